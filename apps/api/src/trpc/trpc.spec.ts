import fs from 'node:fs';
import path from 'node:path';
import { LocalModelHost, startEngineServer, type RunningEngineServer } from '@kailstream/engine';
import { tempDir, writeTestModel } from '@kailstream/engine/testing';
import { startSchedulerServer, type RunningSchedulerServer } from '@kailstream/scheduler';

import { parseApiConfig } from '../env';
import { startApi, type RunningApi } from '../server';
import type { ExpertWindow, ModelSlots, TelemetryPoint } from './telemetry-hub';

// The console's router over the real stack: engine (tiny MoE model in a models directory),
// scheduler, API. Calls go over HTTP in tRPC's own wire format, as the console sends them.
describe('console tRPC router', () => {
  const dir = tempDir('kail-trpc-');
  const modelsDir = path.join(dir, 'models');
  let engine: RunningEngineServer;
  let sched: RunningSchedulerServer;
  let api: RunningApi;
  let file: string;

  beforeAll(async () => {
    fs.mkdirSync(modelsDir);
    file = writeTestModel(modelsDir, 'tiny-qwen3moe', 'F32');
    const host = new LocalModelHost({ seqsPerModel: 2, defaultContext: 256, modelsDir });
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

  type Res<T> = { status: number; data?: T; error?: { message: string; data: { code: string; httpStatus: number; zodIssues: { path: string }[] | null } } };
  async function query<T>(name: string, input?: unknown): Promise<Res<T>> {
    const q = input === undefined ? '' : `?input=${encodeURIComponent(JSON.stringify(input))}`;
    const r = await fetch(`${api.url}/trpc/${name}${q}`);
    const body = (await r.json()) as { result?: { data: T }; error?: Res<T>['error'] };
    return { status: r.status, data: body.result?.data, error: body.error };
  }
  async function mutate<T>(name: string, input: unknown): Promise<Res<T>> {
    const r = await fetch(`${api.url}/trpc/${name}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(input) });
    const body = (await r.json()) as { result?: { data: T }; error?: Res<T>['error'] };
    return { status: r.status, data: body.result?.data, error: body.error };
  }

  /**
   * Calls `get` until `ok` holds of what it returns (every 100 ms, 20 s at most: the hub samples
   * the engine every 500 ms, later on a loaded machine); the last value, for the test's expects.
   */
  async function poll<T>(get: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
    const end = Date.now() + 20_000;
    for (;;) {
      const v = await get();
      if (ok(v) || Date.now() > end) return v;
      await new Promise((res) => setTimeout(res, 100));
    }
  }

  it('lists the files in the models directory with their header summaries', async () => {
    const r = await query<{ modelsDir: string; files: { id: string; architecture: string; info: { expertCount: number } }[] }>('models.files');
    expect(r.status).toBe(200);
    expect(r.data!.modelsDir).toBe(modelsDir);
    expect(r.data!.files).toHaveLength(1);
    expect(r.data!.files[0].architecture).toBe('qwen3moe');
    expect(r.data!.files[0].info.expertCount).toBeGreaterThan(1);
  });

  it('plans before loading, loads, and the model shows as loaded', async () => {
    const plan = await query<{ residency: { residentBytes: number; expertBytes: number; kvBytes: number }; fits: boolean }>('models.plan', { path: file, contextLength: 256 });
    expect(plan.status).toBe(200);
    expect(plan.data!.residency.expertBytes).toBeGreaterThan(0);
    expect(plan.data!.fits).toBe(true);
    const loaded = await mutate<{ id: string; loaded: boolean }>('models.load', { path: file, id: 'tiny', contextLength: 256 });
    expect(loaded.status).toBe(200);
    expect(loaded.data).toMatchObject({ id: 'tiny', loaded: true });
    const list = await query<{ id: string }[]>('models.loaded');
    expect(list.data!.map((m) => m.id)).toEqual(['tiny']);
  }, 30_000);

  it('telemetry history and the expert window move after a generation', async () => {
    const before = await query<{ points: TelemetryPoint[] }>('telemetry.history', { seconds: 30 });
    const gen0 = before.data!.points.at(-1)?.tokensGenerated ?? 0;
    const r = await fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 8, temperature: 0 }),
    });
    expect(r.status).toBe(200);
    // The hub samples every 500 ms; wait for a point that includes the generation.
    const last = await poll(async () => (await query<{ points: TelemetryPoint[] }>('telemetry.history', { seconds: 30 })).data!.points.at(-1), (p) => !!p && p.tokensGenerated > gen0);
    expect(last!.tokensGenerated).toBeGreaterThan(gen0);
    expect(last!.tiers.map((t) => t.tier)).toContain('ram');
    expect(last!.models).toEqual(['tiny']);
    // The slots: both idle again, the one that served the chat keeping its tokens in its cache.
    // (A sample from before the chat ended shows it processing: polled until the hub has a later one.)
    const slots = await poll(async () => (await query<ModelSlots[]>('telemetry.slots')).data!, (s) => s.some((m) => m.slots.some((x) => x.cachedTokens > 0)) && s.every((m) => m.slots.every((x) => !x.processing)));
    expect(slots.map((m) => [m.model, m.slots.length, m.slots.every((x) => !x.processing && x.nCtx === 256)])).toEqual([['tiny', 2, true]]);
    expect(Math.max(...slots[0].slots.map((x) => x.cachedTokens))).toBeGreaterThan(8);
    const ex = await query<ExpertWindow>('telemetry.experts', { windowSeconds: 0 });
    expect(ex.data!.model).toBe('tiny');
    expect(ex.data!.layers.length).toBeGreaterThan(0);
    expect(ex.data!.max).toBeGreaterThan(0);
    const q = await query<{ engines: { serving: boolean }[] }>('requests.queue');
    expect(q.data!.engines[0].serving).toBe(true);
  }, 30_000);

  it('keeps one heatmap per loaded model: a generation on the second shows in its own, chosen by model', async () => {
    const second = await mutate<{ id: string }>('models.load', { path: file, id: 'second', contextLength: 256 });
    expect(second.status).toBe(200);
    try {
      const total = (w: ExpertWindow) => w.layers.reduce((n, l) => n + l.counts.reduce((a, c) => a + c, 0), 0);
      const window = async () => (await query<ExpertWindow>('telemetry.experts', { windowSeconds: 0, model: 'second' })).data ?? undefined;
      let w = await poll(window, (x) => x?.sources.length === 2);
      expect(w!.sources.map((x) => x.model)).toEqual(['tiny', 'second']);
      expect(w!.model).toBe('second');
      expect(total(w!)).toBe(0);
      const tinyBefore = total((await query<ExpertWindow>('telemetry.experts', { windowSeconds: 0, model: 'tiny' })).data!);
      const r = await fetch(`${api.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'second', prompt: 'Once upon a time', max_tokens: 6, temperature: 0 }),
      });
      expect(r.status).toBe(200);
      w = await poll(window, (x) => !!x && total(x) > 0);
      expect(total(w!)).toBeGreaterThan(0);
      // The first model's heatmap did not move.
      expect(total((await query<ExpertWindow>('telemetry.experts', { windowSeconds: 0, model: 'tiny' })).data!)).toBe(tinyBefore);
      expect((await query('telemetry.experts', { windowSeconds: 0, model: 'nope' })).data).toBeNull();
    } finally {
      await mutate('models.unload', { id: 'second' });
    }
  }, 30_000);

  it("sets a loaded model's LoRA scales (the console's form), and says why when it cannot", async () => {
    const adapter = writeTestModel(dir, 'tiny-qwen3moe', 'F32', 5, ['--lora-rank', '4']);
    const loaded = await mutate<{ id: string; loraAdapters: { scale: number }[] }>('models.load', { path: file, id: 'styled', contextLength: 256, lora: [{ path: adapter, scale: 1 }] });
    expect(loaded.status).toBe(200);
    try {
      expect(loaded.data!.loraAdapters.map((l) => l.scale)).toEqual([1]);
      const set = await mutate<{ loraAdapters: { scale: number }[] }>('models.setLora', { id: 'styled', lora: [{ id: 0, scale: 0.25 }] });
      expect(set.status).toBe(200);
      expect(set.data!.loraAdapters.map((l) => l.scale)).toEqual([0.25]);
      expect((await query<{ id: string; loraAdapters: { scale: number }[] }[]>('models.loaded')).data!.find((m) => m.id === 'styled')!.loraAdapters[0].scale).toBe(0.25);
      const bad = await mutate('models.setLora', { id: 'styled', lora: [{ id: 3, scale: 1 }] });
      expect(bad.status).toBe(400);
      expect(bad.error!.message).toMatch(/adapter id 3 does not exist/);
      expect((await mutate('models.setLora', { id: 'nope', lora: [] })).status).toBe(404);
    } finally {
      await mutate('models.unload', { id: 'styled' });
    }
  }, 30_000);

  it('names the bad field of a bad input and maps engine errors', async () => {
    const bad = await query('models.plan', { path: '' });
    expect(bad.status).toBe(400);
    expect(bad.error!.data.zodIssues![0].path).toBe('path');
    const missing = await query('models.plan', { path: path.join(modelsDir, 'nope.gguf') });
    expect(missing.status).toBeGreaterThanOrEqual(400);
    expect(missing.error!.message).toMatch(/nope\.gguf/);
    const unload = await mutate('models.unload', { id: 'not-loaded' });
    expect(unload.status).toBe(404);
    // Speculation settings reach the engine: MTP drafting on a file without an MTP block is refused there.
    const mtp = await mutate('models.load', { path: file, id: 'mtp', mtpDecoding: true });
    expect(mtp.status).toBeGreaterThanOrEqual(400);
    expect(mtp.error!.message).toMatch(/multi-token-prediction drafting is implemented for deepseek2/);
    const k = await mutate('models.load', { path: file, id: 'k', lookupDecoding: true, speculativeK: 99 });
    expect(k.status).toBe(400);
    expect(k.error!.data.zodIssues![0].path).toBe('speculativeK');
  });

  it('says that no key store is configured instead of failing on key routes', async () => {
    const s = await query<{ required: boolean; keyStore: boolean }>('auth.session');
    expect(s.data).toMatchObject({ required: false, keyStore: false });
    const k = await query('keys.list');
    expect(k.status).toBe(412);
    expect(k.error!.message).toMatch(/key store/);
  });

  it('unloads', async () => {
    const r = await mutate<{ unloaded: string }>('models.unload', { id: 'tiny' });
    expect(r.data).toEqual({ unloaded: 'tiny' });
    expect((await query<unknown[]>('models.loaded')).data).toEqual([]);
  });
});

// Keys through the console's router, with the API's real key store in a temp data directory.
describe('console tRPC router: keys and auth', () => {
  const dir = tempDir('kail-trpc-keys-');
  let api: RunningApi;
  beforeAll(async () => {
    api = await startApi(parseApiConfig({ port: 0, dataDir: dir }));
  });
  afterAll(async () => {
    await api.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const call = async (name: string, input: unknown, key?: string, method: 'GET' | 'POST' = 'POST') => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (key) headers.authorization = `Bearer ${key}`;
    const url = `${api.url}/trpc/${name}${method === 'GET' ? (input === undefined ? '' : `?input=${encodeURIComponent(JSON.stringify(input))}`) : ''}`;
    const r = await fetch(url, { method, headers, body: method === 'POST' ? JSON.stringify(input) : undefined });
    return { status: r.status, body: (await r.json()) as { result?: { data: any }; error?: { message: string } } };
  };

  it("pulls a Hugging Face repository's GGUF into the models directory in the background (models.pull, models.pulls)", async () => {
    const { startHubEmulator } = require('@kailstream/tools') as typeof import('@kailstream/tools');
    const gguf = fs.readFileSync(writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0'));
    const h = await startHubEmulator({ 'moe-Q8_0.gguf': gguf });
    const before = process.env.HF_ENDPOINT;
    process.env.HF_ENDPOINT = h.url;
    try {
      const started = await call('models.pull', { ref: 'team/moe-GGUF:Q8_0' });
      expect(started.body.result!.data).toMatchObject({ ref: 'team/moe-GGUF:Q8_0', status: 'pulling' });
      let jobs: { ref: string; status: string; id: string; filesDone: number; files: number; done: number; total: number }[] = [];
      const end = Date.now() + 30_000;
      do {
        await new Promise((r) => setTimeout(r, 100));
        jobs = (await call('models.pulls', undefined, undefined, 'GET')).body.result!.data;
      } while (jobs[0].status === 'pulling' && Date.now() < end);
      expect(jobs[0]).toMatchObject({ status: 'done', id: 'moe-Q8_0', files: 1, filesDone: 1, done: gguf.length, total: gguf.length });
      expect(fs.readFileSync(path.join(dir, 'models', 'moe-Q8_0.gguf')).equals(gguf)).toBe(true);
      // A bad reference is a 400 with the reason; a missing quantization fails the job, saying why.
      const bad = await call('models.pull', { ref: 'not a repo' });
      expect(bad.status).toBe(400);
      expect(bad.body.error!.message).toMatch(/is not a Hugging Face repository/);
      await call('models.pull', { ref: 'team/moe-GGUF:IQ1_S' });
      const end2 = Date.now() + 30_000;
      do {
        await new Promise((r) => setTimeout(r, 100));
        jobs = (await call('models.pulls', undefined, undefined, 'GET')).body.result!.data;
      } while (jobs[0].status === 'pulling' && Date.now() < end2);
      expect(jobs[0]).toMatchObject({ ref: 'team/moe-GGUF:IQ1_S', status: 'failed' });
      expect((jobs[0] as unknown as { error: string }).error).toMatch(/no GGUF model file for 'IQ1_S'/);
    } finally {
      if (before === undefined) delete process.env.HF_ENDPOINT;
      else process.env.HF_ENDPOINT = before;
      h.close();
    }
  }, 60_000);

  it('creates the first key openly on loopback; from then on every call needs a valid key', async () => {
    expect((await call('auth.session', undefined, undefined, 'GET')).body.result!.data).toMatchObject({ required: false, keyStore: true });
    const created = await call('keys.create', { name: 'alice' });
    expect(created.status).toBe(200);
    const alice = created.body.result!.data as { id: string; key: string; prefix: string };
    expect(alice.key.startsWith(alice.prefix)).toBe(true);
    // Now a key exists: no key, or a wrong one, is refused.
    expect((await call('keys.list', undefined, undefined, 'GET')).status).toBe(401);
    expect((await call('keys.list', undefined, 'ks-wrong', 'GET')).status).toBe(401);
    const session = await call('auth.session', undefined, alice.key, 'GET');
    expect(session.body.result!.data).toMatchObject({ required: true, authenticated: true, key: { name: 'alice' } });
    const list = await call('keys.list', undefined, alice.key, 'GET');
    expect(list.body.result!.data.map((k: { name: string; key?: string }) => [k.name, k.key])).toEqual([['alice', undefined]]);
    // The list never carries the secret.
    expect(JSON.stringify(list.body)).not.toContain(alice.key);
    const bob = (await call('keys.create', { name: 'bob' }, alice.key)).body.result!.data as { id: string; key: string };
    expect((await call('keys.usage', undefined, alice.key, 'GET')).body.result!.data.map((u: { name: string }) => u.name).sort()).toEqual(['alice', 'bob']);
    expect((await call('keys.revoke', { id: bob.id }, alice.key)).status).toBe(200);
    expect((await call('keys.list', undefined, bob.key, 'GET')).status).toBe(401);
    const again = await call('keys.revoke', { id: bob.id }, alice.key);
    expect(again.status).toBe(409);
    expect((await call('keys.revoke', { id: 'no-such' }, alice.key)).status).toBe(404);
    expect((await call('keys.create', { name: '  ' }, alice.key)).status).toBe(400);
  });
});
