import fs from 'node:fs';
import path from 'node:path';

import { EngineError } from '../errors';
import { cachePolicies, defaultCachePolicy, simulateCache } from './simulate';
import { parseRoutingTrace, readRoutingTrace } from './trace';

/** shared/fixtures/routing/mixtral-8x7b-gsm8k.jsonl, searched upward from here (or KAIL_ROUTING_TRACE). */
function fixture(): string | null {
  if (process.env.KAIL_ROUTING_TRACE) return process.env.KAIL_ROUTING_TRACE;
  for (let dir = __dirname; path.dirname(dir) !== dir; dir = path.dirname(dir)) {
    const f = path.join(dir, 'shared/fixtures/routing/mixtral-8x7b-gsm8k.jsonl');
    if (fs.existsSync(f)) return f;
  }
  return null;
}

const single = (refs: number[]) =>
  parseRoutingTrace(refs.map((e, i) => JSON.stringify({ layer: 0, token_idx: i, experts: [e] })).join('\n'));

describe('simulateCache', () => {
  it('lists the policies, the default among them', () => {
    expect(cachePolicies()).toEqual(expect.arrayContaining(['lru', 'lfu', 'context', 'belady']));
    expect(cachePolicies()).toContain(defaultCachePolicy());
  });

  it('gives textbook LRU and Belady hit counts', () => {
    // 20 references, 3 frames: LRU 12 faults, OPT 9.
    const t = single([7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1]);
    const r = simulateCache(t, 3, ['lru']);
    expect(r.accesses).toBe(20);
    expect(r.hits.lru).toBe(8);
    expect(r.hits.belady).toBe(11);
    expect(r.policies[0]).toBe('lru');
    expect(r.policies[r.policies.length - 1]).toBe('belady');
    expect(r.policies).toContain(r.defaultPolicy);
    expect(r.hitRate.lru).toBeCloseTo(8 / 20);
    expect(r.gapClosed.lru).toBe(0);
    expect(r.gapClosed.belady).toBe(1);
  });

  it('passes policy options through and rejects unknown policies, options and slot counts', () => {
    const t = single([0, 0, 0, 0, 1, 2, 0]);
    expect(simulateCache(t, 2, ['lfu:half_life=1000']).hits['lfu:half_life=1000']).toBe(4);
    expect(() => simulateCache(t, 2, ['fifo'])).toThrow(EngineError);
    expect(() => simulateCache(t, 2, ['fifo'])).toThrow(/unknown cache policy 'fifo'/);
    expect(() => simulateCache(t, 2, ['lfu:bogus=1'])).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG' }));
    expect(() => simulateCache(t, 0)).toThrow(/slots must be an integer/);
    expect(() => simulateCache(t, 2.5)).toThrow(/slots must be an integer/);
  });

  const file = fixture();
  (file ? it : it.skip)('replays the Mixtral GSM8K trace: LRU and Belady as in the issue, the default well above LRU', () => {
    const t = readRoutingTrace(file!);
    expect(t).toMatchObject({ records: 7889, tokens: 247, problems: 2, layers: 32, experts: 8, k: 2 });
    const lru = [0.4283, 0.5742, 0.6931, 0.8002];
    const belady = [0.6218, 0.7464, 0.8357, 0.9014];
    for (const slots of [3, 4, 5, 6]) {
      const r = simulateCache(t, slots);
      expect(r.accesses).toBe(15778);
      expect(r.hitRate.lru).toBeCloseTo(lru[slots - 3], 4);
      expect(r.hitRate.belady).toBeCloseTo(belady[slots - 3], 4);
      for (const p of r.policies) expect(r.hits[p]).toBeLessThanOrEqual(r.hits.belady);
      // The issue asks for 0.5 of the gap; the default reaches 0.41-0.48 (see src/cache/README.md
      // in core-native). This guards against regressions.
      expect(r.gapClosed[r.defaultPolicy]!).toBeGreaterThan(0.38);
    }
  });
});
