import * as grpc from '@grpc/grpc-js';
import type { engine as pb, scheduler as spb } from '@kailstream/proto';

/** One tier's state at a sample, with its hit rate over the last sample interval. */
export interface TierPoint {
  tier: string;
  budgetBytes: number;
  usedBytes: number;
  hits: number;
  misses: number;
  /** hits / (hits + misses) over the interval since the previous sample; null when nothing was looked up. */
  hitRate: number | null;
}

/** One merged sample of every engine (counters summed), with rates over the previous sample. */
export interface TelemetryPoint {
  t: number;
  tokensPerSecond: number;
  tokensGenerated: number;
  bytesRead: number;
  bytesReadPerSecond: number;
  ioStallSeconds: number;
  /** Seconds stalled on storage per second of wall time (0..1 per engine). */
  ioStallPerSecond: number;
  storageBandwidthBytesPerSecond: number;
  running: number;
  queued: number;
  queueCapacity: number;
  kvUsedBytes: number;
  kvCapacityBytes: number;
  tiers: TierPoint[];
  models: string[];
  engines: number;
  /** One entry per loaded model that speculates. */
  speculative: { model: string; mode: string; drafted: number; accepted: number; tokensPerPass: number }[];
}

/** A loaded model's sequence slots on one engine, as the engine reports them (the console's table, /slots). */
export interface ModelSlots {
  engineId: string;
  model: string;
  slots: pb.SlotState[];
}

/** A loaded model the heatmap can show: the engine it runs on and its id there. */
export interface ExpertSource {
  engineId: string;
  model: string;
}

/** Per-layer expert activation counts of one model over a window, and what is resident now. */
export interface ExpertWindow {
  engineId: string;
  model: string;
  /** Every model with a heatmap now (for a selector), in engine then load order. */
  sources: ExpertSource[];
  /** Seconds the counts cover (shorter than asked while the history is young). */
  windowSeconds: number;
  layers: { layer: number; counts: number[]; resident: number[] }[];
  max: number;
}

interface ExpertFrame {
  t: number;
  layers: { layer: number; counts: number[] }[];
}

export interface TelemetryHubOptions {
  /** Interval asked of the scheduler's WatchTelemetry, ms. Default 500. */
  intervalMs?: number;
  /** Samples kept for charts. Default 600 (5 minutes at 500 ms). */
  historyLength?: number;
  /** Expert-count frames kept per engine and model (one per second at most). Default 300. */
  expertFrames?: number;
  /** A snapshot older than this no longer counts toward the merged sample, ms. Default 5000. */
  staleMs?: number;
}

/**
 * Follows the scheduler's WatchTelemetry and WatchQueue streams, merges the engines' snapshots
 * into one sample per interval and keeps a ring of them (and of per-engine expert counts) so the
 * console can draw charts and a heatmap over a window without holding the streams itself.
 * Reconnects when a stream ends or fails; `status()` says why there is no data.
 */
export class TelemetryHub {
  private readonly intervalMs: number;
  private readonly historyLength: number;
  private readonly expertFrameCap: number;
  private readonly staleMs: number;
  private readonly latest = new Map<string, { at: number; msg: spb.EngineTelemetry }>();
  /** Per engine, per model: kept expert-count frames. */
  private readonly expertFrames = new Map<string, Map<string, ExpertFrame[]>>();
  private history: TelemetryPoint[] = [];
  private queue: spb.QueueSnapshot | null = null;
  private telemetryCall?: grpc.ClientReadableStream<spb.EngineTelemetry>;
  private queueCall?: grpc.ClientReadableStream<spb.QueueSnapshot>;
  private sampler?: NodeJS.Timeout;
  private retry?: NodeJS.Timeout;
  private lastError: string | null = null;
  private connectedClient?: spb.SchedulerServiceClient;
  private stopped = false;

  constructor(private readonly scheduler: () => spb.SchedulerServiceClient | undefined, opts: TelemetryHubOptions = {}) {
    this.intervalMs = opts.intervalMs ?? 500;
    this.historyLength = opts.historyLength ?? 600;
    this.expertFrameCap = opts.expertFrames ?? 300;
    this.staleMs = opts.staleMs ?? 5000;
  }

  /** Starts following the scheduler (idempotent); the console's first telemetry call does this. */
  start(): void {
    if (this.sampler || this.stopped) return;
    this.connect();
    this.sampler = setInterval(() => this.sample(Date.now()), this.intervalMs);
    this.sampler.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.sampler);
    clearTimeout(this.retry);
    this.telemetryCall?.cancel();
    this.queueCall?.cancel();
  }

  status(): { connected: boolean; error: string | null; engines: number } {
    return { connected: !!this.telemetryCall && this.lastError === null, error: this.lastError, engines: this.latest.size };
  }

  private connect(): void {
    if (this.stopped) return;
    const client = this.scheduler();
    if (!client) {
      this.lastError = 'the API is not connected to a scheduler';
      return;
    }
    this.connectedClient = client;
    const again = (why: string) => {
      if (this.stopped) return;
      this.lastError = why;
      this.telemetryCall = undefined;
      clearTimeout(this.retry);
      this.retry = setTimeout(() => this.connect(), 1000);
      this.retry.unref();
    };
    const tele = client.watchTelemetry({ intervalMs: this.intervalMs });
    this.telemetryCall = tele;
    this.lastError = null;
    tele.on('data', (msg: spb.EngineTelemetry) => this.ingest(msg, Date.now()));
    tele.on('error', (e: grpc.ServiceError) => {
      if (e.code !== grpc.status.CANCELLED) again(`scheduler telemetry: ${e.details || e.message}`);
    });
    tele.on('end', () => again('scheduler telemetry stream ended'));
    const q = client.watchQueue({ intervalMs: this.intervalMs });
    this.queueCall = q;
    q.on('data', (s: spb.QueueSnapshot) => {
      this.queue = s;
    });
    // The queue stream is secondary: without it the charts show running requests only.
    q.on('error', () => {
      this.queue = null;
    });
  }

  /** Takes one engine snapshot (exposed for tests that feed the hub directly). */
  ingest(msg: spb.EngineTelemetry, now: number): void {
    this.latest.set(msg.engineId, { at: now, msg });
    const snap = msg.snapshot;
    if (!snap) return;
    const byModel = this.expertFrames.get(msg.engineId) ?? new Map<string, ExpertFrame[]>();
    // A model unloaded since the last snapshot takes its history with it.
    for (const id of byModel.keys()) if (!snap.models.some((m) => m.model === id)) byModel.delete(id);
    for (const m of snap.models) {
      const frames = byModel.get(m.model) ?? [];
      const last = frames[frames.length - 1];
      const frame: ExpertFrame = { t: now, layers: m.experts.map((l) => ({ layer: l.layer, counts: l.counts.slice() })) };
      // Counters reset when an engine restarts or reloads the model: start its history again.
      if (last && (last.layers.length !== frame.layers.length || sumAll(frame) < sumAll(last))) frames.length = 0;
      // At most one kept frame per second: the newest frame replaces the last one until a second has
      // passed since the one before it.
      if (frames.length >= 2 && now - frames[frames.length - 2].t < 1000) frames[frames.length - 1] = frame;
      else frames.push(frame);
      if (frames.length > this.expertFrameCap) frames.splice(0, frames.length - this.expertFrameCap);
      byModel.set(m.model, frames);
    }
    this.expertFrames.set(msg.engineId, byModel);
  }

  /** Every loaded model's sequence slots on every live engine, engines in id order, models in load order. */
  slots(now = Date.now()): ModelSlots[] {
    const out: ModelSlots[] = [];
    const live = [...this.latest.entries()].filter(([, v]) => now - v.at <= this.staleMs).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    for (const [engineId, v] of live)
      for (const m of v.msg.snapshot?.models ?? [])
        out.push({
          engineId,
          model: m.model,
          slots: m.slots,
        });
    return out;
  }

  /** Merges the engines' latest snapshots into one history point (exposed for tests). */
  sample(now: number): TelemetryPoint | null {
    const live = [...this.latest.entries()].filter(([, v]) => now - v.at <= this.staleMs);
    for (const [id, v] of this.latest) if (now - v.at > this.staleMs * 4) this.latest.delete(id);
    const snaps = live.map(([, v]) => v.msg.snapshot).filter((s): s is pb.TelemetrySnapshot => !!s);
    if (!snaps.length && !this.queue) return null;
    const prev = this.history[this.history.length - 1];
    const dt = prev ? Math.max(1e-3, (now - prev.t) / 1000) : 0;
    const rate = (cur: number, before: number | undefined) => (prev && before !== undefined && cur >= before ? (cur - before) / dt : 0);
    const tierMap = new Map<string, TierPoint>();
    for (const s of snaps)
      for (const ti of s.tiers) {
        const p = tierMap.get(ti.tier) ?? { tier: ti.tier, budgetBytes: 0, usedBytes: 0, hits: 0, misses: 0, hitRate: null };
        p.budgetBytes += ti.budgetBytes;
        p.usedBytes += ti.usedBytes;
        p.hits += ti.hits;
        p.misses += ti.misses;
        tierMap.set(ti.tier, p);
      }
    const tiers = [...tierMap.values()].sort((a, b) => tierOrder(a.tier) - tierOrder(b.tier));
    for (const p of tiers) {
      const before = prev?.tiers.find((x) => x.tier === p.tier);
      const dh = before ? p.hits - before.hits : 0;
      const dm = before ? p.misses - before.misses : 0;
      p.hitRate = before && dh >= 0 && dm >= 0 && dh + dm > 0 ? dh / (dh + dm) : null;
    }
    const sum = (f: (s: pb.TelemetrySnapshot) => number) => snaps.reduce((a, s) => a + f(s), 0);
    const bytesRead = sum((s) => s.bytesRead);
    const stall = sum((s) => s.ioStallSeconds);
    const point: TelemetryPoint = {
      t: now,
      tokensPerSecond: sum((s) => s.tokensPerSecond),
      tokensGenerated: sum((s) => s.tokensGenerated),
      bytesRead,
      bytesReadPerSecond: rate(bytesRead, prev?.bytesRead),
      ioStallSeconds: stall,
      ioStallPerSecond: rate(stall, prev?.ioStallSeconds),
      storageBandwidthBytesPerSecond: Math.max(0, ...snaps.map((s) => s.storageBandwidthBytesPerSecond)),
      running: this.queue ? this.queue.running : sum((s) => s.runningRequests),
      queued: this.queue?.queued ?? 0,
      queueCapacity: this.queue?.capacity ?? 0,
      kvUsedBytes: sum((s) => s.kvUsedBytes),
      kvCapacityBytes: sum((s) => s.kvCapacityBytes),
      tiers,
      models: [...new Set(snaps.flatMap((s) => s.models.map((m) => m.model)))],
      engines: snaps.length,
      speculative: snaps.flatMap((s) =>
        s.models
          .filter((m) => m.speculative?.enabled)
          .map((m) => ({ model: m.model, mode: m.speculative!.mode, drafted: m.speculative!.draftedTokens, accepted: m.speculative!.acceptedTokens, tokensPerPass: m.speculative!.tokensPerPass })),
      ),
    };
    this.history.push(point);
    if (this.history.length > this.historyLength) this.history.splice(0, this.history.length - this.historyLength);
    return point;
  }

  /** Points of the last `seconds` (all kept ones when omitted). */
  recent(seconds?: number, now = Date.now()): TelemetryPoint[] {
    if (seconds === undefined) return this.history.slice();
    const from = now - seconds * 1000;
    return this.history.filter((p) => p.t >= from);
  }

  /** Every loaded model with a heatmap, in engine then load order. */
  sources(): ExpertSource[] {
    const out: ExpertSource[] = [];
    for (const engineId of [...this.latest.keys()].sort())
      for (const m of this.latest.get(engineId)!.msg.snapshot?.models ?? []) if (m.experts.length) out.push({ engineId, model: m.model });
    return out;
  }

  /**
   * Activation counts per layer × expert over the last `windowSeconds` (0 = since the model was
   * loaded) of one model (default: the first of `sources()`; an engine alone picks its first model),
   * with the experts resident now. Null when no such model reports a heatmap.
   */
  experts(windowSeconds: number, engineId?: string, model?: string, now = Date.now()): ExpertWindow | null {
    const sources = this.sources();
    const src = sources.find((x) => (engineId === undefined || x.engineId === engineId) && (model === undefined || x.model === model));
    const snap = src && this.latest.get(src.engineId)?.msg.snapshot?.models.find((m) => m.model === src.model);
    if (!src || !snap) return null;
    const frames = this.expertFrames.get(src.engineId)?.get(src.model) ?? [];
    let base: ExpertFrame | undefined;
    if (windowSeconds > 0) {
      const from = now - windowSeconds * 1000;
      // The newest frame at or before the window start; the oldest kept one when history is shorter.
      for (const f of frames) {
        if (f.t <= from) base = f;
        else break;
      }
      base ??= frames[0];
    }
    let max = 0;
    const layers = snap.experts.map((l) => {
      const b = base?.layers.find((x) => x.layer === l.layer)?.counts;
      const counts = l.counts.map((c, i) => Math.max(0, c - (b?.[i] ?? 0)));
      for (const c of counts) if (c > max) max = c;
      return { layer: l.layer, counts, resident: l.resident.slice() };
    });
    const covered = windowSeconds > 0 && base ? Math.max(0, (now - base.t) / 1000) : 0;
    return { engineId: src.engineId, model: src.model, sources, windowSeconds: windowSeconds > 0 ? Math.min(windowSeconds, covered) : 0, layers, max };
  }

  /** For tests and status: the client the hub follows now. */
  get client(): spb.SchedulerServiceClient | undefined {
    return this.connectedClient;
  }
}

function tierOrder(t: string): number {
  return t === 'vram' ? 0 : t === 'ram' ? 1 : 2;
}

function sumAll(f: ExpertFrame): number {
  let s = 0;
  for (const l of f.layers) for (const c of l.counts) s += c;
  return s;
}
