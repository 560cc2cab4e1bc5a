// Fill-in-the-middle (GenerateRequest.suffix, OpenAI's `suffix`): the prompt becomes
// FIM_PRE prefix FIM_SUF suffix FIM_MID with the vocabulary's FIM tokens, found by their text as
// llama.cpp finds them (the qwen2 test vocabulary carries Qwen's, the llama3 one none).
import fs from 'node:fs';
import { engine as pb } from '@kailstream/proto';

import { tempDir, writeTestModel } from '../testing';
import { LocalModelHost } from './model-host';

describe('fill-in-the-middle requests', () => {
  const dir = tempDir();
  const host = new LocalModelHost({ seqsPerModel: 2, defaultContext: 256 });

  beforeAll(async () => {
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: writeTestModel(dir, 'tiny-qwen3moe', 'F32'), id: 'fim', threads: 2 }));
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: writeTestModel(dir, 'tiny-llama', 'F32'), id: 'nofim', threads: 2 }));
  }, 120_000);
  afterAll(async () => {
    await host.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const run = async (extra: Partial<pb.GenerateRequest>) => {
    const req = pb.GenerateRequest.fromPartial({ requestId: `r${Math.random()}`, model: 'fim', maxTokens: 6, ignoreEos: true, ...extra });
    const tokens: number[] = [];
    let last: pb.GenerateResponse | undefined;
    for await (const r of host.generate(req, new AbortController().signal)) {
      tokens.push(...r.tokens);
      last = r;
    }
    return { tokens, promptTokens: last!.usage!.promptTokens };
  };
  const tokenize = (text: string, parseSpecial: boolean) => host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'fim', text, addSpecial: false, parseSpecial }));

  const prefix = 'def add(a, b):\n    ';
  const suffix = '\n    return c\n';

  it('arranges prefix and suffix around the FIM tokens, as the same prompt written out with them', async () => {
    const written = `<|fim_prefix|>${prefix}<|fim_suffix|>${suffix}<|fim_middle|>`;
    const expected = tokenize(written, true);
    const [pre, suf, mid] = ['<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>'].map((t) => tokenize(t, true));
    expect([pre.length, suf.length, mid.length]).toEqual([1, 1, 1]);
    expect(expected[0]).toBe(pre[0]);
    expect(expected[expected.length - 1]).toBe(mid[0]);

    const fim = await run({ prompt: prefix, suffix });
    const plain = await run({ prompt: written });
    expect(fim.promptTokens).toBe(expected.length);
    expect(fim.tokens).toHaveLength(6);
    expect(fim.tokens).toEqual(plain.tokens);
    // The prompt as token ids is the prefix.
    const ids = await run({ promptTokens: tokenize(prefix, false), suffix });
    expect(ids.tokens).toEqual(fim.tokens);
  });

  it('does not parse special-token text inside the prefix or the suffix', async () => {
    const code = 'x = "<|im_end|>"';
    const fim = await run({ prompt: code, suffix: '<|fim_middle|>' });
    const literal = (tokenize(code, false)).length + (tokenize('<|fim_middle|>', false)).length + 3;
    expect(fim.promptTokens).toBe(literal);
    expect(literal).toBeGreaterThan((tokenize(code, true)).length + 4);
  });

  it('fills the start of a file: an empty prompt before the suffix', async () => {
    const fim = await run({ prompt: '', suffix });
    expect(fim.promptTokens).toBe((tokenize(suffix, false)).length + 3);
  });

  it('refuses a vocabulary without FIM tokens and requests that cannot take a suffix, naming why', async () => {
    await expect(run({ model: 'nofim', prompt: prefix, suffix })).rejects.toThrow(/model 'nofim' cannot fill in the middle: its vocabulary has no FIM_PRE\/FIM_SUF\/FIM_MID token/);
    await expect(run({ prompt: prefix, suffix, echoPrompt: true })).rejects.toThrow(/cannot be combined with echo/);
    await expect(run({ prompt: prefix, suffix, promptLogprobs: true })).rejects.toThrow(/cannot be combined with prompt logprobs/);
    await expect(run({ messages: [pb.ChatMessage.fromPartial({ role: 'user', content: 'hi' })], suffix })).rejects.toThrow(/cannot be combined with chat messages/);
    // The host keeps serving.
    expect((await run({ prompt: prefix, suffix })).tokens).toHaveLength(6);
  });
});
