import fs from 'node:fs';
import { engine as pb } from '@kailstream/proto';
import { LocalModelHost, startEngineServer, type RunningEngineServer } from '@kailstream/engine';
import { tempDir, writeTestModel } from '@kailstream/engine/testing';
import { startSchedulerServer, type RunningSchedulerServer } from '@kailstream/scheduler';

import { parseApiConfig } from '../env';
import { startApi, type RunningApi } from '../server';

// The real stack in one process: engine gRPC server with a tiny MoE model, scheduler, API.
describe('OpenAI-compatible routes', () => {
  const dir = tempDir();
  let engine: RunningEngineServer;
  let sched: RunningSchedulerServer;
  let api: RunningApi;

  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const host = new LocalModelHost({ seqsPerModel: 4, defaultContext: 256 });
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny', contextLength: 256, threads: 2 }));
    engine = await startEngineServer(host, { port: 0 });
    sched = await startSchedulerServer({ engines: [`127.0.0.1:${engine.port}`] });
    api = await startApi(parseApiConfig({ port: 0, schedulerAddress: `127.0.0.1:${sched.port}` }));
  }, 60_000);

  afterAll(async () => {
    await api.close();
    await sched.close(100);
    await engine.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const post = (path: string, body: unknown) =>
    fetch(`${api.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });

  it('lists the model', async () => {
    const r = (await (await fetch(`${api.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(r.data.map((m) => m.id)).toEqual(['tiny']);
  });

  it('answers a chat completion with usage; a seed makes it reproducible', async () => {
    const body = { model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, seed: 3, temperature: 0.9 };
    const a = (await (await post('/v1/chat/completions', body)).json()) as any;
    const b = (await (await post('/v1/chat/completions', body)).json()) as any;
    expect(a.object).toBe('chat.completion');
    expect(a.choices[0].message.role).toBe('assistant');
    expect(a.usage.completion_tokens).toBeGreaterThan(0);
    expect(a.usage.total_tokens).toBe(a.usage.prompt_tokens + a.usage.completion_tokens);
    expect(b.choices[0].message.content).toBe(a.choices[0].message.content);
  });

  it('streams chat chunks over SSE ending with [DONE], with usage when asked', async () => {
    const r = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, stream: true, stream_options: { include_usage: true }, temperature: 0 });
    expect(r.headers.get('content-type')).toContain('text/event-stream');
    const events = (await r.text()).split('\n\n').filter(Boolean).map((e) => e.replace(/^data: /, ''));
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks[0].choices[0].delta.role).toBe('assistant');
    expect(chunks.some((c) => c.choices[0]?.finish_reason)).toBe(true);
    expect(chunks.at(-1).usage.completion_tokens).toBeGreaterThan(0);
    const streamed = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    const whole = (await (await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, temperature: 0 })).json()) as any;
    expect(streamed).toBe(whole.choices[0].message.content);
  });

  it('answers a text completion with logprobs', async () => {
    const r = (await (await post('/v1/completions', { model: 'tiny', prompt: 'Once upon', max_tokens: 4, temperature: 0, logprobs: 2 })).json()) as any;
    expect(r.object).toBe('text_completion');
    expect(r.choices[0].logprobs.tokens).toHaveLength(r.usage.completion_tokens);
    expect(r.choices[0].logprobs.top_logprobs[0]).toBeDefined();
  });

  it.each([
    ['malformed JSON', '{"model": ', 400],
    ['unknown model', { model: 'nope', messages: [{ role: 'user', content: 'x' }] }, 404],
    ['wrong type', { model: 'tiny', messages: 'hello' }, 400],
    ['negative max_tokens', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: -1 }, 400],
    ['huge max_tokens', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 1e12 }, 400],
    ['temperature out of range', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], temperature: 5 }, 400],
    ['empty messages', { model: 'tiny', messages: [] }, 400],
    ['prompt longer than the context', { model: 'tiny', messages: [{ role: 'user', content: 'word '.repeat(400) }] }, 400],
  ])('%s gets an OpenAI-shaped 4xx and the server keeps serving', async (_name, body, status) => {
    const r = await post('/v1/chat/completions', body);
    expect(r.status).toBe(status);
    const e = (await r.json()) as any;
    expect(typeof e.error.message).toBe('string');
    expect(e.error).toHaveProperty('type');
    expect(e.error).toHaveProperty('param');
    expect(e.error).toHaveProperty('code');
    expect((await fetch(`${api.url}/health`)).status).toBe(200);
  });
});
