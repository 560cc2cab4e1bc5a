import { parseApiConfig } from './env';
import { allowedOrigin, parseCorsOrigins } from './cors';
import { startApi, type RunningApi } from './server';

// Browsers on other origins (llama-server's --cors-*): by default only pages of this machine may
// call the API; preflights are answered before the key check; --cors-origins widens or narrows it.
describe('cross-origin requests (CORS)', () => {
  const preflight = (url: string, origin: string, headers = 'authorization, content-type') =>
    fetch(`${url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': headers } });
  const withApi = async (config: Record<string, unknown>, fn: (api: RunningApi) => Promise<void>) => {
    const api = await startApi(parseApiConfig({ port: 0, ...config }));
    try {
      await fn(api);
    } finally {
      await api.close();
    }
  };

  it("by default answers pages of this machine (Ollama's default), not other sites; a preflight needs no key", async () => {
    // (A key given at start: every route needs one, but the browser's preflight carries none.)
    await withApi({ staticKeys: ['sk-1'] }, async (api) => {
      const ok = await preflight(api.url, 'http://localhost:3000');
      expect(ok.status).toBe(204);
      expect(ok.headers.get('access-control-allow-origin')).toBe('http://localhost:3000');
      expect(ok.headers.get('access-control-allow-credentials')).toBe('true');
      // (`*` would not cover Authorization: the headers asked for are answered by name.)
      expect(ok.headers.get('access-control-allow-headers')).toBe('authorization, content-type');
      expect(ok.headers.get('access-control-allow-methods')).toBe('GET, POST, DELETE, OPTIONS');
      expect(ok.headers.get('vary')).toMatch(/Origin/);
      for (const o of ['http://127.0.0.1:5173', 'http://[::1]:8000']) expect((await preflight(api.url, o)).headers.get('access-control-allow-origin')).toBe(o);
      const evil = await preflight(api.url, 'https://evil.example');
      expect(evil.status).toBe(204);
      expect(evil.headers.get('access-control-allow-origin')).toBeNull();
      // The request itself carries the header too, and still needs its key.
      const get = (key?: string) => fetch(`${api.url}/v1/models`, { headers: { origin: 'http://localhost:3000', ...(key ? { authorization: `Bearer ${key}` } : {}) } });
      const denied = await get();
      expect(denied.status).toBe(401);
      expect(denied.headers.get('access-control-allow-origin')).toBe('http://localhost:3000');
      expect((await get('sk-1')).status).toBe(200);
      expect((await fetch(`${api.url}/v1/models`, { headers: { origin: 'https://evil.example', authorization: 'Bearer sk-1' } })).headers.get('access-control-allow-origin')).toBeNull();
    });
  });

  it('--cors-origins * answers any page (by name, with credentials; `*` without), a list only its own', async () => {
    await withApi({ corsOrigins: '*' }, async (api) => {
      expect((await preflight(api.url, 'https://app.example')).headers.get('access-control-allow-origin')).toBe('https://app.example');
    });
    await withApi({ corsOrigins: '*', corsCredentials: 'false', corsHeaders: 'content-type' }, async (api) => {
      const r = await preflight(api.url, 'https://app.example');
      expect(r.headers.get('access-control-allow-origin')).toBe('*');
      expect(r.headers.get('access-control-allow-credentials')).toBeNull();
      expect(r.headers.get('access-control-allow-headers')).toBe('content-type');
    });
    await withApi({ corsOrigins: 'https://app.example, http://intranet:8080' }, async (api) => {
      expect((await preflight(api.url, 'https://app.example')).headers.get('access-control-allow-origin')).toBe('https://app.example');
      expect((await preflight(api.url, 'http://intranet:8080')).headers.get('access-control-allow-origin')).toBe('http://intranet:8080');
      expect((await preflight(api.url, 'http://localhost:3000')).headers.get('access-control-allow-origin')).toBeNull();
      expect((await preflight(api.url, 'https://app.example.evil')).headers.get('access-control-allow-origin')).toBeNull();
    });
  });

  it('reads origins as origins: a malformed entry is an error naming it', () => {
    expect(parseCorsOrigins(' localhost , HTTPS://App.Example:443 ,*')).toEqual(['localhost', 'https://app.example', '*']);
    expect(allowedOrigin('https://APP.example', ['https://app.example'], true)).toBe('https://APP.example');
    expect(allowedOrigin('null', ['localhost'], true)).toBeUndefined();
    expect(allowedOrigin('http://localhost.evil.example', ['localhost'], true)).toBeUndefined();
    expect(() => parseApiConfig({ corsOrigins: 'app.example' })).toThrow("corsOrigins: cors origins: 'app.example' is not an origin");
    expect(() => parseApiConfig({ corsOrigins: 'https://app.example/ui' })).toThrow(/'https:\/\/app.example\/ui' is not an origin \(scheme:\/\/host\[:port\], no path\)/);
    expect(() => parseApiConfig({ corsOrigins: ' , ' })).toThrow(/give `localhost`, `\*` or origins/);
    expect(() => parseApiConfig({ corsCredentials: 'maybe' })).toThrow(/corsCredentials/);
  });
});
