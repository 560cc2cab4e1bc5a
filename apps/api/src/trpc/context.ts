import type { CreateFastifyContextOptions } from '@trpc/server/adapters/fastify';
import type { scheduler as spb } from '@kailstream/proto';

import type { KeyStore } from '../auth/keys';
import type { PullJobs } from '../pull-jobs';
import type { TelemetryHub } from './telemetry-hub';

/** What the console's key routes use of the API's key store (apps/api/src/auth/keys.ts). */
export type KeyAdmin = Pick<KeyStore, 'create' | 'list' | 'revoke' | 'verify' | 'usage'>;

/** What the API hands the tRPC router when it mounts it. */
export interface TrpcDeps {
  scheduler: () => spb.SchedulerServiceClient | undefined;
  /** The API's key store; undefined when the API runs without one (no data directory). */
  keys?: () => KeyAdmin | undefined;
  /** True when every route needs a key (a key exists, or the API is bound beyond loopback). */
  authRequired: () => boolean;
  /** Pulls the console starts (models.pull); absent: pulling is refused. */
  pulls?: PullJobs;
  telemetry: TelemetryHub;
}

export interface TrpcContext {
  deps: TrpcDeps;
  auth: {
    required: boolean;
    /** A key was sent (valid or not). */
    presented: boolean;
    /** The verified key, or null. */
    key: { id: string; name: string } | null;
  };
}

/** The key a request carries: `Authorization: Bearer <key>` (as the OpenAI routes) or `x-api-key`. */
export function keyFromHeaders(headers: Record<string, string | string[] | undefined>): string | undefined {
  const auth = headers['authorization'];
  const a = Array.isArray(auth) ? auth[0] : auth;
  if (a && /^bearer\s+/i.test(a)) return a.replace(/^bearer\s+/i, '').trim() || undefined;
  const x = headers['x-api-key'];
  return (Array.isArray(x) ? x[0] : x)?.trim() || undefined;
}

export function contextFactory(deps: TrpcDeps) {
  return ({ req }: CreateFastifyContextOptions): TrpcContext => {
    const presented = keyFromHeaders(req.headers);
    const store = deps.keys?.();
    // The API's auth hook has verified the key already when it runs (req.apiKey); verify here otherwise.
    const checked = (req as { apiKey?: { id: string; name: string } }).apiKey;
    const verified = checked ?? (presented && store ? store.verify(presented) : null);
    return {
      deps,
      auth: {
        required: deps.authRequired(),
        presented: !!presented,
        key: verified ? { id: verified.id, name: verified.name } : null,
      },
    };
  };
}
