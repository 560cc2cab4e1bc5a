import { engine as pb } from '@kailstream/proto';

import { startTestStack, type TestStack } from '../test-stack';

// The real stack in one process (engine with the tiny Qwen3-MoE model, whose vocabulary has
// Qwen2.5-Coder's FIM tokens; scheduler; API), spoken to as llama-server's clients speak.
describe("llama-server's endpoints: /completion, /infill, /tokenize, /detokenize, /apply-template, /props, /slots", () => {
  let stack: TestStack;
  let api: TestStack['api'];
  let file: string;

  beforeAll(async () => {
    // A context wider than /infill's 2048-token window leaves room for the project's files.
    stack = await startTestStack([{ id: 'tiny' }], { defaultContext: 4096 });
    api = stack.api;
    file = stack.files.tiny;
  }, 60_000);
  afterAll(() => stack?.close());

  const post = (path: string, body: unknown) => stack.post(path, body);
  /** Server-sent events of a streamed answer, parsed. */
  const events = async (path: string, body: unknown) => (await stack.events(path, body as object)).map(([, d]) => d);
  const tokenize = async (content: string, extra: object = {}) => (await post('/tokenize', { content, ...extra })).body.tokens as number[];
  const greedy = { temperature: 0, ignore_eos: true, return_tokens: true };

  it('tokenizes (special tokens parsed by default, pieces on request) and detokenizes back, the model left out', async () => {
    const ids = await tokenize('Hello world<|im_end|>');
    const literal = await tokenize('Hello world<|im_end|>', { parse_special: false });
    expect(literal.length).toBeGreaterThan(ids.length);
    const pieces = (await post('/tokenize', { content: 'Hello world', with_pieces: true, model: 'tiny' })).body.tokens as { id: number; piece: string }[];
    expect(pieces.map((p) => p.piece).join('')).toBe('Hello world');
    expect(pieces.map((p) => p.id)).toEqual(await tokenize('Hello world'));
    expect((await post('/detokenize', { tokens: ids })).body).toEqual({ content: 'Hello world<|im_end|>' });
    expect((await post('/detokenize', {})).body).toEqual({ content: '' });
    expect((await post('/tokenize', {})).body).toEqual({ tokens: [] });
    // A piece that is not whole UTF-8 comes back as its bytes.
    const split = (await post('/tokenize', { content: '\u{1F600}', with_pieces: true })).body.tokens as { piece: string | number[] }[];
    const bytes = split.flatMap((p) => (typeof p.piece === 'string' ? [...Buffer.from(p.piece)] : p.piece));
    expect(Buffer.from(bytes).toString('utf8')).toBe('\u{1F600}');
  });

  it("answers the OpenAI routes (chat, completions, embeddings, responses) without a model with the one served, as llama-server and vLLM do", async () => {
    const chat = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, temperature: 0 });
    expect([chat.status, chat.body.model, chat.body.choices[0].message.role]).toEqual([200, 'tiny', 'assistant']);
    const named = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, temperature: 0 });
    expect(chat.body.choices[0].message.content).toBe(named.body.choices[0].message.content);
    const text = await post('/v1/completions', { prompt: 'The answer is', max_tokens: 2 });
    expect([text.status, text.body.model, text.body.usage.completion_tokens]).toEqual([200, 'tiny', 2]);
    const embedding = await post('/v1/embeddings', { input: 'x' });
    expect([embedding.status, embedding.body.model]).toEqual([200, 'tiny']);
    const response = await post('/v1/responses', { input: 'Hi', max_output_tokens: 2 });
    expect([response.status, response.body.model, response.body.usage.output_tokens]).toEqual([200, 'tiny', 2]);
  });

  it('completes a prompt as llama-server: content, tokens, stop type, settings and timings; streamed the same', async () => {
    const { status, body } = await post('/completion', { prompt: 'The answer is', n_predict: 6, ...greedy });
    expect(status).toBe(200);
    expect(body.tokens).toHaveLength(6);
    expect(body.tokens_predicted).toBe(6);
    expect(body.tokens_evaluated).toBe((await tokenize('The answer is', { add_special: true })).length);
    expect(body.stop).toBe(true);
    expect(body.stop_type).toBe('limit');
    expect(body.model).toBe('tiny');
    expect(body.prompt).toBe('The answer is');
    expect((await post('/detokenize', { tokens: body.tokens })).body.content).toBe(body.content);
    expect(body.generation_settings).toMatchObject({ n_predict: 6, temperature: 0, top_k: 40, seed: -1 });
    expect(body.timings.predicted_n).toBe(6);
    expect(body.timings.predicted_per_second).toBeGreaterThan(0);
    // Token ids as the prompt give the same answer; so does the stream, piece by piece.
    const ids = await post('/completions', { prompt: await tokenize('The answer is', { add_special: true }), n_predict: 6, ...greedy });
    expect(ids.body.tokens).toEqual(body.tokens);
    const ev = await events('/completion', { prompt: 'The answer is', n_predict: 6, ...greedy });
    const last = ev.at(-1)!;
    expect(last.stop).toBe(true);
    expect(last.stop_type).toBe('limit');
    expect(ev.slice(0, -1).every((e) => e.stop === false)).toBe(true);
    expect(ev.slice(0, -1).map((e) => e.content).join('')).toBe(body.content);
    expect(ev.slice(0, -1).flatMap((e) => e.tokens)).toEqual(body.tokens);
  });

  it('timings_per_token: every streamed event carries the timings so far, on /completion and the OpenAI routes; final answers carry them anyway', async () => {
    const keys = ['cache_n', 'prompt_n', 'prompt_ms', 'prompt_per_token_ms', 'prompt_per_second', 'predicted_n', 'predicted_ms', 'predicted_per_token_ms', 'predicted_per_second'];
    const nPrompt = (await tokenize('The answer is', { add_special: true })).length;
    const ev = await events('/completion', { prompt: 'The answer is', n_predict: 5, timings_per_token: true, ...greedy });
    const partial = ev.slice(0, -1);
    expect(partial).toHaveLength(5);
    expect(partial.map((e) => e.timings.predicted_n)).toEqual([1, 2, 3, 4, 5]);
    for (const e of partial) {
      expect(Object.keys(e.timings).sort()).toEqual([...keys].sort());
      expect(e.timings.prompt_n + e.timings.cache_n).toBe(nPrompt);
      expect(e.timings.prompt_ms).toBeGreaterThan(0);
    }
    // Times only grow.
    expect(partial.map((e) => e.timings.predicted_ms)).toEqual([...partial.map((e) => e.timings.predicted_ms)].sort((a, b) => a - b));
    expect(ev.at(-1)!.timings.predicted_n).toBe(5);
    // Without it: no timings until the last event.
    expect((await events('/completion', { prompt: 'The answer is', n_predict: 3, ...greedy })).slice(0, -1).some((e) => 'timings' in e)).toBe(false);
    // OpenAI chat stream (llama.cpp's own test): the role chunk has none, every content chunk has
    // them, the usage chunk too.
    const chat = { model: 'tiny', messages: [{ role: 'user', content: 'test' }], max_tokens: 6, temperature: 0, ignore_eos: true, stream: true };
    const done = await events('/v1/chat/completions', { ...chat, timings_per_token: true, stream_options: { include_usage: true } });
    expect(done[0].choices[0].delta.role).toBe('assistant');
    expect('timings' in done[0]).toBe(false);
    const usageChunk = done.at(-1)!;
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.timings.predicted_n).toBe(usageChunk.usage.completion_tokens);
    expect(usageChunk.timings.prompt_n + usageChunk.timings.cache_n).toBe(usageChunk.usage.prompt_tokens);
    const content = done.filter((e) => e.choices[0]?.delta?.content);
    expect(content.length).toBeGreaterThan(0);
    for (const e of content) expect(e.timings.predicted_n).toBeLessThanOrEqual(6);
    // Without it, only the last chunk; a plain answer carries them too (llama-server's extra field).
    const plain = await events('/v1/chat/completions', chat);
    expect(plain.slice(0, -1).some((e) => 'timings' in e)).toBe(false);
    expect(plain.at(-1)!.timings.predicted_n).toBe(6);
    const whole = await post('/v1/chat/completions', { ...chat, stream: false });
    expect(whole.body.timings.predicted_n).toBe(whole.body.usage.completion_tokens);
    const text = await post('/v1/completions', { model: 'tiny', prompt: 'The answer is', max_tokens: 4, temperature: 0, ignore_eos: true });
    expect(text.body.timings.predicted_n).toBe(4);
    // n > 1: several sequences, no single timings.
    expect('timings' in (await post('/v1/chat/completions', { ...chat, stream: false, n: 2 })).body).toBe(false);
  });

  it('takes several prompts (an array of answers, or events with their index), and token ids mixed with text', async () => {
    const one = await post('/completion', { prompt: 'Once upon', n_predict: 4, ...greedy });
    const two = await post('/completion', { prompt: 'The answer is', n_predict: 4, ...greedy });
    const both = await post('/completion', { prompt: ['Once upon', { prompt_string: 'The answer is' }], n_predict: 4, ...greedy });
    expect(both.status).toBe(200);
    expect(Array.isArray(both.body)).toBe(true);
    const arr = both.body as unknown as Record<string, any>[];
    expect(arr.map((r) => r.index)).toEqual([0, 1]);
    expect(arr.map((r) => r.tokens)).toEqual([one.body.tokens, two.body.tokens]);
    expect(arr.map((r) => r.content)).toEqual([one.body.content, two.body.content]);
    const ev = await events('/completion', { prompt: ['Once upon', 'The answer is'], n_predict: 4, ...greedy });
    for (const [i, want] of [one, two].entries()) {
      const mine = ev.filter((e) => e.index === i);
      expect(mine.at(-1)!.stop).toBe(true);
      expect(mine.filter((e) => !e.stop).flatMap((e) => e.tokens)).toEqual(want.body.tokens);
    }
    // Mixed: a leading string gets BOS (where the model adds one); later strings none.
    const tail = await tokenize(' is');
    const mixed = await post('/completion', { prompt: ['The answer', ...tail], n_predict: 4, ...greedy });
    const ids = [...(await tokenize('The answer', { add_special: true })), ...tail];
    const byIds = await post('/completion', { prompt: ids, n_predict: 4, ...greedy });
    expect(mixed.body.tokens_evaluated).toBe(ids.length);
    expect(mixed.body.tokens).toEqual(byIds.body.tokens);
    const idsFirst = await post('/completion', { prompt: [...(await tokenize('The answer')), ' is'], n_predict: 1, ...greedy });
    expect(idsFirst.body.tokens_evaluated).toBe((await tokenize('The answer')).length + tail.length);
  });

  it('computes the prompt and generates nothing for n_predict 0, leaving its cache for the next request', async () => {
    const warm = await post('/infill', { input_prefix: 'import os\n\ndef main():\n    ', input_suffix: '\n', input_extra: [{ filename: 'x.py', text: 'X = 1\n' }], n_predict: 0 });
    expect(warm.status).toBe(200);
    expect(warm.body).toMatchObject({ content: '', tokens_predicted: 0, stop_type: 'limit' });
    expect(warm.body.tokens_evaluated).toBeGreaterThan(20);
    const next = await post('/infill', { input_prefix: 'import os\n\ndef main():\n    ', input_suffix: '\n', input_extra: [{ filename: 'x.py', text: 'X = 1\n' }], n_predict: 3, ...greedy });
    expect(next.body.tokens_predicted).toBe(3);
    // All but the last prompt token come from the warmed cache.
    expect(next.body.tokens_cached).toBe(warm.body.tokens_evaluated - 1);
  });

  it('says which stop string ended the answer, and returns the top alternatives with n_probs', async () => {
    const free = await post('/completion', { prompt: 'Once upon', n_predict: 12, ...greedy });
    const text = free.body.content as string;
    const word = text.slice(3, 6);
    expect(word).toHaveLength(3);
    const stopped = await post('/completion', { prompt: 'Once upon', n_predict: 12, stop: [word], ...greedy });
    expect(stopped.body.stop_type).toBe('word');
    expect(stopped.body.stopping_word).toBe(word);
    expect(stopped.body.content).toBe(text.slice(0, text.indexOf(word)));
    const probs = await post('/completion', { prompt: 'Once upon', n_predict: 3, n_probs: 4, ...greedy });
    const cp = probs.body.completion_probabilities as { id: number; logprob: number; top_logprobs: { id: number; logprob: number }[] }[];
    expect(cp).toHaveLength(3);
    for (const [i, p] of cp.entries()) {
      expect(p.id).toBe(probs.body.tokens[i]);
      expect(p.top_logprobs).toHaveLength(4);
      // Greedy: the chosen token is the most likely one.
      expect(p.top_logprobs[0].id).toBe(p.id);
    }
    // post_sampling_probs: the distribution after the chain (top_k 3 leaves at most 3 candidates), as probabilities.
    const after = await post('/completion', { prompt: 'Once upon', n_predict: 4, n_probs: 5, temperature: 1, top_k: 3, top_p: 1, min_p: 0, seed: 7, post_sampling_probs: true });
    const pp = after.body.completion_probabilities as { id: number; prob: number; top_probs: { id: number; prob: number }[] }[];
    expect(pp).toHaveLength(4);
    for (const p of pp) {
      expect(p).not.toHaveProperty('logprob');
      expect(p.top_probs.length).toBeGreaterThan(0);
      expect(p.top_probs.length).toBeLessThanOrEqual(3);
      expect(p.top_probs.reduce((a, t) => a + t.prob, 0)).toBeCloseTo(1, 5);
      expect(p.top_probs.find((t) => t.id === p.id)?.prob).toBeCloseTo(p.prob, 6);
      for (const t of p.top_probs) expect(t.prob).toBeGreaterThan(0);
    }
    // Greedy: the chosen token has probability 1.
    const g = await post('/completion', { prompt: 'Once upon', n_predict: 2, n_probs: 3, ...greedy, post_sampling_probs: true });
    for (const p of g.body.completion_probabilities) expect(p.prob).toBe(1);
  });

  it('fills in the middle with the project files before the prefix, as OpenAI suffix does without them', async () => {
    const prefix = 'def add(a, b):\n    ';
    const suffix = '\n    return c\n';
    const infill = await post('/infill', { input_prefix: prefix, input_suffix: suffix, n_predict: 5, ...greedy });
    expect(infill.status).toBe(200);
    // The same prompt laid out by hand: the repository markers, then OpenAI's suffix prompt.
    const oai = await post('/v1/completions', { model: 'tiny', prompt: prefix, suffix, max_tokens: 1 });
    const marks = await tokenize('<|repo_name|>myproject\n<|file_sep|>filename\n');
    const layout = [...marks, ...(await tokenize('<|fim_prefix|>')), ...(await tokenize(prefix, { parse_special: false })),
      ...(await tokenize('<|fim_suffix|>')), ...(await tokenize(suffix, { parse_special: false })), ...(await tokenize('<|fim_middle|>'))];
    expect(infill.body.tokens_evaluated).toBe(oai.body.usage.prompt_tokens + marks.length);
    expect(infill.body.tokens_evaluated).toBe(layout.length);
    const byHand = await post('/completion', { prompt: layout, n_predict: 5, ...greedy });
    expect(infill.body.tokens).toEqual(byHand.body.tokens);
    const extra = [{ filename: 'util.py', text: 'def sub(a, b):\n    return a - b\n' }];
    const withFiles = await post('/infill', { input_prefix: prefix, input_suffix: suffix, input_extra: extra, prompt: 'c =', n_predict: 5, ...greedy });
    const more = (await tokenize('<|file_sep|>util.py\n')).length + (await tokenize(extra[0].text)).length + (await tokenize('c =')).length;
    expect(withFiles.body.tokens_evaluated).toBe(infill.body.tokens_evaluated + more);
    const ev = await events('/infill', { input_prefix: prefix, input_suffix: suffix, n_predict: 5, ...greedy });
    expect(ev.slice(0, -1).map((e) => e.content).join('')).toBe(infill.body.content);
  });

  it("runs llama.cpp's further samplers: DRY breaks greedy loops, Mirostat at tau 0 and top-n-sigma near 0 pick greedily, XTC at threshold 0 the least likely", async () => {
    const prompt = 'Once upon a time there was';
    const plain = (await post('/completion', { prompt, n_predict: 64, ...greedy })).body;
    // A random tiny model loops: some bigram repeats in its greedy answer.
    const bigrams = (ts: number[]) => ts.slice(1).map((t, i) => `${ts[i]},${t}`);
    const promptIds = await tokenize(prompt, { add_special: true });
    const seen = (ts: number[]) => {
      const all = bigrams([...promptIds, ...ts]);
      return all.filter((b, i) => all.indexOf(b) < i).length;
    };
    expect(seen(plain.tokens)).toBeGreaterThan(0);
    // DRY (allowed length 1, a penalty of 100 per extended repeat, no breakers that occur here,
    // the whole history): no bigram of the answer repeats one before it.
    const dry = { dry_multiplier: 100, dry_base: 1, dry_allowed_length: 1, dry_penalty_last_n: -1, dry_sequence_breakers: ['\u0001'] };
    const r = await post('/completion', { prompt, n_predict: 64, ...greedy, ...dry });
    expect(r.status).toBe(200);
    expect(seen(r.body.tokens)).toBe(0);
    expect(r.body.generation_settings).toMatchObject({ dry_multiplier: 100, dry_base: 1, dry_allowed_length: 1, dry_penalty_last_n: -1, dry_sequence_breakers: ['\u0001'], mirostat: 0, typical_p: 1 });
    // Samplers that leave only the best token give the greedy answer at any temperature.
    const hot = { prompt, n_predict: 12, temperature: 1.5, seed: 4, ignore_eos: true, return_tokens: true };
    const greedy12 = plain.tokens.slice(0, 12);
    expect((await post('/completion', { ...hot, mirostat: 2, mirostat_tau: 0, mirostat_eta: 0 })).body.tokens).toEqual(greedy12);
    expect((await post('/completion', { ...hot, top_n_sigma: 1e-9, top_k: 0, top_p: 1, min_p: 0 })).body.tokens).toEqual(greedy12);
    // XTC always, threshold 0: every token is "above" it, so only the least likely of them stays.
    const xtc = (await post('/completion', { prompt, n_predict: 1, temperature: 0, top_k: 0, top_p: 1, min_p: 0, xtc_probability: 1, xtc_threshold: 0, return_tokens: true, n_probs: 1 })).body;
    expect(xtc.tokens[0]).not.toBe(plain.tokens[0]);
    // `samplers` orders the chain (names, aliases or chars): without a temperature stage a temperature of 0 is not greedy.
    const noTemp = (samplers: unknown) => post('/completion', { prompt, n_predict: 12, temperature: 0, seed: 9, ignore_eos: true, return_tokens: true, samplers });
    const sampled = (await noTemp(['top_k', 'top_p'])).body.tokens;
    expect(sampled).not.toEqual(greedy12);
    expect((await noTemp(['top-k', 'nucleus'])).body.tokens).toEqual(sampled);
    expect((await noTemp('kp')).body.tokens).toEqual(sampled);
    expect((await noTemp('kpt')).body.tokens).toEqual(greedy12);
    expect((await post('/completion', { prompt, n_predict: 1, samplers: 'kt' })).body.generation_settings.samplers).toEqual(['top_k', 'temperature']);
    // Adaptive-p (its draw replaces the plain one; parity with llama.cpp in the engine's sampler spec): seeded, reproducible, reported.
    const adaptive = { prompt, n_predict: 12, temperature: 1, seed: 5, ignore_eos: true, return_tokens: true, samplers: ['top_k', 'temperature', 'adaptive_p'], adaptive_target: 0.3, adaptive_decay: 0.5 };
    const a1 = await post('/completion', adaptive);
    expect(a1.status).toBe(200);
    expect(a1.body.tokens).toHaveLength(12);
    expect((await post('/completion', adaptive)).body.tokens).toEqual(a1.body.tokens);
    expect(a1.body.generation_settings).toMatchObject({ adaptive_target: expect.closeTo(0.3, 6), adaptive_decay: 0.5, samplers: ['top_k', 'temperature', 'adaptive_p'] });
    // The sampling field names llama-server takes are checked as it checks them.
    for (const [body, why] of [
      [{ samplers: ['top_k', 'wibble'] }, /unknown sampler "wibble"/],
      [{ samplers: 'kzt' }, /unknown sampler "z"/],
      [{ samplers: ['infill'] }, /the infill sampler is not supported/],
      [{ adaptive_decay: -0.5 }, /adaptive_decay/],
      [{ mirostat: 3 }, /mirostat/],
      [{ xtc_probability: 1.5 }, /xtc_probability/],
      [{ dry_sequence_breakers: [] }, /dry_sequence_breakers must be a non-empty array/],
      [{ dry_sequence_breakers: [''] }, /must not be empty strings/],
      [{ dry_penalty_last_n: -2 }, /dry_penalty_last_n/],
      [{ top_n_sigma: 'wide' }, /top_n_sigma/],
    ] as const) {
      const bad = await post('/completion', { prompt, n_predict: 1, ...body });
      expect([JSON.stringify(body), bad.status]).toEqual([JSON.stringify(body), 400]);
      expect(bad.body.error.message).toMatch(why);
    }
  });

  it('answers n_cmpl completions per prompt (seed + j), keeps only response_fields, and refuses an adapter the model lacks', async () => {
    const one = async (seed: number) => (await post('/completion', { prompt: 'Once', n_predict: 6, temperature: 1.5, seed, ignore_eos: true, return_tokens: true })).body.tokens;
    const r = await post('/completion', { prompt: 'Once', n_predict: 6, temperature: 1.5, seed: 11, ignore_eos: true, return_tokens: true, n_cmpl: 3 });
    expect(r.body.map((x: { index: number }) => x.index)).toEqual([0, 1, 2]);
    expect(r.body.map((x: { tokens: number[] }) => x.tokens)).toEqual([await one(11), await one(12), await one(13)]);
    const two = await post('/completion', { prompt: ['Once', 'Twice'], n_predict: 2, n: 2 });
    expect(two.body).toHaveLength(4);
    const f = await post('/completion', { prompt: 'Once', n_predict: 3, response_fields: ['content', 'generation_settings/n_predict', 'nope/x'] });
    expect(Object.keys(f.body).sort()).toEqual(['content', 'generation_settings/n_predict']);
    expect(f.body['generation_settings/n_predict']).toBe(3);
    for (const [body, why] of [
      [{ lora: [{ id: 0, scale: 1 }] }, /lora: adapter id 0 does not exist; the model has 0 LoRA adapters/],
      [{ n_cmpl: 17 }, /n_cmpl/],
    ] as const) {
      const bad = await post('/completion', { prompt: 'x', n_predict: 1, ...body });
      expect(bad.status).toBe(400);
      expect(bad.body.error.message).toMatch(why);
    }
  });

  it("holds the output to json_schema and grammar (llama-server's fields) and vLLM's guided_json / guided_choice / guided_grammar / guided_regex", async () => {
    const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false };
    const r = await post('/completion', { prompt: 'JSON:', n_predict: 400, temperature: 1, seed: 2, json_schema: schema });
    expect(r.status).toBe(200);
    expect(r.body.stop_type).toBe('eos');
    expect(Object.keys(JSON.parse(r.body.content))).toEqual(['n']);
    expect(Number.isInteger(JSON.parse(r.body.content).n)).toBe(true);
    // {} is any object.
    const any = await post('/completion', { prompt: 'JSON:', n_predict: 40, temperature: 0, json_schema: {} });
    expect(any.body.content.trimStart().startsWith('{')).toBe(true);
    // vLLM's names on the OpenAI routes.
    const choice = await post('/v1/completions', { model: 'tiny', prompt: 'Pick:', max_tokens: 20, temperature: 1, seed: 5, guided_choice: ['red', 'green', 'blue'] });
    expect(choice.status).toBe(200);
    expect(['red', 'green', 'blue']).toContain(choice.body.choices[0].text);
    expect(choice.body.choices[0].finish_reason).toBe('stop');
    const flag = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
    const gj = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 400, temperature: 0, guided_json: JSON.stringify(flag) });
    expect(typeof JSON.parse(gj.body.choices[0].message.content).ok).toBe('boolean');
    // GBNF grammars: llama-server's grammar, vLLM's guided_grammar.
    const g = 'root ::= ("up" | "down") " " [0-9]{1,2} "\\n"';
    for (const seed of [1, 2, 3]) {
      const out = await post('/completion', { prompt: 'Move:', n_predict: 30, temperature: 1, seed, grammar: g });
      expect(out.status).toBe(200);
      expect(out.body.content).toMatch(/^(up|down) [0-9]{1,2}\n$/);
      expect(out.body.stop_type).toBe('eos');
    }
    // Lazy: free until a trigger (llama-server's grammar_lazy + grammar_triggers), the grammar from it on.
    const digits = 'root ::= [0-9]+';
    const lazy = async (grammar_triggers: unknown, extra = {}) =>
      (await post('/completion', { prompt: 'Move:', n_predict: 20, temperature: 1, seed: 6, ignore_eos: true, grammar: digits, grammar_lazy: true, grammar_triggers, ...extra })).body.content as string;
    expect(await lazy([{ type: 2, value: 'QQQZZZ' }])).toMatch(/[^0-9]/); // never triggered: free text
    expect(await lazy([{ type: 2, value: '[\\s\\S]' }])).toMatch(/^[0-9]{20,}$/); // triggered at the first byte
    // A token trigger is its id when given (the value may say anything), as llama-server reads it.
    const byId = await post('/completion', { prompt: 'Move:', n_predict: 4, grammar: digits, grammar_lazy: true, grammar_triggers: [{ type: 0, value: 'not one token at all', token: 5 }] });
    expect(byId.status).toBe(200);
    // On the OpenAI routes too, as llama-server takes them there.
    const lc = await post('/v1/completions', { model: 'tiny', prompt: 'Move:', max_tokens: 12, temperature: 1, seed: 6, grammar: digits, grammar_lazy: true, grammar_triggers: [{ type: 3, value: '[\\s\\S]*' }] });
    expect(lc.body.choices[0].text).toMatch(/^[0-9]+$/);
    const vg = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 30, temperature: 0, guided_grammar: 'root ::= [a-c]{3}' });
    expect(vg.body.choices[0].message.content).toMatch(/^[a-c]{3}$/);
    // vLLM's current form: structured_outputs.
    const so = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 30, temperature: 1, seed: 4, structured_outputs: { choice: ['left', 'right'] } });
    expect(['left', 'right']).toContain(so.body.choices[0].message.content);
    const soRx = await post('/v1/completions', { model: 'tiny', prompt: 'Id:', max_tokens: 30, temperature: 1, seed: 4, structured_outputs: { regex: '[A-Z]{3}\\d{2}' } });
    expect(soRx.body.choices[0].text).toMatch(/^[A-Z]{3}\d{2}$/);
    const soJson = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 400, temperature: 0, structured_outputs: { json: flag } });
    expect(typeof JSON.parse(soJson.body.choices[0].message.content).ok).toBe('boolean');
    const soObj = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 400, temperature: 0, structured_outputs: { json_object: true } });
    expect(soObj.body.choices[0].message.content.trimStart().startsWith('{')).toBe(true);
    for (const [body, why] of [
      [{ structured_outputs: { regex: 'a', choice: ['a'] } }, /structured_outputs: regex and choice cannot be combined/],
      [{ structured_outputs: { regex: 'a' }, guided_regex: 'b' }, /structured_outputs cannot be combined with guided_regex/],
      [{ structured_outputs: { json: '{' } }, /structured_outputs.json is not valid JSON/],
      [{ structured_outputs: { structural_tag: { type: 'x' } } }, /structural_tag is not supported/],
    ] as const) {
      const bad = await post('/v1/completions', { model: 'tiny', prompt: 'x', ...body });
      expect([JSON.stringify(body), bad.status]).toEqual([JSON.stringify(body), 400]);
      expect(bad.body.error.message).toMatch(why);
    }
    // vLLM's guided_regex: the whole output matches.
    for (const seed of [1, 2]) {
      const rx = await post('/v1/completions', { model: 'tiny', prompt: 'Call', max_tokens: 40, temperature: 1, seed, guided_regex: '\\(\\d{3}\\) \\d{3}-\\d{4}' });
      expect(rx.status).toBe(200);
      expect(rx.body.choices[0].text).toMatch(/^\(\d{3}\) \d{3}-\d{4}$/);
      expect(rx.body.choices[0].finish_reason).toBe('stop');
    }
    for (const [p, body, why] of [
      ['/completion', { prompt: 'x', grammar: 'root ::= "a" | missing' }, /grammar: rule 'missing' is used but never defined/],
      ['/completion', { prompt: 'x', grammar: 'root ::= "a"', json_schema: schema }, /json_schema and grammar cannot be combined/],
      ['/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], guided_grammar: 'root ::= "a"', response_format: { type: 'json_object' } }, /guided_grammar cannot be combined with response_format/],
      ['/v1/completions', { model: 'tiny', prompt: 'x', guided_regex: '(a)\\1' }, /regex: \\1 \(a backreference\) cannot be held by a grammar/],
      ['/v1/completions', { model: 'tiny', prompt: 'x', guided_regex: 'a+', guided_grammar: 'root ::= "a"' }, /guided_grammar and guided_regex cannot be combined/],
      ['/v1/completions', { model: 'tiny', prompt: 'x', guided_choice: ['a', 'ab'] }, /output choices: "a" and "ab" cannot be told apart/],
      ['/v1/completions', { model: 'tiny', prompt: 'x', guided_json: '{', }, /guided_json is not valid JSON/],
      ['/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], guided_choice: ['a'], response_format: { type: 'json_object' } }, /guided_choice cannot be combined with response_format/],
      ['/completion', { prompt: 'x', json_schema: schema, guided_choice: ['a'] }, /json_schema and guided_choice cannot be combined/],
      ['/completion', { prompt: 'x', grammar: 'root ::= "a"', grammar_lazy: true }, /grammar_lazy needs grammar_triggers/],
      ['/completion', { prompt: 'x', grammar_lazy: true, grammar_triggers: [{ type: 1, value: 'x' }] }, /grammar_lazy and grammar_triggers need a grammar/],
      ['/completion', { prompt: 'x', grammar: 'root ::= "a"', grammar_lazy: true, grammar_triggers: [{ type: 2, value: '(' }] }, /grammar_triggers\[0\]: Invalid regular expression/],
      ['/completion', { prompt: 'x', grammar: 'root ::= "a"', grammar_triggers: [{ type: 1, value: 'x' }] }, /grammar_triggers need grammar_lazy/],
    ] as const) {
      const bad = await post(p, body);
      expect([p, bad.status]).toEqual([p, 400]);
      expect(bad.body.error.message).toMatch(why);
    }
  });

  it('answers bad requests with a 400 naming the field, an unknown model with a 404, and keeps serving', async () => {
    const bad: [string, unknown, RegExp][] = [
      ['/infill', { input_suffix: '' }, /input_prefix is required/],
      ['/infill', { input_prefix: 'x' }, /input_suffix is required/],
      ['/infill', { input_prefix: 'x', input_suffix: '', input_extra: 'nope' }, /input_extra must be an array/],
      ['/infill', { input_prefix: 'x', input_suffix: '', input_extra: [{ filename: 'a' }] }, /input_extra\.0\.text: each input_extra chunk needs a text string/],
      ['/completion', { prompt: { text: 'x' } }, /prompt: prompt must be a string, an array of token ids, an array mixing/],
      ['/completion', { prompt: ['x', { prompt_string: 'y', multimodal_data: ['AAAA'] }] }, /prompt\.1: multimodal_data is not supported/],
      ['/completion', { prompt: ['x', ''] }, /prompt\.1 must not be empty/],
      ['/completion', { prompt: [] }, /prompt must not be empty/],
      ['/completion', { n_predict: 1 }, /prompt is required/],
      ['/completion', { prompt: '' }, /prompt must not be empty/],
      ['/completion', { prompt: 'x', n_predict: -2 }, /n_predict/],
      ['/completion', { prompt: 'x', temperature: 'hot' }, /temperature/],
      ['/completion', '{"prompt": "x",', /JSON/i],
      ['/tokenize', { content: 5 }, /content must be a string/],
      ['/detokenize', { tokens: [1, -1] }, /tokens\.1/],
      ['/detokenize', { tokens: [1e9] }, /outside the vocabulary/],
    ];
    for (const [path, body, why] of bad) {
      const r = await post(path, body);
      expect([path, r.status]).toEqual([path, 400]);
      expect(r.body.error.message).toMatch(why);
    }
    const unknown = await post('/completion', { prompt: 'x', model: 'nope' });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.message).toMatch(/The model 'nope' does not exist \(served: tiny\)/);
    expect((await post('/completion', { prompt: 'x', n_predict: 2 })).status).toBe(200);
  });

  it('renders a chat with the model\'s template (/apply-template), and /completion of that prompt answers as the chat does', async () => {
    const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }];
    const r = await post('/apply-template', { messages });
    expect(r.status).toBe(200);
    // ChatML (the test file has no template of its own), ending with the assistant turn's opening.
    expect(r.body.prompt).toBe('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n');
    const chat = await post('/v1/chat/completions', { model: 'tiny', messages, max_tokens: 5, temperature: 0 });
    const byPrompt = await post('/completion', { prompt: r.body.prompt, n_predict: 5, temperature: 0, return_tokens: true });
    expect(byPrompt.body.tokens_evaluated).toBe(chat.body.usage.prompt_tokens);
    expect(byPrompt.body.content).toBe(chat.body.choices[0].message.content);
    const bad = await post('/apply-template', { messages: [] });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/messages must not be empty/);
    const kw = await post('/apply-template', { messages, chat_template_kwargs: { messages: [] } });
    expect(kw.status).toBe(400);
    expect(kw.body.error.message).toMatch(/chat_template_kwargs cannot set 'messages'/);
  });

  it('ends code completions as llama-server does: n_indent cuts the first line short of it, t_max_predict_ms stops at a newline', async () => {
    const [nl] = await tokenize('\n');
    const [sp] = await tokenize('  ');
    // Sampled with a seed (the same tokens each time), newlines and indentation made likely, so
    // that the random model writes several lines.
    const base = { prompt: 'def f(x):', n_predict: 64, ...greedy, temperature: 1, seed: 7, logit_bias: [[nl, 5], [sp, 4]] };
    const text = (await post('/completion', base)).body.content as string;
    expect(text.slice(0, -1)).toContain('\n');
    // The rule: every line after the first newline needs 2 leading spaces/tabs; the first that has
    // fewer before another character (a newline too) is cut just before that character.
    const cutAt = (t: string, n: number) => {
      let p = t.indexOf('\n') + 1;
      while (p > 0) {
        let k = 0;
        while (k < n && (t[p + k] === ' ' || t[p + k] === '\t')) k++;
        if (k < n) return p + k < t.length ? t.slice(0, p + k) : t;
        p = t.indexOf('\n', p + k) + 1;
      }
      return t;
    };
    const expected = cutAt(text, 2);
    expect(expected.length).toBeLessThan(text.length);
    const cut = await post('/completion', { ...base, n_indent: 2 });
    expect([cut.body.content, cut.body.stop_type, cut.body.generation_settings.n_indent]).toEqual([expected, 'limit', 2]);
    const streamed = await events('/completion', { ...base, n_indent: 2 });
    expect(streamed.map((e) => e.content).join('')).toBe(expected);
    expect(streamed.at(-1)!.stop_type).toBe('limit');
    // 1 ms: past it at once, so the output ends with the first token after the first that writes a newline.
    const timed = await post('/completion', { ...base, t_max_predict_ms: 1 });
    expect(text.startsWith(timed.body.content)).toBe(true);
    expect(timed.body.stop_type).toBe('limit');
    const last = (await post('/detokenize', { tokens: timed.body.tokens.slice(-1) })).body.content as string;
    expect(last).toContain('\n');
  });

  it("embeds as llama-server's /embedding and /embeddings: [{index, embedding: [vector]}], normalized by embd_normalize", async () => {
    const oai = await post('/v1/embeddings', { model: 'tiny', input: ['hello world', 'bye'] });
    const r = await post('/embedding', { model: 'tiny', content: ['hello world', 'bye'] });
    expect(r.status).toBe(200);
    expect(r.body.map((e: { index: number }) => e.index)).toEqual([0, 1]);
    for (const [i, e] of (r.body as { embedding: number[][] }[]).entries()) {
      expect(e.embedding).toHaveLength(1);
      e.embedding[0].forEach((x, j) => expect(x).toBeCloseTo(oai.body.data[i].embedding[j], 5));
    }
    const raw = (await post('/embedding', { model: 'tiny', content: 'hello world', embd_normalize: -1 })).body[0].embedding[0] as number[];
    const taxicab = (await post('/embeddings', { model: 'tiny', input: 'hello world', embd_normalize: 1 })).body[0].embedding[0] as number[];
    const l1 = raw.reduce((a, x) => a + Math.abs(x), 0);
    taxicab.forEach((x, j) => expect(x).toBeCloseTo(raw[j] / l1, 6));
    const maxAbs = (await post('/embedding', { model: 'tiny', content: 'hello world', embd_normalize: 0 })).body[0].embedding[0] as number[];
    expect(Math.max(...maxAbs.map(Math.abs))).toBeCloseTo(32760, 1);
    // Token ids (BOS first, as llama-server tokenizes a text input) embed the same as the text.
    const ids = await tokenize('hello world', { add_special: true });
    const byIds = (await post('/embedding', { model: 'tiny', content: ids })).body[0].embedding[0] as number[];
    byIds.forEach((x, j) => expect(x).toBeCloseTo(r.body[0].embedding[0][j], 6));
    expect(await post('/embedding', { model: 'tiny' })).toMatchObject({ status: 400, body: { error: { message: '"input" or "content" must be provided' } } });
    expect((await post('/embedding', { model: 'tiny', content: '' })).status).toBe(400);
    expect((await post('/embedding', { model: 'tiny', content: 'x', embd_normalize: -2 })).status).toBe(400);
  });

  it('reports the server\'s properties (/props): context, slots, file, chat template and /completion\'s defaults', async () => {
    const r = await fetch(`${api.url}/props`);
    expect(r.status).toBe(200);
    const p = (await r.json()) as Record<string, any>;
    expect(p.default_generation_settings.n_ctx).toBe(4096);
    expect(p.default_generation_settings.params).toMatchObject({ n_predict: -1, seed: -1, temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05 });
    expect(p.total_slots).toBe(2);
    expect(p.model_path).toBe(file);
    expect(p.model_alias).toBe('tiny');
    expect(p.chat_template).toContain('<|im_start|>');
    expect(p.build_info).toMatch(/^kailstream /);
    expect((await fetch(`${api.url}/props?model=tiny`)).status).toBe(200);
    expect((await fetch(`${api.url}/props?model=nope`)).status).toBe(404);
  });

  it('shows the slots (/slots): idle, then what runs in each; fail_on_no_slot answers 503 while all are busy', async () => {
    const slots = async (q = '') => {
      const r = await fetch(`${api.url}/slots${q}`);
      return { status: r.status, body: (await r.json()) as any };
    };
    /** Polls /slots until `ok` holds (the telemetry behind it is sampled every 500 ms; 30 s at most, for a loaded machine). */
    const until = async (ok: (s: any[]) => boolean) => {
      const deadline = Date.now() + 30_000;
      for (;;) {
        const r = await slots();
        if (r.status === 200 && ok(r.body)) return r.body as any[];
        if (Date.now() > deadline) throw new Error(`/slots never got there: ${JSON.stringify(r)}`);
        await new Promise((res) => setTimeout(res, 100));
      }
    };
    const idle = await until((s) => s.length === 2 && s.every((x) => !x.is_processing));
    expect(idle.map((x) => x.id)).toEqual([0, 1]);
    expect(idle[0]).toMatchObject({ n_ctx: 4096, is_processing: false, request_id: null, params: null, next_token: { has_next_token: false, n_remain: -1 } });
    expect((await slots('?fail_on_no_slot=1')).status).toBe(200);

    // Two long streams fill both slots.
    const stop = new AbortController();
    const streams = [0.5, 0.7].map((temperature) =>
      fetch(`${api.url}/completion`, { method: 'POST', signal: stop.signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'Count', n_predict: 3000, temperature, seed: 1, ignore_eos: true, stream: true }) })
        .then((r) => r.text())
        .catch(() => ''),
    );
    try {
      const busy = await until((s) => s.every((x) => x.is_processing && x.next_token.n_decoded > 0));
      const temps = busy.map((x) => x.params.temperature).sort();
      expect(temps[0]).toBeCloseTo(0.5, 6);
      expect(temps[1]).toBeCloseTo(0.7, 6);
      for (const x of busy) {
        expect(x.request_id).toEqual(expect.any(String));
        expect(x.n_prompt_tokens).toBeGreaterThan(0);
        expect(x.n_prompt_tokens_processed).toBe(x.n_prompt_tokens);
        expect(x.next_token.n_remain).toBe(3000 - x.next_token.n_decoded);
        expect(x.n_cached_tokens).toBeGreaterThanOrEqual(x.n_prompt_tokens);
      }
      const full = await slots('?fail_on_no_slot=1');
      expect(full.status).toBe(503);
      expect(full.body.error.message).toBe('no slot available');
    } finally {
      stop.abort();
      await Promise.all(streams);
    }
    // The disconnected clients' requests are cancelled; the slots keep their caches for reuse.
    const after = await until((s) => s.every((x) => !x.is_processing));
    for (const x of after) expect(x.n_cached_tokens).toBeGreaterThan(0);
    expect((await slots('?model=nope')).status).toBe(404);
  });

  it('needs the model named once two are served', async () => {
    await stack.host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny2', threads: 2 }));
    // (The scheduler sees the second model at its next probe of the engine: polled for 30 s at most.)
    const deadline = Date.now() + 30_000;
    let r = await post('/tokenize', { content: 'x' });
    while (r.status === 200 && Date.now() < deadline) {
      await new Promise((res) => setTimeout(res, 100));
      r = await post('/tokenize', { content: 'x' });
    }
    expect(r.status).toBe(400);
    expect(r.body.error.message).toMatch(/model is required: 2 models are served \(tiny, tiny2\)/);
    const chat = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1 });
    expect([chat.status, chat.body.error]).toEqual([400, { message: 'model is required: 2 models are served (tiny, tiny2)', type: 'invalid_request_error', param: 'model', code: 'invalid_value' }]);
    expect((await post('/tokenize', { content: 'x', model: 'tiny2' })).status).toBe(200);
  });
});

describe("context shift (llama-server's --context-shift, n_keep, n_discard; Ollama's num_keep)", () => {
  const stacks: TestStack[] = [];
  afterAll(async () => {
    for (const s of stacks) await s.close();
  });
  const greedy = { temperature: 0, ignore_eos: true, return_tokens: true };

  it('generates past a 48-token context with the engine shifting, and stops there without it', async () => {
    const shifting = await startTestStack([{ id: 'tiny', contextLength: 48 }], { contextShift: true });
    const plain = await startTestStack([{ id: 'tiny', contextLength: 48 }]);
    stacks.push(shifting, plain);
    const body = { prompt: 'The answer is', n_predict: 100, ...greedy };
    const nPrompt = (await shifting.post('/tokenize', { content: 'The answer is', add_special: true })).body.tokens.length as number;
    const stopped = (await plain.post('/completion', body)).body;
    expect(stopped.tokens_predicted).toBe(48 - nPrompt);
    expect(stopped.truncated).toBe(false);
    const shifted = (await shifting.post('/completion', { ...body, n_keep: 2, n_discard: 10 })).body;
    expect(shifted.tokens_predicted).toBe(100);
    expect(shifted.truncated).toBe(true);
    expect(shifted.stop_type).toBe('limit');
    expect(shifted.generation_settings).toMatchObject({ n_keep: 2, n_discard: 10 });
    // Up to the first shift the two are the same tokens.
    expect(shifted.tokens.slice(0, stopped.tokens.length)).toEqual(stopped.tokens);
    // Streamed, the same tokens.
    const ev = (await shifting.events('/completion', { ...body, n_keep: 2, n_discard: 10 })).map(([, d]) => d);
    expect(ev.flatMap((e) => e.tokens ?? [])).toEqual(shifted.tokens);
    expect(ev.at(-1)!.truncated).toBe(true);
    // The OpenAI routes take n_keep and n_discard too, as llama-server's do.
    const oai = await shifting.post('/v1/completions', { model: 'tiny', prompt: 'The answer is', max_tokens: 90, temperature: 0, ignore_eos: true, n_keep: 1 });
    expect(oai.status).toBe(200);
    expect(oai.body.usage.completion_tokens).toBe(90);
    expect((await shifting.post('/v1/completions', { model: 'tiny', prompt: 'x', max_tokens: 2, n_keep: -5 })).status).toBe(400);
    // Ollama's generate: num_keep, and a num_ctx window smaller than the model's shifts there.
    const ol = await shifting.post('/api/generate', { model: 'tiny', prompt: 'The answer is', raw: true, stream: false, options: { num_predict: 60, num_ctx: 32, num_keep: 1, temperature: 0, seed: 1 } });
    expect(ol.status).toBe(200);
    // (Ollama's requests may end at an end-of-generation token: past the window is what counts.)
    expect(ol.body.eval_count).toBeGreaterThan(32 - nPrompt);
    if (ol.body.eval_count < 60) expect(ol.body.done_reason).toBe('stop');
    // Bad values are the client's error, and the server goes on.
    const bad = await shifting.post('/completion', { ...body, n_keep: -2 });
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.body)).toContain('n_keep');
    expect((await shifting.post('/completion', { prompt: 'x', n_predict: 2, ...greedy })).status).toBe(200);
  }, 120_000);
});

describe("slot save / restore / erase (llama-server's POST /slots/ID?action=…, --slot-save-path)", () => {
  let stack: TestStack;
  let off: TestStack;
  beforeAll(async () => {
    stack = await startTestStack([{ id: 'tiny' }], { slotSave: true });
    off = await startTestStack([{ id: 'tiny' }]);
  }, 60_000);
  afterAll(async () => {
    await stack?.close();
    await off?.close();
  });
  const greedy = { temperature: 0, ignore_eos: true, return_tokens: true };

  it("saves a slot's cache to a file, erases it, restores it into another slot, and the next request reuses it", async () => {
    const prompt = 'System: you are a helpful assistant that knows about mixtures of experts. User: hello';
    const first = (await stack.post('/completion', { prompt, n_predict: 4, id_slot: 1, ...greedy })).body;
    // The answer names the slot it ran in (pinned here with id_slot), the one with something to save.
    expect(first.id_slot).toBe(1);
    const saves = await Promise.all([0, 1].map((id) => stack.post(`/slots/${id}?action=save`, { filename: `s${id}.bin` })));
    for (const s of saves) expect(s.status).toBe(200);
    const used = saves.findIndex((s) => s.body.n_saved > 0);
    expect(used).toBe(1);
    const saved = saves[used].body;
    expect(saved).toMatchObject({ id_slot: used, filename: `s${used}.bin`, n_saved: first.tokens_evaluated + 3 });
    expect(saved.n_written).toBeGreaterThan(0);
    expect(saved.timings.save_ms).toBeGreaterThanOrEqual(0);
    // Both slots emptied, then the file goes into the other one.
    for (const id of [0, 1]) expect((await stack.post(`/slots/${id}?action=erase`, {})).status).toBe(200);
    const other = 1 - used;
    const restored = (await stack.post(`/slots/${other}?action=restore`, { filename: `s${used}.bin` })).body;
    expect(restored).toMatchObject({ id_slot: other, filename: `s${used}.bin`, n_restored: saved.n_saved, n_read: saved.n_written });
    const next = (await stack.post('/completion', { prompt: prompt + first.content + ' more', n_predict: 4, ...greedy })).body;
    expect(next.tokens_cached).toBeGreaterThanOrEqual(first.tokens_evaluated);
    // The same answer as computing it all.
    for (const id of [0, 1]) await stack.post(`/slots/${id}?action=erase`, {});
    const again = (await stack.post('/completion', { prompt: prompt + first.content + ' more', n_predict: 4, ...greedy })).body;
    expect(again.tokens_cached).toBe(0);
    expect(next.tokens).toEqual(again.tokens);
  }, 60_000);

  it("answers POST /props as llama-server without --props does (501), and GET /props still works", async () => {
    const r = await stack.post('/props', { default_generation_settings: {} });
    expect(r.status).toBe(501);
    expect(r.body.error.message).toContain('does not support changing global properties');
  });

  it('answers bad actions, names, files and servers without a save path with the right errors, and goes on serving', async () => {
    expect((await stack.post('/slots/0?action=fly', { filename: 'a.bin' })).status).toBe(400);
    expect((await stack.post('/slots/0?action=save', {})).status).toBe(400);
    const path = await stack.post('/slots/0?action=save', { filename: '../escape.bin' });
    expect(path.status).toBe(400);
    expect(path.body.error.message).toContain("invalid slot file name '../escape.bin'");
    const missing = await stack.post('/slots/0?action=restore', { filename: 'nothing.bin' });
    expect(missing.status).toBe(404);
    expect(missing.body.error.message).toContain('nothing.bin');
    expect((await stack.post('/slots/9?action=erase', {})).status).toBe(400);
    const pinned = await stack.post('/completion', { prompt: 'x', n_predict: 2, id_slot: 9 });
    expect(pinned.status).toBe(400);
    expect(pinned.body.error.message).toContain('slot 9 does not exist');
    expect((await stack.post('/slots/x?action=erase', {})).status).toBe(400);
    const disabled = await off.post('/slots/0?action=save', { filename: 'a.bin' });
    expect(disabled.status).toBe(501);
    expect(disabled.body.error.message).toContain('--slot-save-path');
    expect((await stack.post('/completion', { prompt: 'x', n_predict: 2, ...greedy })).status).toBe(200);
  }, 60_000);
});

describe("reranking (llama-server's /rerank, /v1/rerank; TEI's shape with texts)", () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack([{ id: 'rr', preset: 'tiny-qwen3-reranker' }, { id: 'tiny' }]);
  }, 60_000);
  afterAll(() => stack?.close());
  const docs = ['A router picks the top experts for each token.', 'The weather is mild in the spring.', 'Experts are feed-forward blocks.', 'Bananas are yellow.'];

  it('scores each document against the query, highest first, with top_n, return_text and usage', async () => {
    const r = await stack.post('/rerank', { model: 'rr', query: 'what routes tokens to experts?', documents: docs, return_text: true });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ model: 'rr', object: 'list' });
    const res = r.body.results as { index: number; relevance_score: number; document: { text: string } }[];
    expect(res.map((x) => x.index).sort()).toEqual([0, 1, 2, 3]);
    for (let i = 1; i < res.length; i++) expect(res[i - 1].relevance_score).toBeGreaterThanOrEqual(res[i].relevance_score);
    for (const x of res) {
      expect(x.relevance_score).toBeGreaterThan(0);
      expect(x.relevance_score).toBeLessThan(1);
      expect(x.document.text).toBe(docs[x.index]);
    }
    expect(new Set(res.map((x) => x.relevance_score)).size).toBe(4);
    expect(r.body.usage.prompt_tokens).toBeGreaterThan(docs.length);
    // The same scores on every door, each document scored alone; top_n keeps the best.
    const v1 = await stack.post('/v1/rerank', { model: 'rr', query: 'what routes tokens to experts?', documents: docs, top_n: 2 });
    expect(v1.body.results).toEqual(res.slice(0, 2).map(({ index, relevance_score }) => ({ index, relevance_score })));
    const one = await stack.post('/reranking', { model: 'rr', query: 'what routes tokens to experts?', documents: [docs[2]] });
    expect(one.body.results[0].relevance_score).toBeCloseTo(res.find((x) => x.index === 2)!.relevance_score, 6);
    const tei = await stack.post('/v1/reranking', { model: 'rr', query: 'what routes tokens to experts?', texts: docs, return_text: true });
    expect(tei.body).toEqual(res.map((x) => ({ index: x.index, score: x.relevance_score, text: docs[x.index] })));
  }, 60_000);

  it("answers vLLM's /score (one text_1 against each text_2, or pairs) and Cohere v2's /v2/rerank with the same scores", async () => {
    const q = 'what routes tokens to experts?';
    const rr = (await stack.post('/v1/rerank', { model: 'rr', query: q, documents: docs })).body.results as { index: number; relevance_score: number }[];
    const byIndex = (i: number) => rr.find((x) => x.index === i)!.relevance_score;
    const sc = await stack.post('/score', { model: 'rr', text_1: q, text_2: docs });
    expect(sc.status).toBe(200);
    expect(sc.body.data.map((d: { index: number }) => d.index)).toEqual([0, 1, 2, 3]);
    sc.body.data.forEach((d: { index: number; score: number; object: string }) => {
      expect(d.object).toBe('score');
      expect(d.score).toBeCloseTo(byIndex(d.index), 6);
    });
    const pairs = await stack.post('/v1/score', { model: 'rr', text_1: [q, q], text_2: [docs[1], docs[0]] });
    expect(pairs.body.data[0].score).toBeCloseTo(byIndex(1), 6);
    expect(pairs.body.data[1].score).toBeCloseTo(byIndex(0), 6);
    expect((await stack.post('/score', { model: 'rr', text_1: [q, q], text_2: docs })).status).toBe(400);
    expect((await stack.post('/v2/rerank', { model: 'rr', query: q, documents: docs })).body.results).toEqual(rr);
  }, 60_000);

  it("scores hundreds of documents in one request (more than the scheduler's queue for one key holds)", async () => {
    const many = Array.from({ length: 300 }, (_, i) => `document number ${i}`);
    const r = await stack.post('/rerank', { model: 'rr', query: 'which number?', documents: many, top_n: 3 });
    expect(r.status).toBe(200);
    expect(r.body.results).toHaveLength(3);
    expect(r.body.usage.prompt_tokens).toBeGreaterThan(300);
  }, 120_000);

  it('refuses a model that is not a reranker and bad bodies with the right errors, and goes on serving', async () => {
    const notRr = await stack.post('/rerank', { model: 'tiny', query: 'q', documents: ['d'] });
    expect(notRr.status).toBe(501);
    expect(notRr.body.error.message).toContain("model 'tiny' is not a reranker");
    expect((await stack.post('/rerank', { model: 'rr', documents: ['d'] })).status).toBe(400);
    expect((await stack.post('/rerank', { model: 'rr', query: 'q', documents: [] })).status).toBe(400);
    expect((await stack.post('/rerank', { model: 'rr', query: 'q', documents: [1, 2] })).status).toBe(400);
    expect((await stack.post('/rerank', { model: 'nope', query: 'q', documents: ['d'] })).status).toBe(404);
    expect((await stack.post('/rerank', { model: 'rr', query: 'q', documents: ['d'] })).status).toBe(200);
  }, 60_000);
});
