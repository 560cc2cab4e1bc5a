import { common, scheduler as spb } from '@kailstream/proto';

import { unary } from '../grpc-call';
import { protectedProcedure, router } from '../trpc';

export const requestsRouter = router({
  /** The scheduler's queue (queued, running, capacity, per key) and its engines. */
  queue: protectedProcedure.query(async ({ ctx }) => {
    const s = ctx.deps.scheduler();
    const engines = await unary<spb.ListEnginesRequest, spb.ListEnginesResponse>(s, s?.listEngines, {});
    const last = ctx.deps.telemetry.recent(5).at(-1);
    return {
      queued: last?.queued ?? 0,
      running: last?.running ?? engines.engines.reduce((a, e) => a + e.running, 0),
      capacity: last?.queueCapacity ?? 0,
      engines: engines.engines.map((e) => ({
        engineId: e.engineId,
        address: e.address,
        serving: e.status === common.ServingStatus.SERVING_STATUS_SERVING,
        models: e.models,
        running: e.running,
        lastSeenUnixMs: e.lastSeenUnixMs,
      })),
    };
  }),
});
