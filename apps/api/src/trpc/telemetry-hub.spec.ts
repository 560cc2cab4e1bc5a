import type { engine as pb, scheduler as spb } from '@kailstream/proto';

import { TelemetryHub } from './telemetry-hub';

// The hub's arithmetic on snapshots fed in directly (the stream side is covered by trpc.spec.ts).
type ModelOpts = { model?: string; counts: number[][]; resident?: number[][]; spec?: { drafted: number; accepted: number } };
function modelEntry(o: ModelOpts): pb.ModelTelemetry {
  return {
    model: o.model ?? 'm',
    tokensPerSecond: 5,
    runningRequests: 1,
    bytesRead: 0,
    ioStallSeconds: 0,
    tiers: [],
    kvUsedBytes: 1,
    kvCapacityBytes: 2,
    slots: [],
    experts: o.counts.map((c, layer) => ({ layer, counts: c, resident: o.resident?.[layer] ?? [] })),
    speculative: o.spec
      ? { enabled: true, mode: 'lookup', draftedTokens: o.spec.drafted, acceptedTokens: o.spec.accepted, targetPasses: 1, tokensPerPass: 2, currentK: 3, timeSavedSeconds: 0 }
      : undefined,
  };
}
function snap(engineId: string, o: { tokens: number; bytes: number; stall: number; hits: number; misses: number; counts: number[][]; resident?: number[][]; models?: ModelOpts[] }): spb.EngineTelemetry {
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
      storageBandwidthBytesPerSecond: 1000,
      kvUsedBytes: 1,
      kvCapacityBytes: 2,
      models: (o.models ?? [{ counts: o.counts, resident: o.resident }]).map(modelEntry),
    },
  };
}
const idle = { tokens: 0, bytes: 0, stall: 0, hits: 0, misses: 0, counts: [] };

describe('TelemetryHub', () => {
  it("lists every live engine's models with their slots", () => {
    const hub = new TelemetryHub(() => undefined);
    const withSlots = snap('b', idle);
    withSlots.snapshot!.models[0].slots = [
      { id: 0, processing: true, requestId: 'r1', nCtx: 128, promptTokens: 9, promptTokensProcessed: 9, decodedTokens: 3, remainingTokens: 5, cachedTokens: 12, sampling: { temperature: 0.5, topK: 40, topP: 1, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyLastN: 64, seed: 1, hasSeed: true, logitBias: {}, extras: undefined }, speculative: false },
      { id: 1, processing: false, requestId: '', nCtx: 128, promptTokens: 0, promptTokensProcessed: 0, decodedTokens: 0, remainingTokens: 0, cachedTokens: 7, sampling: undefined, speculative: false },
    ];
    hub.ingest(withSlots, 0);
    hub.ingest(snap('a', idle), 0);
    const s = hub.slots(0);
    expect(s.map((m) => m.engineId)).toEqual(['a', 'b']);
    expect(s[1].slots).toEqual(withSlots.snapshot!.models[0].slots);
    expect(s[1].slots.map((x) => [x.id, x.processing, x.requestId, x.cachedTokens, x.sampling?.temperature ?? null])).toEqual([[0, true, 'r1', 12, 0.5], [1, false, '', 7, null]]);
    // A stale engine drops out.
    expect(hub.slots(60_000)).toEqual([]);
  });

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
    const w = hub.experts(5, undefined, undefined, 10_000)!;
    expect(w.layers.map((l) => l.counts)).toEqual([[4, 0], [2, 0]]);
    expect(w.layers[0].resident).toEqual([0]);
    expect(w.max).toBe(4);
    expect(w.windowSeconds).toBe(5);
    expect(hub.experts(0, undefined, undefined, 10_000)!.layers.map((l) => l.counts)).toEqual([[5, 1], [2, 4]]);
    // The engine restarted: its counts went down, so the window starts again from the new frame.
    hub.ingest(snap('a', { tokens: 0, bytes: 0, stall: 0, hits: 0, misses: 0, counts: [[1, 0], [0, 0]] }), 12_000);
    expect(hub.experts(60, undefined, undefined, 12_000)!.layers.map((l) => l.counts)).toEqual([[0, 0], [0, 0]]);
    expect(hub.experts(60, 'nope', undefined, 12_000)).toBeNull();
  });

  it('keeps about one expert frame per second when snapshots come every 500 ms', () => {
    const hub = new TelemetryHub(() => undefined, { expertFrames: 1000 });
    for (let i = 0; i <= 40; i++) hub.ingest(snap('a', { tokens: 0, bytes: 0, stall: 0, hits: 0, misses: 0, counts: [[i]] }), i * 500);
    // Counts grow by 1 per 500 ms: a 10 s window holds about 20 of them.
    const w = hub.experts(10, undefined, undefined, 20_000)!;
    expect(w.layers[0].counts[0]).toBeGreaterThanOrEqual(19);
    expect(w.layers[0].counts[0]).toBeLessThanOrEqual(21);
    expect(w.windowSeconds).toBe(10);
  });

  it('keeps a heatmap per loaded model: each its own window, chosen by engine and model; an unloaded model drops out', () => {
    const hub = new TelemetryHub(() => undefined);
    const two = (a: number[][], b: number[][]) => snap('e1', { ...idle, models: [{ model: 'qwen', counts: a }, { model: 'mixtral', counts: b, resident: [[1]], spec: { drafted: 8, accepted: 6 } }] });
    hub.ingest(two([[1, 0]], [[0, 0, 0]]), 0);
    hub.ingest(snap('e0', { ...idle, models: [{ model: 'olmoe', counts: [[9]] }] }), 10_000);
    hub.ingest(two([[3, 0]], [[0, 5, 1]]), 10_000);
    expect(hub.sources()).toEqual([
      { engineId: 'e0', model: 'olmoe' },
      { engineId: 'e1', model: 'qwen' },
      { engineId: 'e1', model: 'mixtral' },
    ]);
    // Default: the first source; an engine alone: its first model; both: that model.
    expect(hub.experts(0, undefined, undefined, 10_000)!.model).toBe('olmoe');
    expect(hub.experts(0, 'e1', undefined, 10_000)!.model).toBe('qwen');
    const mx = hub.experts(5, 'e1', 'mixtral', 10_000)!;
    expect(mx.layers).toEqual([{ layer: 0, counts: [0, 5, 1], resident: [1] }]);
    expect(mx.sources).toHaveLength(3);
    expect(hub.experts(5, undefined, 'qwen', 10_000)!.layers[0].counts).toEqual([2, 0]);
    expect(hub.experts(5, 'e0', 'qwen', 10_000)).toBeNull();
    // Speculation is reported per model.
    const p = hub.sample(10_000)!;
    expect(p.models.sort()).toEqual(['mixtral', 'olmoe', 'qwen']);
    expect(p.speculative).toEqual([{ model: 'mixtral', mode: 'lookup', drafted: 8, accepted: 6, tokensPerPass: 2 }]);
    // 'qwen' unloaded: it is gone from the sources, and a reload starts its history afresh.
    hub.ingest(snap('e1', { ...idle, models: [{ model: 'mixtral', counts: [[0, 6, 1]] }] }), 11_000);
    expect(hub.sources().map((x) => x.model)).toEqual(['olmoe', 'mixtral']);
    hub.ingest(snap('e1', { ...idle, models: [{ model: 'mixtral', counts: [[0, 6, 1]] }, { model: 'qwen', counts: [[4, 4]] }] }), 12_000);
    expect(hub.experts(60, 'e1', 'qwen', 12_000)!.layers[0].counts).toEqual([0, 0]);
  });
});
