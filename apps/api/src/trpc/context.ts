import type { CreateFastifyContextOptions } from '@trpc/server/adapters/fastify';
import type { scheduler as spb } from '@kailstream/proto';

import type { TelemetryHub } from './telemetry-hub';

/** A key as the key store reports it (the raw key is never part of it). */
export interface KeyRecordLike {
  id: string;
  name: string;
  prefix?: string;
  createdAt?: string | number | Date;
  revokedAt?: string | number | Date | null;
  lastUsedAt?: string | number | Date | null;
  [k: string]: unknown;
}

/**
 * What the console's key routes need from the API's key store (apps/api/src/auth/keys.ts,
 * `KeyStore`); structural so the router does not depend on the store's file layout.
 */
export interface KeyAdmin {
  create(name: string): { id: string; name: string; key: string; prefix: string; createdAt: string | number | Date };
  list(): KeyRecordLike[];
  revoke(id: string): unknown;
  verify(key: string): { id: string; name: string } | null | undefined | false;
  usage(): Array<Record<string, unknown>>;
}

/** What the API hands the tRPC router when it mounts it. */
export interface TrpcDeps {
  scheduler: () => spb.SchedulerServiceClient | undefined;
  /** The API's key store; undefined when the API runs without one (no data directory). */
  keys?: () => KeyAdmin | undefined;
  /** True when every route needs a key (a key exists, or the API is bound beyond loopback). */
  authRequired: () => boolean;
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
    const verified = presented && store ? store.verify(presented) : null;
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
