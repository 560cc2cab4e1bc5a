// A diffusion language model (tiny-llada) behind the real stack: /v1/completions and
// /v1/chat/completions run its loop as one exclusive engine job (max_tokens: the canvas, seed /
// temperature / top_p its sampling, diffusion_* fields its settings), giving kail run's output
// (diffusionGenerateWith over the same file, prompt and parameters), streamed as the canvas settles
// (together the same text) and [DONE]; stop strings cut the text; a client that goes away stops the loop and frees the model; a
// bad diffusion field is a 400 naming it.
import OpenAI from 'openai';
import { ChatTemplate, EngineModel, diffusionGenerateWith, diffusionModelSettings } from '@kailstream/engine';

import { parseApiConfig } from '../env';
import { startApi } from '../server';
import { startTestStack, type TestStack } from '../test-stack';

describe('a diffusion model through the API', () => {
  let stack: TestStack;
  let client: OpenAI;
  let model: EngineModel;
  beforeAll(async () => {
    stack = await startTestStack([{ id: 'llada', preset: 'tiny-llada', contextLength: 128 }]);
    client = new OpenAI({ baseURL: `${stack.api.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
    model = EngineModel.load(stack.files.llada, { threads: 2, nCtx: 128 });
  }, 60_000);
  afterAll(async () => {
    model?.close();
    await stack?.close();
  });

  /** Polls `ok` until it holds; fails after 30 s. */
  async function until(what: string, ok: () => boolean) {
    const end = Date.now() + 30_000;
    while (!ok()) {
      if (Date.now() > end) throw new Error(`${what}: not within 30 s`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** kail run's text: the loop over the file (llada: blocks of 32 unless given), masks left out. */
  async function kailRun(prompt: number[], nGen: number, o: { steps: number; temperature: number; topP?: number; seed: number; algorithm?: 'confidence' | 'margin' }) {
    const mask = diffusionModelSettings(model).maskTokenId;
    const r = await diffusionGenerateWith(model, prompt, nGen, { steps: o.steps, algorithm: o.algorithm ?? 'confidence', schedule: { kind: 'block', blockLength: 32 }, temperature: o.temperature, topP: o.topP ?? 1, topK: 0, seed: o.seed });
    return model.tokenizer.detokenize(Array.from(r.generated).filter((t) => t !== mask));
  }

  it("answers /v1/completions and /v1/chat/completions with kail run's text for the same seed and parameters, with usage", async () => {
    const prompt = model.tokenizer.tokenize('Experts stream', { addSpecial: true, parseSpecial: true });
    for (const s of [
      { temperature: 0, seed: 1, diffusion_steps: 4 },
      { temperature: 0.9, top_p: 0.9, seed: 7, diffusion_steps: 8, diffusion_algorithm: 'margin' as const },
    ]) {
      const r = await stack.post('/v1/completions', { model: 'llada', prompt: 'Experts stream', max_tokens: 8, ...s });
      expect(r.status).toBe(200);
      const want = await kailRun(prompt, 8, { steps: s.diffusion_steps, temperature: s.temperature, topP: 'top_p' in s ? s.top_p : 1, seed: s.seed, algorithm: 'diffusion_algorithm' in s ? s.diffusion_algorithm : undefined });
      expect(r.body.choices[0]).toEqual(expect.objectContaining({ text: want, finish_reason: 'length' }));
      expect(r.body.usage).toEqual(expect.objectContaining({ prompt_tokens: prompt.length, completion_tokens: 8 }));
    }
    // Chat: the model's template applied as for other models (and as kail run --chat).
    const messages = [{ role: 'user' as const, content: 'hi' }];
    const chat = await client.chat.completions.create({ model: 'llada', messages, max_tokens: 6, temperature: 0, seed: 3, diffusion_steps: 3 } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const text = ChatTemplate.fromTokenizer(model.tokenizer).render(messages, { addGenerationPrompt: true });
    const chatPrompt = model.tokenizer.tokenize(text, { addSpecial: false, parseSpecial: true });
    expect(chat.choices[0].message.content).toBe(await kailRun(chatPrompt, 6, { steps: 3, temperature: 0, seed: 3 }));
    expect(chat.usage).toEqual(expect.objectContaining({ prompt_tokens: chatPrompt.length, completion_tokens: 6 }));
  }, 60_000);

  it('streams the text as the canvas settles, piece by piece, then [DONE]: together the unstreamed answer; stop strings cut it', async () => {
    // Three blocks of 8 (two passes each): the answer comes in more than one piece.
    const body = { model: 'llada', prompt: 'Experts stream', max_tokens: 24, temperature: 0, seed: 2, diffusion_steps: 6, diffusion_block_length: 8 };
    const plain = (await stack.post('/v1/completions', body)).body;
    const whole = plain.choices[0].text as string;
    expect(plain.choices[0].finish_reason).toBe('length');
    const res = await fetch(`${stack.api.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }) });
    const sse = await res.text();
    expect(sse.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const chunks = sse.split('\n\n').filter((b) => b.startsWith('data: {')).map((b) => JSON.parse(b.slice(6)));
    const texts = chunks.map((c) => c.choices[0]?.text ?? '');
    expect(texts.filter(Boolean).length).toBeGreaterThan(1);
    expect(texts.join('')).toBe(whole);
    expect(chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => c.choices[0].finish_reason)).toEqual(['length']);
    expect(chunks.find((c) => c.usage)?.usage).toEqual(expect.objectContaining({ prompt_tokens: plain.usage.prompt_tokens, completion_tokens: 24 }));
    // llama-server's /completion: the same text, in more than one piece, the same stop type.
    const llama = { model: 'llada', prompt: 'Experts stream', n_predict: 24, temperature: 0, seed: 2, diffusion_steps: 6, diffusion_block_length: 8 };
    const one = (await stack.post('/completion', llama)).body;
    expect(one.content).toBe(whole);
    const ev = (await stack.events('/completion', llama)).map(([, d]) => d);
    expect(ev.filter((e) => e.content).length).toBeGreaterThan(1);
    expect(ev.map((e) => e.content ?? '').join('')).toBe(one.content);
    expect([ev.at(-1)!.stop, ev.at(-1)!.stop_type, ev.at(-1)!.tokens_predicted]).toEqual([true, one.stop_type, one.tokens_predicted]);
    // Chat: the streamed deltas are the unstreamed message, in more than one piece.
    const chatBody = { model: 'llada', messages: [{ role: 'user', content: 'Experts stream' }], max_tokens: 24, temperature: 0, seed: 2, diffusion_steps: 6, diffusion_block_length: 8 };
    const chatWhole = (await stack.post('/v1/chat/completions', chatBody)).body.choices[0];
    const deltas = (await stack.events('/v1/chat/completions', { ...chatBody, stream: true })).map(([, d]) => d.choices?.[0]);
    expect(deltas.filter((c) => c?.delta?.content).length).toBeGreaterThan(1);
    expect(deltas.map((c) => c?.delta?.content ?? '').join('')).toBe(chatWhole.message.content);
    expect(deltas.filter((c) => c?.finish_reason).map((c) => c.finish_reason)).toEqual([chatWhole.finish_reason]);
    // A stop string from inside the text: the text up to its first occurrence, finish_reason stop.
    const chars = [...whole];
    const stop = chars.slice(3, 5).join('');
    expect(stop.length).toBeGreaterThan(0);
    const cut = (await stack.post('/v1/completions', { ...body, stop: [stop] })).body.choices[0];
    expect(cut).toEqual(expect.objectContaining({ text: whole.slice(0, whole.indexOf(stop)), finish_reason: 'stop' }));
    // Streamed, the same cut.
    const cutEv = (await stack.events('/v1/completions', { ...body, stop: [stop] })).map(([, d]) => d.choices?.[0]);
    expect(cutEv.map((c) => c?.text ?? '').join('')).toBe(cut.text);
    expect(cutEv.filter((c) => c?.finish_reason).map((c) => c.finish_reason)).toEqual(['stop']);
  }, 60_000);

  it('a bad diffusion field is a 400 naming it; the engine names steps the blocks do not divide', async () => {
    for (const [extra, want] of [
      [{ diffusion_algorithm: 'fastest' }, /diffusion_algorithm/],
      [{ diffusion_steps: 0 }, /diffusion_steps/],
      [{ diffusion_eps: 1.5 }, /diffusion_eps/],
      [{ diffusion_block_length: 4, diffusion_steps: 5 }, /diffusion steps \(5\) must be a multiple of the block count \(2/],
      [{ diffusion_block_length: 4, diffusion_eps: 0.01 }, /one of the diffusion eps .* and the diffusion block length/],
    ] as const) {
      const r = await stack.post('/v1/completions', { model: 'llada', prompt: 'hi', max_tokens: 8, ...extra });
      expect(r.status).toBe(400);
      expect(r.body.error).toEqual(expect.objectContaining({ message: expect.stringMatching(want) }));
    }
  }, 60_000);

  it('a client that goes away, or a deadline, stops the loop, and the model serves the next request', async () => {
    const ac = new AbortController();
    // (The timestep schedule over a million passes unmasks nothing until near the end: hours, unless
    // the loop stops when the client leaves.)
    const long = fetch(`${stack.api.url}/v1/completions`, { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'llada', prompt: 'hi', max_tokens: 8, diffusion_steps: 1_000_000, diffusion_eps: 0 }) })
      .then((r) => r.text())
      .catch((e: Error) => e);
    // (Waits for the engine to run the loop, and then for it to stop: the conditions themselves, not
    // a fixed pause or a bound on the next request's time, which a loaded machine stretches.)
    const running = () => stack.host.telemetry().runningRequests;
    await until('the loop runs', () => running() === 1);
    ac.abort();
    expect(String(await long)).toMatch(/abort/i);
    await until('the loop stops', () => running() === 0);
    const r = await stack.post('/v1/completions', { model: 'llada', prompt: 'hi', max_tokens: 4, temperature: 0, diffusion_steps: 2 });
    expect(r.status).toBe(200);
    // A deadline (an API whose requests time out after 0.5 s): 504, and the loop stops.
    const hurried = await startApi(parseApiConfig({ port: 0, schedulerAddress: `127.0.0.1:${stack.sched.port}`, requestTimeoutS: 0.5 }));
    try {
      const h = await fetch(`${hurried.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'llada', prompt: 'hi', max_tokens: 8, diffusion_steps: 1_000_000, diffusion_eps: 0 }) });
      expect(h.status).toBe(504);
    } finally {
      await hurried.close();
    }
    await until('the loop stops at the deadline', () => running() === 0);
    expect((await stack.post('/v1/completions', { model: 'llada', prompt: 'hi', max_tokens: 4, temperature: 0, diffusion_steps: 2 })).status).toBe(200);
    // Ollama's /api/generate runs the loop too, diffusion fields among the options; without
    // num_predict the canvas is the rest of one pass (kail run -n -1; here the context of 128),
    // cut to whole blocks of 32 that the steps divide.
    const o = await stack.post('/api/generate', { model: 'llada', prompt: 'hi', stream: false, options: { temperature: 0, diffusion_steps: 4 } });
    expect([o.status, o.body.error]).toEqual([200, undefined]);
    expect(o.body).toEqual(expect.objectContaining({ done: true, done_reason: 'length' }));
    const room = 128 - o.body.prompt_eval_count;
    let blocks = Math.ceil(room / 32);
    while (4 % blocks) blocks--;
    expect(o.body.eval_count).toBe(Math.min(room, blocks * 32));
    const bad = await stack.post('/api/generate', { model: 'llada', prompt: 'hi', stream: false, options: { diffusion_algorithm: 'fastest' } });
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.body)).toMatch(/diffusion_algorithm/);
  }, 60_000);
});
