import * as grpc from '@grpc/grpc-js';
import { common, engine as pb } from '@kailstream/proto';

/** One engine service the scheduler dispatches to. */
export interface EngineEntry {
  id: string;
  address: string;
  client: pb.EngineServiceClient;
  status: common.ServingStatus;
  models: common.ModelInfo[];
  running: number;
  lastSeenUnixMs: number;
}

function call<Req, Res>(fn: (req: Req, md: grpc.Metadata, opts: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: Res) => void) => unknown, req: Req, timeoutMs: number): Promise<Res> {
  return new Promise((resolve, reject) =>
    fn(req, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (e, r) => (e ? reject(e) : resolve(r))),
  );
}

/** Engines registered by address, with periodic health and model-list probes. */
export class EnginePool {
  private readonly engines = new Map<string, EngineEntry>();
  private nextId = 1;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly probeTimeoutMs = 2000) {}

  /** Registers an engine (idempotent per address) and probes it once. */
  async register(address: string): Promise<EngineEntry> {
    const existing = [...this.engines.values()].find((e) => e.address === address);
    if (existing) {
      await this.probe(existing);
      return existing;
    }
    const entry: EngineEntry = {
      id: `engine-${this.nextId++}`,
      address,
      client: new pb.EngineServiceClient(address, grpc.credentials.createInsecure()),
      status: common.ServingStatus.SERVING_STATUS_UNSPECIFIED,
      models: [],
      running: 0,
      lastSeenUnixMs: 0,
    };
    this.engines.set(entry.id, entry);
    await this.probe(entry);
    return entry;
  }

  /** Asks one engine for health and models; marks it NOT_SERVING when it does not answer. */
  async probe(entry: EngineEntry): Promise<void> {
    try {
      const h = await call<common.HealthRequest, common.HealthResponse>(entry.client.health.bind(entry.client), {}, this.probeTimeoutMs);
      const m = await call<pb.ListModelsRequest, pb.ListModelsResponse>(entry.client.listModels.bind(entry.client), {}, this.probeTimeoutMs);
      entry.status = h.status;
      entry.models = m.models;
      entry.lastSeenUnixMs = Date.now();
    } catch {
      entry.status = common.ServingStatus.SERVING_STATUS_NOT_SERVING;
    }
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
    return this.list().find((e) => e.status === common.ServingStatus.SERVING_STATUS_SERVING);
  }

  list(): EngineEntry[] {
    return [...this.engines.values()];
  }

  /** A healthy engine serving `model`, the least busy first; undefined when none. */
  pick(model: string): EngineEntry | undefined {
    return this.list()
      .filter((e) => e.status === common.ServingStatus.SERVING_STATUS_SERVING && e.models.some((m) => m.id === model))
      .sort((a, b) => a.running - b.running)[0];
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
