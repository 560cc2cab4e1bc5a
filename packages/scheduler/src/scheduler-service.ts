import * as grpc from '@grpc/grpc-js';
import { addStandardServices, bindServer, common, engine as pb, scheduler as spb, shutdownServer } from '@kailstream/proto';

import { EnginePool } from './engine-pool';
import { VERSION } from './version';

export const SCHEDULER_SERVICE_NAME = 'kailstream.scheduler.v1.SchedulerService';

export interface SchedulerServerOptions {
  host?: string;
  port?: number;
  /** Engine addresses to register at start. */
  engines?: string[];
  /** Health-probe interval for engines (ms). */
  probeIntervalMs?: number;
}

export interface RunningSchedulerServer {
  server: grpc.Server;
  pool: EnginePool;
  host: string;
  port: number;
  close(graceMs?: number): Promise<void>;
}

function grpcError(code: grpc.status, message: string): grpc.ServiceError {
  return Object.assign(new Error(message), { code, details: message, metadata: new grpc.Metadata() });
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
        engineId ? `no engine '${engineId}' is registered (registered: ${known.join(', ') || 'none'})` : 'no healthy engine is registered',
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

/** The SchedulerService: accepts requests and dispatches them to registered engines. */
export function createSchedulerServiceImpl(pool: EnginePool): spb.SchedulerServiceServer {
  const started = Date.now();
  const running = new Map<string, { engine: string; call: grpc.ClientReadableStream<pb.GenerateResponse> }>();
  return {
    health: (_call, cb) =>
      cb(null, {
        status: common.ServingStatus.SERVING_STATUS_SERVING,
        version: VERSION,
        detail: `${pool.list().length} engine(s) registered`,
        uptimeSeconds: (Date.now() - started) / 1000,
      }),
    listModels: (_call, cb) => {
      const models = new Map<string, common.ModelInfo>();
      for (const e of pool.list()) {
        if (e.status !== common.ServingStatus.SERVING_STATUS_SERVING) continue;
        for (const m of e.models) if (!models.has(m.id)) models.set(m.id, m);
      }
      cb(null, { models: [...models.values()] });
    },
    registerEngine: (call, cb) => {
      if (!call.request.address) return cb(grpcError(grpc.status.INVALID_ARGUMENT, 'address is required (host:port)'));
      pool.register(call.request.address).then(
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
        })),
      }),
    submit: (call) => {
      const req = call.request.generate;
      if (!req || !req.model) {
        call.emit('error', grpcError(grpc.status.INVALID_ARGUMENT, 'generate.model is required'));
        return;
      }
      const engine = pool.pick(req.model);
      if (!engine) {
        call.emit('error', grpcError(grpc.status.NOT_FOUND, `no healthy engine serves model '${req.model}'`));
        return;
      }
      engine.running++;
      const upstream = engine.client.generate(req);
      running.set(req.requestId, { engine: engine.id, call: upstream });
      const done = () => {
        if (running.delete(req.requestId)) engine.running--;
      };
      call.on('cancelled', () => {
        upstream.cancel();
        done();
      });
      upstream.on('data', (chunk: pb.GenerateResponse) => call.write(chunk));
      upstream.on('end', () => {
        done();
        call.end();
      });
      upstream.on('error', (e: grpc.ServiceError) => {
        done();
        if (e.code !== grpc.status.CANCELLED) call.emit('error', e);
      });
    },
    cancel: (call, cb) => {
      const r = running.get(call.request.requestId);
      if (r) r.call.cancel();
      cb(null, { cancelled: !!r });
    },
    listModelFiles: (call, cb) =>
      passThrough(pool, call.request.engineId, (c, md, o, done) => c.listModelFiles({}, md, o, done), cb),
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
      passThrough(pool, call.request.engineId, (c, md, o, done) => c.unloadModel(call.request.unload!, md, o, done), cb, true);
    },
    watchTelemetry: (call) => {
      const interval = Math.max(100, call.request.intervalMs || 1000);
      const streams = new Map<string, grpc.ClientReadableStream<pb.TelemetrySnapshot>>();
      let stopped = false;
      // Follow every engine, including ones registered after the watch began; reconnect after errors.
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
    watchQueue: (call) => {
      const send = () =>
        call.write({ queued: 0, running: running.size, capacity: 0, queuedPerTenant: {} });
      send();
      const timer = setInterval(send, Math.max(100, call.request.intervalMs || 1000));
      const stop = () => clearInterval(timer);
      call.on('cancelled', stop);
      call.on('close', stop);
    },
  };
}

/** Starts the scheduler gRPC service (with reflection and grpc.health.v1). */
export async function startSchedulerServer(opts: SchedulerServerOptions = {}): Promise<RunningSchedulerServer> {
  const pool = new EnginePool();
  for (const address of opts.engines ?? []) await pool.register(address);
  pool.startProbing(opts.probeIntervalMs ?? 2000);
  const server = new grpc.Server();
  server.addService(spb.SchedulerServiceService, createSchedulerServiceImpl(pool));
  addStandardServices(server, [SCHEDULER_SERVICE_NAME]);
  const host = opts.host ?? '127.0.0.1';
  const port = await bindServer(server, host, opts.port ?? 0);
  return {
    server,
    pool,
    host,
    port,
    close: async (graceMs) => {
      pool.close();
      await shutdownServer(server, graceMs);
    },
  };
}

export function createSchedulerClient(address: string, credentials = grpc.credentials.createInsecure()): spb.SchedulerServiceClient {
  return new spb.SchedulerServiceClient(address, credentials);
}
