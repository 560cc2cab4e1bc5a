import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { engine as pb } from '@kailstream/proto';

import { parseApiConfig } from '../env';
import { startApi } from '../server';
import { startTestStack, type TestStack } from '../test-stack';
import { MemoryResponseStore, SqliteResponseStore, type ResponseStore } from './response-store';
import { toChatMessages } from './responses';
import { HERMES_TEMPLATE, THINK_TEMPLATE } from './test-templates';

describe("OpenAI's Responses API (/v1/responses), real engine", () => {
  let stack: TestStack;
  let client: OpenAI;

  beforeAll(async () => {
    stack = await startTestStack([{ id: 'tiny' }, { id: 'hermes', template: HERMES_TEMPLATE }, { id: 'think', template: THINK_TEMPLATE }]);
    client = new OpenAI({ baseURL: `${stack.api.url}/v1`, apiKey: 'none', maxRetries: 0 });
  }, 60_000);
  afterAll(() => stack?.close());

  const send = async (method: string, p: string) => {
    const r = await fetch(`${stack.api.url}${p}`, { method });
    return { status: r.status, body: (await r.json()) as Record<string, any> };
  };
  const post = (p: string, body: unknown) => stack.post(p, body);
  const events = (body: object) => stack.events('/v1/responses', body);
  /** Output items without their ids (each answer names its items afresh). */
  const shape = (items: any[]) =>
    items.map(({ id: _id, call_id, ...rest }) =>
      // (The SDK's stream helper adds its own parsed / parsed_arguments fields.)
      JSON.parse(JSON.stringify({ ...rest, ...(call_id ? { call_id: typeof call_id } : {}) }, (k, v) => (k === 'parsed' || k === 'parsed_arguments' ? undefined : v))));
  const ask = { model: 'tiny', instructions: 'Be brief.', input: 'Hi there', temperature: 0 };

  it('answers as the chat completion of the same conversation: a message item, status, usage; streamed the same, events numbered', async () => {
    const r = await post('/v1/responses', { ...ask, max_output_tokens: 6 });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ object: 'response', model: 'tiny', status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, instructions: 'Be brief.', error: null });
    expect(r.body.id).toMatch(/^resp_/);
    const oai = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }], max_tokens: 6, temperature: 0 });
    expect(r.body.output).toEqual([{ id: expect.stringMatching(/^msg_/), type: 'message', role: 'assistant', status: 'incomplete', content: [{ type: 'output_text', text: oai.body.choices[0].message.content, annotations: [], logprobs: [] }] }]);
    expect(r.body.usage).toEqual({
      input_tokens: oai.body.usage.prompt_tokens, input_tokens_details: { cached_tokens: expect.any(Number) },
      output_tokens: 6, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: oai.body.usage.prompt_tokens + 6,
    });

    const ev = await events({ ...ask, max_output_tokens: 6 });
    const types = ev.map(([t]) => t);
    expect(types.slice(0, 4)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    expect(types.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    expect(new Set(types.slice(4, -4))).toEqual(new Set(['response.output_text.delta']));
    expect(ev.map(([, d]) => d.sequence_number)).toEqual(ev.map((_, i) => i));
    expect(ev[0][1].response).toMatchObject({ status: 'in_progress', output: [] });
    expect(ev.filter(([t]) => t === 'response.output_text.delta').map(([, d]) => d.delta).join('')).toBe(r.body.output[0].content[0].text);
    const done = ev.at(-1)![1].response;
    expect(shape(done.output)).toEqual(shape(r.body.output));
    expect(done.usage.output_tokens).toBe(6);
    // No model named, three served: a 400 naming them (one served answers it: llama-server/routes.spec.ts).
    const { model: _model, ...unnamed } = ask;
    const none = await post('/v1/responses', { ...unnamed, max_output_tokens: 1 });
    expect([none.status, none.body.error.param]).toEqual([400, 'model']);
    expect(none.body.error.message).toMatch(/^model is required: 3 models are served \((tiny|hermes|think), (tiny|hermes|think), (tiny|hermes|think)\)$/);
  });

  it('serves the official openai SDK: create (output_text), stream (text events, final response) and the same answer either way', async () => {
    const params = { model: 'tiny', instructions: 'Be brief.', input: 'Hi there', temperature: 0, max_output_tokens: 6 };
    const r = await client.responses.create(params);
    expect(r.status).toBe('incomplete');
    expect(r.output_text.length).toBeGreaterThan(0);
    const s = client.responses.stream(params);
    let streamed = '';
    s.on('response.output_text.delta', (e) => (streamed += e.delta));
    const final = await s.finalResponse();
    expect(streamed).toBe(r.output_text);
    expect(final.output_text).toBe(r.output_text);
    expect(shape(final.output)).toEqual(shape(r.output));
    await expect(client.responses.create({ ...params, model: 'nope' })).rejects.toMatchObject({ status: 404 });
  });

  it('continues a stored response (previous_response_id) as the same conversation sent whole; GET and DELETE it; store false keeps nothing', async () => {
    const first = await post('/v1/responses', { ...ask, max_output_tokens: 4 });
    const text = first.body.output[0].content[0].text as string;
    const next = await post('/v1/responses', { model: 'tiny', instructions: 'Be brief.', previous_response_id: first.body.id, input: 'And then?', temperature: 0, max_output_tokens: 4 });
    expect(next.status).toBe(200);
    expect(next.body.previous_response_id).toBe(first.body.id);
    const whole = await post('/v1/responses', {
      model: 'tiny', instructions: 'Be brief.', temperature: 0, max_output_tokens: 4,
      input: [{ role: 'user', content: 'Hi there' }, { type: 'message', role: 'assistant', content: [{ type: 'output_text', text }] }, { role: 'user', content: [{ type: 'input_text', text: 'And then?' }] }],
    });
    expect(shape(next.body.output)).toEqual(shape(whole.body.output));
    expect(next.body.usage.input_tokens).toBe(whole.body.usage.input_tokens);
    expect(next.body.usage.input_tokens).toBeGreaterThan(first.body.usage.input_tokens + 4);

    expect(await send('GET', `/v1/responses/${first.body.id}`)).toEqual({ status: 200, body: first.body });
    expect((await client.responses.retrieve(next.body.id)).id).toBe(next.body.id);

    // input_tokens counts what a request's input would take, the stored conversation included.
    const count = await post('/v1/responses/input_tokens', { model: 'tiny', instructions: 'Be brief.', previous_response_id: first.body.id, input: 'And then?' });
    expect(count).toEqual({ status: 200, body: { object: 'response.input_tokens', input_tokens: next.body.usage.input_tokens } });
    // input_items lists a stored response's own input, newest first unless order=asc, paged by item id.
    const listed = await post('/v1/responses', { ...ask, store: true, max_output_tokens: 1, input: [{ role: 'user', content: 'one' }, { role: 'assistant', content: 'two' }, { role: 'user', content: [{ type: 'input_text', text: 'three' }] }] });
    const items = await send('GET', `/v1/responses/${listed.body.id}/input_items?order=asc`);
    expect(items.body.data.map((x: any) => [x.role, x.content[0].type, x.content[0].text])).toEqual([['user', 'input_text', 'one'], ['assistant', 'output_text', 'two'], ['user', 'input_text', 'three']]);
    expect(items.body).toMatchObject({ object: 'list', has_more: false, first_id: items.body.data[0].id, last_id: items.body.data[2].id });
    const ids = items.body.data.map((x: any) => x.id);
    const sdk = [];
    for await (const x of client.responses.inputItems.list(listed.body.id, { limit: 1 })) sdk.push((x as { id: string }).id);
    expect(sdk).toEqual([...ids].reverse());
    const page = await send('GET', `/v1/responses/${listed.body.id}/input_items?order=asc&limit=1&after=${ids[0]}`);
    expect(page.body).toMatchObject({ first_id: ids[1], last_id: ids[1], has_more: true });
    expect((await send('GET', `/v1/responses/${listed.body.id}/input_items?limit=0`)).status).toBe(400);
    expect((await send('GET', `/v1/responses/${listed.body.id}/input_items?after=nope`)).status).toBe(404);
    expect((await send('GET', '/v1/responses/resp_nope/input_items')).status).toBe(404);
    expect(await send('DELETE', `/v1/responses/${first.body.id}`)).toEqual({ status: 200, body: { id: first.body.id, object: 'response', deleted: true } });
    await client.responses.delete(next.body.id);
    await expect(client.responses.retrieve(next.body.id)).rejects.toMatchObject({ status: 404 });
    expect((await send('GET', `/v1/responses/${first.body.id}`)).status).toBe(404);
    const gone = await post('/v1/responses', { ...ask, previous_response_id: first.body.id });
    expect(gone.status).toBe(404);
    expect(gone.body.error).toMatchObject({ param: 'previous_response_id', code: 'previous_response_not_found' });
    const unstored = await post('/v1/responses', { ...ask, max_output_tokens: 2, store: false });
    expect(unstored.body.store).toBe(false);
    expect((await send('GET', `/v1/responses/${unstored.body.id}`)).status).toBe(404);
  });

  it('calls functions: a function_call item (its arguments streamed in pieces), then a function_call_output continues', async () => {
    // Enums keep a random model's arguments short (a free string can run to max_output_tokens).
    const tools = [{ type: 'function' as const, name: 'get_weather', description: 'Weather of a city', strict: false, parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Rome'] } }, required: ['city'] } }];
    const base = { model: 'hermes', input: 'Weather in Paris?', max_output_tokens: 300, temperature: 1, seed: 1, tools, tool_choice: 'required' as const, parallel_tool_calls: false };
    const r = await post('/v1/responses', base);
    expect(r.status).toBe(200);
    expect(r.body.status).toBe('completed');
    const calls = (r.body.output as Record<string, any>[]).filter((x) => x.type === 'function_call');
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ type: 'function_call', name: 'get_weather', status: 'completed' });
    expect(calls[0].id).toMatch(/^fc_/);
    expect(['Paris', 'Rome']).toContain(JSON.parse(calls[0].arguments).city);

    // Streamed with the same seed: the same call; the SDK assembles the arguments from the deltas.
    const ev = await events(base);
    const added = ev.find(([t, d]) => t === 'response.output_item.added' && d.item.type === 'function_call')![1];
    const deltas = ev.filter(([t, d]) => t === 'response.function_call_arguments.delta' && d.output_index === added.output_index);
    expect(deltas.map(([, d]) => d.delta).join('')).toBe(calls[0].arguments);
    const final = await (client.responses.stream as (p: object) => ReturnType<OpenAI['responses']['stream']>)(base).finalResponse();
    expect(shape(final.output)).toEqual(shape(r.body.output));

    // The call's output goes back as a function_call_output item, on the stored response or whole.
    const output = { type: 'function_call_output', call_id: calls[0].call_id, output: 'Sunny, 21 C' };
    const stored = await post('/v1/responses', { model: 'hermes', tools, previous_response_id: r.body.id, input: [output], max_output_tokens: 3, temperature: 0 });
    const whole = await post('/v1/responses', { model: 'hermes', tools, input: [{ role: 'user', content: 'Weather in Paris?' }, ...r.body.output, output], max_output_tokens: 3, temperature: 0 });
    expect(stored.status).toBe(200);
    expect(shape(stored.body.output)).toEqual(shape(whole.body.output));
    expect(stored.body.usage.input_tokens).toBe(whole.body.usage.input_tokens);
  });

  it("puts a reasoning model's thinking in a reasoning item and counts its tokens as reasoning tokens", async () => {
    const body = { model: 'think', input: 'Why?', temperature: 0, max_output_tokens: 8 };
    const r = await post('/v1/responses', body);
    expect(r.body.status).toBe('incomplete');
    // The template opened the block and 8 tokens do not close it: all of the answer is reasoning.
    expect(r.body.output).toEqual([{ id: expect.stringMatching(/^rs_/), type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: expect.any(String) }], encrypted_content: null, status: 'incomplete' }]);
    expect(r.body.output[0].content[0].text.length).toBeGreaterThan(0);
    expect(r.body.usage.output_tokens_details.reasoning_tokens).toBe(8);
    const ev = await events(body);
    expect(ev.filter(([t]) => t === 'response.reasoning_text.delta').map(([, d]) => d.delta).join('')).toBe(r.body.output[0].content[0].text);
    expect(shape(ev.at(-1)![1].response.output)).toEqual(shape(r.body.output));
    // reasoning.effort 'none' turns thinking off where the template has the switch; here it has not: still reasoning.
    expect((await post('/v1/responses', { ...body, reasoning: { effort: 'none' } })).body.output[0].type).toBe('reasoning');
  });

  it('include message.output_text.logprobs: the message tokens with top_logprobs, the same in the stream piece by piece; reasoning tokens left out', async () => {
    const body = { ...ask, max_output_tokens: 6, include: ['message.output_text.logprobs'], top_logprobs: 2 };
    const r = await post('/v1/responses', body);
    expect(r.status).toBe(200);
    const part = r.body.output[0].content[0];
    expect(part.logprobs).toHaveLength(6);
    expect(part.logprobs.map((l: { token: string }) => l.token).join('')).toBe(part.text);
    for (const l of part.logprobs) {
      expect(l.logprob).toBeLessThanOrEqual(0);
      expect(Buffer.from(l.bytes).toString('utf8')).toBe(l.token);
      expect(l.top_logprobs).toHaveLength(2);
      // Greedy: the token is the most likely one.
      expect(l.top_logprobs[0].logprob).toBeCloseTo(l.logprob, 5);
    }
    // The chat completion's logprobs of the same conversation are the same tokens and values.
    const chat = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }], temperature: 0, max_tokens: 6, logprobs: true, top_logprobs: 2 });
    expect(part.logprobs.map((l: { token: string; logprob: number }) => [l.token, l.logprob])).toEqual(chat.body.choices[0].logprobs.content.map((l: { token: string; logprob: number }) => [l.token, l.logprob]));
    // Streamed: the deltas' logprobs add up to the whole's; without include there are none.
    const ev = await events(body);
    const deltas = ev.filter(([t]) => t === 'response.output_text.delta').flatMap(([, d]) => d.logprobs);
    expect(deltas).toEqual(part.logprobs);
    expect(ev.find(([t]) => t === 'response.output_text.done')![1].logprobs).toEqual(part.logprobs);
    expect((await post('/v1/responses', { ...ask, max_output_tokens: 3 })).body.output[0].content[0].logprobs).toEqual([]);
    // A reasoning model: the reasoning's tokens have none (8 tokens, all reasoning: no message item at all).
    const think = await post('/v1/responses', { model: 'think', input: 'Why?', temperature: 0, max_output_tokens: 8, include: ['message.output_text.logprobs'] });
    expect(think.body.output.map((x: { type: string }) => x.type)).toEqual(['reasoning']);
  });

  it("chat completions: reasoning_budget_tokens ends the model's reasoning with reasoning_budget_message, and the answer follows", async () => {
    const body = { model: 'think', messages: [{ role: 'user', content: 'Why?' }], temperature: 0, max_tokens: 40 };
    const free = await post('/v1/chat/completions', body);
    expect(free.body.choices[0].message.content ?? '').toBe('');
    const r = await post('/v1/chat/completions', { ...body, reasoning_budget_tokens: 4, reasoning_budget_message: ' Enough.' });
    expect(r.status).toBe(200);
    const m = r.body.choices[0].message;
    // The reasoning: the model's first 4 tokens (as without a budget), then the message; the rest is the answer.
    const first4 = (await post('/v1/chat/completions', { ...body, max_tokens: 4 })).body.choices[0].message.reasoning_content;
    expect(m.reasoning_content).toBe(`${first4} Enough.`.trim());
    expect(m.content.length).toBeGreaterThan(0);
    expect(r.body.usage.completion_tokens).toBeGreaterThan(4);
    // thinking_budget_tokens is the same; -1 is no budget.
    expect((await post('/v1/chat/completions', { ...body, thinking_budget_tokens: 4, reasoning_budget_message: ' Enough.' })).body.choices[0].message).toEqual(m);
    expect((await post('/v1/chat/completions', { ...body, reasoning_budget_tokens: -1 })).body.choices[0].message).toEqual(free.body.choices[0].message);
    expect((await post('/v1/chat/completions', { ...body, reasoning_budget_tokens: -2 })).status).toBe(400);
    // With a JSON format the reasoning runs (here 3 tokens of budget), then the answer is held to JSON.
    const close = (await post('/tokenize', { model: 'think', content: '}' })).body.tokens[0] as number;
    const held = await post('/v1/chat/completions', { ...body, max_tokens: 300, temperature: 1, seed: 3, logit_bias: { [close]: 4 }, reasoning_budget_tokens: 3, response_format: { type: 'json_object' } });
    expect(held.body.choices[0].finish_reason).toBe('stop');
    expect(held.body.choices[0].message.reasoning_content.length).toBeGreaterThan(0);
    expect(JSON.parse(held.body.choices[0].message.content)).toEqual(expect.any(Object));

    // A server default (kail serve --reasoning-budget) applies to chat requests that set none,
    // on every chat route: here 4 tokens, then </think> alone.
    const capped = await startApi(parseApiConfig({ port: 0, schedulerAddress: `127.0.0.1:${stack.sched.port}`, reasoningBudget: 4 }));
    try {
      const at = (p: string, b: object) =>
        fetch(`${capped.url}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) }).then((x) => x.json() as Promise<any>);
      expect((await at('/v1/chat/completions', body)).choices[0].message.reasoning_content).toBe(first4);
      expect((await at('/v1/chat/completions', { ...body, reasoning_budget_tokens: 4, reasoning_budget_message: ' Enough.' })).choices[0].message).toEqual(m);
      const resp = await at('/v1/responses', { model: 'think', input: 'Why?', temperature: 0, max_output_tokens: 40 });
      expect(resp.output.map((x: { type: string }) => x.type)).toEqual(['reasoning', 'message']);
      expect(resp.output[0].content[0].text).toBe(first4);
    } finally {
      await capped.close();
    }
  });

  it('holds the output to text.format json_schema', async () => {
    const schema = { type: 'object', properties: { role: { enum: ['admin', 'user'] }, ok: { type: 'boolean' } }, required: ['role', 'ok'], additionalProperties: false };
    // The grammar allows up to a newline and 20 spaces or tabs between JSON tokens (llama.cpp's
    // rule), which a random-weight model with one-character tokens fills often: 60 tokens were
    // not always enough for the object (1 run in 7).
    const r = await client.responses.create({ model: 'tiny', input: 'JSON please', max_output_tokens: 400, temperature: 1, text: { format: { type: 'json_schema', name: 'x', schema, strict: true } } });
    expect(r.status).toBe('completed');
    const v = JSON.parse(r.output_text);
    expect(['admin', 'user']).toContain(v.role);
    expect(typeof v.ok).toBe('boolean');
  });

  it("answers bad requests with OpenAI's error shape naming the problem, and keeps serving", async () => {
    const bad: [unknown, number, RegExp][] = [
      [{ ...ask, input: [] }, 400, /input must not be empty/],
      [{ ...ask, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 400, /type 'input_image' are not supported: the models served here read text only/],
      [{ ...ask, input: [{ type: 'item_reference', id: 'x' }] }, 400, /input items of type 'item_reference' are not supported/],
      [{ ...ask, input: [{ type: 'function_call', name: 'f' }] }, 400, /call_id/],
      [{ ...ask, tools: [{ type: 'web_search' }] }, 400, /tools of type 'web_search' are not supported/],
      [{ ...ask, tool_choice: 'required' }, 400, /needs tools/],
      [{ ...ask, tools: [{ type: 'function', name: 'f' }], tool_choice: { type: 'function', name: 'g' } }, 400, /'g', which is not among the tools/],
      [{ ...ask, background: true }, 400, /background responses are not supported/],
      [{ ...ask, truncation: 'auto' }, 400, /truncation 'auto' is not supported/],
      [{ ...ask, include: ['file_search_call.results'] }, 400, /include 'file_search_call.results' is not supported/],
      [{ ...ask, include: ['message.output_text.logprobs'], top_logprobs: 21 }, 400, /top_logprobs/],
      [{ ...ask, temperature: 3 }, 400, /temperature/],
      [{ ...ask, max_output_tokens: 0 }, 400, /max_output_tokens/],
      [{ ...ask, tools: [{ type: 'function', name: 'f' }] }, 400, /does not show tools/],
      [{ ...ask, model: 'nope' }, 404, /nope/],
      [{ ...ask, previous_response_id: 'resp_missing' }, 404, /resp_missing/],
      ['{', 400, /./],
    ];
    for (const [body, status, why] of bad) {
      const r = await post('/v1/responses', body);
      expect([r.status, JSON.stringify(body)]).toEqual([status, JSON.stringify(body)]);
      expect(r.body.error.message).toMatch(why);
      expect(r.body.error).toHaveProperty('type');
    }
    expect((await post('/v1/responses', { ...ask, max_output_tokens: 2 })).status).toBe(200);
  });
});

describe('Responses input items as chat turns', () => {
  it("gathers an assistant turn's reasoning, text and calls; names a call's output by its call", () => {
    const turns = toChatMessages([
      { type: 'message', role: 'developer', content: 'D' },
      { type: 'message', role: 'user', content: 'q' },
      { type: 'reasoning', content: [{ type: 'reasoning_text', text: 'hmm' }] },
      { type: 'message', role: 'assistant', content: 'calling' },
      { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"a":1}' },
      { type: 'function_call_output', call_id: 'c1', output: 'ok' },
      { type: 'reasoning', summary: [{ type: 'summary_text', text: 's1' }, { type: 'summary_text', text: 's2' }] },
      { type: 'message', role: 'assistant', content: 'done' },
      { type: 'message', role: 'assistant', content: 'again' },
    ]);
    expect(turns.map((t) => [t.role, t.content, t.reasoningContent])).toEqual([
      ['system', 'D', ''], ['user', 'q', ''], ['assistant', 'calling', 'hmm'], ['tool', 'ok', ''], ['assistant', 'done', 's1\n\ns2'], ['assistant', 'again', ''],
    ]);
    expect(JSON.parse(turns[2].toolCallsJson)).toEqual([{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }]);
    expect(turns[3]).toMatchObject({ toolCallId: 'c1', name: 'f' });
    // A call made in an earlier (stored) turn names its output too.
    expect(toChatMessages([{ type: 'function_call_output', call_id: 'c1', output: 'x' }], turns.slice(0, 3))[0].name).toBe('f');
  });

  it.each([
    ['in memory', (limits: { responses: number; bytes: number }) => new MemoryResponseStore(limits)],
    ['in SQLite', (limits: { responses: number; bytes: number }) => SqliteResponseStore.open(path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kail-resp-')), 'r.sqlite'), limits)],
  ] as const)('keeps stored responses per key (%s), the oldest dropped past the count or byte limit', (_kind, open) => {
    const s: ResponseStore = open({ responses: 3, bytes: 1 << 20 });
    const conv = [pb.ChatMessage.fromPartial({ role: 'user', content: 'x' }), pb.ChatMessage.fromPartial({ role: 'assistant', content: 'y', reasoningContent: 'r', toolCallsJson: '[1]' })];
    for (const id of ['a', 'b', 'c', 'd']) s.put(id, 'k1', { id }, conv, [{ id: `in_${id}` }]);
    expect([s.size, s.get('a', 'k1'), s.get('b', 'k1')?.response]).toEqual([3, undefined, { id: 'b' }]);
    expect(s.get('c', 'k1')).toEqual({ tenant: 'k1', response: { id: 'c' }, input: [{ id: 'in_c' }], conversation: conv });
    expect(s.get('b', 'k2')).toBeUndefined();
    expect(s.delete('b', 'k2')).toBe(false);
    expect(s.delete('b', 'k1')).toBe(true);
    expect(s.size).toBe(2);
    s.close();
    const small = open({ responses: 100, bytes: 600 });
    for (const id of ['a', 'b', 'c']) small.put(id, 'k', { id, pad: 'p'.repeat(200) }, conv);
    expect(small.get('a', 'k')).toBeUndefined();
    expect(small.get('c', 'k')).toBeDefined();
    small.close();
  });

  it('keeps responses in SQLite across a restart (reopening the file)', () => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kail-resp-')), 'r.sqlite');
    const conv = [pb.ChatMessage.fromPartial({ role: 'user', content: 'hello' })];
    const a = SqliteResponseStore.open(file);
    a.put('resp_1', 'k', { id: 'resp_1', output: [] }, conv);
    a.close();
    const b = SqliteResponseStore.open(file);
    expect(b.get('resp_1', 'k')?.conversation).toEqual(conv);
    b.close();
    expect(() => SqliteResponseStore.open(path.join(file, 'not-a-dir', 'x.sqlite'))).toThrow(/cannot open the response store/);
  });

  it('moves a file that is not a database aside, keeping it, and starts an empty store', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-resp-bad-'));
    const file = path.join(dir, 'responses.sqlite');
    fs.writeFileSync(file, 'not a database, but somebody may want these bytes back '.repeat(200));
    const notes: string[] = [];
    const s = SqliteResponseStore.open(file, undefined, (m) => notes.push(m));
    expect(notes).toEqual([expect.stringMatching(/^cannot open the response store .*responses\.sqlite: file is not a database; moved it to .*responses\.sqlite\.unreadable-\S+ and started an empty response store$/)]);
    const aside = fs.readdirSync(dir).filter((n) => n.startsWith('responses.sqlite.unreadable-'));
    expect(aside).toHaveLength(1);
    expect(fs.readFileSync(path.join(dir, aside[0]), 'utf8')).toMatch(/^not a database/);
    s.put('resp_1', 'k', { id: 'resp_1', output: [] }, []);
    expect(s.get('resp_1', 'k')).not.toBeNull();
    s.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
});
