import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { LocalModelHost, startEngineServer } from '@kailstream/engine';
import { startSchedulerServer } from '@kailstream/scheduler';

import { KEYS_FILE, KeyStore } from './auth/keys';
import { parseApiConfig } from './env';
import { startApi, type RunningApi } from './server';

describe('API app', () => {
  let api: RunningApi;
  beforeAll(async () => {
    api = await startApi(parseApiConfig({ port: 0 }));
  });
  afterAll(() => api.close());

  it('binds loopback by default and answers /health', async () => {
    expect(api.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetch(`${api.url}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'ok' });
  });

  it('answers unknown routes with an OpenAI-shaped 404', async () => {
    const res = await fetch(`${api.url}/v1/nope`);
    expect(res.status).toBe(404);
    const body = (await res.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({ type: 'invalid_request_error', code: 'not_found' });
  });

  it('is not ready without a scheduler, and says why', async () => {
    const res = await fetch(`${api.url}/ready`);
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ ready: false, reason: 'no scheduler is configured' });
  });

  it('serves Prometheus metrics in the text format', async () => {
    const res = await fetch(`${api.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    for (const name of ['kailstream:prompt_tokens_total', 'kailstream:num_requests_waiting', 'kailstream:time_to_first_token_seconds', 'process_cpu_seconds_total'])
      expect(text).toContain(`# TYPE ${name}`);
  });

  it('rejects a bad configuration with a message naming the field', () => {
    expect(() => parseApiConfig({ port: 70000 })).toThrow(/port/);
  });
});

describe('API keys', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-api-keys-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('refuses to bind beyond loopback without a key, saying how to create one', async () => {
    await expect(startApi(parseApiConfig({ host: '0.0.0.0', port: 0, dataDir: dir }))).rejects.toThrow(/beyond loopback.*kail keys create/);
    await expect(startApi(parseApiConfig({ host: '0.0.0.0', port: 0 }))).rejects.toThrow(/--data-dir/);
  });

  it('needs no key while none exists, then requires one on every route but /health', async () => {
    const api = await startApi(parseApiConfig({ port: 0, dataDir: dir }));
    try {
      expect((await fetch(`${api.url}/v1/models`)).status).toBe(200);
      // A key made by another handle (the CLI) applies at once.
      const cli = KeyStore.open(path.join(dir, KEYS_FILE));
      const k = cli.create('team');
      for (const route of ['/v1/models', '/metrics', '/ready']) {
        const r = await fetch(`${api.url}${route}`);
        expect(r.status).toBe(401);
        expect(((await r.json()) as any).error).toMatchObject({ code: 'missing_api_key', type: 'invalid_request_error' });
      }
      expect((await fetch(`${api.url}/health`)).status).toBe(200);
      const auth = { authorization: `Bearer ${k.key}` };
      expect((await fetch(`${api.url}/v1/models`, { headers: auth })).status).toBe(200);
      expect((await fetch(`${api.url}/v1/models`, { headers: { 'x-api-key': k.key } })).status).toBe(200);
      const bad = await fetch(`${api.url}/v1/models`, { headers: { authorization: 'Bearer ks-wrong' } });
      expect(bad.status).toBe(401);
      expect(((await bad.json()) as any).error.code).toBe('invalid_api_key');
      cli.revoke(k.id);
      // Revoked: refused; no key left, so auth is off again on loopback.
      expect((await fetch(`${api.url}/v1/models`)).status).toBe(200);
      cli.close();
    } finally {
      await api.close();
    }
  });

  it('binds beyond loopback once a key exists, and then always requires one', async () => {
    const d2 = path.join(dir, 'wide');
    const s = KeyStore.open(path.join(d2, KEYS_FILE));
    const k = s.create('lan');
    const api = await startApi(parseApiConfig({ host: '0.0.0.0', port: 0, dataDir: d2 }));
    try {
      const url = api.url.replace('0.0.0.0', '127.0.0.1');
      expect((await fetch(`${url}/v1/models`)).status).toBe(401);
      expect((await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${k.key}` } })).status).toBe(200);
      s.revoke(k.id);
      expect((await fetch(`${url}/v1/models`)).status).toBe(401);
    } finally {
      await api.close();
      s.close();
    }
  });
});

describe('API keys given at start (kail serve --api-key)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-api-static-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('are required on every route but /health, accepted beside stored keys, and let the API bind beyond loopback', async () => {
    const api = await startApi(parseApiConfig({ host: '0.0.0.0', port: 0, dataDir: dir, staticKeys: ['sk-one', 'team-two'] }));
    try {
      const url = api.url.replace('0.0.0.0', '127.0.0.1');
      const get = (key?: string) => fetch(`${url}/v1/models`, { headers: key ? { authorization: `Bearer ${key}` } : {} });
      expect((await get()).status).toBe(401);
      expect((await fetch(`${url}/health`)).status).toBe(200);
      expect((await get('sk-one')).status).toBe(200);
      expect((await fetch(`${url}/v1/models`, { headers: { 'x-api-key': 'team-two' } })).status).toBe(200);
      const bad = await get('sk-on');
      expect(bad.status).toBe(401);
      expect(((await bad.json()) as any).error.code).toBe('invalid_api_key');
      // A stored key works too; revoking it leaves the given ones required.
      const s = KeyStore.open(path.join(dir, KEYS_FILE));
      const k = s.create('stored');
      expect((await get(k.key)).status).toBe(200);
      s.revoke(k.id);
      expect((await get(k.key)).status).toBe(401);
      expect((await get()).status).toBe(401);
      // Their usage is not stored (they have no row): the stored key's list is unchanged.
      expect(s.usage().map((u) => u.name)).toEqual(['stored']);
      s.close();
    } finally {
      await api.close();
    }
  });

  it('an empty key or one with spaces is a configuration error', () => {
    expect(() => parseApiConfig({ staticKeys: [''] })).toThrow(/staticKeys.0: an API key cannot be empty/);
    expect(() => parseApiConfig({ staticKeys: ['a b'] })).toThrow(/cannot hold spaces/);
  });
});

describe('/ready', () => {
  it('tells the truth: no model loaded, then no engine answering, while /health stays 200', async () => {
    const engine = await startEngineServer(new LocalModelHost(), { port: 0 });
    const sched = await startSchedulerServer({ engines: [`127.0.0.1:${engine.port}`], probeIntervalMs: 200 });
    const api = await startApi(parseApiConfig({ port: 0, schedulerAddress: `127.0.0.1:${sched.port}`, readyMaxAgeS: 1 }));
    try {
      // (Status and reason from one answer: two requests could straddle a probe.)
      const ready = async () => {
        const r = await fetch(`${api.url}/ready`);
        return { status: r.status, body: (await r.json()) as { ready: boolean; reason: string } };
      };
      expect(await ready()).toEqual({ status: 503, body: expect.objectContaining({ ready: false, reason: 'no model is loaded' }) });
      await engine.close(0);
      // (Seen at the scheduler's next probe, every 200 ms, each up to its 2 s timeout: polled for 15 s at most.)
      const end = Date.now() + 15_000;
      let r = await ready();
      while (r.body.reason === 'no model is loaded' && Date.now() < end) {
        await new Promise((res) => setTimeout(res, 100));
        r = await ready();
      }
      expect(r.status).toBe(503);
      expect(r.body.reason).toMatch(/no engine is serving/);
      expect((await fetch(`${api.url}/health`)).status).toBe(200);
    } finally {
      await api.close();
      await sched.close(0);
    }
  }, 20_000);
});
