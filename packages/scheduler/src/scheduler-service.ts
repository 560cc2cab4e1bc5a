import * as grpc from '@grpc/grpc-js';
import { addStandardServices, bearerAuthInterceptors, bindServer, MESSAGE_LIMITS, common, engine as pb, scheduler as spb, shutdownServer } from '@kailstream/proto';

import { clientOptions } from './auth';
import { ModelLoader } from './model-loader';
import { Dispatcher, grpcError, type DispatcherOptions } from './dispatcher';
import { EnginePool } from './engine-pool';
import { VERSION } from './version';

export const SCHEDULER_SERVICE_NAME = 'kailstream.scheduler.v1.SchedulerService';

export interface SchedulerServerOptions extends DispatcherOptions {
  host?: string;
  port?: number;
  /** Engine addresses to register at start. */
  engines?: string[];
  /** Health-probe interval for engines (ms). Default 2000. */
  probeIntervalMs?: number;
  /** Running slots per engine registered without its own. Default 8. */
  slotsPerEngine?: number;
  /** When set, every RPC but health needs `authorization: Bearer <token>`. */
  authToken?: string;
  /** Token sent to the engines (default: authToken). */
  engineToken?: string;
  /** Load a model named by a request from an engine's models directory when none has it (model-loader.ts). Default false. */
  loadOnDemand?: boolean;
  /** With loadOnDemand: how long a model loaded on demand stays after its last request (ms; negative: until unloaded). Default 300000. */
  keepAliveMs?: number;
  /** With loadOnDemand: most models per engine before the least recently used idle one makes room (0: memory decides). Default 0. */
  maxModels?: number;
}

export interface RunningSchedulerServer {
  server: grpc.Server;
  pool: EnginePool;
  dispatcher: Dispatcher;
  host: string;
  port: number;
  close(graceMs?: number): Promise<void>;
}

type Unary<Res> = (
  client: pb.EngineServiceClient,
  md: grpc.Metadata,
  opts: grpc.CallOptions,
  done: (e: grpc.ServiceError | null, r?: Res) => void,
) => unknown;

/** Runs a model-management call on one engine (by id, or the first healthy one) and refreshes it after changes. */
function passThrough<Res>(pool: EnginePool, engineId: string, fn: Unary<Res>, cb: grpc.sendUnaryData<Res>, refresh = false): void {
  const e = engineId ? pool.get(engineId) : pool.firstHealthy();
  if (!e) {
    const known = pool.list().map((x) => `${x.id} (${x.address})`);
    return cb(
      grpcError(
        engineId ? grpc.status.NOT_FOUND : grpc.status.UNAVAILABLE,
        engineId ? `no engine '${engineId}' is registered (registered: ${known.join(', ') || 'none'})` : `no healthy engine is registered (registered: ${known.join(', ') || 'none'})`,
      ),
    );
  }
  fn(e.client, new grpc.Metadata(), {}, (err, res) => {
    const reply = () => (err ? cb(err) : cb(null, res as Res));
    // After a load or unload, refresh the engine's model list before answering so dispatch sees it.
    if (refresh) void pool.probe(e).then(reply);
    else reply();
  });
}

/** Runs a call that names a model on a healthy engine that has it (tokenize, detokenize), loading it first on demand. */
function onModelEngine<Res>(dispatcher: Dispatcher, model: string, fn: Unary<Res>, cb: grpc.sendUnaryData<Res>): void {
  const pool = dispatcher.pool;
  // A model being unloaded: ask again once that is over (it loads back if it went).
  const leaving = dispatcher.loader?.whileLeaving(model);
  if (leaving) {
    void leaving.then(() => onModelEngine(dispatcher, model, fn, cb));
    return;
  }
  const e = pool.serving(model);
  if (!e) {
    if (!pool.knows(model)) {
      if (!dispatcher.loader) return cb(grpcError(grpc.status.NOT_FOUND, `no engine serves model '${model}' (served: ${pool.modelIds().join(', ') || 'none'})`, 'KAIL_E_NOT_FOUND'));
      dispatcher.loader.ensure(model).then(
        () => onModelEngine(dispatcher, model, fn, cb),
        (err: grpc.ServiceError) => cb(err),
      );
      return;
    }
    return cb(grpcError(grpc.status.UNAVAILABLE, `no healthy engine serves model '${model}' now`));
  }
  dispatcher.loader?.touch(model);
  fn(e.client, new grpc.Metadata(), {}, (err, res) => (err ? cb(err) : cb(null, res as Res)));
}

/** The SchedulerService: queues requests and dispatches them to registered engines. */
export function createSchedulerServiceImpl(dispatcher: Dispatcher): spb.SchedulerServiceServer {
  const pool = dispatcher.pool;
  const started = Date.now();
  return {
    health: (_call, cb) => {
      const engines = pool.list();
      const serving = engines.filter((e) => e.status === common.ServingStatus.SERVING_STATUS_SERVING).length;
      cb(null, {
        status: common.ServingStatus.SERVING_STATUS_SERVING,
        version: VERSION,
        detail: `${serving}/${engines.length} engine(s) serving`,
        uptimeSeconds: (Date.now() - started) / 1000,
      });
    },
    listModels: (_call, cb) => {
      const models = new Map<string, common.ModelInfo>();
      for (const e of pool.list()) {
        if (e.status !== common.ServingStatus.SERVING_STATUS_SERVING) continue;
        for (const m of e.models) if (!models.has(m.id)) models.set(m.id, m);
      }
      // A model that leaves when idle says when.
      cb(null, { models: [...models.values()].map((m) => ({ ...m, expiresAtUnixMs: dispatcher.loader?.expiresAt(m.id) ?? 0 })) });
    },
    registerEngine: (call, cb) => {
      if (!call.request.address) return cb(grpcError(grpc.status.INVALID_ARGUMENT, 'address is required (host:port)'));
      pool.register(call.request.address, call.request.slots).then(
        (e) => cb(null, { engineId: e.id }),
        (e) => cb(grpcError(grpc.status.UNAVAILABLE, (e as Error).message)),
      );
    },
    listEngines: (_call, cb) =>
      cb(null, {
        engines: pool.list().map((e) => ({
          engineId: e.id,
          address: e.address,
          status: e.status,
          models: e.models.map((m) => m.id),
          running: e.running,
          lastSeenUnixMs: e.lastSeenUnixMs,
          slots: e.slots,
          detail: e.detail,
        })),
      }),
    submit: (call) => dispatcher.submit(call),
    cancel: (call, cb) => cb(null, { cancelled: dispatcher.cancel(call.request.requestId) }),
    watchQueue: (call) => {
      const send = () => call.write(dispatcher.snapshot());
      send();
      const timer = setInterval(send, Math.max(100, call.request.intervalMs || 1000));
      const stop = () => clearInterval(timer);
      call.on('cancelled', stop);
      call.on('close', stop);
      call.on('error', stop);
    },
    listModelFiles: (call, cb) => passThrough(pool, call.request.engineId, (c, md, o, done) => c.listModelFiles({}, md, o, done), cb),
    planModel: (call, cb) => {
      if (!call.request.plan) return cb(grpcError(grpc.status.INVALID_ARGUMENT, 'plan is required'));
      passThrough(pool, call.request.engineId, (c, md, o, done) => c.planModel(call.request.plan!, md, o, done), cb);
    },
    loadModel: (call, cb) => {
      if (!call.request.load) return cb(grpcError(grpc.status.INVALID_ARGUMENT, 'load is required'));
      passThrough(pool, call.request.engineId, (c, md, o, done) => c.loadModel(call.request.load!, md, o, done), cb, true);
    },
    unloadModel: (call, cb) => {
      if (!call.request.unload) return cb(grpcError(grpc.status.INVALID_ARGUMENT, 'unload is required'));
      // Without an engine id: the engine that has the model.
      const id = call.request.unload.id;
      const engineId = call.request.engineId || pool.list().find((e) => e.models.some((m) => m.id === id))?.id || '';
      passThrough(pool, engineId, (c, md, o, done) => c.unloadModel(call.request.unload!, md, o, done), cb, true);
    },
    setLoraAdapters: (call, cb) => {
      if (!call.request.set) return cb(grpcError(grpc.status.INVALID_ARGUMENT, 'set is required'));
      const id = call.request.set.model;
      const engineId = call.request.engineId || pool.list().find((e) => e.models.some((m) => m.id === id))?.id || '';
      passThrough(pool, engineId, (c, md, o, done) => c.setLoraAdapters(call.request.set!, md, o, done), cb, true);
    },
    slotAction: (call, cb) => {
      if (!call.request.action) return cb(grpcError(grpc.status.INVALID_ARGUMENT, 'action is required'));
      const id = call.request.action.model;
      const engineId = call.request.engineId || pool.list().find((e) => e.models.some((m) => m.id === id))?.id || '';
      passThrough(pool, engineId, (c, md, o, done) => c.slotAction(call.request.action!, md, o, done), cb, true);
    },
    deleteModelFile: (call, cb) => {
      if (!call.request.delete) return cb(grpcError(grpc.status.INVALID_ARGUMENT, 'delete is required'));
      passThrough(pool, call.request.engineId, (c, md, o, done) => c.deleteModelFile(call.request.delete!, md, o, done), cb, true);
    },
    copyModelFile: (call, cb) => {
      if (!call.request.copy) return cb(grpcError(grpc.status.INVALID_ARGUMENT, 'copy is required'));
      passThrough(pool, call.request.engineId, (c, md, o, done) => c.copyModelFile(call.request.copy!, md, o, done), cb);
    },
    ensureModel: (call, cb) => {
      const model = call.request.model;
      if (!model) return cb(grpcError(grpc.status.INVALID_ARGUMENT, 'model is required'));
      const loader = dispatcher.loader;
      if (!loader) return cb(grpcError(grpc.status.UNIMPLEMENTED, 'this scheduler has no model loader'));
      loader.ensure(model, call.request.contextLength).then(
        (r) => {
          loader.touch(model, call.request.hasKeepAlive ? call.request.keepAliveMs : undefined);
          cb(null, { model: { ...r.model, expiresAtUnixMs: loader.expiresAt(model) }, engineId: r.engine.id, loadedNow: r.loadedNow });
        },
        (err: grpc.ServiceError) => cb(err),
      );
    },
    tokenize: (call, cb) => onModelEngine(dispatcher, call.request.model, (c, md, o, done) => c.tokenize(call.request, md, o, done), cb),
    detokenize: (call, cb) => onModelEngine(dispatcher, call.request.model, (c, md, o, done) => c.detokenize(call.request, md, o, done), cb),
    watchTelemetry: (call) => {
      const interval = Math.max(100, call.request.intervalMs || 1000);
      const streams = new Map<string, grpc.ClientReadableStream<pb.TelemetrySnapshot>>();
      let stopped = false;
      // Follow every engine, including ones registered or restarted after the watch began.
      const attach = () => {
        if (stopped) return;
        for (const e of pool.list()) {
          if (streams.has(e.id) || e.status !== common.ServingStatus.SERVING_STATUS_SERVING) continue;
          const s = e.client.watchTelemetry({ intervalMs: interval });
          streams.set(e.id, s);
          s.on('data', (snap: pb.TelemetrySnapshot) => {
            if (!stopped) call.write({ engineId: e.id, address: e.address, snapshot: snap });
          });
          const drop = () => {
            if (streams.get(e.id) === s) streams.delete(e.id);
          };
          s.on('error', drop);
          s.on('end', drop);
        }
      };
      attach();
      const timer = setInterval(attach, interval);
      const stop = () => {
        stopped = true;
        clearInterval(timer);
        for (const s of streams.values()) s.cancel();
        streams.clear();
      };
      call.on('cancelled', stop);
      call.on('close', stop);
      call.on('error', stop);
    },
  };
}

/** Starts the scheduler gRPC service (with reflection and grpc.health.v1). */
export async function startSchedulerServer(opts: SchedulerServerOptions = {}): Promise<RunningSchedulerServer> {
  const pool = new EnginePool({ defaultSlots: opts.slotsPerEngine, engineToken: opts.engineToken ?? opts.authToken });
  for (const address of opts.engines ?? []) await pool.register(address);
  pool.startProbing(opts.probeIntervalMs ?? 2000);
  const loader = new ModelLoader(pool, { enabled: !!opts.loadOnDemand, keepAliveMs: opts.keepAliveMs, maxModels: opts.maxModels });
  const dispatcher = new Dispatcher(pool, { ...opts, loader });
  const server = new grpc.Server({ ...MESSAGE_LIMITS, interceptors: bearerAuthInterceptors(opts.authToken) });
  server.addService(spb.SchedulerServiceService, createSchedulerServiceImpl(dispatcher));
  addStandardServices(server, [SCHEDULER_SERVICE_NAME]);
  const host = opts.host ?? '127.0.0.1';
  const port = await bindServer(server, host, opts.port ?? 0);
  return {
    server,
    pool,
    dispatcher,
    host,
    port,
    close: async (graceMs) => {
      dispatcher.close();
      loader.close();
      pool.close();
      await shutdownServer(server, graceMs);
    },
  };
}

/** A client for the scheduler at `address`; `token` adds the bearer metadata its --auth-token requires. */
export function createSchedulerClient(address: string, credentials = grpc.credentials.createInsecure(), token?: string): spb.SchedulerServiceClient {
  return new spb.SchedulerServiceClient(address, credentials, clientOptions(token));
}
