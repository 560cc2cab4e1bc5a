import { EngineError, toEngineError } from '../errors';
import { native } from '../native';
import type { RoutingTrace } from './trace';

export interface CacheSimulation {
  /** Expert slots per layer. */
  slots: number;
  /** Expert accesses replayed (one per routed expert per token and layer). */
  accesses: number;
  /** The policy the runtime cache uses by default. */
  defaultPolicy: string;
  /** Policies in the order run: "lru" first, "belady" last. */
  policies: string[];
  hits: Record<string, number>;
  /** hits / accesses per policy. */
  hitRate: Record<string, number>;
  /**
   * Share of the LRU-to-Belady gap each policy closes: (rate - lru) / (belady - lru); null when
   * Belady does no better than LRU.
   */
  gapClosed: Record<string, number | null>;
}

/** Policy names the simulator knows (see include/kail/expert_cache.h). */
export function cachePolicies(): string[] {
  return native().cachePolicies();
}

/** The eviction policy the runtime expert cache uses by default. */
export function defaultCachePolicy(): string {
  return native().cacheDefaultPolicy();
}

/**
 * Replays a routing trace through a demand-fetch expert cache of `slots` experts per layer, once
 * per policy, and scores each against Belady's optimal replacement on the same trace.
 *
 * `policies`: the policies to compare; every known policy when omitted. "lru", the default policy
 * and "belady" are always run. Names may carry options ("lfu:half_life=16"). Throws EngineError
 * KAIL_E_INVALID_ARG for a bad slot count, policy or option.
 */
export function simulateCache(trace: RoutingTrace, slots: number, policies?: string[]): CacheSimulation {
  if (!Number.isInteger(slots) || slots < 1 || slots > 1 << 20)
    throw new EngineError('KAIL_E_INVALID_ARG', `slots must be an integer in 1..${1 << 20}, got ${slots}`);
  try {
    const addon = native();
    const def = addon.cacheDefaultPolicy();
    const wanted = policies ?? addon.cachePolicies();
    const list = [...new Set(['lru', ...wanted, def].filter((p) => p !== 'belady')), 'belady'];
    const r = addon.cacheSimulate({ layer: trace.layer, token: trace.token, experts: trace.expertIds, probs: trace.probs, k: trace.k }, slots, list);
    const hitRate: Record<string, number> = {};
    const gapClosed: Record<string, number | null> = {};
    for (const p of list) hitRate[p] = r.accesses > 0 ? r.hits[p] / r.accesses : 0;
    const span = r.hits.belady - r.hits.lru;
    for (const p of list) gapClosed[p] = span > 0 ? (r.hits[p] - r.hits.lru) / span : null;
    return { slots, accesses: r.accesses, defaultPolicy: def, policies: list, hits: r.hits, hitRate, gapClosed };
  } catch (e) {
    throw toEngineError(e);
  }
}
