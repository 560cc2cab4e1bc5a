import * as grpc from '@grpc/grpc-js';
import { common, scheduler as spb } from '@kailstream/proto';

export interface Readiness {
  ready: boolean;
  /** Why not ready (empty when ready). */
  reason: string;
  engines: { engineId: string; address: string; status: string; models: string[]; lastSeenMsAgo: number | null }[];
}

/**
 * Ready = the scheduler answers, and at least one engine is SERVING, has a model loaded and
 * answered the scheduler's health probe within `maxAgeMs`. An engine that hangs stops answering
 * the probe, so readiness goes false even while its process (and our /health) is alive.
 */
export async function readiness(scheduler: spb.SchedulerServiceClient | undefined, maxAgeMs: number, timeoutMs = 2000): Promise<Readiness> {
  if (!scheduler) return { ready: false, reason: 'no scheduler is configured', engines: [] };
  let res: spb.ListEnginesResponse;
  try {
    res = await new Promise<spb.ListEnginesResponse>((resolve, reject) =>
      scheduler.listEngines({}, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (e, r) => (e ? reject(e) : resolve(r!))),
    );
  } catch (e) {
    return { ready: false, reason: `scheduler did not answer: ${(e as grpc.ServiceError).details || (e as Error).message}`, engines: [] };
  }
  const now = Date.now();
  const engines = res.engines.map((e) => ({
    engineId: e.engineId,
    address: e.address,
    status: common.servingStatusToJSON(e.status),
    models: e.models,
    lastSeenMsAgo: e.lastSeenUnixMs > 0 ? Math.max(0, Math.round(now - e.lastSeenUnixMs)) : null,
  }));
  const ok = res.engines.some(
    (e) => e.status === common.ServingStatus.SERVING_STATUS_SERVING && e.models.length > 0 && e.lastSeenUnixMs > 0 && now - e.lastSeenUnixMs <= maxAgeMs,
  );
  if (ok) return { ready: true, reason: '', engines };
  let reason: string;
  if (res.engines.length === 0) reason = 'no engine is registered with the scheduler';
  else if (!res.engines.some((e) => e.status === common.ServingStatus.SERVING_STATUS_SERVING)) reason = 'no engine is serving (the last health probe failed)';
  else if (!res.engines.some((e) => e.models.length > 0)) reason = 'no model is loaded';
  else reason = `no serving engine with a model answered a probe in the last ${maxAgeMs} ms`;
  return { ready: false, reason, engines };
}
