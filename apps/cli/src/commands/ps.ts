import fs from 'node:fs';
import path from 'node:path';
import type * as grpc from '@grpc/grpc-js';
import type { Command } from 'commander';
import type { scheduler as spb } from '@kailstream/proto';

import { dataDir } from '../paths';
import { isAlive, readServeState } from '../serve-state';

export interface PsReport {
  dataDir: string;
  running: boolean;
  supervisor?: { pid: number; startedAt: string };
  services: { name: string; address: string; pid: number | null; alive: boolean }[];
  /** Filled from the scheduler; `error` says why when it could not be asked. */
  scheduler?: {
    error?: string;
    engines: { engineId: string; address: string; status: string; models: string[]; running: number; lastSeenMsAgo: number | null }[];
    models: {
      id: string; engine?: string; architecture: string; contextLength: number; experts: string;
      /** The KV cache type (f16, q8_0, q4_0, ...: KV_TYPES); "K q8_0, V q4_0" when K's and V's differ. */
      kvType: string;
      /** LoRA adapters with their default scales. */
      lora: { path: string; scale: number }[];
      memory: { residentBytes: number; expertBytes: number; kvBytes: number; ramExpertCacheBytes: number; vramExpertCacheBytes: number };
    }[];
    /** Live tier occupancy per engine (from its telemetry). */
    tiers: { engineId: string; tier: string; usedBytes: number; budgetBytes: number; hits: number; misses: number }[];
    kv: { engineId: string; usedBytes: number; capacityBytes: number }[];
    queue?: { queued: number; running: number; capacity: number; queuedPerTenant: Record<string, number> };
  };
}

/**
 * grpc-js and the generated contracts, loaded when ps asks the scheduler: they take longer to load
 * than most kail commands take to run, so no command pays for them unless it talks gRPC.
 */
export function rpc(): { grpc: typeof import('@grpc/grpc-js'); proto: typeof import('@kailstream/proto') } {
  /* eslint-disable @typescript-eslint/no-require-imports */
  return { grpc: require('@grpc/grpc-js') as typeof import('@grpc/grpc-js'), proto: require('@kailstream/proto') as typeof import('@kailstream/proto') };
  /* eslint-enable @typescript-eslint/no-require-imports */
}

export function unary<Req, Res>(
  fn: (req: Req, md: grpc.Metadata, o: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: Res) => void) => unknown,
  req: Req,
  timeoutMs: number,
): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, new (rpc().grpc.Metadata)(), { deadline: Date.now() + timeoutMs }, (e, r) => (e ? reject(e) : resolve(r))));
}

/** First message of a server stream within timeoutMs (then cancels), or undefined. */
function firstOf<T>(open: () => grpc.ClientReadableStream<T>, timeoutMs: number, enough: (seen: T[]) => boolean = () => true): Promise<T[]> {
  return new Promise((resolve) => {
    const seen: T[] = [];
    const s = open();
    const finish = () => {
      clearTimeout(t);
      s.removeAllListeners('data');
      s.on('error', () => undefined);
      s.cancel();
      resolve(seen);
    };
    const t = setTimeout(finish, timeoutMs);
    s.on('data', (m: T) => {
      seen.push(m);
      if (enough(seen)) finish();
    });
    s.on('error', finish);
    s.on('end', finish);
  });
}

/** A client of the scheduler at `address` (plain channel, the bearer token when there is one). */
export function schedulerClient(address: string, token: string | undefined) {
  const { grpc: g, proto } = rpc();
  return new proto.scheduler.SchedulerServiceClient(address, g.credentials.createInsecure(), proto.bearerClientOptions(token));
}

async function askScheduler(address: string, token: string | undefined, timeoutMs: number): Promise<NonNullable<PsReport['scheduler']>> {
  const { proto } = rpc();
  const c = schedulerClient(address, token);
  const out: NonNullable<PsReport['scheduler']> = { engines: [], models: [], tiers: [], kv: [] };
  try {
    const [eng, models] = await Promise.all([
      unary<spb.ListEnginesRequest, spb.ListEnginesResponse>(c.listEngines.bind(c), {}, timeoutMs),
      unary<spb.ListModelsRequest, spb.ListModelsResponse>(c.listModels.bind(c), {}, timeoutMs),
    ]);
    const now = Date.now();
    out.engines = eng.engines.map((e) => ({
      engineId: e.engineId, address: e.address, status: proto.common.servingStatusToJSON(e.status).replace('SERVING_STATUS_', ''),
      models: e.models, running: e.running, lastSeenMsAgo: e.lastSeenUnixMs > 0 ? Math.round(now - e.lastSeenUnixMs) : null,
    }));
    out.models = models.models.map((m) => ({
      id: m.id,
      engine: eng.engines.find((e) => e.models.includes(m.id))?.engineId,
      architecture: m.architecture,
      contextLength: m.contextLength,
      experts: m.expertCount ? `${m.expertUsedCount}/${m.expertCount}` : '-',
      kvType: m.kvTypeV && m.kvTypeV !== m.kvType ? `K ${m.kvType}, V ${m.kvTypeV}` : m.kvType || 'f16',
      lora: m.loraAdapters.map((l) => ({ path: l.path, scale: l.scale })),
      memory: {
        residentBytes: m.residency?.residentBytes ?? 0, expertBytes: m.residency?.expertBytes ?? 0, kvBytes: m.residency?.kvBytes ?? 0,
        ramExpertCacheBytes: m.residency?.ramExpertCacheBytes ?? 0, vramExpertCacheBytes: m.residency?.vramExpertCacheBytes ?? 0,
      },
    }));
    const serving = out.engines.filter((e) => e.status === 'SERVING').length;
    const [queue, tele] = await Promise.all([
      firstOf(() => c.watchQueue({ intervalMs: 1000 }), timeoutMs),
      serving > 0 ? firstOf(() => c.watchTelemetry({ intervalMs: 250 }), timeoutMs, (seen) => new Set(seen.map((t) => t.engineId)).size >= serving) : Promise.resolve([]),
    ]);
    if (queue[0]) out.queue = { queued: queue[0].queued, running: queue[0].running, capacity: queue[0].capacity, queuedPerTenant: queue[0].queuedPerTenant };
    const latest = new Map<string, spb.EngineTelemetry>();
    for (const t of tele) latest.set(t.engineId, t);
    for (const t of latest.values()) {
      const s = t.snapshot;
      if (!s) continue;
      for (const tier of s.tiers) out.tiers.push({ engineId: t.engineId, tier: tier.tier, usedBytes: tier.usedBytes, budgetBytes: tier.budgetBytes, hits: tier.hits, misses: tier.misses });
      out.kv.push({ engineId: t.engineId, usedBytes: s.kvUsedBytes, capacityBytes: s.kvCapacityBytes });
    }
  } catch (e) {
    out.error = `scheduler at ${address} did not answer: ${(e as grpc.ServiceError).details || (e as Error).message}`;
  } finally {
    c.close();
  }
  return out;
}

/** The gRPC bearer token: $KAIL_GRPC_TOKEN, else the one `kail serve` keeps in the data directory (bound beyond loopback). */
export function grpcTokenOf(dir: string): string | undefined {
  const env = rpc().proto.AUTH_TOKEN_ENV;
  if (process.env[env]) return process.env[env];
  try {
    return fs.readFileSync(path.join(dir, 'grpc-token'), 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Everything `kail ps` shows, gathered from serve.json and the scheduler. */
export async function psReport(dir: string, timeoutMs = 3000): Promise<PsReport> {
  const state = readServeState(dir);
  if (!state) return { dataDir: dir, running: false, services: [] };
  const running = isAlive(state.pid);
  const report: PsReport = {
    dataDir: dir,
    running,
    supervisor: { pid: state.pid, startedAt: state.startedAt },
    services: Object.entries(state.services).map(([name, s]) => ({ name, address: s.address, pid: s.pid ?? null, alive: running && isAlive(s.pid) })),
  };
  const sched = state.services.scheduler;
  if (running && sched) report.scheduler = await askScheduler(sched.address, grpcTokenOf(dir), timeoutMs);
  return report;
}

const mib = (n: number) => (n >= 1 << 30 ? `${(n / (1 << 30)).toFixed(2)} GiB` : `${(n / (1 << 20)).toFixed(1)} MiB`);

function table(rows: string[][]): string[] {
  const w = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (c ?? '').padEnd(w[i])).join('  ').trimEnd());
}

export function formatPs(r: PsReport): string {
  if (!r.supervisor) return `no server is running on ${r.dataDir} (start one with kail serve)`;
  if (!r.running) return `the server recorded in ${r.dataDir}/serve.json (pid ${r.supervisor.pid}) is not running (kail stop removes the stale file)`;
  const out = [`kail serve pid ${r.supervisor.pid}, started ${r.supervisor.startedAt}, data dir ${r.dataDir}`, ''];
  out.push(...table([['SERVICE', 'ADDRESS', 'PID', 'STATE'], ...r.services.map((s) => [s.name, s.address, String(s.pid ?? '-'), s.alive ? 'running' : 'exited'])]));
  const sc = r.scheduler;
  if (!sc) return out.join('\n');
  if (sc.error) {
    out.push('', sc.error);
    return out.join('\n');
  }
  out.push('', ...table([['ENGINE', 'ADDRESS', 'STATUS', 'RUNNING', 'LAST PROBE', 'MODELS'], ...sc.engines.map((e) => [e.engineId, e.address, e.status, String(e.running), e.lastSeenMsAgo === null ? 'never' : `${(e.lastSeenMsAgo / 1000).toFixed(1)} s ago`, e.models.join(',') || '-'])]));
  if (sc.models.length)
    out.push('', ...table([['MODEL', 'ARCH', 'CTX', 'EXPERTS', 'RESIDENT', 'KV', 'RAM EXPERT CACHE', 'VRAM EXPERT CACHE', 'EXPERTS ON STORAGE'],
      ...sc.models.map((m) => [m.id, m.architecture, String(m.contextLength), m.experts, mib(m.memory.residentBytes), `${mib(m.memory.kvBytes)} ${m.kvType}`, mib(m.memory.ramExpertCacheBytes), mib(m.memory.vramExpertCacheBytes), mib(m.memory.expertBytes)])]));
  else out.push('', 'no model loaded');
  for (const m of sc.models) for (const l of m.lora) out.push(`LoRA ${m.id}: ${l.path} x ${l.scale}`);
  if (sc.tiers.length)
    out.push('', ...table([['ENGINE', 'TIER', 'USED', 'BUDGET', 'HIT RATE'],
      ...sc.tiers.map((t) => [t.engineId, t.tier, mib(t.usedBytes), mib(t.budgetBytes), t.hits + t.misses ? `${((100 * t.hits) / (t.hits + t.misses)).toFixed(1)}%` : '-'])]));
  for (const k of sc.kv) if (k.capacityBytes) out.push(`KV cache ${k.engineId}: ${mib(k.usedBytes)} of ${mib(k.capacityBytes)}`);
  if (sc.queue) {
    const per = Object.entries(sc.queue.queuedPerTenant).map(([t, n]) => `${t}:${n}`).join(' ');
    out.push('', `queue: ${sc.queue.queued} waiting, ${sc.queue.running} running, bound ${sc.queue.capacity || 'none'}${per ? ` (${per})` : ''}`);
  }
  return out.join('\n');
}

export function registerPs(program: Command): void {
  program
    .command('ps')
    .description('list the running services, addresses, loaded models, memory per tier and the queue')
    .option('--data-dir <dir>', 'data directory (default: $KAIL_DATA_DIR or ~/.kailstream)')
    .option('--json', 'print JSON')
    .action(async (o: { dataDir?: string; json?: boolean }) => {
      const r = await psReport(dataDir(o.dataDir));
      process.stdout.write((o.json ? JSON.stringify(r, null, 2) : formatPs(r)) + '\n');
    });
}
