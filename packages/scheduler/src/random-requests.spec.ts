import fs from 'node:fs';

import * as grpc from '@grpc/grpc-js';
import { LocalModelHost, startEngineServer, type RunningEngineServer } from '@kailstream/engine';
import { tempDir, writeTestModel } from '@kailstream/engine/testing';
import { engine as pb, scheduler as spb } from '@kailstream/proto';

import { createSchedulerClient, startSchedulerServer, type RunningSchedulerServer } from './scheduler-service';

// Random calls at the scheduler's gRPC service, as a client in another language may make them:
// submissions with odd tenants, priorities and deadlines (NaN, past, infinite) or no request at
// all, and model management and engine registration with bad paths, ids and addresses. Each gets
// an answer or a status with a message, and the scheduler keeps serving. Seeded, so a failure
// reproduces.
jest.setTimeout(120_000);

describe('scheduler service under random requests', () => {
  const dir = tempDir();
  let engine: RunningEngineServer;
  let sched: RunningSchedulerServer;
  let client: spb.SchedulerServiceClient;

  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const host = new LocalModelHost({ seqsPerModel: 4, defaultContext: 128, modelsDir: dir });
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny', contextLength: 128, threads: 2 }));
    engine = await startEngineServer(host, { port: 0 });
    sched = await startSchedulerServer({ engines: [`127.0.0.1:${engine.port}`], slotsPerEngine: 4, maxQueued: 16, maxQueuedPerTenant: 8, probeIntervalMs: 200 });
    client = createSchedulerClient(`127.0.0.1:${sched.port}`);
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await sched?.close(100);
    await engine?.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const submit = (req: spb.SubmitRequest) =>
    new Promise<{ code: number; msg: string; tokens: number }>((resolve) => {
      const call = client.submit(req, { deadline: Date.now() + 60_000 });
      let tokens = 0;
      call.on('data', (m: pb.GenerateResponse) => (tokens += m.tokens.length));
      call.on('error', (e: grpc.ServiceError) => resolve({ code: e.code, msg: e.details, tokens }));
      call.on('end', () => resolve({ code: 0, msg: '', tokens }));
    });
  const unary = <Req, Res>(fn: (req: Req, md: grpc.Metadata, opts: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: Res) => void) => unknown, req: Req) =>
    new Promise<{ code: number; msg: string }>((resolve) => fn.call(client, req, new grpc.Metadata(), { deadline: Date.now() + 30_000 }, (e) => resolve(e ? { code: e.code, msg: e.details } : { code: 0, msg: '' })));

  it('answers each with tokens or a clear status, and keeps serving', async () => {
    let seed = Number(process.env.KAIL_FUZZ_SEED ?? 1);
    const rnd = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    const pick = <T,>(a: T[]) => a[Math.floor(rnd() * a.length)];
    const hist: Record<string, number> = {};
    const bad: string[] = [];
    const n = Number(process.env.KAIL_FUZZ_N ?? 150);
    const pending: Promise<void>[] = [];
    for (let i = 0; i < n; i++) {
      const kind = pick(['submit', 'submit', 'submit', 'submit', 'load', 'plan', 'unload', 'register', 'cancel']);
      let p: Promise<{ code: number; msg: string }>;
      let what: string;
      if (kind === 'submit') {
        const gen = rnd() < 0.1 ? undefined : pb.GenerateRequest.fromPartial({ requestId: pick(['', `s${i}`, 's-dup']), model: pick(['tiny', 'tiny', 'nope', '']), prompt: pick(['hi', '', 'x'.repeat(500)]), maxTokens: pick([0, 2, 4, 4294967295]), ignoreEos: rnd() < 0.5 });
        if (gen && gen.maxTokens > 8) gen.maxTokens = rnd() < 0.9 ? 4 : gen.maxTokens;
        const req = spb.SubmitRequest.fromPartial({ generate: gen, tenant: pick(['', 'a', 'b', 'x'.repeat(10000), '\u0000']), priority: pick([0, 1, -1, 2147483647, -2147483648]), deadlineUnixMs: pick([0, 0, NaN, -1, 1, Date.now() + 60_000, Infinity, -Infinity, 1e300]) });
        what = JSON.stringify(spb.SubmitRequest.toJSON(req)).slice(0, 300);
        p = submit(req);
      } else if (kind === 'load') {
        const req = spb.LoadModelRequest.fromPartial({ load: pb.LoadModelRequest.fromPartial({ path: pick(['', '/nonexistent.gguf', dir, '../../etc/passwd', `${dir}/none.gguf`]), id: pick(['', 'x', 'tiny']), contextLength: pick([0, 1, 4294967295]), threads: pick([0, 1, 1000]) }), engineId: pick(['', 'nope']) });
        what = `load ${JSON.stringify(spb.LoadModelRequest.toJSON(req))}`;
        p = unary(client.loadModel, req);
      } else if (kind === 'plan') {
        const req = spb.PlanModelRequest.fromPartial({ plan: pb.PlanModelRequest.fromPartial({ path: pick(['', '/nonexistent.gguf', dir]) }), engineId: pick(['', 'nope']) });
        what = `plan ${JSON.stringify(spb.PlanModelRequest.toJSON(req))}`;
        p = unary(client.planModel, req);
      } else if (kind === 'unload') {
        const req = spb.UnloadModelRequest.fromPartial({ unload: pb.UnloadModelRequest.fromPartial({ id: pick(['', 'nope', 'x']) }), engineId: pick(['', 'nope']) });
        what = `unload ${JSON.stringify(spb.UnloadModelRequest.toJSON(req))}`;
        p = unary(client.unloadModel, req);
      } else if (kind === 'register') {
        const req = spb.RegisterEngineRequest.fromPartial({ address: pick(['', 'nonsense', 'localhost:0', '[::1', 'x'.repeat(3000)]) });
        what = `register ${JSON.stringify(spb.RegisterEngineRequest.toJSON(req)).slice(0, 200)}`;
        p = unary(client.registerEngine, req);
      } else {
        const req = spb.CancelRequest.fromPartial({ requestId: pick(['', 's-dup', 'nope']) });
        what = `cancel ${JSON.stringify(req)}`;
        p = unary(client.cancel, req);
      }
      const settled = p.then((r) => {
        hist[r.code] = (hist[r.code] ?? 0) + 1;
        if (r.code === grpc.status.INTERNAL || r.code === grpc.status.UNKNOWN || (r.code !== 0 && !r.msg)) bad.push(`${r.code} ${r.msg} <- ${what}`);
      });
      // A few at a time, so queueing and fairness paths run too.
      pending.push(settled);
      if (pending.length >= 6) await Promise.all(pending.splice(0));
    }
    await Promise.all(pending);
    const ok = await submit(spb.SubmitRequest.fromPartial({ generate: pb.GenerateRequest.fromPartial({ requestId: 'final', model: 'tiny', prompt: 'hello', maxTokens: 4, ignoreEos: true }), tenant: 't' }));
    expect(bad).toEqual([]);
    expect(hist[0]).toBeGreaterThan(10);
    expect(ok).toMatchObject({ code: 0, tokens: 4 });
    const engines = await new Promise<spb.ListEnginesResponse>((resolve, reject) => client.listEngines({}, (e, r) => (e ? reject(e) : resolve(r))));
    expect(engines.engines.some((e) => e.address === `127.0.0.1:${engine.port}`)).toBe(true);
  });
});
