import type { FastifyInstance } from 'fastify';
import { fastifyTRPCPlugin } from '@trpc/server/adapters/fastify';

import { contextFactory, type TrpcDeps } from './context';
import { appRouter, type AppRouter } from './router';
import { TelemetryHub, type TelemetryHubOptions } from './telemetry-hub';

export interface MountTrpcOptions extends Omit<TrpcDeps, 'telemetry'> {
  /** URL prefix. Default '/trpc'. */
  prefix?: string;
  telemetry?: TelemetryHubOptions;
}

/**
 * Mounts the console's tRPC router on the API's fastify server and starts following the
 * scheduler's telemetry (stopped when the server closes). Returns the hub for tests.
 */
export async function mountTrpc(app: FastifyInstance, opts: MountTrpcOptions): Promise<TelemetryHub> {
  const hub = new TelemetryHub(opts.scheduler, opts.telemetry);
  const deps: TrpcDeps = { scheduler: opts.scheduler, keys: opts.keys, authRequired: opts.authRequired, pulls: opts.pulls, telemetry: hub };
  await app.register(fastifyTRPCPlugin<AppRouter>, {
    prefix: opts.prefix ?? '/trpc',
    trpcOptions: { router: appRouter, createContext: contextFactory(deps) },
  });
  app.addHook('onClose', async () => hub.stop());
  if (opts.scheduler()) hub.start();
  return hub;
}

export type { AppRouter } from './router';
export type { KeyAdmin, TrpcDeps } from './context';
export type { TelemetryPoint, TierPoint, ExpertWindow, ExpertSource, ModelSlots } from './telemetry-hub';
export type { ModelView } from './routers/models';
export type { PullJob } from '../pull-jobs';
