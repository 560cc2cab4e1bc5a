import fs from 'node:fs';
import { Ollama } from 'ollama';
import { tempDir } from '@kailstream/engine/testing';

import { HERMES_TEMPLATE, THINK_TEMPLATE } from '../openai/test-templates';
import { startTestStack, type TestStack } from '../test-stack';
import { OLLAMA_DEFAULTS, toChatMessages } from './routes';

// The real stack in one process, spoken to with the official ollama-js client.
describe("Ollama's API (/api/chat, /api/generate, /api/embed, /api/tags…), real engine", () => {
  let stack: TestStack;
  let ollama: Ollama;

  beforeAll(async () => {
    stack = await startTestStack([{ id: 'tiny' }, { id: 'hermes', template: HERMES_TEMPLATE }, { id: 'think', template: THINK_TEMPLATE }, { id: 'llama', preset: 'tiny-llama' }]);
    ollama = new Ollama({ host: stack.api.url });
  }, 60_000);
  afterAll(() => stack?.close());

  const greedy = { temperature: 0, repeat_penalty: 1, num_predict: 6 };
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }];

  it('lists, shows and reports the served models, and answers the liveness probe', async () => {
    expect((await fetch(`${stack.api.url}/`)).status).toBe(200);
    // As `curl -d` sends it (form-urlencoded), the way Ollama's docs call it: read as JSON.
    const curl = await fetch(`${stack.api.url}/api/show`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '{"model":"tiny"}' });
    expect([curl.status, ((await curl.json()) as { details: { format: string } }).details.format]).toEqual([200, 'gguf']);
    const notJson = await fetch(`${stack.api.url}/api/show`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'model=tiny' });
    expect([notJson.status, await notJson.json()]).toEqual([400, { error: 'the body is not valid JSON' }]);
    expect((await ollama.version()).version).toMatch(/^\d+\.\d+\.\d+/);
    const tags = await ollama.list();
    expect(tags.models.map((m) => m.name).sort()).toEqual(['hermes:latest', 'llama:latest', 'think:latest', 'tiny:latest']);
    const tiny = tags.models.find((m) => m.name === 'tiny:latest')!;
    expect(tiny.details).toMatchObject({ format: 'gguf', family: 'qwen3moe', quantization_level: 'F32' });
    expect(tiny.size).toBeGreaterThan(1000);
    const ps = await ollama.ps();
    expect(ps.models).toHaveLength(4);
    expect(ps.models[0].size).toBeGreaterThan(0);
    const show = await ollama.show({ model: 'hermes:latest' });
    expect(show.template).toBe(HERMES_TEMPLATE);
    expect(show.capabilities).toEqual(['completion', 'tools']);
    expect((show.model_info as unknown as Record<string, number>)['qwen3moe.expert_count']).toBeGreaterThan(1);
    expect(show.parameters).toContain(`temperature                    ${OLLAMA_DEFAULTS.temperature}`);
    expect((await ollama.show({ model: 'think' })).capabilities).toEqual(['completion', 'thinking']);
  });

  it('chats as the OpenAI route answers the same conversation, whole or streamed as NDJSON, with counts and durations', async () => {
    const r = await ollama.chat({ model: 'tiny', messages, options: greedy, stream: false });
    const oai = await stack.post('/v1/chat/completions', { model: 'tiny', messages, max_tokens: 6, temperature: 0 });
    expect(r.message).toEqual({ role: 'assistant', content: oai.body.choices[0].message.content });
    expect(r).toMatchObject({ model: 'tiny', done: true, done_reason: 'length', eval_count: 6, prompt_eval_count: oai.body.usage.prompt_tokens, load_duration: 0 });
    expect(r.total_duration).toBeGreaterThan(0);
    expect(r.eval_duration).toBeGreaterThan(0);
    expect(r.total_duration).toBeGreaterThanOrEqual(r.eval_duration);

    let text = '';
    let final: Awaited<ReturnType<typeof ollama.chat>> | undefined;
    for await (const part of await ollama.chat({ model: 'tiny:latest', messages, options: greedy, stream: true })) {
      if (part.done) final = part;
      else text += part.message.content;
    }
    expect(text).toBe(r.message.content);
    expect(final).toMatchObject({ done: true, done_reason: 'length', eval_count: 6, message: { role: 'assistant', content: '' } });
    // Ollama's own defaults apply where the request leaves them out (a repeat penalty of 1.1 among them).
    const defaults = await ollama.chat({ model: 'tiny', messages, options: { num_predict: 6, seed: 3 } });
    const same = await stack.post('/v1/chat/completions', { model: 'tiny', messages, max_tokens: 6, seed: 3, temperature: 0.8, top_k: 40, top_p: 0.9, repeat_penalty: 1.1 });
    expect(defaults.message.content).toBe(same.body.choices[0].message.content);
    // A seed is read as a uint32 (Go's uint32(seed)): -3 samples as 2^32 - 3.
    const wrapped = await ollama.chat({ model: 'tiny', messages, options: { num_predict: 6, seed: -3, temperature: 1.5 } });
    expect(wrapped.message.content).toBe((await ollama.chat({ model: 'tiny', messages, options: { num_predict: 6, seed: 2 ** 32 - 3, temperature: 1.5 } })).message.content);
    // Ollama's mirostat options reach the sampler: Mirostat 2 at tau 0 keeps only the best token.
    const miro = await ollama.chat({ model: 'tiny', messages, options: { num_predict: 6, seed: 3, temperature: 1.5, repeat_penalty: 1, mirostat: 2, mirostat_tau: 0, mirostat_eta: 0 } });
    expect(miro.message.content).toBe(r.message.content);
    // No messages: the "load the model" answer.
    expect(await ollama.chat({ model: 'tiny', messages: [] })).toMatchObject({ done: true, done_reason: 'load' });
  });

  it('drops the oldest turns of a chat too long for the context, as Ollama does: system kept, the most that fit, room left for the answer', async () => {
    // The tiny model's context here is 1024 tokens; 24 turns of about 90 tokens each do not fit.
    const long = Array.from({ length: 24 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `Turn ${i}: ` + 'the quick brown fox jumps over the lazy dog '.repeat(9) }));
    const msgs = [{ role: 'system', content: 'Be brief.' }, ...long, { role: 'user', content: 'And now?' }];
    const count = async (m: typeof msgs) => {
      const p = (await stack.post('/apply-template', { model: 'tiny', messages: m })).body.prompt as string;
      return ((await stack.post('/tokenize', { model: 'tiny', content: p, add_special: true })).body.tokens as number[]).length;
    };
    expect(await count(msgs)).toBeGreaterThan(1024);
    const r = await stack.post('/api/chat', { model: 'tiny', messages: msgs, stream: false, options: { temperature: 0, num_predict: 4 } });
    expect(r.status).toBe(200);
    expect(r.body.eval_count).toBe(4);
    // What it kept: the system message and the turns from some user message on; at most the
    // context less num_predict (4 < a quarter); one turn pair more would not have fitted.
    const kept = r.body.prompt_eval_count as number;
    expect(kept).toBeLessThanOrEqual(1024 - 4);
    let cut = -1;
    for (let i = 1; i < msgs.length; i++) if (msgs[i].role === 'user' && (await count([msgs[0], ...msgs.slice(i)])) === kept) cut = i;
    expect(cut).toBeGreaterThan(1);
    expect(await count([msgs[0], ...msgs.slice(cut - 2)])).toBeGreaterThan(1024 - 4);
    // The answer is the one to that shorter chat, sent as it is.
    const same = await stack.post('/api/chat', { model: 'tiny', messages: [msgs[0], ...msgs.slice(cut)], stream: false, options: { temperature: 0, num_predict: 4 } });
    expect(same.body.message.content).toBe(r.body.message.content);
    // Without num_predict, a quarter of the context stays free for the answer.
    const q = await stack.post('/api/chat', { model: 'tiny', messages: msgs, stream: false, options: { temperature: 0, num_predict: -1, stop: ['the'] } });
    expect(q.status).toBe(200);
    expect(q.body.prompt_eval_count).toBeLessThanOrEqual(768);
    // A last message longer than the context alone is still the engine's 400.
    const huge = await stack.post('/api/chat', { model: 'tiny', messages: [{ role: 'user', content: 'fox '.repeat(3000) }], stream: false });
    expect(huge.status).toBe(400);
  });

  it('generates from a prompt (templated, or raw), returns the context, and continues from one', async () => {
    const raw = await ollama.generate({ model: 'tiny', prompt: 'Once upon a time', raw: true, options: greedy });
    const cmpl = await stack.post('/v1/completions', { model: 'tiny', prompt: 'Once upon a time', max_tokens: 6, temperature: 0 });
    expect(raw.response).toBe(cmpl.body.choices[0].text);
    expect(raw.context).toHaveLength(cmpl.body.usage.prompt_tokens + 6);

    const first = await ollama.generate({ model: 'tiny', system: 'Be brief.', prompt: 'Hi there', options: greedy });
    const chat = await ollama.chat({ model: 'tiny', messages, options: greedy });
    expect(first.response).toBe(chat.message.content);
    expect(first.context).toHaveLength(first.prompt_eval_count + 6);
    const next = await ollama.generate({ model: 'tiny', prompt: 'And then?', context: first.context, options: greedy });
    const alone = await ollama.generate({ model: 'tiny', prompt: 'And then?', options: greedy });
    expect(next.prompt_eval_count).toBe(first.context.length + alone.prompt_eval_count);
    expect(next.context.slice(0, first.context.length)).toEqual(first.context);
    // A vocabulary that adds BOS: the chat prompt starts with it (as llama-server's), but going on
    // from a context adds no second one.
    const bos = (await stack.post('/tokenize', { model: 'llama', content: '', add_special: true })).body.tokens;
    expect(bos).toHaveLength(1);
    const lFirst = await ollama.generate({ model: 'llama', prompt: 'Hi there', options: greedy });
    expect(lFirst.context[0]).toBe(bos[0]);
    const lAlone = await ollama.generate({ model: 'llama', prompt: 'And then?', options: greedy });
    const lNext = await ollama.generate({ model: 'llama', prompt: 'And then?', context: lFirst.context, options: greedy });
    expect(lNext.context.slice(lFirst.context.length, lFirst.context.length + lAlone.prompt_eval_count - 1)).toEqual(lAlone.context.slice(1, lAlone.prompt_eval_count));
    expect(lNext.prompt_eval_count).toBe(lFirst.context.length + lAlone.prompt_eval_count - 1);

    let streamed = '';
    for await (const part of await ollama.generate({ model: 'tiny', system: 'Be brief.', prompt: 'Hi there', options: greedy, stream: true })) streamed += part.response;
    expect(streamed).toBe(first.response);
    // A suffix fills in the middle with the vocabulary's FIM tokens, as /v1/completions' suffix does.
    const fim = await ollama.generate({ model: 'tiny', prompt: 'def add(a, b):', suffix: '\n    return c', options: greedy });
    const oaiFim = await stack.post('/v1/completions', { model: 'tiny', prompt: 'def add(a, b):', suffix: '\n    return c', max_tokens: 6, temperature: 0 });
    expect(fim.response).toBe(oaiFim.body.choices[0].text);
  });

  it("puts a reasoning model's thinking in `thinking`, whole and streamed", async () => {
    const r = await ollama.chat({ model: 'think', messages: [{ role: 'user', content: 'Why?' }], options: { ...greedy, num_predict: 8 } });
    // The template opened the block and 8 tokens do not close it: all of the answer is thinking.
    expect(r.message.content).toBe('');
    expect(r.message.thinking!.length).toBeGreaterThan(0);
    let thinking = '';
    for await (const part of await ollama.chat({ model: 'think', messages: [{ role: 'user', content: 'Why?' }], options: { ...greedy, num_predict: 8 }, stream: true })) thinking += part.message.thinking ?? '';
    expect(thinking).toBe(r.message.thinking);
    const g = await ollama.generate({ model: 'think', prompt: 'Why?', options: { ...greedy, num_predict: 8 } });
    expect([g.response, g.thinking]).toEqual(['', r.message.thinking]);
  });

  it('holds the output to a format (a JSON schema), and shows tools and earlier calls to the model', async () => {
    const schema = { type: 'object', properties: { role: { enum: ['admin', 'user'] }, ok: { type: 'boolean' } }, required: ['role', 'ok'], additionalProperties: false };
    const r = await ollama.chat({ model: 'tiny', messages: [{ role: 'user', content: 'JSON please' }], format: schema, options: { num_predict: 400, seed: 1 } });
    const v = JSON.parse(r.message.content);
    expect(['admin', 'user']).toContain(v.role);
    expect(typeof v.ok).toBe('boolean');

    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const ask = (extra: object, msgs: object[] = [{ role: 'user', content: 'Weather in Paris?' }]) =>
      ollama.chat({ model: 'hermes', messages: msgs as never, options: { ...greedy, num_predict: 1 }, ...extra }).then((x) => x.prompt_eval_count);
    const bare = await ask({});
    expect(await ask({ tools })).toBeGreaterThan(bare + 20);
    const turn = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
      { role: 'tool', content: 'Sunny, 21 C', tool_name: 'get_weather' },
    ];
    expect(await ask({ tools }, turn)).toBeGreaterThan((await ask({ tools })) + 10);

    // A call (Llama 3's bare JSON form, which the format holds the random model to) comes back
    // as tool_calls with its arguments as an object, whole and streamed alike.
    const callSchema = {
      type: 'object', additionalProperties: false, required: ['name', 'parameters'],
      properties: { name: { enum: ['get_weather'] }, parameters: { type: 'object', additionalProperties: false, required: ['city'], properties: { city: { enum: ['Paris', 'Rome'] } } } },
    };
    const call = { model: 'hermes', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, format: callSchema, options: { num_predict: 400, seed: 2 } };
    const whole = await ollama.chat({ ...call, stream: false });
    expect(whole.message.content).toBe('');
    expect(whole.message.tool_calls).toHaveLength(1);
    expect(whole.message.tool_calls![0].function.name).toBe('get_weather');
    expect(['Paris', 'Rome']).toContain(whole.message.tool_calls![0].function.arguments.city);
    const parts = [];
    for await (const part of await ollama.chat({ ...call, stream: true })) parts.push(part);
    expect(parts.map((p) => p.message.content).join('')).toBe('');
    expect(parts.flatMap((p) => p.message.tool_calls ?? []).map((c) => c.function)).toEqual(whole.message.tool_calls!.map((c) => c.function));
  });

  it('embeds as /v1/embeddings does (unit vectors), and the older /api/embeddings gives the same direction', async () => {
    const e = await ollama.embed({ model: 'tiny', input: ['hello world', 'goodbye'] });
    expect(e.embeddings).toHaveLength(2);
    const oai = await stack.post('/v1/embeddings', { model: 'tiny', input: ['hello world', 'goodbye'] });
    for (const [i, v] of e.embeddings.entries()) {
      expect(v).toHaveLength(oai.body.data[i].embedding.length);
      v.forEach((x, j) => expect(x).toBeCloseTo(oai.body.data[i].embedding[j], 5));
    }
    expect(e.prompt_eval_count).toBe(oai.body.usage.prompt_tokens);
    const legacy = (await ollama.embeddings({ model: 'tiny', prompt: 'hello world' })).embedding;
    const norm = Math.sqrt(legacy.reduce((a, x) => a + x * x, 0));
    legacy.forEach((x, j) => expect(x / norm).toBeCloseTo(e.embeddings[0][j], 5));
    expect((await ollama.embed({ model: 'tiny', input: 'hello world', dimensions: 4 })).embeddings[0]).toHaveLength(4);
  });

  it('answers bad requests with {"error"} and the right status, and keeps serving', async () => {
    const bad: [string, unknown, number, RegExp][] = [
      ['/api/chat', { model: 'nope', messages }, 404, /model 'nope' not found \(served: .*tiny:latest/],
      ['/api/chat', { messages }, 400, /model/],
      ['/api/chat', { model: 'tiny', messages, options: { mirostat: 3 } }, 400, /mirostat/],
      ['/api/chat', { model: 'tiny', messages: [{ role: 'user', content: 'x', images: ['aGk='] }] }, 400, /images are not supported/],
      ['/api/chat', { model: 'tiny', messages: [{ role: 'robot', content: 'x' }] }, 400, /role/],
      ['/api/chat', { model: 'tiny', messages: [], keep_alive: 0 }, 400, /outside the models directory, so it could not come back on demand: it stays loaded/],
      ['/api/chat', { model: 'tiny', messages, options: { temperature: -1 } }, 400, /temperature/],
      ['/api/chat', { model: 'tiny', messages, tools: [{ type: 'function', function: { name: 'f' } }] }, 400, /does not show tools/],
      ['/api/generate', { model: 'tiny', prompt: 'x', template: '{{ .Prompt }' }, 400, /template: template: :1: unexpected "}" in operand/],
      ['/api/generate', { model: 'tiny', prompt: 'x', suffix: 'y', context: [1, 2] }, 400, /context cannot be combined with suffix/],
      ['/api/embed', { model: 'tiny', input: [] }, 400, /input must not be empty/],
      ['/api/show', {}, 400, /model is required/],
      ['/api/pull', { model: 'no-such-model-anywhere' }, 501, /nor a model of this machine's Ollama store .*; there is no Ollama registry/],
      ['/api/pull', {}, 400, /model is required/],
      ['/api/push', { model: 'x' }, 501, /no model registry/],
      ['/api/chat', '{"model": ', 400, /./],
    ];
    for (const [route, body, status, why] of bad) {
      const r = await stack.post(route, body);
      expect([route, JSON.stringify(body), r.status]).toEqual([route, JSON.stringify(body), status]);
      expect(r.body.error).toMatch(why);
    }
    await expect(ollama.chat({ model: 'nope', messages: [] })).rejects.toMatchObject({ status_code: 404 });
    // keep_alive 0 on an answer leaves a model from outside the models directory loaded.
    expect((await stack.post('/api/chat', { model: 'tiny', messages, stream: false, keep_alive: 0, options: greedy })).status).toBe(200);
    expect((await ollama.chat({ model: 'tiny', messages, options: greedy })).done).toBe(true);
  });
});

describe('Ollama chat messages as the engine turns', () => {
  it('gives calls ids and a tool answer the id of the call it answers (by name, else in order)', () => {
    const turns = toChatMessages([
      { role: 'user', content: 'q' },
      { role: 'assistant', content: '', thinking: 'hmm', tool_calls: [{ function: { name: 'a', arguments: { x: 1 } } }, { function: { name: 'b', arguments: {} } }] },
      { role: 'tool', content: 'B', tool_name: 'b' },
      { role: 'tool', content: 'A' },
    ]);
    const calls = JSON.parse(turns[1].toolCallsJson) as { id: string; function: { name: string; arguments: string } }[];
    expect(calls.map((c) => [c.function.name, c.function.arguments])).toEqual([['a', '{"x":1}'], ['b', '{}']]);
    expect(turns[1].reasoningContent).toBe('hmm');
    expect([turns[2].toolCallId, turns[2].name]).toEqual([calls[1].id, 'b']);
    expect([turns[3].toolCallId, turns[3].name]).toEqual([calls[0].id, 'a']);
  });
});

describe('Ollama routes behind API keys', () => {
  it('ask for a key in their own error shape (the liveness probe does not); ollama-js sends one as a bearer header', async () => {
    const dataDir = tempDir();
    const stack = await startTestStack([{ id: 'tiny' }], { api: { dataDir } });
    try {
      const key = stack.api.keys!.create('t').key;
      const r = await fetch(`${stack.api.url}/api/tags`);
      expect(r.status).toBe(401);
      expect(await r.json()).toEqual({ error: expect.stringMatching(/an API key is required/) });
      expect((await fetch(`${stack.api.url}/`)).status).toBe(200);
      const withKey = new Ollama({ host: stack.api.url, headers: { Authorization: `Bearer ${key}` } });
      expect((await withKey.list()).models.map((m) => m.name)).toEqual(['tiny:latest']);
    } finally {
      await stack.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
