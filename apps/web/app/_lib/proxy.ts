// Server side of the console: it proxies the browser's calls to the API (same origin, so no CORS
// and the session cookie stays httpOnly) and holds the session. Runs in the Next.js server only.

/** Name of the httpOnly cookie that carries the console session's API key. */
export const SESSION_COOKIE = 'kail_console_key';

/** Paths of the API the console may reach through the proxy. */
const ALLOWED = [/^trpc\/[A-Za-z0-9_.,]+$/, /^v1\/(chat\/completions|completions|models)$/];

export function apiUrl(): string {
  return (process.env.KAIL_API_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
}

export function readCookie(header: string | null, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return decodeURIComponent(part.slice(i + 1).trim());
  }
  return undefined;
}

function jsonError(status: number, message: string): Response {
  return new Response(JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code: null } }), {
    status,
    headers: { 'content-type': 'application/json' },
  });
}

/**
 * Forwards one request to the API at `base` + `/` + `subpath`, adding `Authorization: Bearer` from
 * the session cookie, and streams the answer back (server-sent events included).
 */
export async function proxy(req: Request, subpath: string, base = apiUrl()): Promise<Response> {
  if (!ALLOWED.some((r) => r.test(subpath))) return jsonError(404, `the console does not proxy /${subpath}`);
  const url = new URL(req.url);
  const headers: Record<string, string> = {};
  const ct = req.headers.get('content-type');
  if (ct) headers['content-type'] = ct;
  const accept = req.headers.get('accept');
  if (accept) headers.accept = accept;
  const key = readCookie(req.headers.get('cookie'), SESSION_COOKIE);
  if (key) headers.authorization = `Bearer ${key}`;
  let upstream: Response;
  try {
    upstream = await fetch(`${base}/${subpath}${url.search}`, {
      method: req.method,
      headers,
      body: req.method === 'GET' || req.method === 'HEAD' ? undefined : await req.arrayBuffer(),
      signal: req.signal,
      cache: 'no-store',
    });
  } catch (e) {
    return jsonError(502, `the console cannot reach the API at ${base}: ${(e as Error).message}`);
  }
  const out = new Headers();
  for (const h of ['content-type', 'retry-after']) {
    const v = upstream.headers.get(h);
    if (v) out.set(h, v);
  }
  // no-transform keeps the server's compression from buffering a token stream.
  out.set('cache-control', 'no-cache, no-transform');
  return new Response(upstream.body, { status: upstream.status, headers: out });
}

/**
 * Checks a key against the API (tRPC auth.session with the key) and answers with the session
 * cookie set, or 401 naming the problem.
 */
export async function login(req: Request, base = apiUrl()): Promise<Response> {
  let key: unknown;
  try {
    key = ((await req.json()) as { key?: unknown }).key;
  } catch {
    return Response.json({ error: 'send {"key": "<API key>"} as JSON' }, { status: 400 });
  }
  if (typeof key !== 'string' || !key.trim() || key.length > 512) return Response.json({ error: 'key must be a non-empty string' }, { status: 400 });
  let r: Response;
  try {
    r = await fetch(`${base}/trpc/auth.session`, { headers: { authorization: `Bearer ${key.trim()}` }, cache: 'no-store' });
  } catch (e) {
    return Response.json({ error: `the console cannot reach the API at ${base}: ${(e as Error).message}` }, { status: 502 });
  }
  const body = (await r.json().catch(() => null)) as { result?: { data?: { required: boolean; authenticated: boolean } } } | null;
  const s = body?.result?.data;
  if (r.status === 401 || (s && s.required && !s.authenticated))
    return Response.json({ error: 'the API does not accept this key (unknown or revoked)' }, { status: 401 });
  if (!r.ok || !s) return Response.json({ error: `the API answered ${r.status}` }, { status: 502 });
  const res = Response.json({ ok: true, authenticated: s.authenticated });
  // SameSite=Strict: the key rides only on the console's own requests; httpOnly: scripts never see it.
  res.headers.append('set-cookie', `${SESSION_COOKIE}=${encodeURIComponent(key.trim())}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${60 * 60 * 24 * 7}`);
  return res;
}

export function logout(): Response {
  const res = Response.json({ ok: true });
  res.headers.append('set-cookie', `${SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0`);
  return res;
}
