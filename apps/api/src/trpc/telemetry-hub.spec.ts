import type { scheduler as spb } from '@kailstream/proto';

import { TelemetryHub } from './telemetry-hub';

// The hub's arithmetic on snapshots fed in directly (the stream side is covered by trpc.spec.ts).
function snap(engineId: string, o: { tokens: number; bytes: number; stall: number; hits: number; misses: number; counts: number[][]; resident?: number[][] }): spb.EngineTelemetry {
  return {
    engineId,
    address: 'x',
    snapshot: {
      unixMs: 0,
      tokensPerSecond: 5,
      tokensGenerated: o.tokens,
      bytesRead: o.bytes,
      ioStallSeconds: o.stall,
      runningRequests: 1,
      tiers: [{ tier: 'ram', budgetBytes: 100, usedBytes: 50, hits: o.hits, misses: o.misses }],
      experts: o.counts.map((c, layer) => ({ layer, counts: c, resident: o.resident?.[layer] ?? [] })),
      model: 'm',
      storageBandwidthBytesPerSecond: 1000,
      kvUsedBytes: 1,
      kvCapacityBytes: 2,
      speculative: undefined,
    },
  };
}

describe('TelemetryHub', () => {
  it('merges engines and turns counters into rates and hit rates per interval', () => {
    const hub = new TelemetryHub(() => undefined);
    hub.ingest(snap('a', { tokens: 10, bytes: 1000, stall: 0.5, hits: 10, misses: 10, counts: [[1, 2]] }), 0);
    hub.ingest(snap('b', { tokens: 5, bytes: 0, stall: 0, hits: 0, misses: 0, counts: [[0, 0]] }), 0);
    const p0 = hub.sample(0)!;
    expect(p0).toMatchObject({ tokensGenerated: 15, tokensPerSecond: 10, bytesReadPerSecond: 0, engines: 2 });
    expect(p0.tiers[0]).toMatchObject({ tier: 'ram', budgetBytes: 200, usedBytes: 100, hitRate: null });
    hub.ingest(snap('a', { tokens: 20, bytes: 3000, stall: 0.75, hits: 19, misses: 11, counts: [[3, 2]] }), 500);
    const p1 = hub.sample(500)!;
    expect(p1.bytesReadPerSecond).toBe(4000);
    expect(p1.ioStallPerSecond).toBeCloseTo(0.5);
    // 9 hits, 1 miss in the interval.
    expect(p1.tiers[0].hitRate).toBeCloseTo(0.9);
    expect(hub.recent(1, 500)).toHaveLength(2);
  });

  it('counts expert activations over a window as the difference of two frames; a reset starts over', () => {
    const hub = new TelemetryHub(() => undefined);
    hub.ingest(snap('a', { tokens: 0, bytes: 0, stall: 0, hits: 0, misses: 0, counts: [[1, 1], [0, 4]] }), 0);
    hub.ingest(snap('a', { tokens: 0, bytes: 0, stall: 0, hits: 0, misses: 0, counts: [[5, 1], [2, 4]], resident: [[0], []] }), 10_000);
    const w = hub.experts(5, undefined, 10_000)!;
    expect(w.layers.map((l) => l.counts)).toEqual([[4, 0], [2, 0]]);
    expect(w.layers[0].resident).toEqual([0]);
    expect(w.max).toBe(4);
    expect(w.windowSeconds).toBe(5);
    expect(hub.experts(0, undefined, 10_000)!.layers.map((l) => l.counts)).toEqual([[5, 1], [2, 4]]);
    // The engine restarted: its counts went down, so the window starts again from the new frame.
    hub.ingest(snap('a', { tokens: 0, bytes: 0, stall: 0, hits: 0, misses: 0, counts: [[1, 0], [0, 0]] }), 12_000);
    expect(hub.experts(60, undefined, 12_000)!.layers.map((l) => l.counts)).toEqual([[0, 0], [0, 0]]);
    expect(hub.experts(60, 'nope', 12_000)).toBeNull();
  });

  it('keeps about one expert frame per second when snapshots come every 500 ms', () => {
    const hub = new TelemetryHub(() => undefined, { expertFrames: 1000 });
    for (let i = 0; i <= 40; i++) hub.ingest(snap('a', { tokens: 0, bytes: 0, stall: 0, hits: 0, misses: 0, counts: [[i]] }), i * 500);
    // Counts grow by 1 per 500 ms: a 10 s window holds about 20 of them.
    const w = hub.experts(10, undefined, 20_000)!;
    expect(w.layers[0].counts[0]).toBeGreaterThanOrEqual(19);
    expect(w.layers[0].counts[0]).toBeLessThanOrEqual(21);
    expect(w.windowSeconds).toBe(10);
  });
});
