import type { NativeExpertLayerStats, NativeExpertStreamStats } from '@kailstream/core-native';

/** Expert-streaming totals over all MoE layers, optionally over an interval (after - before). */
export interface StreamSummary {
  accesses: number;
  hits: number;
  misses: number;
  /** Misses whose read (a prefetch) had already been issued when the layer asked: in flight, not ready. */
  missesInflight: number;
  /** hits / accesses (0 without accesses). */
  hitRate: number;
  reads: number;
  bytesRead: number;
  readSeconds: number;
  computeSeconds: number;
  stallSeconds: number;
  prefetchReads: number;
  prefetchUsed: number;
  prefetchWasted: number;
  /** Of the experts predicted for a layer, the share it then asked for. */
  prefetchPrecision: number;
  /** Of the experts a layer asked for, the share that had been predicted. */
  prefetchRecall: number;
  directIo: boolean;
  ioNote: string;
  residentBytes: number;
  capacityBytes: number;
  usedBytes: number;
  peakBytes: number;
  /** Entries filled from the VRAM tier instead of storage, their bytes and copy time. */
  vramReads: number;
  vramBytes: number;
  vramSeconds: number;
  /** The VRAM tier's device ('' without one), capacity and bytes held now. */
  vramDevice: string;
  vramCapacityBytes: number;
  vramUsedBytes: number;
}

const COUNTERS = [
  'accesses',
  'hits',
  'misses',
  'missesInflight',
  'reads',
  'bytesRead',
  'readSeconds',
  'computeSeconds',
  'stallSeconds',
  'prefetchReads',
  'prefetchUsed',
  'prefetchWasted',
  'predicted',
  'predictedCorrect',
  'predictedActual',
  'vramReads',
  'vramBytes',
  'vramSeconds',
] as const satisfies readonly (keyof NativeExpertLayerStats)[];

export function summarizeStream(after: NativeExpertStreamStats, before?: NativeExpertStreamStats): StreamSummary {
  const t = Object.fromEntries(COUNTERS.map((k) => [k, 0])) as Record<(typeof COUNTERS)[number], number>;
  after.layers.forEach((l, i) => {
    for (const k of COUNTERS) t[k] += l[k] - (before?.layers[i]?.[k] ?? 0);
  });
  return {
    accesses: t.accesses,
    hits: t.hits,
    misses: t.misses,
    missesInflight: t.missesInflight,
    hitRate: t.accesses ? t.hits / t.accesses : 0,
    reads: t.reads,
    bytesRead: t.bytesRead,
    readSeconds: t.readSeconds,
    computeSeconds: t.computeSeconds,
    stallSeconds: t.stallSeconds,
    prefetchReads: t.prefetchReads,
    prefetchUsed: t.prefetchUsed,
    prefetchWasted: t.prefetchWasted,
    prefetchPrecision: t.predicted ? t.predictedCorrect / t.predicted : 0,
    prefetchRecall: t.predictedActual ? t.predictedCorrect / t.predictedActual : 0,
    directIo: after.directIo,
    ioNote: after.ioNote,
    residentBytes: after.residentBytes,
    capacityBytes: after.capacityBytes,
    usedBytes: after.usedBytes,
    peakBytes: after.peakBytes,
    vramReads: t.vramReads,
    vramBytes: t.vramBytes,
    vramSeconds: t.vramSeconds,
    vramDevice: after.vram.device,
    vramCapacityBytes: after.vram.capacityBytes,
    vramUsedBytes: after.vram.usedBytes,
  };
}
