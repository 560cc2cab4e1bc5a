import fs from 'node:fs';
import path from 'node:path';
import { common, engine as pb } from '@kailstream/proto';

import { EngineError } from '../errors';
import { JsonRecognizer } from '../sampling/json-constraint';
import { tempDir, writeTestModel } from '../testing';
import { LocalModelHost } from './model-host';

// A template in the style of Qwen3's: earlier reasoning shown, thinking opened for the model
// unless enable_thinking is false (then an empty block closes it).
const TEMPLATE = [
  '{%- for m in messages %}<|im_start|>{{ m.role }}\n',
  "{%- if m.role == 'assistant' and m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{%- endif %}",
  '{{ m.content }}<|im_end|>\n{%- endfor %}',
  "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- if enable_thinking is false %}<think>\n\n</think>\n\n{%- else %}<think>\n{%- endif %}{%- if greeting %}{{ greeting }}{%- endif %}{%- endif %}",
].join('');

// A harmony (gpt-oss) template whose generation prompt opens the analysis channel.
const HARMONY = [
  '{%- for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{%- endfor %}',
  '{%- if add_generation_prompt %}<|start|>assistant<|channel|>analysis<|message|>{%- endif %}',
].join('');

describe('chat requests: chat_template_kwargs, reasoning in and out', () => {
  const dir = tempDir();
  const host = new LocalModelHost({ seqsPerModel: 2, defaultContext: 256 });

  beforeAll(async () => {
    const tpl = path.join(dir, 'think.jinja');
    fs.writeFileSync(tpl, TEMPLATE);
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: writeTestModel(dir, 'tiny-qwen3moe', 'F32', 1, ['--chat-template-file', tpl]), id: 'think', threads: 2 }));
    const htpl = path.join(dir, 'harmony.jinja');
    fs.writeFileSync(htpl, HARMONY);
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: writeTestModel(dir, 'tiny-qwen3moe', 'F32', 1, ['--chat-template-file', htpl]), id: 'harmony', threads: 2 }));
  }, 60_000);
  afterAll(async () => {
    await host.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** The last message of a one-token generation (`text`: all of the output). */
  const run = async (messages: Partial<pb.ChatMessage>[], kwargs?: unknown, extra: Partial<pb.GenerateRequest> = {}) => {
    const req = pb.GenerateRequest.fromPartial({
      requestId: `r${Math.random()}`, model: 'think', maxTokens: 1, messages: messages.map((m) => pb.ChatMessage.fromPartial(m)),
      chatTemplateKwargsJson: kwargs === undefined ? '' : JSON.stringify(kwargs),
      ...extra,
    });
    let last: pb.GenerateResponse | undefined;
    let text = '';
    for await (const r of host.generate(req, new AbortController().signal)) {
      last = r;
      text += r.text;
    }
    return { ...last!, text };
  };
  const user = { role: 'user', content: 'Hi' };

  it('says when the template leaves the reasoning open, and passes chat_template_kwargs to it', async () => {
    const open = await run([user]);
    expect(open.reasoningOpen).toBe(true);
    const closed = await run([user], { enable_thinking: false });
    expect(closed.reasoningOpen).toBe(false);
    // Tokenize renders the same prompt and says the same.
    const tokenized = (kwargs?: object) =>
      host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'think', messages: [pb.ChatMessage.fromPartial(user)], chatTemplateKwargsJson: kwargs ? JSON.stringify(kwargs) : '' })).reasoningOpen;
    expect([tokenized(), tokenized({ enable_thinking: false })]).toEqual([true, false]);
    expect(closed.usage!.promptTokens).toBeGreaterThan(open.usage!.promptTokens);
    // Any variable the template reads; here one that writes after the opened block.
    const greeted = await run([user], { greeting: 'Let me think about this greeting.' });
    expect(greeted.reasoningOpen).toBe(false);
    expect(greeted.usage!.promptTokens).toBeGreaterThan(open.usage!.promptTokens + 5);
  });

  it("shows an earlier turn's reasoning_content to the template", async () => {
    const turn = [user, { role: 'assistant', content: 'Hello.' }, { role: 'user', content: 'Again' }];
    const without = await run(turn);
    const withReasoning = await run([user, { role: 'assistant', content: 'Hello.', reasoningContent: 'They greeted me, so I greet back.' }, { role: 'user', content: 'Again' }]);
    expect(withReasoning.usage!.promptTokens).toBeGreaterThan(without.usage!.promptTokens + 8);
  });

  it('lets reasoning the prompt left open run free, then holds the answer after </think> to the JSON format', async () => {
    // ('}' made likely, so a random model's object ends well within max tokens on any CPU.)
    const close = host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'think', text: '}' })).tokens[0];
    const sampling = common.SamplingParams.fromPartial({ temperature: 1, seed: 3, hasSeed: true, logitBias: { [close]: 4 } });
    const json = { maxTokens: 300, responseFormat: pb.ResponseFormat.RESPONSE_FORMAT_JSON_OBJECT, sampling };
    // No constraint inside the reasoning: its start is what the model writes without a format.
    const free = await run([user], undefined, { ...json, responseFormat: pb.ResponseFormat.RESPONSE_FORMAT_TEXT, maxTokens: 8 });
    const open = await run([user], undefined, { ...json, maxTokens: 8 });
    expect(open.reasoningOpen).toBe(true);
    expect(open.text).toBe(free.text);
    // A reasoning budget closes it; then a blank line and one JSON object.
    const budgeted = await run([user], undefined, { ...json, reasoningBudget: 4, hasReasoningBudget: true });
    const end = budgeted.text.indexOf('</think>');
    expect(end).toBeGreaterThan(0);
    expect(budgeted.text.slice(end, end + 10)).toBe('</think>\n\n');
    expect(budgeted.finishReason).toBe(common.FinishReason.FINISH_REASON_STOP);
    expect(new JsonRecognizer().feed(Buffer.from(budgeted.text.slice(end + 10)))).toBe(true);
    // Thinking off (the template closed the block): JSON from the first token, nothing to budget.
    const closed = await run([user], { enable_thinking: false }, { ...json, reasoningBudget: 4, hasReasoningBudget: true });
    expect(closed.text.includes('</think>')).toBe(false);
    expect(new JsonRecognizer().feed(Buffer.from(closed.text))).toBe(true);
  });

  it('ends reasoning at its token budget with the message and </think>, then lets the model answer', async () => {
    const tokensOf = async (extra: Partial<pb.GenerateRequest>, kwargs?: unknown) => {
      const req = pb.GenerateRequest.fromPartial({
        requestId: `r${Math.random()}`, model: 'think', maxTokens: 24, ignoreEos: true, messages: [pb.ChatMessage.fromPartial(user)],
        chatTemplateKwargsJson: kwargs === undefined ? '' : JSON.stringify(kwargs), ...extra,
      });
      const out: number[] = [];
      let text = '';
      for await (const r of host.generate(req, new AbortController().signal)) {
        out.push(...r.tokens);
        text += r.text;
      }
      return { tokens: out, text };
    };
    const tok = (text: string) => host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'think', text, parseSpecial: true })).tokens;
    const forced = [...tok(' Time is up.'), ...tok('</think>')];
    const free = await tokensOf({});
    expect(free.text.includes('</think>')).toBe(false);
    // The template opened the block: 5 tokens of the model's, then the forced ones, then the model again.
    const budgeted = await tokensOf({ reasoningBudget: 5, hasReasoningBudget: true, reasoningBudgetMessage: ' Time is up.' });
    expect(budgeted.tokens.slice(0, 5)).toEqual(free.tokens.slice(0, 5));
    expect(budgeted.tokens.slice(5, 5 + forced.length)).toEqual(forced);
    expect(budgeted.tokens.length).toBe(24);
    expect(budgeted.text.indexOf(' Time is up.</think>')).toBeGreaterThan(0);
    // Budget 0 closes the block before the model writes anything.
    const none = await tokensOf({ reasoningBudget: 0, hasReasoningBudget: true });
    expect(none.tokens.slice(0, tok('</think>').length)).toEqual(tok('</think>'));
    expect(none.text.startsWith('</think>')).toBe(true);
    // With thinking off (the template closed the block) the output does not open one: nothing forced.
    const off = await tokensOf({}, { enable_thinking: false });
    expect((await tokensOf({ reasoningBudget: 2, hasReasoningBudget: true }, { enable_thinking: false })).tokens).toEqual(off.tokens);
    // Only for chat messages.
    const err = await (async () => {
      for await (const _ of host.generate(pb.GenerateRequest.fromPartial({ model: 'think', prompt: 'Hi', reasoningBudget: 3, hasReasoningBudget: true }), new AbortController().signal));
    })().catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/a reasoning budget needs chat messages/);
  });

  it("budgets gpt-oss's analysis channel: the message and <|end|> once it is spent", async () => {
    const tokensOf = async (extra: Partial<pb.GenerateRequest>) => {
      const req = pb.GenerateRequest.fromPartial({ requestId: `h${Math.random()}`, model: 'harmony', maxTokens: 20, ignoreEos: true, messages: [pb.ChatMessage.fromPartial(user)], ...extra });
      const out: number[] = [];
      for await (const r of host.generate(req, new AbortController().signal)) out.push(...r.tokens);
      return out;
    };
    const tok = (text: string) => host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'harmony', text, parseSpecial: true })).tokens;
    const forced = [...tok(' Enough.'), ...tok('<|end|>')];
    const free = await tokensOf({});
    const budgeted = await tokensOf({ reasoningBudget: 4, hasReasoningBudget: true, reasoningBudgetMessage: ' Enough.' });
    expect(budgeted.slice(0, 4)).toEqual(free.slice(0, 4));
    expect(budgeted.slice(4, 4 + forced.length)).toEqual(forced);
  });

  it('continues a final assistant message (prefill) instead of opening a new turn', async () => {
    const messages = [pb.ChatMessage.fromPartial(user), pb.ChatMessage.fromPartial({ role: 'assistant', content: 'The answer is' })];
    const t = host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'think', messages, continueFinalMessage: true }));
    // (This template writes the history turn as '<|im_start|>assistant' + content + '<|im_end|>'.)
    const history = host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'think', messages })).prompt;
    expect(history.includes('The answer is<|im_end|>')).toBe(true);
    expect(t.prompt).toBe(history.slice(0, history.lastIndexOf('The answer is') + 'The answer is'.length));
    expect(t.prompt.endsWith('<|im_start|>assistantThe answer is')).toBe(true);
    // The generation goes on from that text: the same tokens as from the rendered prompt itself.
    const gen = async (req: Partial<pb.GenerateRequest>) => {
      const out: number[] = [];
      for await (const r of host.generate(pb.GenerateRequest.fromPartial({ requestId: `c${Math.random()}`, model: 'think', maxTokens: 6, ignoreEos: true, ...req }), new AbortController().signal)) out.push(...r.tokens);
      return out;
    };
    expect(await gen({ messages, continueFinalMessage: true })).toEqual(await gen({ promptTokens: t.tokens }));
    const bad = await gen({ messages: [pb.ChatMessage.fromPartial(user)], continueFinalMessage: true }).catch((e: unknown) => e);
    expect((bad as Error).message).toMatch(/needs the last message to be the assistant's/);
  });

  it('refuses chat_template_kwargs that are not an object or set what the request sets', async () => {
    for (const [kwargs, msg] of [
      [[1], /chat_template_kwargs has the wrong shape/],
      [{ messages: [] }, /cannot set 'messages'/],
      [{ add_generation_prompt: false }, /cannot set 'add_generation_prompt'/],
    ] as const) {
      const err = await run([user], kwargs).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(EngineError);
      expect((err as EngineError).code).toBe('KAIL_E_INVALID_ARG');
      expect((err as Error).message).toMatch(msg);
    }
  });
});
