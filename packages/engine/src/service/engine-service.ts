import * as grpc from '@grpc/grpc-js';
import { addStandardServices, bearerAuthInterceptors, bearerClientOptions, bindServer, MESSAGE_LIMITS, common, engine as pb, shutdownServer } from '@kailstream/proto';

import { toServiceError } from './grpc-status';
import type { ModelHost } from './model-host';
import { VERSION } from '../version';

export const ENGINE_SERVICE_NAME = 'kailstream.engine.v1.EngineService';

export interface EngineServerOptions {
  /** Interface to bind; default 127.0.0.1. */
  host?: string;
  /** Port; 0 (default) picks a free one. */
  port?: number;
  /** When set, every RPC but health needs `authorization: Bearer <token>` metadata (UNAUTHENTICATED otherwise). */
  authToken?: string;
}

export interface RunningEngineServer {
  server: grpc.Server;
  host: string;
  port: number;
  /** Stops the server (graceful, then forced after graceMs). */
  close(graceMs?: number): Promise<void>;
}

/** The EngineService implementation over a ModelHost (which owns models and generation). */
export function createEngineServiceImpl(host: ModelHost): pb.EngineServiceServer {
  const started = Date.now();
  return {
    health: (_call, cb) => {
      const h = host.health();
      cb(null, {
        status: h.ok ? common.ServingStatus.SERVING_STATUS_SERVING : common.ServingStatus.SERVING_STATUS_NOT_SERVING,
        version: VERSION,
        detail: h.detail,
        uptimeSeconds: (Date.now() - started) / 1000,
      });
    },
    listModels: (_call, cb) => {
      try {
        cb(null, { models: host.listModels() });
      } catch (e) {
        cb(toServiceError(e));
      }
    },
    loadModel: (call, cb) => {
      host.loadModel(call.request).then(
        (model) => cb(null, { model }),
        (e) => cb(toServiceError(e)),
      );
    },
    slotAction: (call, cb) => {
      try {
        cb(null, host.slotAction(call.request));
      } catch (e) {
        cb(toServiceError(e));
      }
    },
    setLoraAdapters: (call, cb) => {
      try {
        cb(null, { model: host.setLoraAdapters(call.request.model, call.request.lora) });
      } catch (e) {
        cb(toServiceError(e));
      }
    },
    unloadModel: (call, cb) => {
      host.unloadModel(call.request.id, call.request.ifIdle).then(
        () => cb(null, {}),
        (e) => cb(toServiceError(e)),
      );
    },
    generate: (call) => {
      const abort = new AbortController();
      call.on('cancelled', () => abort.abort());
      (async () => {
        for await (const chunk of host.generate(call.request, abort.signal)) {
          if (abort.signal.aborted) return;
          call.write(chunk);
        }
        call.end();
      })().catch((e) => {
        if (!abort.signal.aborted) call.emit('error', toServiceError(e));
      });
    },
    cancel: (call, cb) => {
      cb(null, { cancelled: host.cancel(call.request.requestId) });
    },
    listModelFiles: (_call, cb) => {
      host.listModelFiles().then(
        (res) => cb(null, res),
        (e) => cb(toServiceError(e)),
      );
    },
    deleteModelFile: (call, cb) => {
      host.deleteModelFile(call.request.id).then(
        (unloaded) => cb(null, { unloaded }),
        (e) => cb(toServiceError(e)),
      );
    },
    copyModelFile: (call, cb) => {
      const lora = call.request.lora.map((l) => ({ path: l.path, scale: l.scale }));
      (call.request.sourcePath ? host.importModelFile(call.request.sourcePath, call.request.destinationId, lora) : host.copyModelFile(call.request.sourceId, call.request.destinationId, lora)).then(
        () => cb(null, {}),
        (e) => cb(toServiceError(e)),
      );
    },
    planModel: (call, cb) => {
      host.planModel(call.request).then(
        (res) => cb(null, res),
        (e) => cb(toServiceError(e)),
      );
    },
    tokenize: (call, cb) => {
      try {
        cb(null, host.tokenize(call.request));
      } catch (e) {
        cb(toServiceError(e));
      }
    },
    detokenize: (call, cb) => {
      try {
        cb(null, { text: host.detokenize(call.request) });
      } catch (e) {
        cb(toServiceError(e));
      }
    },
    watchTelemetry: (call) => {
      const interval = Math.max(100, call.request.intervalMs || 1000);
      const send = () => {
        try {
          call.write(host.telemetry());
        } catch (e) {
          call.emit('error', toServiceError(e));
        }
      };
      send();
      const timer = setInterval(send, interval);
      const stop = () => clearInterval(timer);
      call.on('cancelled', stop);
      call.on('close', stop);
      call.on('error', stop);
    },
  };
}

/** Starts the engine gRPC service (with reflection and grpc.health.v1) on host:port. */
export async function startEngineServer(host: ModelHost, opts: EngineServerOptions = {}): Promise<RunningEngineServer> {
  const server = new grpc.Server({ ...MESSAGE_LIMITS, interceptors: bearerAuthInterceptors(opts.authToken) });
  server.addService(pb.EngineServiceService, createEngineServiceImpl(host));
  const standard = addStandardServices(server, [ENGINE_SERVICE_NAME]);
  const bindHost = opts.host ?? '127.0.0.1';
  const port = await bindServer(server, bindHost, opts.port ?? 0);
  // Keep grpc.health.v1 in step with the engine's own health.
  const timer = setInterval(() => {
    const ok = host.health().ok;
    standard.setStatus(ENGINE_SERVICE_NAME, ok ? 'SERVING' : 'NOT_SERVING');
    standard.setStatus('', ok ? 'SERVING' : 'NOT_SERVING');
  }, 1000);
  timer.unref();
  return {
    server,
    host: bindHost,
    port,
    close: async (graceMs) => {
      clearInterval(timer);
      await host.close();
      await shutdownServer(server, graceMs);
    },
  };
}

/** A client for the engine service at `address` (host:port); `token` adds the bearer metadata its --auth-token requires. */
export function createEngineClient(address: string, credentials = grpc.credentials.createInsecure(), token?: string): pb.EngineServiceClient {
  return new pb.EngineServiceClient(address, credentials, bearerClientOptions(token));
}
