import Anthropic from '@anthropic-ai/sdk';

import { HERMES_TEMPLATE as HERMES, THINK_TEMPLATE } from '../openai/test-templates';
import { startTestStack, type TestStack } from '../test-stack';
import { toChatMessages } from './messages';

describe("Anthropic's Messages API (/v1/messages), real engine", () => {
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startTestStack([{ id: 'tiny' }, { id: 'hermes', template: HERMES }, { id: 'think', template: THINK_TEMPLATE }]);
  }, 60_000);
  afterAll(() => stack?.close());

  const post = (p: string, body: unknown) => stack.post(p, body, { 'x-api-key': 'none', 'anthropic-version': '2023-06-01' });
  /** The stream's events, parsed: [name, data]. */
  const stream = (body: object) => stack.events('/v1/messages', body) as Promise<[string, Record<string, any>][]>;
  const chat = { model: 'tiny', system: 'Be brief.', messages: [{ role: 'user', content: 'Hi there' }], temperature: 0 };

  it('answers as the chat completion of the same conversation: text block, stop reason, usage; streamed the same', async () => {
    const r = await post('/v1/messages', { ...chat, max_tokens: 6 });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ type: 'message', role: 'assistant', model: 'tiny', stop_reason: 'max_tokens', stop_sequence: null });
    expect(r.body.id).toMatch(/^msg_/);
    expect(r.body.content).toHaveLength(1);
    expect(r.body.content[0].type).toBe('text');
    const oai = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }], max_tokens: 6, temperature: 0 });
    expect(r.body.content[0].text).toBe(oai.body.choices[0].message.content);
    expect(r.body.usage.output_tokens).toBe(6);
    expect(r.body.usage.input_tokens + r.body.usage.cache_read_input_tokens).toBe(oai.body.usage.prompt_tokens);
    const count = await post('/v1/messages/count_tokens', { model: 'tiny', system: 'Be brief.', messages: chat.messages });
    expect(count.body).toEqual({ input_tokens: oai.body.usage.prompt_tokens });

    const ev = await stream({ ...chat, max_tokens: 6 });
    expect(ev.map(([n]) => n)).toEqual(['message_start', 'content_block_start', ...ev.slice(2, -3).map(() => 'content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop']);
    expect(ev[0][1].message).toMatchObject({ role: 'assistant', model: 'tiny', content: [] });
    expect(ev[1][1]).toEqual({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    expect(ev.filter(([n]) => n === 'content_block_delta').map(([, d]) => d.delta.text).join('')).toBe(r.body.content[0].text);
    expect(ev.at(-2)![1]).toMatchObject({ delta: { stop_reason: 'max_tokens', stop_sequence: null }, usage: { output_tokens: 6 } });
  });

  it("serves the official Anthropic SDK: create, stream (final message and text events) and countTokens", async () => {
    const client = new Anthropic({ baseURL: stack.api.url, apiKey: 'none', maxRetries: 0 });
    const params = { model: 'tiny', max_tokens: 6, temperature: 0, system: 'Be brief.', messages: [{ role: 'user' as const, content: 'Hi there' }] };
    const m = await client.messages.create(params);
    expect(m.stop_reason).toBe('max_tokens');
    expect(m.content[0].type).toBe('text');
    const s = client.messages.stream(params);
    let streamed = '';
    s.on('text', (t) => (streamed += t));
    const final = await s.finalMessage();
    expect(final.content).toEqual(m.content);
    expect(streamed).toBe((m.content[0] as Anthropic.TextBlock).text);
    expect(final.usage).toMatchObject({ output_tokens: 6, input_tokens: m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0) - (final.usage.cache_read_input_tokens ?? 0) });
    const n = await client.messages.countTokens({ model: 'tiny', system: 'Be brief.', messages: params.messages });
    expect(n.input_tokens).toBe(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0));
    await expect(client.messages.create({ ...params, model: 'nope' })).rejects.toMatchObject({ status: 404 });
    // A forced call, whole and streamed (the SDK assembles the input from its input_json_delta pieces).
    const tools = [{ name: 'get_weather', input_schema: { type: 'object' as const, properties: { city: { enum: ['Paris', 'Rome'] } }, required: ['city'] } }];
    const call = { model: 'hermes', max_tokens: 300, temperature: 1, seed: 2, messages: [{ role: 'user' as const, content: 'Weather?' }], tools, tool_choice: { type: 'any' as const, disable_parallel_tool_use: true } };
    const whole = await client.messages.create(call);
    expect(whole.stop_reason).toBe('tool_use');
    const streamedCall = await client.messages.stream(call).finalMessage();
    // (Each answer names its calls afresh.)
    const shape = (c: Anthropic.ContentBlock[]) => c.map((b) => (b.type === 'tool_use' ? { type: b.type, name: b.name, input: b.input, id: b.id.startsWith('toolu_') } : b));
    expect(shape(streamedCall.content)).toEqual(shape(whole.content));
    expect(whole.content.some((b) => b.type === 'tool_use')).toBe(true);
    expect(streamedCall.stop_reason).toBe('tool_use');
  });

  it('holds extended thinking to budget_tokens: a thinking block of that many tokens, then the text answer', async () => {
    const body = { model: 'think', messages: [{ role: 'user', content: 'Why?' }], temperature: 0, max_tokens: 40 };
    // Without a budget the block never closes in 40 tokens.
    const free = await post('/v1/messages', { ...body, thinking: { type: 'enabled', budget_tokens: 100 } });
    expect(free.body.content.map((b: { type: string }) => b.type)).toEqual(['thinking']);
    const r = await post('/v1/messages', { ...body, thinking: { type: 'enabled', budget_tokens: 5 } });
    expect(r.body.content.map((b: { type: string }) => b.type)).toEqual(['thinking', 'text']);
    const five = await post('/v1/messages', { ...body, max_tokens: 5, thinking: { type: 'enabled', budget_tokens: 100 } });
    expect(r.body.content[0].thinking).toBe(five.body.content[0].thinking);
    expect(r.body.usage.output_tokens).toBeGreaterThan(5);
    const ev = await stream({ ...body, thinking: { type: 'enabled', budget_tokens: 5 } });
    expect(ev.filter(([n]) => n === 'content_block_start').map(([, d]) => d.content_block.type)).toEqual(['thinking', 'text']);
  });

  it('continues a final assistant message (prefill), as the chat completion does; count_tokens counts that prompt', async () => {
    const messages = [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Sure, the answer' }];
    const a = await post('/v1/messages', { model: 'tiny', max_tokens: 5, temperature: 0, messages });
    const o = await stack.post('/v1/chat/completions', { model: 'tiny', max_tokens: 5, temperature: 0, messages });
    expect(a.body.content[0].text).toBe(o.body.choices[0].message.content);
    expect(a.body.usage.input_tokens + a.body.usage.cache_read_input_tokens).toBe(o.body.usage.prompt_tokens);
    expect((await post('/v1/messages/count_tokens', { model: 'tiny', messages })).body.input_tokens).toBe(o.body.usage.prompt_tokens);
  });

  it('stops at a stop sequence and says which', async () => {
    const free = await post('/v1/messages', { ...chat, max_tokens: 12 });
    const text = free.body.content[0].text as string;
    const word = text.slice(3, 6);
    const stopped = await post('/v1/messages', { ...chat, max_tokens: 12, stop_sequences: [word] });
    expect(stopped.body).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: word });
    expect(stopped.body.content[0].text).toBe(text.slice(0, text.indexOf(word)));
  });

  it('holds the answer to a JSON schema (structured outputs: output_config.format, and the beta output_format)', async () => {
    const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 120 } }, required: ['name', 'age'], additionalProperties: false };
    for (const body of [{ output_config: { format: { type: 'json_schema', schema } } }, { output_format: { type: 'json_schema', schema } }]) {
      const r = await post('/v1/messages', { ...chat, max_tokens: 300, temperature: 1, seed: 3, ...body });
      expect(r.status).toBe(200);
      expect(r.body.stop_reason).toBe('end_turn');
      const v = JSON.parse(r.body.content[0].text);
      expect(Object.keys(v)).toEqual(['name', 'age']);
      expect(v.name.length).toBeLessThanOrEqual(12);
      expect(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120).toBe(true);
    }
    const bad = await post('/v1/messages', { ...chat, max_tokens: 10, output_config: { format: { type: 'json_schema', schema: { type: 'object', properties: { a: { type: 'array', uniqueItems: true } } } } } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/'uniqueItems' is not supported/);
  });

  it('calls tools: tool_choice any gives tool_use blocks (streamed as input_json_delta), and a tool_result turn continues', async () => {
    // Enums keep a random model's arguments short (a free string can run to max_tokens).
    const tools = [{ name: 'get_weather', description: 'Weather of a city', input_schema: { type: 'object', properties: { city: { enum: ['Paris', 'Rome'] }, metric: { type: 'boolean' } }, required: ['city', 'metric'] } }];
    const base = { model: 'hermes', max_tokens: 300, temperature: 1, seed: 1, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: { type: 'any', disable_parallel_tool_use: true } };
    const r = await post('/v1/messages', base);
    expect(r.status).toBe(200);
    expect(r.body.stop_reason).toBe('tool_use');
    const uses = (r.body.content as Record<string, any>[]).filter((b) => b.type === 'tool_use');
    expect(uses).toHaveLength(1);
    expect(uses[0].name).toBe('get_weather');
    expect(uses[0].id).toMatch(/^toolu_/);
    expect(['Paris', 'Rome']).toContain(uses[0].input.city);
    expect(typeof uses[0].input.metric).toBe('boolean');
    // Streamed with the same seed: the same call, its input in pieces.
    const ev = await stream(base);
    const start = ev.find(([n, d]) => n === 'content_block_start' && d.content_block.type === 'tool_use')!;
    expect(start[1].content_block).toMatchObject({ type: 'tool_use', name: 'get_weather', input: {} });
    const json = ev.filter(([n, d]) => n === 'content_block_delta' && d.index === start[1].index).map(([, d]) => d.delta.partial_json).join('');
    expect(JSON.parse(json)).toEqual(uses[0].input);
    expect(ev.at(-2)![1].delta.stop_reason).toBe('tool_use');
    // The tool's answer goes back as a tool_result block; the model then answers.
    const next = await post('/v1/messages', {
      model: 'hermes', max_tokens: 4, temperature: 0, tools,
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: uses[0].id, name: 'get_weather', input: uses[0].input }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: 'Sunny, 21 C' }] },
      ],
    });
    expect(next.status).toBe(200);
    expect(next.body.usage.output_tokens).toBeGreaterThan(0);
  });

  it('turns blocks into the engine\'s chat turns: thinking as reasoning, tool_use as calls, tool_result as tool messages', () => {
    const turns = toChatMessages({
      system: [{ type: 'text', text: 'S1' }, { type: 'text', text: 'S2' }],
      messages: [
        { role: 'user', content: 'q' },
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'hmm' }, { type: 'text', text: 'calling' }, { type: 'tool_use', id: 'toolu_1', name: 'f', input: { a: 1 } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'ok' }] }, { type: 'text', text: 'thanks' }] },
      ],
    });
    expect(turns.map((t) => [t.role, t.content])).toEqual([['system', 'S1\nS2'], ['user', 'q'], ['assistant', 'calling'], ['tool', 'ok'], ['user', 'thanks']]);
    expect(turns[2].reasoningContent).toBe('hmm');
    expect(JSON.parse(turns[2].toolCallsJson)).toEqual([{ id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }]);
    expect(turns[3]).toMatchObject({ toolCallId: 'toolu_1', name: 'f' });
  });

  it("answers bad requests in Anthropic's error shape, and keeps serving", async () => {
    const bad: [unknown, number, RegExp][] = [
      [{ model: 'tiny', messages: chat.messages }, 400, /max_tokens is required/],
      [{ ...chat, max_tokens: 0 }, 400, /max_tokens/],
      [{ ...chat, max_tokens: 4, messages: [] }, 400, /messages must not be empty/],
      [{ ...chat, max_tokens: 4, temperature: 1.5 }, 400, /temperature/],
      [{ ...chat, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, 400, /type 'image' are not supported: the models served here read text only/],
      [{ ...chat, max_tokens: 4, messages: [{ role: 'assistant', content: [{ type: 'tool_result', tool_use_id: 'x' }] }] }, 400, /tool_result blocks belong in a user message/],
      [{ ...chat, max_tokens: 4, tools: [{ name: 'f', input_schema: {} }], tool_choice: { type: 'tool', name: 'g' } }, 400, /tool_choice names 'g', which is not in tools/],
      [{ ...chat, model: 'tiny', max_tokens: 4, tools: [{ name: 'f', input_schema: {} }] }, 400, /does not show tools/],
      [{ ...chat, model: 'nope', max_tokens: 4 }, 404, /nope/],
      // Malformed JSON, answered before the route runs: still Anthropic's shape.
      ['{"model": ', 400, /JSON/],
    ];
    for (const [body, status, why] of bad) {
      const r = await post('/v1/messages', body);
      expect([r.status, r.body.type]).toEqual([status, 'error']);
      expect(r.body.error.message).toMatch(why);
      expect(r.body.error.type).toBe(status === 404 ? 'not_found_error' : 'invalid_request_error');
    }
    expect((await post('/v1/messages', { ...chat, max_tokens: 2 })).status).toBe(200);
  });
});
