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
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'fim', threads: 2 }));
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: writeTestModel(dir, 'tiny-llama', 'F32'), id: 'nofim', threads: 2 }));
    // The same file with a context wider than /infill's 2048-token window, for the project's files.
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'wide', threads: 2, contextLength: 4096 }));
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
  const tokenize = (text: string, parseSpecial: boolean) => host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'fim', text, addSpecial: false, parseSpecial })).tokens;

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

  const infill = (model: string, prefix: string, suffix: string, extra: { filename: string; text: string }[], middle = '', maxTokens = 6) =>
    run({ model, prompt: prefix, suffix, infill: { extra, middle }, maxTokens });
  const special = (t: string) => tokenize(t, true)[0];

  it('puts the project\'s files before the prefix and the middle after it, as llama-server\'s /infill', async () => {
    const t = (s: string) => tokenize(s, false);
    const files = [{ filename: 'util.py', text: 'def sub(a, b):\n    return a - b\n' }, { filename: '', text: 'x = 1\n' }];
    const expected = [
      special('<|repo_name|>'), ...t('myproject\n'),
      special('<|file_sep|>'), ...t('util.py\n'), ...t(files[0].text),
      special('<|file_sep|>'), ...t('tmp\n'), ...t(files[1].text),
      special('<|file_sep|>'), ...t('filename\n'),
      special('<|fim_prefix|>'), ...t(prefix), ...t('c ='), special('<|fim_suffix|>'), ...t(suffix), special('<|fim_middle|>'),
    ];
    const got = await infill('wide', prefix, suffix, files, 'c =');
    const plain = await run({ model: 'wide', promptTokens: expected });
    expect(got.promptTokens).toBe(expected.length);
    expect(got.tokens).toEqual(plain.tokens);
    // With nothing but an empty suffix it is still fill-in-the-middle (OpenAI's suffix alone is not).
    const empty = await infill('wide', prefix, '', []);
    expect(empty.promptTokens).toBe(t(prefix).length + 3 + 1 + t('myproject\n').length + 1 + t('filename\n').length);
  });

  it('trims the prefix from the front, the suffix from the back and the files to what the context leaves', async () => {
    const t = (s: string) => tokenize(s, false);
    const line = (i: number) => `value_${i} = compute(${i}) + offset\n`;
    const longPrefix = Array.from({ length: 300 }, (_, i) => line(i)).join('');
    const longSuffix = Array.from({ length: 300 }, (_, i) => line(1000 + i)).join('');
    const pre = t(longPrefix);
    const suf = t(longSuffix);
    expect(pre.length).toBeGreaterThan(1536);
    expect(suf.length).toBeGreaterThan(512);
    // Context 256: the window is what the context leaves beside the answer (256 - 6 - 2), prefix
    // 3 x 62 tokens, suffix 62 - 2, no room for files.
    const narrow = await infill('fim', longPrefix, longSuffix, [{ filename: 'a.py', text: 'y = 2\n' }]);
    expect(narrow.promptTokens).toBe(186 + 60 + 3);
    // Context 4096: prefix 1536 and suffix 510 of a 2048 window; the files' last 4096-2048-2*6 tokens.
    const bigFile = { filename: 'big.py', text: longPrefix + longSuffix };
    const wide = await infill('wide', longPrefix, longSuffix, [bigFile]);
    expect(wide.promptTokens).toBe(2036 + 1536 + 510 + 3);
    const kept = [...pre.slice(-1536), special('<|fim_suffix|>'), ...suf.slice(0, 510), special('<|fim_middle|>')];
    const filesTokens = [special('<|repo_name|>'), ...t('myproject\n'), special('<|file_sep|>'), ...t('big.py\n'), ...t(bigFile.text), special('<|file_sep|>'), ...t('filename\n')];
    const plain = await run({ model: 'wide', promptTokens: [...filesTokens.slice(-2036), special('<|fim_prefix|>'), ...kept] });
    expect(wide.tokens).toEqual(plain.tokens);
  }, 120_000);

  it('refuses a vocabulary without FIM tokens and requests that cannot take a suffix, naming why', async () => {
    await expect(run({ model: 'nofim', prompt: prefix, suffix })).rejects.toThrow(/model 'nofim' cannot fill in the middle: its vocabulary has no FIM_PRE\/FIM_SUF\/FIM_MID token/);
    await expect(infill('nofim', prefix, '', [])).rejects.toThrow(/model 'nofim' cannot fill in the middle/);
    await expect(run({ prompt: prefix, suffix, echoPrompt: true })).rejects.toThrow(/cannot be combined with echo/);
    await expect(run({ prompt: prefix, suffix, promptLogprobs: true })).rejects.toThrow(/cannot be combined with prompt logprobs/);
    await expect(run({ messages: [pb.ChatMessage.fromPartial({ role: 'user', content: 'hi' })], suffix })).rejects.toThrow(/cannot be combined with chat messages/);
    // The host keeps serving.
    expect((await run({ prompt: prefix, suffix })).tokens).toHaveLength(6);
  });
});
