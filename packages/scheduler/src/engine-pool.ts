import * as grpc from '@grpc/grpc-js';
import { common, engine as pb } from '@kailstream/proto';

import { clientOptions } from './auth';

/** One engine service the scheduler dispatches to. */
export interface EngineEntry {
  id: string;
  address: string;
  client: pb.EngineServiceClient;
  status: common.ServingStatus;
  /** Why it is not serving (the last probe's error or the failure seen mid-stream). */
  detail: string;
  models: common.ModelInfo[];
  /** Requests the scheduler runs on it now, and at most. */
  running: number;
  slots: number;
  lastSeenUnixMs: number;
}

export interface EnginePoolOptions {
  /** Deadline of one probe call (ms). Default 2000. */
  probeTimeoutMs?: number;
  /** Running slots of an engine registered without its own. Default 8. */
  defaultSlots?: number;
  /** Bearer token sent to engines (their --auth-token). */
  engineToken?: string;
}

function call<Req, Res>(fn: (req: Req, md: grpc.Metadata, opts: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: Res) => void) => unknown, req: Req, timeoutMs: number): Promise<Res> {
  return new Promise((resolve, reject) =>
    fn(req, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (e, r) => (e ? reject(e) : resolve(r))),
  );
}

const SERVING = common.ServingStatus.SERVING_STATUS_SERVING;
const NOT_SERVING = common.ServingStatus.SERVING_STATUS_NOT_SERVING;

/** Engines registered by address, with periodic health and model-list probes. */
export class EnginePool {
  private readonly engines = new Map<string, EngineEntry>();
  private nextId = 1;
  private timer: NodeJS.Timeout | undefined;
  private readonly listeners = new Set<() => void>();
  private readonly probeTimeoutMs: number;
  readonly defaultSlots: number;
  private readonly engineToken: string | undefined;

  constructor(opts: EnginePoolOptions = {}) {
    this.probeTimeoutMs = opts.probeTimeoutMs ?? 2000;
    this.defaultSlots = Math.max(1, opts.defaultSlots ?? 8);
    this.engineToken = opts.engineToken;
  }

  /** Called whenever an engine's status, models or free slots may have changed. */
  onChange(fn: () => void): void {
    this.listeners.add(fn);
  }

  private changed(): void {
    for (const fn of this.listeners) fn();
  }

  /** Registers an engine (idempotent per address: a restarted engine keeps its id) and probes it once. */
  async register(address: string, slots = 0): Promise<EngineEntry> {
    const existing = [...this.engines.values()].find((e) => e.address === address);
    if (existing) {
      if (slots > 0) existing.slots = slots;
      // A restarted engine: a fresh channel connects now instead of after the old one's backoff.
      if (existing.status !== SERVING) {
        existing.client.close();
        existing.client = this.newClient(address);
      }
      await this.probe(existing);
      return existing;
    }
    const entry: EngineEntry = {
      id: `engine-${this.nextId++}`,
      address,
      client: this.newClient(address),
      status: common.ServingStatus.SERVING_STATUS_UNSPECIFIED,
      detail: 'not probed yet',
      models: [],
      running: 0,
      slots: slots > 0 ? slots : this.defaultSlots,
      lastSeenUnixMs: 0,
    };
    this.engines.set(entry.id, entry);
    await this.probe(entry);
    return entry;
  }

  private newClient(address: string): pb.EngineServiceClient {
    // Reconnect quickly after an engine restart (grpc-js backs off up to 120 s by default).
    return new pb.EngineServiceClient(address, grpc.credentials.createInsecure(), {
      ...clientOptions(this.engineToken),
      'grpc.initial_reconnect_backoff_ms': 250,
      'grpc.max_reconnect_backoff_ms': 2000,
    });
  }

  /** Asks one engine for health and models; marks it NOT_SERVING when it does not answer. */
  async probe(entry: EngineEntry): Promise<void> {
    try {
      const h = await call<common.HealthRequest, common.HealthResponse>(entry.client.health.bind(entry.client), {}, this.probeTimeoutMs);
      const m = await call<pb.ListModelsRequest, pb.ListModelsResponse>(entry.client.listModels.bind(entry.client), {}, this.probeTimeoutMs);
      entry.status = h.status;
      entry.detail = h.status === SERVING ? '' : h.detail || 'the engine reports it is not serving';
      entry.models = m.models;
      entry.lastSeenUnixMs = Date.now();
    } catch (e) {
      entry.status = NOT_SERVING;
      entry.detail = `probe failed: ${(e as grpc.ServiceError).details || (e as Error).message}`;
    }
    this.changed();
  }

  /** Marks an engine down at once (a stream to it broke); the next probe may bring it back. */
  markDown(entry: EngineEntry, why: string): void {
    entry.status = NOT_SERVING;
    entry.detail = why;
    this.changed();
  }

  /** Probes every engine each intervalMs until stop(). */
  startProbing(intervalMs = 2000): void {
    this.stop();
    this.timer = setInterval(() => void Promise.all([...this.engines.values()].map((e) => this.probe(e))), intervalMs);
    this.timer.unref();
  }

  get(id: string): EngineEntry | undefined {
    return this.engines.get(id);
  }

  firstHealthy(): EngineEntry | undefined {
    return this.list().find((e) => e.status === SERVING);
  }

  list(): EngineEntry[] {
    return [...this.engines.values()];
  }

  /** True when some registered engine (healthy or not) has loaded `model`. */
  knows(model: string): boolean {
    return this.list().some((e) => e.models.some((m) => m.id === model));
  }

  /** A healthy engine that has loaded `model` (free slots or not), the least loaded; undefined when none. */
  serving(model: string): EngineEntry | undefined {
    const ok = this.list().filter((e) => e.status === SERVING && e.models.some((m) => m.id === model));
    return ok.sort((a, b) => a.running / a.slots - b.running / b.slots)[0];
  }

  /** The ids of the models the registered engines have loaded. */
  modelIds(): string[] {
    return [...new Set(this.list().flatMap((e) => e.models.map((m) => m.id)))];
  }

  /**
   * A healthy engine with a free slot for the model: `preferred` (by id) when it is one of them,
   * else the least loaded; undefined when none.
   */
  pick(model: string, preferred?: string): EngineEntry | undefined {
    const ok = this.list().filter((e) => e.status === SERVING && e.running < e.slots && e.models.some((m) => m.id === model));
    return ok.find((e) => e.id === preferred) ?? ok.sort((a, b) => a.running / a.slots - b.running / b.slots)[0];
  }

  /** Slots of healthy engines in all. */
  capacity(): number {
    return this.list()
      .filter((e) => e.status === SERVING)
      .reduce((s, e) => s + e.slots, 0);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  close(): void {
    this.stop();
    for (const e of this.engines.values()) e.client.close();
    this.engines.clear();
  }
}
