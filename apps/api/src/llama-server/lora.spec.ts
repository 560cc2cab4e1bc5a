import { startTestStack, type TestStack } from '../test-stack';

// LoRA adapters through the API, as llama-server serves them: GET /lora-adapters lists a model's
// adapters; a request's `lora` ([{id, scale}], the others at 0) sets their scales for it alone, on
// llama-server's /completion and on the OpenAI routes. The same weights loaded without adapters
// ('base') are what scale 0 must give, bit for bit.
describe('LoRA adapters through the API', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack([{ id: 'base' }, { id: 'tuned', lora: [{ rank: 8 }, { rank: 4, scale: 0.5 }] }]);
  }, 60_000);
  afterAll(() => stack?.close());

  const probs = async (model: string, lora?: unknown) => {
    const r = await stack.post('/completion', { model, prompt: 'Adapters change what the model says', n_predict: 6, temperature: 0, ignore_eos: true, n_probs: 3, ...(lora === undefined ? {} : { lora }) });
    expect(r.status).toBe(200);
    return JSON.stringify(r.body.completion_probabilities);
  };

  it('lists the adapters with their default scales', async () => {
    const r = await fetch(`${stack.api.url}/lora-adapters?model=tuned`);
    expect(r.status).toBe(200);
    const list = (await r.json()) as { id: number; path: string; scale: number }[];
    expect(list.map((l) => [l.id, l.scale])).toEqual([[0, 1], [1, 0.5]]);
    expect(list[0].path).toMatch(/\.gguf$/);
    expect(await (await fetch(`${stack.api.url}/lora-adapters?model=base`)).json()).toEqual([]);
    expect((await fetch(`${stack.api.url}/lora-adapters?model=nope`)).status).toBe(404);
  });

  it("a request's lora sets the scales for it alone: scale 0 is the base model's bits; the defaults come back without it", async () => {
    const base = await probs('base');
    const tuned = await probs('tuned');
    expect(tuned).not.toBe(base);
    expect(await probs('tuned', [{ id: 0, scale: 0 }])).toBe(base);
    expect(await probs('tuned', [{ id: 0, scale: 1 }, { id: 1, scale: 0.5 }])).toBe(tuned);
    expect(await probs('tuned', [])).toBe(tuned);
    const one = await probs('tuned', [{ id: 1, scale: 0.5 }]);
    expect([base, tuned]).not.toContain(one);
    // And after all that, the defaults again (no cache computed at other scales is reused).
    expect(await probs('tuned')).toBe(tuned);
    // The OpenAI chat route takes it too.
    const chat = async (model: string, lora?: unknown) =>
      JSON.stringify((await stack.post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2, ...(lora ? { lora } : {}) })).body.choices[0].logprobs);
    expect(await chat('tuned', [{ id: 1, scale: 0 }])).toBe(await chat('base'));
  });

  it("POST /lora-adapters sets the scales of requests that give none (llama-server's: the others at 0)", async () => {
    const post = (body: unknown) => fetch(`${stack.api.url}/lora-adapters?model=tuned`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const tuned = await probs('tuned');
    const r = await post([{ id: 1, scale: 0.25 }]);
    expect([r.status, await r.json()]).toEqual([200, { success: true }]);
    expect(((await (await fetch(`${stack.api.url}/lora-adapters?model=tuned`)).json()) as { scale: number }[]).map((l) => l.scale)).toEqual([0, 0.25]);
    expect(await probs('tuned')).toBe(await probs('tuned', [{ id: 1, scale: 0.25 }]));
    expect(await probs('tuned')).not.toBe(tuned);
    // All at 0: the base model's bits; back to the load scales: the first answer again.
    await post([]);
    expect(await probs('tuned')).toBe(await probs('base'));
    await post([{ id: 0, scale: 1 }, { id: 1, scale: 0.5 }]);
    expect(await probs('tuned')).toBe(tuned);
    const bad = await post([{ id: 9, scale: 1 }]);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/adapter id 9 does not exist/);
    expect((await post({ id: 0 })).status).toBe(400);
  });

  it('refuses an adapter id the model lacks, and a malformed list, with 400', async () => {
    const r = await stack.post('/completion', { model: 'tuned', prompt: 'x', n_predict: 1, lora: [{ id: 2, scale: 1 }] });
    expect(r.status).toBe(400);
    expect(r.body.error.message).toMatch(/lora: adapter id 2 does not exist; the model has 2 LoRA adapters/);
    const bad = await stack.post('/v1/chat/completions', { model: 'tuned', messages: [{ role: 'user', content: 'x' }], lora: [{ id: -1, scale: 1 }] });
    expect(bad.status).toBe(400);
    // Still serving.
    expect((await stack.post('/completion', { model: 'tuned', prompt: 'x', n_predict: 1 })).status).toBe(200);
  });
});
