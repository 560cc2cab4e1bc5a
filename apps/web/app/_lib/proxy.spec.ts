import http from 'node:http';
import type { AddressInfo } from 'node:net';

import { login, logout, proxy, readCookie, SESSION_COOKIE } from './proxy';

// The console's server-side proxy against a small HTTP server that records what reached it and
// answers like the API would (JSON, a token stream, 401 for a wrong key).
describe('console proxy and session', () => {
  let server: http.Server;
  let base: string;
  const seen: { url: string; method: string; auth?: string; body: string }[] = [];

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        seen.push({ url: req.url!, method: req.method!, auth: req.headers.authorization, body });
        if (req.url!.startsWith('/trpc/auth.session')) {
          const ok = req.headers.authorization === 'Bearer good';
          res.writeHead(ok ? 200 : 401, { 'content-type': 'application/json' });
          return res.end(JSON.stringify(ok ? { result: { data: { required: true, authenticated: true } } } : { error: { message: 'bad key' } }));
        }
        if (req.url === '/v1/chat/completions') {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: {"n":1}\n\n');
          setTimeout(() => res.end('data: [DONE]\n\n'), 50);
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ result: { data: 'ok' } }));
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => {
    // fetch keeps connections alive; close them so the server (and jest) can end.
    server.closeAllConnections();
    return new Promise<void>((r) => server.close(() => r()));
  });

  it('forwards tRPC calls with the query string and the session key as a bearer token', async () => {
    const req = new Request('http://console/api/trpc/models.files,models.loaded?batch=1&input=%7B%7D', { headers: { cookie: `a=1; ${SESSION_COOKIE}=k%3Dy` } });
    const res = await proxy(req, 'trpc/models.files,models.loaded', base);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ result: { data: 'ok' } });
    expect(seen.at(-1)).toMatchObject({ url: '/trpc/models.files,models.loaded?batch=1&input=%7B%7D', method: 'GET', auth: 'Bearer k=y' });
  });

  it('streams a chat completion through, body and all', async () => {
    const req = new Request('http://console/api/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"m"}' });
    const res = await proxy(req, 'v1/chat/completions', base);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(res.headers.get('cache-control')).toContain('no-transform');
    expect(await res.text()).toBe('data: {"n":1}\n\ndata: [DONE]\n\n');
    expect(seen.at(-1)).toMatchObject({ method: 'POST', body: '{"model":"m"}', auth: undefined });
  });

  it('refuses paths outside the API surface the console uses, and says when the API is down', async () => {
    const r = await proxy(new Request('http://console/api/x'), 'metrics', base);
    expect(r.status).toBe(404);
    const down = await proxy(new Request('http://console/api/trpc/a'), 'trpc/a', 'http://127.0.0.1:1');
    expect(down.status).toBe(502);
    expect(((await down.json()) as { error: { message: string } }).error.message).toMatch(/cannot reach the API/);
  });

  it('signs in only with a key the API accepts, in an httpOnly cookie; signs out', async () => {
    const post = (body: string) => new Request('http://console/api/session', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const bad = await login(post('{"key":"nope"}'), base);
    expect(bad.status).toBe(401);
    expect(bad.headers.get('set-cookie')).toBeNull();
    expect((await login(post('not json'), base)).status).toBe(400);
    expect((await login(post('{"key":""}'), base)).status).toBe(400);
    const good = await login(post('{"key":"good"}'), base);
    expect(good.status).toBe(200);
    const cookie = good.headers.get('set-cookie')!;
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Strict/);
    expect(readCookie(cookie.split(';')[0], SESSION_COOKIE)).toBe('good');
    expect(logout().headers.get('set-cookie')).toMatch(/Max-Age=0/);
  });
});
