import * as grpc from '@grpc/grpc-js';
import type { engine as pb, scheduler as spb } from '@kailstream/proto';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * Prometheus metrics for `/metrics`. Names follow vLLM's (`vllm:` → `kailstream:`), so dashboards
 * made for vLLM or llama-server need only the prefix changed; ours add the expert cache per tier,
 * storage reads and I/O stalls.
 *
 * Two sources: the API itself (tokens, latencies, request outcomes: counted here as requests pass)
 * and the scheduler's WatchTelemetry / WatchQueue streams (engine counters, queue depth), whose
 * latest snapshot per engine is turned into samples at scrape time. Engine counters are cumulative
 * in the engine, so they are exported as counters that reset when an engine restarts, which
 * Prometheus' rate() handles.
 */
export class ApiMetrics {
  readonly registry = new Registry();
  private readonly snapshots = new Map<string, { address: string; snap: pb.TelemetrySnapshot; at: number }>();
  private queue: spb.QueueSnapshot | undefined;
  private readonly watches: grpc.ClientReadableStream<unknown>[] = [];
  private timers: NodeJS.Timeout[] = [];
  private closed = false;

  readonly promptTokens: Counter<'model'>;
  readonly promptTokensCached: Counter<'model'>;
  readonly generationTokens: Counter<'model'>;
  readonly requestSuccess: Counter<'model' | 'finished_reason'>;
  readonly requestErrors: Counter<'status'>;
  readonly ttft: Histogram<'model'>;
  readonly perToken: Histogram<'model'>;
  readonly e2e: Histogram<'model'>;

  /** Engine snapshots older than this are dropped (the engine went away). */
  constructor(private readonly staleMs = 30_000) {
    const r = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.promptTokens = new Counter({ name: 'kailstream:prompt_tokens_total', help: 'Prefill tokens processed (requests finished through this API).', labelNames: ['model'], registers: r });
    this.promptTokensCached = new Counter({
      name: 'kailstream:prompt_tokens_cached_total', help: "Prompt tokens served from a sequence slot's kept KV cache (prefix reuse), not computed; part of prompt_tokens_total.", labelNames: ['model'], registers: r,
    });
    this.generationTokens = new Counter({ name: 'kailstream:generation_tokens_total', help: 'Generated tokens (requests finished through this API).', labelNames: ['model'], registers: r });
    this.requestSuccess = new Counter({ name: 'kailstream:request_success_total', help: 'Requests that finished, by finish reason.', labelNames: ['model', 'finished_reason'], registers: r });
    this.requestErrors = new Counter({ name: 'kailstream:request_errors_total', help: 'Requests answered with an error, by HTTP status.', labelNames: ['status'], registers: r });
    this.ttft = new Histogram({
      name: 'kailstream:time_to_first_token_seconds', help: 'Time from the request arriving to its first generated token.', labelNames: ['model'], registers: r,
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80],
    });
    this.perToken = new Histogram({
      name: 'kailstream:time_per_output_token_seconds', help: 'Time between successive generated tokens (inter-token latency).', labelNames: ['model'], registers: r,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5],
    });
    this.e2e = new Histogram({
      name: 'kailstream:e2e_request_latency_seconds', help: 'Time from the request arriving to its last token.', labelNames: ['model'], registers: r,
      buckets: [0.1, 0.3, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300],
    });

    const self = this;
    const fromQueue = (name: string, help: string, pick: (q: spb.QueueSnapshot) => number) =>
      new Gauge({ name, help, registers: r, collect() { this.set(self.queue ? pick(self.queue) : 0); } });
    fromQueue('kailstream:num_requests_running', 'Requests running in engines (from the scheduler).', (q) => q.running);
    fromQueue('kailstream:num_requests_waiting', 'Requests queued in the scheduler.', (q) => q.queued);
    fromQueue('kailstream:queue_capacity', 'Scheduler queue bound (0 = unbounded).', (q) => q.capacity);

    // Engine figures are exported per loaded model ({engine, model}), from each snapshot's models.
    type Model = pb.ModelTelemetry;
    const labelNames = ['engine', 'model'] as const;
    const eachModel = (fn: (labels: { engine: string; model: string }, m: Model) => void) => {
      for (const [id, e] of self.live()) for (const m of e.snap.models) fn({ engine: id, model: m.model }, m);
    };
    const perModelGauge = (name: string, help: string, value: (m: Model) => number | undefined) =>
      new Gauge({
        name, help, labelNames: [...labelNames], registers: r,
        collect() {
          this.reset();
          eachModel((l, m) => {
            const v = value(m);
            if (v !== undefined) this.set(l, v);
          });
        },
      });
    // A counter whose value is the engine's own cumulative count (reset + inc = set).
    const perModelCounter = (name: string, help: string, value: (m: Model) => number | undefined) =>
      new Counter({
        name, help, labelNames: [...labelNames], registers: r,
        collect() {
          this.reset();
          eachModel((l, m) => {
            const v = value(m);
            if (v !== undefined && v >= 0) this.inc(l, v);
          });
        },
      });
    const perTier = (name: string, help: string, counter: boolean, value: (t: pb.TierStats) => number) => {
      const cfg = { name, help, labelNames: [...labelNames, 'tier'], registers: r };
      const each = (fn: (labels: Record<string, string>, v: number) => void) => eachModel((l, m) => m.tiers.forEach((t) => fn({ ...l, tier: t.tier }, value(t))));
      if (counter) new Counter({ ...cfg, collect() { this.reset(); each((l, v) => this.inc(l, Math.max(0, v))); } });
      else new Gauge({ ...cfg, collect() { this.reset(); each((l, v) => this.set(l, v)); } });
    };

    perModelGauge('kailstream:kv_cache_usage_perc', 'KV cache usage as a ratio 0-1 (vLLM\'s name).', (m) => (m.kvCapacityBytes > 0 ? m.kvUsedBytes / m.kvCapacityBytes : 0));
    perModelGauge('kailstream:kv_cache_used_bytes', 'KV cache bytes in use.', (m) => m.kvUsedBytes);
    perModelGauge('kailstream:engine_running_requests', 'Sequences decoding in the engine.', (m) => m.runningRequests);
    perModelGauge('kailstream:engine_tokens_per_second', 'Generation tokens/s the engine reports over its last interval.', (m) => m.tokensPerSecond);
    perModelCounter('kailstream:storage_read_bytes_total', 'Bytes of expert weights read from storage.', (m) => m.bytesRead);
    perModelCounter('kailstream:io_stall_seconds_total', 'Seconds compute waited on storage reads.', (m) => m.ioStallSeconds);
    perTier('kailstream:expert_cache_hits_total', 'Expert lookups served by this tier.', true, (t) => t.hits);
    perTier('kailstream:expert_cache_misses_total', 'Expert lookups this tier missed.', true, (t) => t.misses);
    perTier('kailstream:expert_cache_used_bytes', 'Bytes held by this tier.', false, (t) => t.usedBytes);
    perTier('kailstream:expert_cache_budget_bytes', 'Byte budget of this tier.', false, (t) => t.budgetBytes);
    const spec = (m: Model) => (m.speculative?.enabled ? m.speculative : undefined);
    perModelCounter('kailstream:spec_decode_num_draft_tokens_total', 'Speculative tokens drafted.', (m) => spec(m)?.draftedTokens);
    perModelCounter('kailstream:spec_decode_num_accepted_tokens_total', 'Speculative tokens accepted by the target.', (m) => spec(m)?.acceptedTokens);
    perModelGauge('kailstream:spec_decode_tokens_per_pass', 'Tokens committed per target pass (speculative decoding).', (m) => spec(m)?.tokensPerPass);
  }

  /** Snapshots of engines heard from recently. */
  private *live(): Iterable<[string, { address: string; snap: pb.TelemetrySnapshot; at: number }]> {
    const now = Date.now();
    for (const [id, e] of this.snapshots) {
      if (now - e.at > this.staleMs) this.snapshots.delete(id);
      else yield [id, e];
    }
  }

  /** Latest telemetry per engine (for ps and the console). */
  /** A request that finished through the API: its tokens, why it stopped and its seconds end to end. */
  finished(model: string, u: { prompt: number; cached: number; completion: number }, reason: string, seconds: number): void {
    this.promptTokens.inc({ model }, u.prompt);
    this.promptTokensCached.inc({ model }, u.cached);
    this.generationTokens.inc({ model }, u.completion);
    this.requestSuccess.inc({ model, finished_reason: reason });
    this.e2e.observe({ model }, seconds);
  }

  engines(): { engineId: string; address: string; snapshot: pb.TelemetrySnapshot }[] {
    return [...this.live()].map(([engineId, e]) => ({ engineId, address: e.address, snapshot: e.snap }));
  }

  /** Feeds one engine snapshot (what the WatchTelemetry stream delivers). */
  ingestTelemetry(t: spb.EngineTelemetry): void {
    if (t.snapshot) this.snapshots.set(t.engineId, { address: t.address, snap: t.snapshot, at: Date.now() });
  }

  ingestQueue(q: spb.QueueSnapshot): void {
    this.queue = q;
  }

  /**
   * Follows the scheduler's WatchTelemetry and WatchQueue streams, reconnecting a second after one
   * ends or fails (scheduler restarting, or an older scheduler without the RPC).
   */
  follow(scheduler: spb.SchedulerServiceClient, intervalMs = 1000): void {
    const watch = <T>(open: () => grpc.ClientReadableStream<T>, onData: (m: T) => void) => {
      if (this.closed) return;
      const s = open();
      this.watches.push(s as grpc.ClientReadableStream<unknown>);
      let retried = false;
      const retry = () => {
        if (retried || this.closed) return;
        retried = true;
        const i = this.watches.indexOf(s as grpc.ClientReadableStream<unknown>);
        if (i >= 0) this.watches.splice(i, 1);
        const t = setTimeout(() => watch(open, onData), 1000);
        t.unref();
        this.timers.push(t);
      };
      s.on('data', onData);
      s.on('error', retry);
      s.on('end', retry);
    };
    watch(() => scheduler.watchTelemetry({ intervalMs }), (m: spb.EngineTelemetry) => this.ingestTelemetry(m));
    watch(() => scheduler.watchQueue({ intervalMs }), (m: spb.QueueSnapshot) => this.ingestQueue(m));
  }

  close(): void {
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers = [];
    for (const s of this.watches.splice(0)) s.cancel();
  }
}
