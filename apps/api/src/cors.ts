// Cross-origin requests from browsers (llama-server's --cors-origins, --cors-methods, --cors-headers,
// --cors-credentials; Ollama's OLLAMA_ORIGINS): a web page on another origin may call the API only
// when its origin is allowed. The default allows pages served from this machine (localhost,
// 127.0.0.1, ::1), as Ollama's does: an API on loopback without keys is not open to every web page
// the user visits. Preflight requests (OPTIONS) are answered before any key is checked, since
// browsers send them without the Authorization header.
import type { FastifyInstance, FastifyRequest } from 'fastify';

export interface CorsOptions {
  /** Allowed origins, comma-separated: exact origins, `localhost` (pages of this machine) or `*` (any). */
  origins: string;
  /** Access-Control-Allow-Methods of a preflight. */
  methods: string;
  /** Access-Control-Allow-Headers of a preflight; `*` answers the headers the browser asks for. */
  headers: string;
  /** Access-Control-Allow-Credentials; with `*` origins, each origin is answered by name (browsers refuse `*` with credentials). */
  credentials: boolean;
}

export const CORS_DEFAULTS: CorsOptions = { origins: 'localhost', methods: 'GET, POST, DELETE, OPTIONS', headers: '*', credentials: true };

/** Whether an origin is a page served from this machine. */
export function isLocalhostOrigin(origin: string): boolean {
  try {
    return ['localhost', '127.0.0.1', '[::1]'].includes(new URL(origin).hostname);
  } catch {
    return false;
  }
}

/** Each entry of an origins list, checked: `*`, `localhost` or an origin (scheme://host[:port]); else an error naming it. */
export function parseCorsOrigins(list: string): string[] {
  const out = list.split(',').map((o) => o.trim()).filter(Boolean);
  if (!out.length) throw new Error('cors origins: give `localhost`, `*` or origins such as https://app.example');
  return out.map((o) => {
    if (o === '*' || o === 'localhost') return o;
    let u: URL;
    try {
      u = new URL(o);
    } catch {
      throw new Error(`cors origins: '${o}' is not an origin (scheme://host[:port]), localhost or *`);
    }
    if (u.origin === 'null' || u.pathname !== '/' || u.search || u.hash || o.endsWith('/')) throw new Error(`cors origins: '${o}' is not an origin (scheme://host[:port], no path), localhost or *`);
    return u.origin;
  });
}

/** The Access-Control-Allow-Origin answering `origin`, or undefined when it is not allowed. */
export function allowedOrigin(origin: string, origins: readonly string[], credentials: boolean): string | undefined {
  if (origins.includes('*')) return credentials ? origin : '*';
  if (origins.includes('localhost') && isLocalhostOrigin(origin)) return origin;
  let normal: string;
  try {
    normal = new URL(origin).origin;
  } catch {
    return undefined;
  }
  return origins.includes(normal) ? origin : undefined;
}

export function registerCors(app: FastifyInstance, o: CorsOptions): void {
  const origins = parseCorsOrigins(o.origins);
  const header = (req: FastifyRequest, name: string): string | undefined => {
    const v = req.headers[name];
    return Array.isArray(v) ? v.join(', ') : v;
  };
  // (Before the key check: registered ahead of it, and a preflight ends here.)
  app.addHook('onRequest', async (req, reply) => {
    const origin = header(req, 'origin');
    if (origin !== undefined) {
      const allow = allowedOrigin(origin, origins, o.credentials);
      if (allow !== undefined) {
        reply.header('access-control-allow-origin', allow);
        if (allow !== '*') reply.header('vary', 'Origin');
        if (o.credentials) reply.header('access-control-allow-credentials', 'true');
      }
    }
    if (req.method !== 'OPTIONS') return;
    const asked = header(req, 'access-control-request-headers');
    reply.header('access-control-allow-methods', o.methods);
    reply.header('access-control-allow-headers', o.headers === '*' && asked ? asked : o.headers);
    reply.header('access-control-max-age', '600');
    return reply.code(204).send();
  });
}
