// Load on demand, as Ollama does: a request that names a model no engine has loaded, but whose
// <id>.gguf lies in an engine's models directory, loads it there first and then runs. One load
// per model at a time (concurrent requests for it wait on the same one); a load the engine
// refuses (the file is malformed, the budget does not hold it) fails those requests with the
// engine's own error.
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
  /** Loads done on demand (for tests and the log). */
  loads = 0;

  constructor(
    private readonly pool: EnginePool,
    opts: ModelLoaderOptions = {},
  ) {
    this.enabled = opts.enabled ?? true;
    this.listTimeoutMs = opts.listTimeoutMs ?? 10_000;
  }

  /** The engine and model info for `model`, loading it first when it is not loaded anywhere. */
  ensure(model: string): Promise<Ensured> {
    const have = this.loaded(model);
    if (have) return Promise.resolve(have);
    if (!this.enabled) return Promise.reject(this.notFound(model, []));
    let p = this.inflight.get(model);
    if (!p) {
      p = this.load(model).finally(() => this.inflight.delete(model));
      this.inflight.set(model, p);
    }
    return p;
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

  private async load(model: string): Promise<Ensured> {
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
      try {
        await call<pb.LoadModelRequest, pb.LoadModelResponse>(e.client.loadModel.bind(e.client), pb.LoadModelRequest.fromPartial({ path: f.path, id: model }), 0);
        this.loads++;
      } catch (err) {
        // Loaded by someone else in the meantime: take theirs.
        if ((err as grpc.ServiceError).code !== grpc.status.ALREADY_EXISTS) throw err;
      }
      await this.pool.probe(e);
      const done = this.loaded(model);
      if (!done) throw grpcError(grpc.status.UNAVAILABLE, `engine ${e.id} loaded '${model}' but no longer lists it`);
      return { ...done, loadedNow: true };
    }
    throw this.notFound(model, [...new Set(available)].sort());
  }
}
