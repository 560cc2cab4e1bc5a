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

  it('rejects a bad configuration with a message naming the field', () => {
    expect(() => parseApiConfig({ port: 70000 })).toThrow(/port/);
  });
});
