import { parseApiConfig } from './env';
import { startTestStack, type TestStack } from './test-stack';

// llama-server's --api-prefix: every route under one path, for a reverse proxy that forwards it.
describe('API prefix (kail serve --api-prefix)', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack([{ id: 'tiny' }], { api: { apiPrefix: '/llm/v0' } });
  }, 60_000);
  afterAll(() => stack?.close());

  it('serves every route under the prefix, and names it to a request outside', async () => {
    // (The address it gives holds the prefix.)
    expect(stack.api.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/llm\/v0$/);
    const base = stack.api.url.replace(/\/llm\/v0$/, '');
    expect((await fetch(`${base}/llm/v0/health`)).status).toBe(200);
    expect((((await (await fetch(`${base}/llm/v0/v1/models`)).json()) as { data: { id: string }[] }).data).map((m) => m.id)).toEqual(['tiny']);
    const chat = await fetch(`${base}/llm/v0/v1/chat/completions?x=1`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 }) });
    expect(chat.status).toBe(200);
    expect((await fetch(`${base}/llm/v0/api/tags`)).status).toBe(200);
    for (const p of ['/v1/models', '/health', '/llm/v1/models', '/llm/v0x/health']) {
      const r = await fetch(`${base}${p}`);
      expect([p, r.status]).toEqual([p, 404]);
      expect(((await r.json()) as { error: { message: string } }).error.message).toBe(`no route GET ${p} (this server answers under /llm/v0)`);
    }
    // A route that does not exist under it is an ordinary 404.
    expect(((await (await fetch(`${base}/llm/v0/nope`)).json()) as { error: { message: string } }).error.message).toBe('no route GET /llm/v0/nope');
  });

  it('refuses a prefix that is not a path', () => {
    for (const bad of ['llm', '/llm/', '/l m', '//x']) expect(() => parseApiConfig({ apiPrefix: bad })).toThrow(/apiPrefix: an API prefix is a path such as \/llm/);
    expect(parseApiConfig({ apiPrefix: '/a.b/c-d' }).apiPrefix).toBe('/a.b/c-d');
  });
});
