import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import OpenAI from 'openai';
import { engine as pb, scheduler as spb } from '@kailstream/proto';
import { LocalModelHost, Tokenizer, native, startEngineServer, type RunningEngineServer } from '@kailstream/engine';
import { tempDir, writeTestModel } from '@kailstream/engine/testing';
import { startSchedulerServer, type RunningSchedulerServer } from '@kailstream/scheduler';

import { parseApiConfig } from '../env';
import { MAX_BODY_BYTES, startApi, type RunningApi } from '../server';
import { startTestStack } from '../test-stack';
import { grpcToHttp } from './routes';

const SLOTS = 8;
const MAX_QUEUED = 40;
const CTX = 1024;

// The real stack in one process: engine gRPC server with a tiny MoE model, scheduler, API with a
// key store; the official `openai` client talks to it like to any OpenAI-compatible server.
describe('OpenAI-compatible routes', () => {
  const dir = tempDir();
  let engine: RunningEngineServer;
  let sched: RunningSchedulerServer;
  let api: RunningApi;
  let key: string;
  let client: OpenAI;
  let schedClient: spb.SchedulerServiceClient;
  let tokenizer: Tokenizer;

  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const gguf = native().openGguf(file, { mapData: false });
    tokenizer = Tokenizer.fromMetadata(gguf.metadata);
    gguf.close();
    // (A context of CTX: the flood's running requests generate for several seconds, longer than the
    // flood takes to arrive on a loaded machine.)
    const host = new LocalModelHost({ seqsPerModel: SLOTS, defaultContext: CTX });
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny', contextLength: CTX, threads: 2 }));
    engine = await startEngineServer(host, { port: 0 });
    sched = await startSchedulerServer({ engines: [`127.0.0.1:${engine.port}`], slotsPerEngine: SLOTS, maxQueued: MAX_QUEUED, maxQueuedPerTenant: MAX_QUEUED, probeIntervalMs: 500 });
    api = await startApi(parseApiConfig({ port: 0, schedulerAddress: `127.0.0.1:${sched.port}`, dataDir: dir, readyMaxAgeS: 5 }));
    key = api.keys!.create('tests').key;
    client = new OpenAI({ baseURL: `${api.url}/v1`, apiKey: key, maxRetries: 0, timeout: 60_000 });
    schedClient = new spb.SchedulerServiceClient(`127.0.0.1:${sched.port}`, grpc.credentials.createInsecure());
  }, 60_000);

  afterAll(async () => {
    schedClient?.close();
    await api?.close();
    await sched?.close(100);
    await engine?.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** The token whose text is exactly `text`. */
  const tokenOf = (text: string) => [...Array(tokenizer.nTokens).keys()].find((t) => Buffer.from(tokenizer.tokenToPiece(t)).toString('latin1') === text)!;
  const auth = () => ({ 'content-type': 'application/json', authorization: `Bearer ${key}` });
  const post = (path: string, body: unknown, headers: Record<string, string> = auth(), signal?: AbortSignal) =>
    fetch(`${api.url}${path}`, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body), signal });
  const chat = (content: string, extra: Partial<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming> = {}) =>
    client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content }], max_tokens: 8, temperature: 0, ...extra });
  /** Requests running on the engines of a scheduler (the suite's by default). */
  const running = (c: spb.SchedulerServiceClient = schedClient) =>
    new Promise<number>((resolve, reject) =>
      c.listEngines({}, (e, r) => (e ? reject(e) : resolve(r.engines.reduce((a, x) => a + x.running, 0)))),
    );
  const waitIdle = async (ms = 10_000, c: spb.SchedulerServiceClient = schedClient) => {
    const end = Date.now() + ms;
    while ((await running(c)) > 0) {
      if (Date.now() > end) throw new Error('requests still running on the engine');
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  it('lists the model and is ready', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['tiny']);
    const r = await fetch(`${api.url}/ready`, { headers: auth() });
    expect(r.status).toBe(200);
    expect(await r.json()).toMatchObject({ ready: true, engines: [expect.objectContaining({ models: ['tiny'] })] });
  });

  it('retrieves one model, and answers 404 in the OpenAI shape for one it does not serve', async () => {
    expect(await client.models.retrieve('tiny')).toMatchObject({ id: 'tiny', object: 'model', owned_by: 'kailstream' });
    await expect(client.models.retrieve('org/none')).rejects.toMatchObject({ status: 404, code: 'model_not_found' });
  });

  it('answers a non-streaming chat completion with usage (openai client)', async () => {
    const r = await chat('Hello');
    expect(r.object).toBe('chat.completion');
    expect(r.choices[0].message.role).toBe('assistant');
    expect(typeof r.choices[0].message.content).toBe('string');
    expect(r.usage!.completion_tokens).toBeGreaterThan(0);
    expect(r.usage!.total_tokens).toBe(r.usage!.prompt_tokens + r.usage!.completion_tokens);
  });

  it('streams the same text as the non-streaming answer, with usage when asked (openai client)', async () => {
    const whole = await chat('Hi there', { max_tokens: 10 });
    const stream = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'Hi there' }], max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(whole.choices[0].message.content);
    expect(finish).toBe(whole.choices[0].finish_reason);
    expect(usage!.completion_tokens).toBe(whole.usage!.completion_tokens);
  });

  it('stops at a stop sequence, leaving it out of the text', async () => {
    const full = (await chat('Tell me a story', { max_tokens: 16, ignore_eos: true } as never)).choices[0].message.content!;
    // A stop string from the middle of the greedy answer: the reply must end right before it.
    const at = Math.floor(full.length / 2);
    const stop = full.slice(at, at + 2);
    expect(stop.length).toBe(2);
    const cut = await chat('Tell me a story', { max_tokens: 16, stop: [stop], ignore_eos: true } as never);
    expect(cut.choices[0].message.content).toBe(full.slice(0, full.indexOf(stop)));
    expect(cut.choices[0].finish_reason).toBe('stop');
  });

  it('reproduces a sampled answer with the same seed; other seeds sample differently', async () => {
    const ask = (seed: number) => chat('Once upon a time', { temperature: 1.5, seed, max_tokens: 12, ignore_eos: true } as never).then((r) => r.choices[0].message.content);
    const a = await ask(7);
    expect(await ask(7)).toBe(a);
    const others = [await ask(8), await ask(9), await ask(10)];
    expect(new Set([a, ...others]).size).toBeGreaterThan(1);
    // -1 is llama-server's random seed: a new draw each time (as no seed), not a 400.
    const random = [await ask(-1), await ask(-1), await ask(-1)];
    expect(new Set(random).size).toBeGreaterThan(1);
  });

  it('takes any integer seed, as OpenAI does: past 2^53 and other negatives reduced modulo 2^32, as llama-server reads them', async () => {
    // The raw body: 2^63 - 1 is not a JavaScript number; JSON.parse makes it 2^63 (0 modulo 2^32).
    const ask = async (seed: string) => {
      const r = await post('/v1/chat/completions', `{"model":"tiny","messages":[{"role":"user","content":"Once upon a time"}],"temperature":1.5,"max_tokens":12,"ignore_eos":true,"seed":${seed}}`);
      expect(r.status).toBe(200);
      return ((await r.json()) as OpenAI.Chat.ChatCompletion).choices[0].message.content;
    };
    expect(await ask('-2')).toBe(await ask(String(2 ** 32 - 2)));
    expect(await ask('-9')).toBe(await ask(String(2 ** 32 - 9)));
    expect(await ask('9223372036854775807')).toBe(await ask('0'));
    expect(await ask('-9223372036854775808')).toBe(await ask('0'));
    expect(await ask('-2')).not.toBe(await ask('0'));
  });

  it('takes a top_k beyond int32 as any top_k past the vocabulary (every token kept)', async () => {
    // Not the same draw as top_k 0: like llama.cpp, a top_k sorts the candidates first.
    const ask = (top_k: number) => chat('Once upon a time', { temperature: 1.5, seed: 3, max_tokens: 8, ignore_eos: true, top_k } as never).then((r) => r.choices[0].message.content);
    const all = await ask(1_000_000);
    expect(await ask(2 ** 31)).toBe(all);
    expect(await ask(2 ** 40)).toBe(all);
  });

  it("takes llama-server's further sampler fields (Mirostat, top-n-sigma, DRY, repeat_last_n); a bad one is a 400 naming it", async () => {
    const ask = (extra: object) => chat('Once upon a time', { max_tokens: 10, ignore_eos: true, ...extra } as never).then((r) => r.choices[0].message.content);
    const greedy = await ask({ temperature: 0 });
    expect(await ask({ temperature: 1.5, seed: 3, mirostat: 2, mirostat_tau: 0, mirostat_eta: 0 })).toBe(greedy);
    expect(await ask({ temperature: 1.5, seed: 3, top_n_sigma: 1e-9 })).toBe(greedy);
    // repeat_last_n 0 turns the penalties off, so a repeat penalty changes nothing.
    expect(await ask({ temperature: 0, repeat_penalty: 5, repeat_last_n: 0 })).toBe(greedy);
    const r = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 2, dry_multiplier: 0.8, dry_sequence_breakers: 'nope' });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { param: string } }).error.param).toBe('dry_sequence_breakers');
  });

  it("takes vLLM's stop_token_ids, min_tokens, include_stop_str_in_output and repetition_penalty", async () => {
    const prompt = 'Once upon a time';
    const ids = (await (await post('/completion', { model: 'tiny', prompt, n_predict: 12, temperature: 0, ignore_eos: true, return_tokens: true, repeat_penalty: 1, top_k: 0, top_p: 1, min_p: 0 })).json()) as { tokens: number[]; content: string };
    const at = ids.tokens.findIndex((t, i) => i >= 2 && !ids.tokens.slice(0, i).includes(t));
    const text = async (tokens: number[]) => ((await (await post('/detokenize', { model: 'tiny', tokens })).json()) as { content: string }).content;
    const cmpl = async (extra: object) => (await (await post('/v1/completions', { model: 'tiny', prompt, max_tokens: 12, temperature: 0, ...extra })).json()) as { choices: { text: string; finish_reason: string }[] };
    expect((await cmpl({})).choices[0].text).toBe(ids.content);
    const stopped = await cmpl({ stop_token_ids: [ids.tokens[at]] });
    expect(stopped.choices[0]).toEqual(expect.objectContaining({ text: await text(ids.tokens.slice(0, at)), finish_reason: 'stop' }));
    // min_tokens past it: that token is not drawn before then.
    expect((await cmpl({ stop_token_ids: [ids.tokens[at]], min_tokens: at + 1 })).choices[0].text.startsWith(await text(ids.tokens.slice(0, at)))).toBe(true);
    // The stop string kept at the end.
    const stop = ids.content.slice(3, 5);
    const kept = await cmpl({ stop: [stop], include_stop_str_in_output: true });
    expect(kept.choices[0].text).toBe(ids.content.slice(0, ids.content.indexOf(stop)) + stop);
    // repetition_penalty (vLLM's name) is the repeat penalty over everything.
    expect((await cmpl({ repetition_penalty: 1.5 })).choices[0].text).toBe((await cmpl({ repeat_penalty: 1.5, repeat_last_n: -1 })).choices[0].text);
    const bad = await post('/v1/completions', { model: 'tiny', prompt, stop_token_ids: [-1] });
    expect(bad.status).toBe(400);
  });

  it('continues a final assistant message (prefill) unless add_generation_prompt or continue_final_message false says otherwise', async () => {
    const messages = [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Sure, the answer' }];
    const ask = async (extra: object) => (await (await post('/v1/chat/completions', { model: 'tiny', messages, max_tokens: 5, temperature: 0, ...extra })).json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number } };
    const cont = await ask({});
    const explicit = await ask({ continue_final_message: true });
    const turn = await ask({ add_generation_prompt: true });
    expect(explicit.choices[0].message.content).toBe(cont.choices[0].message.content);
    expect(explicit.usage.prompt_tokens).toBe(cont.usage.prompt_tokens);
    // A new turn adds the end of the assistant's turn and the opening of the next.
    expect(turn.usage.prompt_tokens).toBeGreaterThan(cont.usage.prompt_tokens);
    expect((await ask({ continue_final_message: false })).usage.prompt_tokens).toBe(turn.usage.prompt_tokens);
    // /apply-template shows the continued prompt.
    const tpl = (await (await post('/apply-template', { model: 'tiny', messages })).json()) as { prompt: string };
    expect(tpl.prompt.endsWith('Sure, the answer')).toBe(true);
    for (const [extra, why] of [
      [{ continue_final_message: true, add_generation_prompt: true }, /cannot both be true/],
      [{ continue_final_message: true, messages: [{ role: 'user', content: 'Hi' }] }, /needs the last message to be the assistant's/],
    ] as const) {
      const r = await post('/v1/chat/completions', { model: 'tiny', messages, max_tokens: 2, ...extra });
      expect(r.status).toBe(400);
      expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(why);
    }
  });

  it('applies logit_bias: +100 forces a token, -100 bans it; ids outside the vocabulary are a 400', async () => {
    const [a, b] = tokenizer.tokenize('hello world', { addSpecial: false }).slice(0, 2);
    const biased = (bias: Record<string, number>) => chat('Once upon a time', { max_tokens: 3, ignore_eos: true, logit_bias: bias } as never).then((r) => r.choices[0].message.content);
    const both = await biased({ [a]: 100, [b]: 100 });
    const winner = [a, b].find((t) => both === tokenizer.detokenize([t, t, t]));
    expect(winner).toBeDefined();
    const other = winner === a ? b : a;
    expect(await biased({ [a]: 100, [b]: 100, [winner!]: -100 })).toBe(tokenizer.detokenize([other, other, other]));
    const r = await post('/v1/completions', { model: 'tiny', prompt: 'x', max_tokens: 2, logit_bias: { 99999999: 5 } });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(/logit bias names token id 99999999, outside the vocabulary/);
    const bad = await post('/v1/completions', { model: 'tiny', prompt: 'x', max_tokens: 2, logit_bias: { 5: 101 } });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { param: string } }).error.param).toBe('logit_bias.5');
  });

  it('answers response_format json_object with a JSON object', async () => {
    const r = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'Reply in JSON' }],
      max_tokens: 128,
      seed: 2,
      n: 6,
      response_format: { type: 'json_object' },
      logit_bias: { [tokenOf('"')]: 4, [tokenOf('}')]: 6 },
    });
    const done = r.choices.filter((c) => c.finish_reason === 'stop');
    expect(done.length).toBeGreaterThanOrEqual(3);
    for (const c of done) expect(JSON.parse(c.message.content!)).toEqual(expect.any(Object));
    for (const c of r.choices) expect(c.message.content!.trimStart().startsWith('{')).toBe(true);
  });

  it('answers response_format json_schema with objects that follow the schema; refused keywords are a 400 naming them', async () => {
    const schema = {
      type: 'object',
      properties: { name: { type: 'string' }, age: { type: 'integer' }, role: { enum: ['admin', 'user'] }, tags: { type: 'array', items: { type: 'boolean' }, maxItems: 2 } },
      required: ['name', 'age', 'role', 'tags'],
    };
    const r = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'A person, as JSON' }],
      max_tokens: 160,
      seed: 5,
      n: 6,
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } },
      // Random weights wander; closing quotes and brackets made likely let most answers finish.
      logit_bias: { [tokenOf('"')]: 5, [tokenOf(']')]: 5, [tokenOf('}')]: 5 },
    });
    const done = r.choices.filter((c) => c.finish_reason === 'stop');
    expect(done.length).toBeGreaterThanOrEqual(3);
    for (const c of done) {
      const v = JSON.parse(c.message.content!);
      expect(Object.keys(v)).toEqual(['name', 'age', 'role', 'tags']);
      expect(typeof v.name).toBe('string');
      expect(Number.isInteger(v.age)).toBe(true);
      expect(['admin', 'user']).toContain(v.role);
      expect(v.tags.length).toBeLessThanOrEqual(2);
      for (const t of v.tags) expect(typeof t).toBe('boolean');
    }
    const bad = await post('/v1/chat/completions', {
      model: 'tiny',
      messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'object', properties: { a: { type: 'array', uniqueItems: true } } } } },
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/json_schema at \/properties\/a: 'uniqueItems' is not supported/);
  });

  it('answers n choices, choice i sampled as a single request with seed + i, streamed or not', async () => {
    const params = { messages: [{ role: 'user' as const, content: 'Once upon a time' }], model: 'tiny', temperature: 1.5, max_tokens: 6, ignore_eos: true } as never;
    const one = async (seed: number) => (await client.chat.completions.create({ ...(params as object), seed } as never)) as OpenAI.Chat.ChatCompletion;
    const many = (await client.chat.completions.create({ ...(params as object), seed: 21, n: 3 } as never)) as OpenAI.Chat.ChatCompletion;
    expect(many.choices.map((ch) => ch.index)).toEqual([0, 1, 2]);
    const singles = [await one(21), await one(22), await one(23)];
    expect(many.choices.map((ch) => ch.message.content)).toEqual(singles.map((r) => r.choices[0].message.content));
    expect(many.choices.every((ch) => ch.finish_reason === 'length')).toBe(true);
    expect(many.usage!.prompt_tokens).toBe(singles[0].usage!.prompt_tokens);
    expect(many.usage!.completion_tokens).toBe(18);

    const stream = await client.chat.completions.create({ ...(params as object), seed: 21, n: 3, stream: true, stream_options: { include_usage: true } } as never);
    const texts = ['', '', ''];
    const finishes: (string | null)[] = [null, null, null];
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream as unknown as AsyncIterable<OpenAI.Chat.ChatCompletionChunk>) {
      for (const ch of chunk.choices) {
        texts[ch.index] += ch.delta?.content ?? '';
        finishes[ch.index] = ch.finish_reason ?? finishes[ch.index];
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(texts).toEqual(many.choices.map((ch) => ch.message.content));
    expect(finishes).toEqual(['length', 'length', 'length']);
    expect(usage!.completion_tokens).toBe(18);

    for (const n of [0, 17, 1.5]) {
      const r = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], n });
      expect(r.status).toBe(400);
      expect(((await r.json()) as { error: { param: string } }).error.param).toBe('n');
    }
    await waitIdle();
  });

  it("reports the prompt tokens a chat's next turn took from the cache of its first", async () => {
    const first = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Tell me about routers' }], max_tokens: 8, temperature: 0, ignore_eos: true } as never) as OpenAI.Chat.ChatCompletion;
    expect(first.usage!.prompt_tokens_details?.cached_tokens ?? 0).toBeLessThan(first.usage!.prompt_tokens);
    const next = await client.chat.completions.create({
      model: 'tiny', max_tokens: 4, temperature: 0,
      messages: [{ role: 'user', content: 'Tell me about routers' }, { role: 'assistant', content: first.choices[0].message.content }, { role: 'user', content: 'And experts?' }],
    });
    // At least the whole first prompt was served from the slot that ran it.
    expect(next.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(first.usage!.prompt_tokens);
    expect(next.usage!.prompt_tokens_details!.cached_tokens).toBeLessThan(next.usage!.prompt_tokens);
  });

  it('answers a text completion with logprobs', async () => {
    const r = (await (await post('/v1/completions', { model: 'tiny', prompt: 'Once upon', max_tokens: 4, temperature: 0, logprobs: 2 })).json()) as any;
    expect(r.object).toBe('text_completion');
    expect(r.choices[0].logprobs.tokens).toHaveLength(r.usage.completion_tokens);
    expect(r.choices[0].logprobs.top_logprobs[0]).toBeDefined();
  });

  it('fills in the middle with suffix (openai client), as the prompt written out with the FIM tokens', async () => {
    const prefix = 'def add(a, b):\n    ';
    const suffix = '\n    return c\n';
    const fim = await client.completions.create({ model: 'tiny', prompt: prefix, suffix, max_tokens: 6, temperature: 0 });
    const written = await client.completions.create({ model: 'tiny', prompt: `<|fim_prefix|>${prefix}<|fim_suffix|>${suffix}<|fim_middle|>`, max_tokens: 6, temperature: 0 });
    expect(fim.choices[0].text).toBe(written.choices[0].text);
    expect(fim.usage!.prompt_tokens).toBe(written.usage!.prompt_tokens);
    const count = (t: string) => tokenizer.tokenize(t, { addSpecial: false }).length;
    expect(fim.usage!.prompt_tokens).toBe(count(prefix) + count(suffix) + 3);
    // At the start of a file the prompt is empty.
    const start = await client.completions.create({ model: 'tiny', prompt: '', suffix, max_tokens: 2, temperature: 0 });
    expect(start.usage!.prompt_tokens).toBe(count(suffix) + 3);
  });

  it('answers a batch of prompts, echo, best_of and streamed legacy logprobs as OpenAI does', async () => {
    type Text = { choices: { index: number; text: string; finish_reason: string; logprobs: any }[]; usage: { prompt_tokens: number; completion_tokens: number } };
    const complete = async (body: Record<string, unknown>) => {
      const r = await post('/v1/completions', { model: 'tiny', max_tokens: 4, temperature: 0, ignore_eos: true, ...body });
      expect(r.status).toBe(200);
      return (await r.json()) as Text;
    };
    // A batch: choices prompt by prompt, n each (choice i of a prompt with seed + i); usage adds the prompts.
    const prompts = ['Once upon', 'The router picks'];
    const batch = await complete({ prompt: prompts, n: 2, temperature: 1.2, seed: 5 });
    expect(batch.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    const singles = await Promise.all(prompts.flatMap((p) => [5, 6].map((seed) => complete({ prompt: p, temperature: 1.2, seed }))));
    expect(batch.choices.map((c) => c.text)).toEqual(singles.map((r) => r.choices[0].text));
    expect(batch.usage.prompt_tokens).toBe(singles[0].usage.prompt_tokens + singles[2].usage.prompt_tokens);
    expect(batch.usage.completion_tokens).toBe(16);

    // echo: the prompt's text, then the completion; for token ids, their text.
    const plain = await complete({ prompt: 'Once upon' });
    expect((await complete({ prompt: 'Once upon', echo: true })).choices[0].text).toBe(`Once upon${plain.choices[0].text}`);
    const ids = [tokenizer.tokenize('Once upon', { addSpecial: false }), tokenizer.tokenize('a time', { addSpecial: false })];
    const idPlain = await complete({ prompt: ids });
    const idEcho = await complete({ prompt: ids, echo: true });
    expect(idEcho.choices.map((c) => c.text)).toEqual(ids.map((t, i) => tokenizer.detokenize(t) + idPlain.choices[i].text));
    let streamed = '';
    const sr = await post('/v1/completions', { model: 'tiny', prompt: 'Once upon', max_tokens: 4, temperature: 0, ignore_eos: true, echo: true, stream: true });
    for (const line of (await sr.text()).split('\n\n')) if (line.startsWith('data: {')) streamed += JSON.parse(line.slice(6)).choices[0]?.text ?? '';
    expect(streamed).toBe(`Once upon${plain.choices[0].text}`);

    // best_of: the n of best_of samples with the highest mean log probability per token.
    const best = await complete({ prompt: 'Once upon', temperature: 1.5, seed: 9, best_of: 4, n: 2 });
    const cands = await Promise.all([9, 10, 11, 12].map((seed) => complete({ prompt: 'Once upon', temperature: 1.5, seed, logprobs: 1 })));
    const mean = (r: Text) => r.choices[0].logprobs.token_logprobs.reduce((a: number, x: number) => a + x, 0) / r.choices[0].logprobs.token_logprobs.length;
    const order = [0, 1, 2, 3].sort((a, b) => mean(cands[b]) - mean(cands[a]) || a - b);
    expect(best.choices.map((c) => c.text)).toEqual(order.slice(0, 2).map((i) => cands[i].choices[0].text));
    expect(best.usage.completion_tokens).toBe(16);

    // echo with logprobs scores the prompt too (lm-evaluation-harness's loglikelihood): its tokens
    // first (the first with null), then the completion's, which are what they are without echo.
    const withLp = await complete({ prompt: 'Once upon', logprobs: 2 });
    const scored = await complete({ prompt: 'Once upon', logprobs: 2, echo: true });
    const lp = scored.choices[0].logprobs;
    const nPrompt = scored.usage.prompt_tokens;
    expect(lp.tokens).toHaveLength(nPrompt + 4);
    expect([lp.token_logprobs[0], lp.top_logprobs[0]]).toEqual([null, null]);
    expect(lp.token_logprobs.slice(1).every((x: number) => x < 0)).toBe(true);
    expect(lp.tokens.slice(nPrompt)).toEqual(withLp.choices[0].logprobs.tokens);
    expect(lp.token_logprobs.slice(nPrompt)).toEqual(withLp.choices[0].logprobs.token_logprobs);
    expect(lp.tokens.slice(0, nPrompt).join('')).toBe('Once upon');
    expect(lp.text_offset.slice(0, nPrompt + 1)).toEqual(lp.tokens.slice(0, nPrompt + 1).map((_: string, i: number) => lp.tokens.slice(0, i).join('').length));

    // max_tokens 0 with echo: the prompt and its scores alone (OpenAI's legacy scoring request).
    const only = await complete({ prompt: 'Once upon', logprobs: 2, echo: true, max_tokens: 0 });
    expect(only.choices[0].text).toBe('Once upon');
    expect(only.choices[0].finish_reason).toBe('length');
    expect(only.usage.completion_tokens).toBe(0);
    expect(only.choices[0].logprobs.tokens).toEqual(lp.tokens.slice(0, nPrompt));
    expect(only.choices[0].logprobs.token_logprobs).toEqual(lp.token_logprobs.slice(0, nPrompt));

    // Streamed legacy logprobs: each chunk's tokens, at their offsets in the text.
    const lr = await post('/v1/completions', { model: 'tiny', prompt: 'Once upon', max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: 2, stream: true });
    let text = '';
    for (const line of (await lr.text()).split('\n\n')) {
      if (!line.startsWith('data: {')) continue;
      const ch = JSON.parse(line.slice(6)).choices[0];
      if (!ch?.logprobs) continue;
      expect(ch.logprobs.text_offset[0]).toBe(text.length);
      // (a token that ends inside a character shows as U+FFFD; its text comes with the next chunk)
      expect(ch.logprobs.tokens.length).toBe(ch.logprobs.token_logprobs.length);
      expect(Object.keys(ch.logprobs.top_logprobs[0]).length).toBeGreaterThanOrEqual(1);
      text += ch.text;
    }
    expect(text).toBe(plain.choices[0].text);

    // What is not supported says so, naming the field.
    const bad: [Record<string, unknown>, string, RegExp][] = [
      [{ prompt: 'x', suffix: 'y', echo: true }, 'suffix', /cannot be combined with echo/],
      [{ prompt: 'x', n: 3, best_of: 2 }, 'best_of', /at least n/],
      [{ prompt: 'x', best_of: 2, stream: true }, 'best_of', /stream/],
      [{ prompt: Array(5).fill('x'), n: 16 }, 'prompt', /at most 64/],
      [{ prompt: ['x', ''] }, 'prompt.1', /must not be empty/],
      [{ prompt: 'x', max_tokens: 0 }, 'max_tokens', /needs echo/],
      [{ prompt: [] }, 'prompt', /.+/],
    ];
    for (const [body, param, msg] of bad) {
      const r = await post('/v1/completions', { model: 'tiny', max_tokens: 2, ...body });
      expect(r.status).toBe(400);
      const e = ((await r.json()) as { error: { param: string; message: string } }).error;
      expect([e.param, e.message]).toEqual([param, expect.stringMatching(msg)]);
    }
    const img = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] }] });
    expect(img.status).toBe(400);
    expect(((await img.json()) as { error: { message: string } }).error.message).toMatch(/'image_url' are not supported/);
    await waitIdle();
  }, 60_000);

  it('answers /v1/embeddings (openai client): unit vectors, one per input, base64 or floats, dimensions; bad inputs are 4xx', async () => {
    const r = await client.embeddings.create({ model: 'tiny', input: ['The router picks experts', 'Once upon a time', 'The router picks experts'] });
    expect(r.object).toBe('list');
    expect(r.data.map((d) => d.index)).toEqual([0, 1, 2]);
    const width = r.data[0].embedding.length;
    expect(width).toBeGreaterThan(8);
    for (const d of r.data) expect(Math.hypot(...d.embedding)).toBeCloseTo(1, 5);
    // The same text, the same vector (batched or not); another text, another one.
    expect(r.data[2].embedding).toEqual(r.data[0].embedding);
    expect(r.data[1].embedding).not.toEqual(r.data[0].embedding);
    const one = await client.embeddings.create({ model: 'tiny', input: 'The router picks experts', encoding_format: 'float' });
    expect(one.data[0].embedding).toEqual(r.data[0].embedding);
    const two = await client.embeddings.create({ model: 'tiny', input: 'Once upon a time' });
    expect(r.usage.prompt_tokens).toBe(2 * one.usage.prompt_tokens + two.usage.prompt_tokens);
    expect(one.usage.total_tokens).toBe(one.usage.prompt_tokens);
    // Token ids embed as the text that tokenizes to them does.
    const ids = tokenizer.tokenize('The router picks experts', { addSpecial: true });
    const byIds = (await (await post('/v1/embeddings', { model: 'tiny', input: [ids] })).json()) as { data: { embedding: number[] }[] };
    expect(byIds.data[0].embedding).toEqual(one.data[0].embedding);
    // dimensions: the first N, renormalized.
    const cut = await client.embeddings.create({ model: 'tiny', input: 'The router picks experts', dimensions: 8, encoding_format: 'float' });
    expect(cut.data[0].embedding).toHaveLength(8);
    expect(Math.hypot(...cut.data[0].embedding)).toBeCloseTo(1, 5);
    const head = one.data[0].embedding.slice(0, 8);
    const n = Math.hypot(...head);
    cut.data[0].embedding.forEach((v, i) => expect(v).toBeCloseTo(head[i] / n, 5));
    // Errors in OpenAI's shape.
    const bad: [Record<string, unknown>, number, string][] = [
      [{ model: 'tiny', input: [] }, 400, 'input'],
      [{ model: 'tiny', input: '' }, 400, 'input'],
      [{ model: 'tiny', input: 'x', dimensions: width + 1 }, 400, 'dimensions'],
      [{ model: 'tiny', input: 'x', encoding_format: 'hex' }, 400, 'encoding_format'],
      [{ model: 'nope', input: 'x' }, 404, 'model'],
    ];
    for (const [body, status, param] of bad) {
      const res = await post('/v1/embeddings', body);
      expect([res.status, ((await res.json()) as { error: { param: string } }).error.param]).toEqual([status, param]);
    }
    await waitIdle();
  });

  it('serves 32 concurrent streaming clients, each getting what it gets alone (greedy)', async () => {
    const prompts = Array.from({ length: 8 }, (_, i) => `Story number ${i}:`);
    const alone = new Map<string, string>();
    for (const p of prompts) alone.set(p, (await chat(p, { max_tokens: 8, ignore_eos: true } as never)).choices[0].message.content!);
    const results = await Promise.all(
      Array.from({ length: 32 }, async (_, i) => {
        const p = prompts[i % prompts.length];
        const stream = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: p }], max_tokens: 8, temperature: 0, stream: true, ignore_eos: true } as never) as unknown as AsyncIterable<OpenAI.Chat.ChatCompletionChunk>;
        let text = '';
        let finish: string | null = null;
        for await (const c of stream) {
          text += c.choices[0]?.delta?.content ?? '';
          finish = c.choices[0]?.finish_reason ?? finish;
        }
        return { p, text, finish };
      }),
    );
    for (const r of results) {
      expect(r.finish).toBe('length');
      expect(r.text).toBe(alone.get(r.p));
    }
    await waitIdle();
  }, 120_000);

  it('frees the slots of clients that disconnect mid-stream', async () => {
    const aborters = Array.from({ length: SLOTS }, () => new AbortController());
    const started = await Promise.all(
      aborters.map(async (a, i) => {
        const r = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: `Go ${i}` }], max_tokens: 200, temperature: 0, stream: true, ignore_eos: true }, auth(), a.signal);
        const reader = r.body!.getReader();
        await reader.read(); // the first event: the request is running
        return reader;
      }),
    );
    expect(await running()).toBeGreaterThan(0);
    for (const a of aborters) a.abort();
    for (const r of started) await r.cancel().catch(() => undefined);
    await waitIdle(5000);
    // Every slot is usable again.
    const after = await Promise.all(Array.from({ length: SLOTS }, (_, i) => chat(`again ${i}`, { max_tokens: 2 })));
    expect(after.every((r) => r.usage!.completion_tokens > 0)).toBe(true);
  }, 60_000);

  it('answers 503 with Retry-After past the queue bound, and keeps serving', async () => {
    // Its own scheduler in front of the same engine, with a queue bound of FLOOD_QUEUE, and its own
    // API on the same data directory (so the same key): SLOTS run, FLOOD_QUEUE wait, the rest (8)
    // are refused at once. (A flood of 18 arrives quickly even on a loaded machine; past the main
    // scheduler's bound of MAX_QUEUED it took 56 requests, and on a loaded CI machine the running
    // ones could finish before the last of them arrived, letting queued ones in: none refused.)
    // Accepted streams send their headers only with their first token, so the test waits for the
    // refusals, not for them. The running ones generate up to the context, seconds; if they finish
    // sooner on a loaded machine and let queued ones run, fewer are refused, so the counts are
    // bounded; each refusal's message is exact.
    const FLOOD_QUEUE = 2;
    const fsched = await startSchedulerServer({ engines: [`127.0.0.1:${engine.port}`], slotsPerEngine: SLOTS, maxQueued: FLOOD_QUEUE, maxQueuedPerTenant: FLOOD_QUEUE, probeIntervalMs: 500 });
    const fapi = await startApi(parseApiConfig({ port: 0, schedulerAddress: `127.0.0.1:${fsched.port}`, dataDir: dir, readyMaxAgeS: 5 }));
    const fclient = new spb.SchedulerServiceClient(`127.0.0.1:${fsched.port}`, grpc.credentials.createInsecure());
    const aborters: AbortController[] = [];
    try {
      const refused: { retryAfter: string | null; body: any }[] = [];
      for (let i = 0; i < SLOTS + FLOOD_QUEUE + 8; i++) {
        const a = new AbortController();
        aborters.push(a);
        void fetch(`${fapi.url}/v1/chat/completions`, {
          method: 'POST',
          headers: auth(),
          body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: `flood ${i}` }], max_tokens: CTX - 64, temperature: 0, stream: true, ignore_eos: true }),
          signal: a.signal,
        })
          .then(async (r) => {
            if (r.status === 503) refused.push({ retryAfter: r.headers.get('retry-after'), body: await r.json() });
          })
          .catch(() => undefined);
      }
      const end = Date.now() + 30_000;
      while (refused.length < 1) {
        if (Date.now() > end) throw new Error(`none of the flood's 8 extra requests refused in 30 s`);
        await new Promise((r) => setTimeout(r, 20));
      }
      // The queue is full of this key's requests: the scheduler's tenant is the key id.
      const snap = await new Promise<spb.QueueSnapshot>((resolve) => {
        const w = fclient.watchQueue({ intervalMs: 100 });
        w.once('data', (q: spb.QueueSnapshot) => {
          w.cancel();
          resolve(q);
        });
        w.on('error', () => undefined);
      });
      for (const a of aborters) a.abort();
      expect(snap.running).toBe(SLOTS);
      expect(snap.queued).toBeGreaterThan(0);
      expect(snap.queued).toBeLessThanOrEqual(FLOOD_QUEUE);
      expect(snap.queuedPerTenant).toEqual({ [api.keys!.verify(key)!.id]: snap.queued });
      expect(refused.length).toBeGreaterThanOrEqual(1);
      expect(refused.length).toBeLessThanOrEqual(8);
      for (const r of refused) {
        expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
        expect(r.body.error).toMatchObject({ type: 'server_error', code: 'overloaded' });
        expect(r.body.error.message).toContain(`the scheduler queue is full (${FLOOD_QUEUE} requests waiting, limit ${FLOOD_QUEUE})`);
      }
      // The refusals are counted in the API's metrics.
      const metrics = await (await fetch(`${fapi.url}/metrics`, { headers: auth() })).text();
      expect(Number(/^kailstream:request_errors_total\{status="503"\} (\d+)/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(1);
      await waitIdle(30_000, fclient);
      expect((await chat('still there?', { max_tokens: 2 })).usage!.completion_tokens).toBeGreaterThan(0);
    } finally {
      for (const a of aborters) a.abort();
      fclient.close();
      await fapi.close();
      await fsched.close(100);
    }
  }, 60_000);

  it('exports request, token and engine metrics after traffic', async () => {
    // Telemetry arrives once a second from the scheduler's WatchTelemetry (polled until it has, 30 s
    // at most: a loaded machine delays it).
    const end = Date.now() + 30_000;
    let text = '';
    do {
      text = await (await fetch(`${api.url}/metrics`, { headers: auth() })).text();
      if (/kailstream:expert_cache_hits_total\{/.test(text)) break;
      await new Promise((r) => setTimeout(r, 250));
    } while (Date.now() < end);
    const value = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
    expect(value(/^kailstream:prompt_tokens_total\{model="tiny"\} (\d+)/m)).toBeGreaterThan(0);
    // The chat's second turn (test above) reused its first turn's cache.
    expect(value(/^kailstream:prompt_tokens_cached_total\{model="tiny"\} (\d+)/m)).toBeGreaterThan(0);
    expect(value(/^kailstream:generation_tokens_total\{model="tiny"\} (\d+)/m)).toBeGreaterThan(0);
    expect(value(/^kailstream:time_to_first_token_seconds_count\{model="tiny"\} (\d+)/m)).toBeGreaterThan(0);
    expect(value(/^kailstream:time_per_output_token_seconds_count\{model="tiny"\} (\d+)/m)).toBeGreaterThan(0);
    expect(text).toMatch(/^kailstream:expert_cache_hits_total\{engine="[^"]+",model="tiny",tier="ram"\} \d+/m);
    expect(text).toMatch(/^kailstream:storage_read_bytes_total\{engine="[^"]+",model="tiny"\} \d+/m);
    expect(text).toMatch(/^kailstream:kv_cache_usage_perc\{/m);
    expect(text).toMatch(/^kailstream:num_requests_waiting \d+/m);
    // Usage is recorded against the key.
    const u = api.keys!.usage().find((x) => x.name === 'tests')!;
    expect(u.requests).toBeGreaterThan(32);
    expect(u.completionTokens).toBeGreaterThan(0);
  });

  it('answers 504 in the OpenAI shape when a request runs past its deadline', async () => {
    const hurried = await startApi(parseApiConfig({ port: 0, schedulerAddress: `127.0.0.1:${sched.port}`, requestTimeoutS: 0.001 }));
    try {
      const r = await fetch(`${hurried.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 50 }) });
      expect(r.status).toBe(504);
      expect(((await r.json()) as any).error).toMatchObject({ type: 'server_error', code: 'timeout' });
    } finally {
      await hurried.close();
    }
  });

  const revoked = () => {
    const k = api.keys!.create('gone');
    api.keys!.revoke(k.id);
    return k.key;
  };
  const json = { 'content-type': 'application/json' };
  const msg = [{ role: 'user', content: 'x' }];
  it.each<[string, () => [unknown, Record<string, string>], number]>([
    ['malformed JSON', () => ['{"model": ', auth()], 400],
    ['unknown model', () => [{ model: 'nope', messages: msg }, auth()], 404],
    ['wrong type', () => [{ model: 'tiny', messages: 'hello' }, auth()], 400],
    ['wrong type for max_tokens', () => [{ model: 'tiny', messages: msg, max_tokens: 'ten' }, auth()], 400],
    ['negative max_tokens', () => [{ model: 'tiny', messages: msg, max_tokens: -1 }, auth()], 400],
    ['huge max_tokens', () => [{ model: 'tiny', messages: msg, max_tokens: 1e12 }, auth()], 400],
    ['temperature out of range', () => [{ model: 'tiny', messages: msg, temperature: 5 }, auth()], 400],
    ['fractional seed', () => [{ model: 'tiny', messages: msg, seed: 1.5 }, auth()], 400],
    ['top_logprobs without logprobs', () => [{ model: 'tiny', messages: msg, top_logprobs: 3 }, auth()], 400],
    ['empty messages', () => [{ model: 'tiny', messages: [] }, auth()], 400],
    ['prompt longer than the context', () => [{ model: 'tiny', messages: [{ role: 'user', content: 'word '.repeat(CTX + 100) }] }, auth()], 400],
    ['missing key', () => [{ model: 'tiny', messages: msg }, json], 401],
    ['revoked key', () => [{ model: 'tiny', messages: msg }, { ...json, authorization: `Bearer ${revoked()}` }], 401],
  ])('%s gets an OpenAI-shaped 4xx and the server keeps serving', async (_name, make, status) => {
    const [body, headers] = make();
    const r = await post('/v1/chat/completions', body, headers);
    expect(r.status).toBe(status);
    const e = (await r.json()) as any;
    expect(typeof e.error.message).toBe('string');
    expect(e.error).toHaveProperty('type', 'invalid_request_error');
    expect(e.error).toHaveProperty('param');
    expect(e.error).toHaveProperty('code');
    expect((await fetch(`${api.url}/health`)).status).toBe(200);
    expect((await chat('ok?', { max_tokens: 1 })).choices).toHaveLength(1);
  });
});

describe('request body size', () => {
  it('reads bodies past Fastify\'s 1 MiB default (a long prompt is refused for the context, not for its size); past 64 MiB a 413', async () => {
    const stack = await startTestStack([{ id: 'tiny', contextLength: 256 }]);
    try {
      // 900,000 ids of 5 bytes each in protobuf: a 9 MB body, a 4.5 MB gRPC message (past gRPC's
      // default 4 MiB, which made it a 503 "overloaded" before the services' limits were raised).
      const long = await stack.post('/v1/completions', { model: 'tiny', prompt: Array(900_000).fill(300_000_000), max_tokens: 1 });
      expect([long.status, long.body.error.code]).toEqual([400, 'context_length_exceeded']);
      const huge = await fetch(`${stack.api.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"model":"tiny","prompt":"${'x'.repeat(MAX_BODY_BYTES)}"}` });
      expect(huge.status).toBe(413);
      expect(((await huge.json()) as { error: { message: string } }).error.message).toMatch(/too large/i);
    } finally {
      await stack.close();
    }
  }, 60_000);
});

describe('grpcToHttp', () => {
  const err = (code: grpc.status, md?: Record<string, string>) => {
    const metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(md ?? {})) metadata.set(k, v);
    return Object.assign(new Error('m'), { code, details: 'why', metadata }) as grpc.ServiceError;
  };
  it.each([
    [grpc.status.RESOURCE_EXHAUSTED, 503, 'overloaded'],
    [grpc.status.UNAVAILABLE, 503, 'unavailable'],
    [grpc.status.DEADLINE_EXCEEDED, 504, 'timeout'],
    [grpc.status.NOT_FOUND, 404, 'model_not_found'],
    [grpc.status.INVALID_ARGUMENT, 400, 'invalid_value'],
    [grpc.status.OUT_OF_RANGE, 400, 'context_length_exceeded'],
    [grpc.status.UNAUTHENTICATED, 401, 'invalid_api_key'],
    [grpc.status.INTERNAL, 500, 'internal_error'],
  ])('maps gRPC %s to HTTP %s in the OpenAI shape', (code, status, oaCode) => {
    const r = grpcToHttp(err(code));
    expect(r.status).toBe(status);
    expect(r.body.error).toEqual({ message: 'why', type: status >= 500 ? 'server_error' : 'invalid_request_error', param: r.body.error.param, code: oaCode });
  });
  it("turns the scheduler's retry-after-ms hint into Retry-After seconds", () => {
    expect(grpcToHttp(err(grpc.status.RESOURCE_EXHAUSTED, { 'retry-after-ms': '2300' })).retryAfter).toBe(3);
    expect(grpcToHttp(err(grpc.status.RESOURCE_EXHAUSTED)).retryAfter).toBe(1);
    expect(grpcToHttp(err(grpc.status.UNAVAILABLE)).retryAfter).toBe(1);
  });
});
