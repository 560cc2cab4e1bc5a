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
