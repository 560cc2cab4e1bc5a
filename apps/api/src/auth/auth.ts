import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';

import { errorBody } from '../error-shape';
import type { ApiKeyInfo, KeyStore } from './keys';

/** Routes anyone may call without a key: liveness only. */
// Liveness only: `/` is Ollama's (its clients probe it before anything else).
const PUBLIC_ROUTES = new Set(['/health', '/']);

/** Tenant name used for requests made without a key (auth off: loopback and no key exists). */
export const ANONYMOUS_TENANT = 'anonymous';

/** True when `host` only accepts connections from this machine. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h) || h === '::ffff:127.0.0.1';
}

/** The key a request carries: `Authorization: Bearer KEY` (OpenAI's way) or `x-api-key: KEY`. */
export function keyOf(req: FastifyRequest): string | undefined {
  const auth = req.headers.authorization;
  if (typeof auth === 'string') {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    if (m) return m[1];
  }
  const x = req.headers['x-api-key'];
  return typeof x === 'string' && x ? x : undefined;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The verified API key of this request; undefined when auth is off. */
    apiKey?: ApiKeyInfo;
  }
}

export interface AuthOptions {
  /** The key store; undefined = no store (auth off, allowed only on loopback). */
  store?: KeyStore;
  /** Require a key even when none exists yet (bound beyond loopback). */
  always: boolean;
  /** Keys given at start (StaticKeys), accepted besides the stored ones. */
  staticKeys?: StaticKeys;
}

/** The tenant-id prefix of keys given at start. */
const STATIC_PREFIX = 'static-';

/**
 * Keys given at start (llama-server's --api-key): held as SHA-256 hashes, each its own tenant
 * (`static-` and the hash's first 12 hex digits), looked up by hash as the store's are.
 */
export class StaticKeys {
  private readonly byHash = new Map<string, ApiKeyInfo>();

  constructor(keys: readonly string[]) {
    const at = new Date().toISOString();
    keys.forEach((k, i) => {
      const h = createHash('sha256').update(k, 'utf8').digest('hex');
      this.byHash.set(h, { id: `${STATIC_PREFIX}${h.slice(0, 12)}`, name: `--api-key #${i + 1}`, prefix: k.slice(0, 4), createdAt: at, revokedAt: null, lastUsedAt: null });
    });
  }

  get size(): number {
    return this.byHash.size;
  }

  verify(key: string): ApiKeyInfo | null {
    return this.byHash.get(createHash('sha256').update(key, 'utf8').digest('hex')) ?? null;
  }

  /** Whether a key's id is one of these (their usage is not stored). */
  static isStatic(id: string): boolean {
    return id.startsWith(STATIC_PREFIX);
  }
}

/** Whether any key is needed now: bound beyond loopback, keys given at start, or a stored key. */
export function authRequired(opts: AuthOptions): boolean {
  return opts.always || (opts.staticKeys?.size ?? 0) > 0 || (opts.store !== undefined && opts.store.activeCount() > 0);
}

/**
 * Requires a valid key on every route but /health as soon as one key exists (checked per request,
 * so a key made by `kail keys create` while the server runs applies at once), and always when
 * `always` is set. Missing key: 401; invalid or revoked: 401 with a message saying which.
 */
export function registerAuth(app: FastifyInstance, opts: AuthOptions): void {
  app.decorateRequest('apiKey', undefined);
  app.addHook('onRequest', async (req, reply) => {
    const route = req.url.split('?')[0];
    if (PUBLIC_ROUTES.has(route)) return;
    const required = authRequired(opts);
    const key = keyOf(req);
    const verify = (k: string) => opts.staticKeys?.verify(k) ?? opts.store?.verify(k) ?? null;
    if (!required) {
      // Auth is off; a valid key still names the tenant, anything else (clients such as `openai`
      // always send some key) is ignored.
      if (key !== undefined) req.apiKey = verify(key) ?? undefined;
      return;
    }
    if (!opts.store && !opts.staticKeys?.size) {
      return reply.code(401).send(errorBody(req.url, 401, 'this server has no key store; API keys cannot be checked', 'invalid_api_key'));
    }
    if (key === undefined) {
      return reply
        .code(401)
        .header('www-authenticate', 'Bearer')
        .send(errorBody(req.url, 401, 'an API key is required: send "Authorization: Bearer <key>" (create one with `kail keys create <name>`)', 'missing_api_key'));
    }
    const info = verify(key);
    if (!info) {
      return reply
        .code(401)
        .header('www-authenticate', 'Bearer')
        .send(errorBody(req.url, 401, 'invalid or revoked API key', 'invalid_api_key'));
    }
    req.apiKey = info;
  });
}

/** The scheduler tenant of a request: its key id, or `anonymous`. */
export function tenantOf(req: FastifyRequest): string {
  return req.apiKey?.id ?? ANONYMOUS_TENANT;
}
