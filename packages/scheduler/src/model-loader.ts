// Load on demand, as Ollama does: a request that names a model no engine has loaded, but whose
// <id>.gguf lies in an engine's models directory, loads it there first and then runs. One load
// per model at a time (concurrent requests for it wait on the same one); a load the engine
// refuses (the file is malformed, the budget does not hold it) fails those requests with the
// engine's own error.
//
// Models that load on demand can bring back also leave on their own, as Ollama's do:
// - keep-alive: a model loaded on demand stays loaded for keepAliveMs (Ollama's default 5
//   minutes) after its last request, then unloads once nothing runs or waits on it; a request's
//   own keep_alive (Ollama's field) sets that model's (negative: until unloaded by hand), also for
//   a model `kail serve -m` loaded from the models directory. A model loaded from elsewhere never
//   leaves on its own (nothing could bring it back).
// - context: a caller may ask for a context length (Ollama's num_ctx); a model loaded on demand
//   is loaded with it, and one loaded with less is reloaded with it once idle (never to less).
// - eviction: when an engine refuses a load for lack of memory (KAIL_E_BUDGET), or already holds
//   maxModels models, the least recently used idle model it could bring back is unloaded and the
//   load tried again (Ollama's and llama-server's router mode's LRU unload).
import * as grpc from '@grpc/grpc-js';
import { common, engine as pb } from '@kailstream/proto';

import { grpcError } from './dispatcher';
import type { EngineEntry, EnginePool } from './engine-pool';

const SERVING = common.ServingStatus.SERVING_STATUS_SERVING;

function call<Req, Res>(fn: (req: Req, md: grpc.Metadata, opts: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: Res) => void) => unknown, req: Req, timeoutMs: number): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, new grpc.Metadata(), timeoutMs > 0 ? { deadline: Date.now() + timeoutMs } : {}, (e, r) => (e ? reject(e) : resolve(r))));
}

export interface ModelLoaderOptions {
  /** Load models on demand at all. Default true. */
  enabled?: boolean;
  /** Deadline of an engine's model-file listing (ms). Default 10000. */
  listTimeoutMs?: number;
  /** How long a model loaded on demand stays after its last request (ms); negative: until unloaded by hand. Default 300000 (Ollama's 5m). */
  keepAliveMs?: number;
  /** Most models an engine holds before the least recently used idle one is unloaded for a new one; 0 = no limit but memory. Default 0. */
  maxModels?: number;
  /** How often expired keep-alives are looked for (ms). Default 1000. */
  sweepIntervalMs?: number;
}

/** A model that may leave on its own: load on demand can bring it back. */
interface Kept {
  /** Negative: never expires (eviction may still take it). */
  keepAliveMs: number;
  lastUsed: number;
}

export interface Ensured {
  engine: EngineEntry;
  model: common.ModelInfo;
  loadedNow: boolean;
}

export class ModelLoader {
  private readonly inflight = new Map<string, Promise<Ensured>>();
  readonly enabled: boolean;
  private readonly listTimeoutMs: number;
  readonly keepAliveMs: number;
  readonly maxModels: number;
  /** Models that may leave on their own, by id. */
  private readonly kept = new Map<string, Kept>();
  /** Models being unloaded now (keep-alive or eviction): the unload call, settled when it is over. */
  private readonly leaving = new Map<string, Promise<unknown>>();
  private readonly timer: NodeJS.Timeout | undefined;
  /** The sweep in progress, if any (sweeps run one at a time). */
  private sweeping: Promise<void> | null = null;
  /** Loads done on demand, and unloads done by keep-alive expiry or eviction (for tests and the log). */
  loads = 0;
  expired = 0;
  evicted = 0;
  /** Reloads for a larger context (Ollama's num_ctx). */
  reloads = 0;
  /** Whether requests for the model run or wait (the dispatcher sets it). */
  inUse: (model: string) => boolean = () => false;

  constructor(
    private readonly pool: EnginePool,
    opts: ModelLoaderOptions = {},
  ) {
    this.enabled = opts.enabled ?? true;
    this.listTimeoutMs = opts.listTimeoutMs ?? 10_000;
    this.keepAliveMs = opts.keepAliveMs ?? 300_000;
    this.maxModels = Math.max(0, opts.maxModels ?? 0);
    if (this.enabled) {
      // (A tick while a sweep still runs is skipped, not queued behind it.)
      this.timer = setInterval(() => void (this.sweeping ? undefined : this.sweep()), Math.max(10, opts.sweepIntervalMs ?? 1000));
      this.timer.unref();
    }
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /**
   * The engine and model info for `model`, loading it first when it is not loaded anywhere.
   * `contextLength` (Ollama's num_ctx; 0 = no wish): a load is done with it, and a model loaded
   * with less that load on demand can bring back is reloaded with it if it is idle (Ollama reloads
   * for a new num_ctx). Never to a smaller context: requests cap their own window instead, so
   * clients with different num_ctx do not make the model reload back and forth.
   */
  ensure(model: string, contextLength = 0): Promise<Ensured> {
    const leaving = this.leaving.get(model);
    if (leaving) return leaving.then(() => this.ensure(model, contextLength));
    const have = this.loaded(model);
    let p = this.inflight.get(model);
    if (p) return p;
    if (have && !(contextLength > have.model.contextLength && this.enabled && this.kept.has(model) && !this.inUse(model))) return Promise.resolve(have);
    if (!this.enabled) return Promise.reject(this.notFound(model, []));
    p = (have ? this.reload(model, have, contextLength) : this.load(model, contextLength)).finally(() => this.inflight.delete(model));
    this.inflight.set(model, p);
    return p;
  }

  /** `model` again with a larger context, if it is still idle (else as it is). */
  private async reload(model: string, have: Ensured, contextLength: number): Promise<Ensured> {
    const kept = this.kept.get(model);
    if (!(await this.unloadIdle(model, have.engine))) return this.loaded(model) ?? this.load(model, 0);
    this.reloads++;
    const r = await this.load(model, contextLength);
    // The model's keep-alive stays what it was.
    if (kept) this.kept.set(model, { keepAliveMs: kept.keepAliveMs, lastUsed: Date.now() });
    return r;
  }

  /**
   * A request used `model` now; `keepAliveMs` (a request's keep_alive) becomes the model's, if
   * load on demand can bring it back (checked against the engine's models directory).
   */
  touch(model: string, keepAliveMs?: number): void {
    const k = this.kept.get(model);
    if (k) {
      k.lastUsed = Date.now();
      if (keepAliveMs !== undefined) k.keepAliveMs = keepAliveMs;
      return;
    }
    if (keepAliveMs === undefined || !this.enabled) return;
    const have = this.loaded(model);
    if (!have) return;
    void this.reloadable(have.engine, have.model).then((yes) => {
      if (yes && !this.kept.has(model) && this.loaded(model)) this.kept.set(model, { keepAliveMs, lastUsed: Date.now() });
    });
  }

  /** When the model unloads if nothing uses it before (ms since the epoch); 0 = it stays. */
  expiresAt(model: string): number {
    const k = this.kept.get(model);
    return k && k.keepAliveMs >= 0 ? k.lastUsed + k.keepAliveMs : 0;
  }

  /**
   * Unloads the models whose keep-alive has run out (at `now`, by default when it runs) and that
   * nothing uses. A sweep called while another runs waits for that one and then runs itself (it
   * returned at once, doing nothing: a caller that then expected the model gone found it still
   * there when the periodic sweep happened to be running).
   */
  async sweep(now?: number): Promise<void> {
    while (this.sweeping) await this.sweeping.catch(() => undefined);
    this.sweeping = this.sweepOnce(now ?? Date.now()).finally(() => (this.sweeping = null));
    return this.sweeping;
  }

  private async sweepOnce(now: number): Promise<void> {
    for (const [model, k] of [...this.kept]) {
      if (!this.loaded(model)) {
        this.kept.delete(model);
        continue;
      }
      if (k.keepAliveMs < 0 || now < k.lastUsed + k.keepAliveMs || this.inUse(model) || this.inflight.has(model)) continue;
      if (await this.unloadIdle(model)) this.expired++;
    }
  }

  /**
   * While `model` is being unloaded: settles once that is over (a request that arrives meanwhile
   * waits for it, then finds the model gone and loads it again, or still there). Else null.
   */
  whileLeaving(model: string): Promise<unknown> | null {
    return this.leaving.get(model) ?? null;
  }

  /** Unloads a kept model from engine `e` (default: the one serving it) if it finds it idle; false when it is in use (or gone). */
  private async unloadIdle(model: string, e = this.loaded(model)?.engine): Promise<boolean> {
    if (!this.kept.has(model) || !e) return false;
    const unload = call<pb.UnloadModelRequest, pb.UnloadModelResponse>(e.client.unloadModel.bind(e.client), { id: model, ifIdle: true }, 120_000)
      .then(
        () => true,
        // Gone already counts as unloaded; in use (or the engine unreachable) keeps it.
        (err: grpc.ServiceError) => err.code === grpc.status.NOT_FOUND,
      )
      .then(async (gone) => {
        if (gone) this.kept.delete(model);
        await this.pool.probe(e);
        return gone;
      });
    this.leaving.set(model, unload);
    try {
      return await unload;
    } finally {
      this.leaving.delete(model);
    }
  }

  /** Unloads the least recently used idle model of `e` that load on demand can bring back; false when there is none. */
  private async evictOne(e: EngineEntry, forModel: string): Promise<boolean> {
    const candidates = [...this.kept]
      .filter(([m]) => m !== forModel && !this.inUse(m) && !this.inflight.has(m) && e.models.some((x) => x.id === m))
      .sort((a, b) => a[1].lastUsed - b[1].lastUsed);
    for (const [m] of candidates)
      if (await this.unloadIdle(m, e)) {
        this.evicted++;
        return true;
      }
    return false;
  }

  private async reloadable(e: EngineEntry, m: common.ModelInfo): Promise<boolean> {
    try {
      const files = await call<pb.ListModelFilesRequest, pb.ListModelFilesResponse>(e.client.listModelFiles.bind(e.client), {}, this.listTimeoutMs);
      return files.files.some((f) => f.id === m.id && f.path === m.path);
    } catch {
      return false;
    }
  }

  private loaded(model: string): Ensured | undefined {
    for (const e of this.pool.list()) {
      const m = e.models.find((x) => x.id === model);
      if (m) return { engine: e, model: m, loadedNow: false };
    }
    return undefined;
  }

  private notFound(model: string, available: string[]): grpc.ServiceError {
    const served = this.pool.modelIds();
    const files = available.length ? `; in the models directory: ${available.join(', ')}` : '';
    return grpcError(grpc.status.NOT_FOUND, `no engine serves model '${model}' (served: ${served.join(', ') || 'none'}${files})`, 'KAIL_E_NOT_FOUND');
  }

  /**
   * Loads `model` from an engine's models directory, with `contextLength` (0: the engine's
   * default); when the engine refuses that context (memory, or the model's limits), with the
   * default instead, so the request still runs (its window is then capped by the model's).
   */
  private async load(model: string, contextLength = 0): Promise<Ensured> {
    if (contextLength > 0)
      try {
        return await this.loadWith(model, contextLength);
      } catch (err) {
        const ge = err as grpc.ServiceError;
        if (this.loaded(model) || (ge.code !== grpc.status.RESOURCE_EXHAUSTED && ge.code !== grpc.status.INVALID_ARGUMENT)) throw err;
      }
    return this.loadWith(model, 0);
  }

  private async loadWith(model: string, contextLength: number): Promise<Ensured> {
    const available: string[] = [];
    for (const e of this.pool.list().filter((x) => x.status === SERVING)) {
      let files: pb.ListModelFilesResponse;
      try {
        files = await call<pb.ListModelFilesRequest, pb.ListModelFilesResponse>(e.client.listModelFiles.bind(e.client), {}, this.listTimeoutMs);
      } catch {
        continue;
      }
      const f = files.files.find((x) => x.id === model);
      if (!f) {
        available.push(...files.files.filter((x) => !x.error).map((x) => x.id));
        continue;
      }
      if (f.error) throw grpcError(grpc.status.FAILED_PRECONDITION, `model '${model}' (${f.path}) cannot be loaded: ${f.error}`, 'KAIL_E_FORMAT');
      // Someone may have loaded it meanwhile (the console, another scheduler).
      await this.pool.probe(e);
      const now = this.loaded(model);
      if (now) return now;
      // At the model limit: make room first.
      while (this.maxModels > 0 && e.models.length >= this.maxModels)
        if (!(await this.evictOne(e, model)))
          throw grpcError(
            grpc.status.RESOURCE_EXHAUSTED,
            `engine ${e.id} holds ${e.models.length} models (the limit, --models-max ${this.maxModels}) and none of them can be unloaded now (in use, or loaded from outside the models directory): ${e.models.map((x) => x.id).join(', ')}`,
            'KAIL_E_BUDGET',
          );
      for (;;) {
        try {
          await call<pb.LoadModelRequest, pb.LoadModelResponse>(e.client.loadModel.bind(e.client), pb.LoadModelRequest.fromPartial({ path: f.path, id: model, contextLength }), 0);
          this.loads++;
          break;
        } catch (err) {
          const ge = err as grpc.ServiceError;
          // Loaded by someone else in the meantime: take theirs.
          if (ge.code === grpc.status.ALREADY_EXISTS) break;
          // Out of memory: unload the least recently used idle model and try again.
          if (ge.code === grpc.status.RESOURCE_EXHAUSTED && ge.metadata?.get('kail-code')[0] === 'KAIL_E_BUDGET' && (await this.evictOne(e, model))) continue;
          throw err;
        }
      }
      await this.pool.probe(e);
      const done = this.loaded(model);
      if (!done) throw grpcError(grpc.status.UNAVAILABLE, `engine ${e.id} loaded '${model}' but no longer lists it`);
      // A fresh load starts with the default keep-alive (a request's own follows with it).
      this.kept.set(model, { keepAliveMs: this.keepAliveMs, lastUsed: Date.now() });
      return { ...done, loadedNow: true };
    }
    throw this.notFound(model, [...new Set(available)].sort());
  }
}
