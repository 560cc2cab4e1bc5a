import Fastify, { type FastifyInstance } from 'fastify';
import * as grpc from '@grpc/grpc-js';
import { common, scheduler as spb } from '@kailstream/proto';

import type { ApiConfig } from './env';
import { registerOpenAiRoutes } from './openai/routes';
import { openAiError } from './openai/schemas';
import { mountTrpc } from './trpc';
import { VERSION } from './version';

export interface RunningApi {
  app: FastifyInstance;
  url: string;
  close(): Promise<void>;
}


/** Builds the HTTP API. Routes grow with the services issue; this is the public door. */
export async function startApi(config: ApiConfig): Promise<RunningApi> {
  const app = Fastify({ logger: false });
  const scheduler = config.schedulerAddress
    ? new spb.SchedulerServiceClient(config.schedulerAddress, grpc.credentials.createInsecure())
    : undefined;

  // Liveness: the process is up and its event loop answers.
  app.get('/health', async () => ({ status: 'ok', version: VERSION }));

  app.get('/v1/models', async (_req, reply) => {
    if (!scheduler) return { object: 'list', data: [] };
    try {
      const res = await new Promise<spb.ListModelsResponse>((resolve, reject) =>
        scheduler.listModels({}, new grpc.Metadata(), { deadline: Date.now() + 5000 }, (e, r) => (e ? reject(e) : resolve(r))),
      );
      return {
        object: 'list',
        data: res.models.map((m: common.ModelInfo) => ({ id: m.id, object: 'model', created: 0, owned_by: 'kailstream' })),
      };
    } catch (e) {
      return reply.code(503).send(openAiError(`scheduler unavailable: ${(e as Error).message}`, 'service_unavailable'));
    }
  });

  registerOpenAiRoutes(app, { scheduler: () => scheduler, tenantOf: () => 'anonymous' });

  // The console's tRPC router (apps/api/src/trpc); a key is required under the same rule as the routes.
  const loopback = ['127.0.0.1', 'localhost', '::1'].includes(config.host);
  await mountTrpc(app, { scheduler: () => scheduler, authRequired: () => !loopback });

  app.setNotFoundHandler((req, reply) => {
    reply.code(404).send(openAiError(`no route ${req.method} ${req.url}`, 'invalid_request_error', null, 'not_found'));
  });
  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, _req, reply) => {
    // Fastify's own errors (malformed JSON, wrong content type, body too large) carry a 4xx status.
    const status = err.statusCode && err.statusCode >= 400 && err.statusCode < 600 ? err.statusCode : 500;
    reply.code(status).send(openAiError(err.message, status < 500 ? 'invalid_request_error' : 'server_error', null, err.code ?? null));
  });

  await app.listen({ host: config.host, port: config.port });
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.port;
  const hostForUrl = config.host.includes(':') ? `[${config.host}]` : config.host;
  return {
    app,
    url: `http://${hostForUrl}:${port}`,
    close: async () => {
      scheduler?.close();
      await app.close();
    },
  };
}
