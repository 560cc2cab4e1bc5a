import fs from 'node:fs';

import * as grpc from '@grpc/grpc-js';
import { LocalModelHost, startEngineServer, type RunningEngineServer } from '@kailstream/engine';
import { tempDir, testHardwareProfile, writeTestModel } from '@kailstream/engine/testing';
import { common, engine as pb, scheduler as spb } from '@kailstream/proto';

import { createSchedulerClient, startSchedulerServer, type RunningSchedulerServer } from './scheduler-service';

function unary<Req, Res>(fn: (req: Req, cb: (err: grpc.ServiceError | null, res: Res) => void) => unknown, req: Req): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, (err, res) => (err ? reject(err) : resolve(res))));
}

function collect(stream: grpc.ClientReadableStream<pb.GenerateResponse>): Promise<pb.GenerateResponse[]> {
  const chunks: pb.GenerateResponse[] = [];
  return new Promise((resolve, reject) => {
    stream.on('data', (c: pb.GenerateResponse) => chunks.push(c));
    stream.on('end', () => resolve(chunks));
    stream.on('error', reject);
  });
}

interface Watched {
  chunks: pb.GenerateResponse[];
  first: Promise<void>;
  done: Promise<{ chunks: pb.GenerateResponse[]; error?: grpc.ServiceError }>;
  stream: grpc.ClientReadableStream<pb.GenerateResponse>;
}

function watch(stream: grpc.ClientReadableStream<pb.GenerateResponse>): Watched {
  const chunks: pb.GenerateResponse[] = [];
  let gotFirst!: () => void;
  const first = new Promise<void>((r) => (gotFirst = r));
  const done = new Promise<{ chunks: pb.GenerateResponse[]; error?: grpc.ServiceError }>((resolve) => {
    stream.on('data', (c: pb.GenerateResponse) => {
      chunks.push(c);
      gotFirst();
    });
    stream.on('end', () => resolve({ chunks }));
    stream.on('error', (error: grpc.ServiceError) => resolve({ chunks, error }));
  });
  return { chunks, first, done, stream };
}

// Long enough to still be running while the test acts (thousands of tokens, end-of-text ignored).
const LONG: Partial<pb.GenerateRequest> = { prompt: 'Once upon a time', maxTokens: 4000, ignoreEos: true, sampling: common.SamplingParams.fromPartial({ temperature: 0 }) };

// (Deadlines for conditions that hold within milliseconds on an idle machine; generous, for a loaded one.)
const until = async (cond: () => boolean | Promise<boolean>, ms = 15_000) => {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
};

// A real engine service in-process with the project's tiny MoE model.
describe('scheduler gRPC service', () => {
  const dir = tempDir();
  let file: string;
  let engine: RunningEngineServer;
  let sched: RunningSchedulerServer;
  let client: spb.SchedulerServiceClient;

  beforeAll(async () => {
    file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    engine = await startEngineServer(new LocalModelHost({ seqsPerModel: 2, defaultContext: 256, modelsDir: dir }), { port: 0 });
    sched = await startSchedulerServer({ host: 'localhost', port: 0 });
    client = createSchedulerClient(`localhost:${sched.port}`);
  }, 60_000);

  afterAll(async () => {
    client.close();
    await sched.close(100);
    await engine.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('answers health', async () => {
    const res = await unary<common.HealthRequest, common.HealthResponse>(client.health.bind(client), {});
    expect(res.status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
  });

  it('registers an engine, loads a model through it and lists it', async () => {
    await unary(client.registerEngine.bind(client), { address: `127.0.0.1:${engine.port}`, slots: 0 });
    const files = await unary<spb.ListModelFilesRequest, pb.ListModelFilesResponse>(client.listModelFiles.bind(client), { engineId: '' });
    expect(files.files.map((f) => f.id)).toEqual(['tiny-qwen3moe-F32-1']);
    const load = await unary<spb.LoadModelRequest, pb.LoadModelResponse>(
      client.loadModel.bind(client),
      spb.LoadModelRequest.fromPartial({ load: { path: 'tiny-qwen3moe-F32-1', id: 'tiny' } }),
    );
    expect(load.model?.loaded).toBe(true);
    const engines = await unary<spb.ListEnginesRequest, spb.ListEnginesResponse>(client.listEngines.bind(client), {});
    expect(engines.engines).toHaveLength(1);
    expect(engines.engines[0].status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
    expect(engines.engines[0].models).toEqual(['tiny']);
    const models = await unary<spb.ListModelsRequest, spb.ListModelsResponse>(client.listModels.bind(client), {});
    expect(models.models.map((m) => m.id)).toEqual(['tiny']);
  });

  it('dispatches a submitted request to the engine and streams its output back', async () => {
    const chunks = await collect(client.submit(spb.SubmitRequest.fromPartial({ tenant: 't', generate: { requestId: 'r1', model: 'tiny', prompt: 'Hello', maxTokens: 5 } })));
    const last = chunks.at(-1)!;
    expect(last.usage?.completionTokens).toBe(chunks.flatMap((c) => c.tokens).length);
    expect([common.FinishReason.FINISH_REASON_LENGTH, common.FinishReason.FINISH_REASON_STOP]).toContain(last.finishReason);
  });

  it('refuses a model no engine serves with NOT_FOUND', async () => {
    const err = await collect(client.submit(spb.SubmitRequest.fromPartial({ generate: { requestId: 'r2', model: 'missing', prompt: 'x' } }))).catch((e) => e as grpc.ServiceError);
    expect((err as grpc.ServiceError).code).toBe(grpc.status.NOT_FOUND);
  });

  it('tokenizes and detokenizes on an engine that has the model, with pieces, and names a model none has', async () => {
    const tok = await unary<pb.TokenizeRequest, pb.TokenizeResponse>(client.tokenize.bind(client), pb.TokenizeRequest.fromPartial({ model: 'tiny', text: 'Hello world', withPieces: true }));
    expect(tok.tokens.length).toBeGreaterThan(1);
    expect(tok.pieces).toHaveLength(tok.tokens.length);
    expect(Buffer.concat(tok.pieces).toString('utf8')).toBe('Hello world');
    const det = await unary<pb.DetokenizeRequest, pb.DetokenizeResponse>(client.detokenize.bind(client), pb.DetokenizeRequest.fromPartial({ model: 'tiny', tokens: tok.tokens }));
    expect(det.text).toBe('Hello world');
    const err = await unary(client.tokenize.bind(client), pb.TokenizeRequest.fromPartial({ model: 'missing', text: 'x' })).catch((e) => e as grpc.ServiceError);
    expect((err as grpc.ServiceError).code).toBe(grpc.status.NOT_FOUND);
    expect((err as grpc.ServiceError).details).toMatch(/no engine serves model 'missing' \(served: tiny\)/);
  });

  it('merges engine telemetry with the engine id', async () => {
    const call = client.watchTelemetry({ intervalMs: 100 });
    const first = await new Promise<spb.EngineTelemetry>((resolve, reject) => {
      call.on('data', (t: spb.EngineTelemetry) => resolve(t));
      call.on('error', reject);
    });
    call.cancel();
    expect(first.engineId).toBe('engine-1');
    expect(first.snapshot?.models.map((m) => m.model)).toEqual(['tiny']);
    expect(first.snapshot?.kvCapacityBytes).toBeGreaterThan(0);
  });
});

describe('scheduler queueing: bound, concurrency, cancellation, deadlines, disconnects', () => {
  const dir = tempDir();
  let host: LocalModelHost;
  let engine: RunningEngineServer;
  let sched: RunningSchedulerServer;
  let client: spb.SchedulerServiceClient;
  let engineClient: pb.EngineServiceClient;
  const submit = (id: string, tenant: string, gen: Partial<pb.GenerateRequest> = LONG, extra: Partial<spb.SubmitRequest> = {}) =>
    watch(client.submit(spb.SubmitRequest.fromPartial({ tenant, ...extra, generate: { requestId: id, model: 'tiny', ...gen } })));
  const short = { prompt: 'Hi', maxTokens: 3 };

  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    host = new LocalModelHost({ seqsPerModel: 4, defaultContext: 4096 });
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny' }));
    engine = await startEngineServer(host, { port: 0 });
    // One running slot on the engine, so requests queue.
    sched = await startSchedulerServer({ engines: [`127.0.0.1:${engine.port}`], slotsPerEngine: 1, maxQueued: 2, maxQueuedPerTenant: 2, probeIntervalMs: 500 });
    client = createSchedulerClient(`127.0.0.1:${sched.port}`);
    engineClient = new pb.EngineServiceClient(`127.0.0.1:${engine.port}`, grpc.credentials.createInsecure());
  }, 60_000);

  afterAll(async () => {
    client.close();
    engineClient.close();
    await sched.close(100);
    await engine.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('runs one request per slot, queues the next ones, refuses past the bound with RESOURCE_EXHAUSTED, and reports the queue', async () => {
    const long = submit('L1', 'a');
    await long.first;
    const q1 = submit('Q1', 'b', short);
    const q2 = submit('Q2', 'c', short);
    await until(() => sched.dispatcher.snapshot().queued === 2);
    const over = await submit('Q3', 'd', short).done;
    expect(over.error?.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(over.error?.details).toContain('queue is full (2 requests waiting, limit 2)');
    expect(Number(over.error?.metadata.get('retry-after-ms')[0])).toBeGreaterThan(0);

    const wq = client.watchQueue({ intervalMs: 100 });
    wq.on('error', () => undefined);
    const snap = await new Promise<spb.QueueSnapshot>((resolve) => wq.on('data', resolve));
    wq.cancel();
    expect(snap).toEqual({ queued: 2, running: 1, capacity: 2, queuedPerTenant: { b: 1, c: 1 } });

    // Cancel reaches the engine within a decode step: the stream ends with CANCELLED a token or two later.
    const cancelled = await unary<spb.CancelRequest, spb.CancelResponse>(client.cancel.bind(client), { requestId: 'L1' });
    const atReply = host.telemetry().tokensGenerated; // only L1 has run on this engine so far
    expect(cancelled.cancelled).toBe(true);
    const l = await long.done;
    expect(l.error).toBeUndefined();
    expect(l.chunks.at(-1)?.finishReason).toBe(common.FinishReason.FINISH_REASON_CANCELLED);
    expect(l.chunks.at(-1)!.usage!.completionTokens - atReply).toBeLessThanOrEqual(1);
    expect((await q1.done).error).toBeUndefined();
    expect((await q2.done).error).toBeUndefined();
    expect(sched.dispatcher.snapshot()).toMatchObject({ queued: 0, running: 0 });
  }, 30_000);

  it('cancels a queued request without running it', async () => {
    const long = submit('L2', 'a');
    await long.first;
    const q = submit('Q4', 'b', short);
    await until(() => sched.dispatcher.snapshot().queued === 1);
    expect((await unary<spb.CancelRequest, spb.CancelResponse>(client.cancel.bind(client), { requestId: 'Q4' })).cancelled).toBe(true);
    const r = await q.done;
    expect(r.chunks).toHaveLength(1);
    expect(r.chunks[0].finishReason).toBe(common.FinishReason.FINISH_REASON_CANCELLED);
    expect(r.chunks[0].usage?.completionTokens).toBe(0);
    await unary(client.cancel.bind(client), { requestId: 'L2' });
    await long.done;
  }, 30_000);

  it('expires a queued request at its deadline and cancels a running one at its deadline', async () => {
    // (The queued request's deadline passes while the slot is still busy with a request that runs
    // until cancelled: it did with one whose own deadline was 500 ms later, until a loaded machine
    // took that long for the first token, and the queued request ran instead.)
    const long = submit('L3', 'a');
    let longDone = false;
    void long.done.then(() => (longDone = true));
    await long.first;
    const queued = await submit('Q5', 'b', short, { deadlineUnixMs: Date.now() + 300 }).done;
    expect(queued.error?.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(queued.error?.details).toMatch(/deadline passed after \d+ ms in the queue/);
    expect(longDone).toBe(false);
    expect(sched.dispatcher.snapshot()).toMatchObject({ queued: 0, running: 1 });
    await unary(client.cancel.bind(client), { requestId: 'L3' });
    await long.done;
    await until(() => sched.dispatcher.snapshot().running === 0);
    // A running request's deadline: it is dispatched at once (the slot is free) and stopped at it.
    const l = await submit('L3b', 'a', LONG, { deadlineUnixMs: Date.now() + 500 }).done;
    expect(l.error?.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(l.error?.details).toContain('while running on engine-1');
    // The engine stopped it too.
    await until(() => host.telemetry().runningRequests === 0);
    const past = await submit('Q6', 'b', short, { deadlineUnixMs: Date.now() - 1 }).done;
    expect(past.error?.code).toBe(grpc.status.DEADLINE_EXCEEDED);
  }, 30_000);

  it('stops the engine work when the client disconnects, and frees the slot', async () => {
    const long = submit('L4', 'a');
    await long.first;
    expect(host.telemetry().runningRequests).toBe(1);
    long.stream.cancel();
    await until(() => host.telemetry().runningRequests === 0);
    await until(() => sched.dispatcher.snapshot().running === 0);
    const next = await submit('S1', 'b', short).done;
    expect(next.error).toBeUndefined();
  }, 30_000);

  it('serves a light tenant before a heavy one that queued first, and higher priority before both', async () => {
    const fair = await startSchedulerServer({ engines: [`127.0.0.1:${engine.port}`], slotsPerEngine: 1, maxQueued: 16, maxQueuedPerTenant: 16 });
    const fc = createSchedulerClient(`127.0.0.1:${fair.port}`);
    try {
      const order: string[] = [];
      const go = (id: string, tenant: string, priority = 0, gen: Partial<pb.GenerateRequest> = short) => {
        const w = watch(fc.submit(spb.SubmitRequest.fromPartial({ tenant, priority, generate: { requestId: id, model: 'tiny', ...gen } })));
        void w.first.then(() => order.push(id));
        return w;
      };
      const hold = go('hold', 'heavy', 0, LONG);
      await hold.first;
      // Each heavy request asks for more tokens than a round's credit (256); the light one for 3.
      const big = { prompt: 'Hi', maxTokens: 300 };
      const queued = [go('h1', 'heavy', 0, big), go('h2', 'heavy', 0, big), go('h3', 'heavy', 0, big)];
      await until(() => fair.dispatcher.snapshot().queued === 3);
      queued.push(go('l1', 'light'));
      await until(() => fair.dispatcher.snapshot().queued === 4);
      queued.push(go('urgent', 'heavy', 5));
      await until(() => fair.dispatcher.snapshot().queued === 5);
      await unary(fc.cancel.bind(fc), { requestId: 'hold' });
      await hold.done;
      for (const w of queued) expect((await w.done).error).toBeUndefined();
      // Priority first; then the light tenant gets its turn before the heavy tenant's backlog.
      expect(order[0]).toBe('hold');
      expect(order[1]).toBe('urgent');
      expect(order.indexOf('l1')).toBe(2);
      expect(order.filter((x) => x.startsWith('h') && x !== 'hold')).toEqual(['h1', 'h2', 'h3']);
    } finally {
      fc.close();
      await fair.close(100);
    }
  }, 30_000);

  it('refuses a duplicate request id', async () => {
    const long = submit('L5', 'a');
    await long.first;
    const dup = await submit('L5', 'a', short).done;
    expect(dup.error?.code).toBe(grpc.status.ALREADY_EXISTS);
    long.stream.cancel();
    await until(() => sched.dispatcher.snapshot().running === 0);
  }, 30_000);
});

/**
 * Two in-process engine services with the tiny model loaded and a scheduler over both, set up and
 * torn down around a describe block; the returned object fills in during beforeAll.
 */
function twoEngines(context: number, sched: Parameters<typeof startSchedulerServer>[0]) {
  const dir = tempDir();
  const t = { engines: [] as RunningEngineServer[], sched: undefined as unknown as RunningSchedulerServer, client: undefined as unknown as spb.SchedulerServiceClient };
  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    for (let i = 0; i < 2; i++) {
      const host = new LocalModelHost({ seqsPerModel: 2, defaultContext: context });
      await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny' }));
      t.engines.push(await startEngineServer(host, { port: 0 }));
    }
    t.sched = await startSchedulerServer({ ...sched, engines: t.engines.map((e) => `127.0.0.1:${e.port}`) });
    t.client = createSchedulerClient(`127.0.0.1:${t.sched.port}`);
  }, 60_000);
  afterAll(async () => {
    t.client.close();
    await t.sched.close(100);
    for (const e of t.engines) await e.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return t;
}

describe('scheduler with two engines, one of which dies mid-stream', () => {
  const t = twoEngines(4096, { slotsPerEngine: 1, probeIntervalMs: 300 });

  it('fails the dead engine requests with UNAVAILABLE naming it and sends new ones to the healthy engine', async () => {
    const a = watch(t.client.submit(spb.SubmitRequest.fromPartial({ tenant: 't', generate: { requestId: 'A', model: 'tiny', ...LONG } })));
    await a.first;
    const b = watch(t.client.submit(spb.SubmitRequest.fromPartial({ tenant: 't', generate: { requestId: 'B', model: 'tiny', ...LONG } })));
    await b.first;
    // Both slots are in use, one on each engine; kill the first engine's server.
    expect(t.sched.pool.list().map((e) => e.running)).toEqual([1, 1]);
    t.engines[0].server.forceShutdown();
    const ra = await a.done;
    expect(ra.error?.code).toBe(grpc.status.UNAVAILABLE);
    expect(ra.error?.details).toContain(`engine engine-1 at 127.0.0.1:${t.engines[0].port} failed during request 'A'`);
    const listed = await unary<spb.ListEnginesRequest, spb.ListEnginesResponse>(t.client.listEngines.bind(t.client), {});
    expect(listed.engines[0].status).toBe(common.ServingStatus.SERVING_STATUS_NOT_SERVING);
    expect(listed.engines[0].detail).not.toBe('');
    expect(listed.engines[1].status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
    // The healthy engine's stream is unaffected; a new request waits for its slot and runs there.
    await unary(t.client.cancel.bind(t.client), { requestId: 'B' });
    expect((await b.done).error).toBeUndefined();
    const c = await collect(t.client.submit(spb.SubmitRequest.fromPartial({ tenant: 't', generate: { requestId: 'C', model: 'tiny', prompt: 'Hi', maxTokens: 3 } })));
    expect(c.at(-1)?.usage?.completionTokens).toBeGreaterThan(0);
  }, 30_000);
});

describe('bearer-token auth on the engine and the scheduler', () => {
  const dir = tempDir();
  const TOKEN = 'test-token-0123456789';
  let engine: RunningEngineServer;
  let sched: RunningSchedulerServer;

  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256 });
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny' }));
    engine = await startEngineServer(host, { port: 0, authToken: TOKEN });
    // The scheduler reaches the engine with the same token.
    sched = await startSchedulerServer({ engines: [`127.0.0.1:${engine.port}`], authToken: TOKEN });
  }, 60_000);

  afterAll(async () => {
    await sched.close(100);
    await engine.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('answers UNAUTHENTICATED without the token or with a wrong one, keeps health open, and serves with it', async () => {
    const anon = createSchedulerClient(`127.0.0.1:${sched.port}`);
    const wrong = createSchedulerClient(`127.0.0.1:${sched.port}`, grpc.credentials.createInsecure(), 'nope');
    const authed = createSchedulerClient(`127.0.0.1:${sched.port}`, grpc.credentials.createInsecure(), TOKEN);
    const engineAnon = new pb.EngineServiceClient(`127.0.0.1:${engine.port}`, grpc.credentials.createInsecure());
    try {
      const e1 = await unary(anon.listModels.bind(anon), {}).catch((e) => e as grpc.ServiceError);
      expect((e1 as grpc.ServiceError).code).toBe(grpc.status.UNAUTHENTICATED);
      expect((e1 as grpc.ServiceError).details).toContain('authorization: Bearer');
      const e2 = await unary(wrong.listModels.bind(wrong), {}).catch((e) => e as grpc.ServiceError);
      expect((e2 as grpc.ServiceError).code).toBe(grpc.status.UNAUTHENTICATED);
      const e3 = await collect(anon.submit(spb.SubmitRequest.fromPartial({ generate: { model: 'tiny', prompt: 'x' } }))).catch((e) => e as grpc.ServiceError);
      expect((e3 as grpc.ServiceError).code).toBe(grpc.status.UNAUTHENTICATED);
      const e4 = await unary(engineAnon.listModels.bind(engineAnon), {}).catch((e) => e as grpc.ServiceError);
      expect((e4 as grpc.ServiceError).code).toBe(grpc.status.UNAUTHENTICATED);
      // Health needs no token, on both services.
      expect((await unary<common.HealthRequest, common.HealthResponse>(anon.health.bind(anon), {})).status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
      expect((await unary<common.HealthRequest, common.HealthResponse>(engineAnon.health.bind(engineAnon), {})).status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
      // With the token: the scheduler's probes reached the engine, so the model is listed and a generation runs.
      const models = await unary<spb.ListModelsRequest, spb.ListModelsResponse>(authed.listModels.bind(authed), {});
      expect(models.models.map((m) => m.id)).toEqual(['tiny']);
      const chunks = await collect(authed.submit(spb.SubmitRequest.fromPartial({ generate: { model: 'tiny', prompt: 'Hi', maxTokens: 2 } })));
      expect(chunks.at(-1)?.usage?.completionTokens).toBeGreaterThan(0);
    } finally {
      for (const c of [anon, wrong, authed, engineAnon]) c.close();
    }
  });
});

describe('conversation affinity across engines', () => {
  const t = twoEngines(512, { slotsPerEngine: 2, maxQueued: 8, maxQueuedPerTenant: 8, probeIntervalMs: 500 });

  it("sends a conversation's next turn to the engine that holds its cache, even when another is less loaded", async () => {
    const chat = (id: string, messages: { role: string; content: string }[], gen: Partial<pb.GenerateRequest> = {}) =>
      watch(t.client.submit(spb.SubmitRequest.fromPartial({ tenant: 't', generate: { requestId: id, model: 'tiny', messages, maxTokens: 6, ignoreEos: true, sampling: { temperature: 0 }, ...gen } })));
    const turn1 = [{ role: 'user', content: 'Tell me about routers and experts' }];
    const first = await chat('c1', turn1).done;
    expect(first.error).toBeUndefined();
    const answer = first.chunks.map((c) => c.text).join('');
    // Another conversation keeps one slot busy on an engine (both idle: the first in the list, as
    // turn 1 was), so the least loaded engine is now the other one.
    const busy = chat('busy', [{ role: 'user', content: 'A different story' }], { maxTokens: 4000 });
    await busy.first;
    const turn2 = [...turn1, { role: 'assistant', content: answer }, { role: 'user', content: 'And then?' }];
    const second = await chat('c2', turn2).done;
    busy.stream.cancel();
    await busy.done;
    expect(second.error).toBeUndefined();
    const usage = second.chunks.find((c) => c.usage)?.usage;
    // The whole first prompt (and more) came from the cache the first turn left on its engine.
    expect(usage?.cachedPromptTokens).toBeGreaterThanOrEqual(first.chunks.find((c) => c.usage)!.usage!.promptTokens);
  });
});

// Ollama's load on demand: a request that names a file of the engine's models directory loads it.
describe('scheduler: load on demand', () => {
  const dir = tempDir();
  let engine: RunningEngineServer;
  let onDemand: RunningSchedulerServer;
  let plain: RunningSchedulerServer;
  let client: spb.SchedulerServiceClient;
  let plainClient: spb.SchedulerServiceClient;
  let id: string;

  beforeAll(async () => {
    id = writeTestModel(dir, 'tiny-qwen3moe', 'F32').split('/').pop()!.replace(/\.gguf$/, '');
    fs.writeFileSync(`${dir}/broken.gguf`, 'not a gguf');
    engine = await startEngineServer(new LocalModelHost({ seqsPerModel: 2, defaultContext: 256, modelsDir: dir }), { port: 0 });
    onDemand = await startSchedulerServer({ host: 'localhost', port: 0, engines: [`127.0.0.1:${engine.port}`], loadOnDemand: true });
    plain = await startSchedulerServer({ host: 'localhost', port: 0, engines: [`127.0.0.1:${engine.port}`] });
    client = createSchedulerClient(`localhost:${onDemand.port}`);
    plainClient = createSchedulerClient(`localhost:${plain.port}`);
  }, 60_000);

  afterAll(async () => {
    client.close();
    plainClient.close();
    await onDemand.close(100);
    await plain.close(100);
    await engine.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const gen = (c: spb.SchedulerServiceClient, model: string) =>
    collect(c.submit(spb.SubmitRequest.fromPartial({ generate: { model, prompt: 'Hello', maxTokens: 4, sampling: common.SamplingParams.fromPartial({ temperature: 0 }) } })));

  it('without it, a model that is not loaded is NOT_FOUND', async () => {
    await expect(gen(plainClient, id)).rejects.toMatchObject({ code: grpc.status.NOT_FOUND });
  });

  it('loads a file of the models directory once for concurrent requests, then serves them all; names what it could load otherwise', async () => {
    const loader = onDemand.dispatcher.loader!;
    const runs = await Promise.all([gen(client, id), gen(client, id), gen(client, id)]);
    for (const chunks of runs) expect(chunks.flatMap((c) => c.tokens)).toHaveLength(4);
    expect(loader.loads).toBe(1);
    const listed = await unary<spb.ListModelsRequest, spb.ListModelsResponse>(client.listModels.bind(client), {});
    expect(listed.models.map((m) => m.id)).toEqual([id]);
    // Tokenize and EnsureModel find it loaded now.
    const ensured = await unary<spb.EnsureModelRequest, spb.EnsureModelResponse>(client.ensureModel.bind(client), spb.EnsureModelRequest.fromPartial({ model: id }));
    expect(ensured).toMatchObject({ loadedNow: false, model: { id } });
    await expect(gen(client, 'nope')).rejects.toMatchObject({ code: grpc.status.NOT_FOUND, details: expect.stringMatching(/no engine serves model 'nope' \(served: .*; in the models directory: /) });
    await expect(gen(client, 'broken')).rejects.toMatchObject({ code: grpc.status.FAILED_PRECONDITION, details: expect.stringMatching(/model 'broken' .* cannot be loaded/) });
    // Unloading while a request runs is refused with if_idle; then it loads again on demand.
    const running = watch(client.submit(spb.SubmitRequest.fromPartial({ generate: { model: id, ...LONG } })));
    await running.first;
    await expect(unary<spb.UnloadModelRequest, pb.UnloadModelResponse>(client.unloadModel.bind(client), { engineId: '', unload: { id, ifIdle: true } })).rejects.toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED });
    running.stream.cancel();
    await running.done;
    await until(async () => (await unary<spb.UnloadModelRequest, pb.UnloadModelResponse>(client.unloadModel.bind(client), { engineId: '', unload: { id, ifIdle: true } }).then(() => true, () => false)));
    expect((await unary<spb.ListModelsRequest, spb.ListModelsResponse>(client.listModels.bind(client), {})).models).toEqual([]);
    const tok = await unary<pb.TokenizeRequest, pb.TokenizeResponse>(client.tokenize.bind(client), pb.TokenizeRequest.fromPartial({ model: id, text: 'Hello' }));
    expect(tok.tokens.length).toBeGreaterThan(0);
    expect(loader.loads).toBe(2);
  }, 60_000);
});

// Models load on demand brought also leave on their own: keep-alive expiry and LRU eviction.
describe('scheduler: keep-alive and eviction of models loaded on demand', () => {
  const dir = tempDir();
  let engine: RunningEngineServer;
  const servers: RunningSchedulerServer[] = [];
  const clients: spb.SchedulerServiceClient[] = [];

  beforeAll(async () => {
    const src = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    fs.renameSync(src, `${dir}/a.gguf`);
    fs.copyFileSync(`${dir}/a.gguf`, `${dir}/b.gguf`);
    // (A context of 4096: LONG runs for seconds, still running while a test acts on the model in use.
    // With 256 it ended after ~250 tokens, a fraction of a second: on a loaded machine, before the
    // sweep that was to find the model in use.)
    engine = await startEngineServer(new LocalModelHost({ seqsPerModel: 2, defaultContext: 4096, modelsDir: dir }), { port: 0 });
  }, 60_000);

  afterAll(async () => {
    for (const c of clients) c.close();
    for (const s of servers) await s.close(100);
    await engine.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function scheduler(opts: { keepAliveMs?: number; maxModels?: number }) {
    const s = await startSchedulerServer({ host: 'localhost', port: 0, engines: [`127.0.0.1:${engine.port}`], loadOnDemand: true, ...opts });
    servers.push(s);
    const c = createSchedulerClient(`localhost:${s.port}`);
    clients.push(c);
    return { s, c, loader: s.dispatcher.loader! };
  }
  const gen = (c: spb.SchedulerServiceClient, model: string, extra: Partial<spb.SubmitRequest> = {}) =>
    collect(c.submit(spb.SubmitRequest.fromPartial({ generate: { model, prompt: 'Hello', maxTokens: 2, sampling: common.SamplingParams.fromPartial({ temperature: 0 }) }, ...extra })));
  const listed = async (c: spb.SchedulerServiceClient) => (await unary<spb.ListModelsRequest, spb.ListModelsResponse>(c.listModels.bind(c), {})).models;
  const unloadAll = async (c: spb.SchedulerServiceClient) => {
    for (const m of await listed(c)) await unary<spb.UnloadModelRequest, pb.UnloadModelResponse>(c.unloadModel.bind(c), { engineId: '', unload: { id: m.id, ifIdle: false } });
  };

  it('a model loaded on demand unloads once its keep-alive has run out and nothing uses it; a request keep_alive < 0 keeps it', async () => {
    const { c, loader } = await scheduler({ keepAliveMs: 400 });
    // Loaded on demand by a request that runs on: the scheduler's keep-alive, from its start. (The
    // model in use while the test looks: idle, it could be gone before the listing on a loaded
    // machine, 400 ms later.)
    const t0 = Date.now();
    const running = watch(c.submit(spb.SubmitRequest.fromPartial({ generate: { model: 'a', ...LONG } })));
    await running.first;
    const [m] = await listed(c);
    expect(m.id).toBe('a');
    expect(m.expiresAtUnixMs).toBeGreaterThanOrEqual(t0 + 400);
    expect(m.expiresAtUnixMs).toBeLessThanOrEqual(Date.now() + 400);
    // A request still running when the keep-alive runs out keeps the model.
    // (A sweep as if the keep-alive had run out, not a wait for it.)
    await loader.sweep(Date.now() + 10_000);
    expect((await listed(c)).map((x) => x.id)).toEqual(['a']);
    running.stream.cancel();
    await running.done;
    // Then it leaves on its own (the sweep runs every second).
    await until(async () => (await listed(c)).length === 0);
    expect(loader.expired).toBe(1);
    // keep_alive -1 on a request: it stays (expires_at 0), past any keep-alive.
    await gen(c, 'a', { keepAliveMs: -1, hasKeepAlive: true });
    expect((await listed(c))[0].expiresAtUnixMs).toBe(0);
    await loader.sweep(Date.now() + 3_600_000);
    expect((await listed(c)).map((x) => x.id)).toEqual(['a']);
    // A request that arrives while the model is being unloaded waits for that, then loads it back.
    await gen(c, 'a', { keepAliveMs: 0, hasKeepAlive: true });
    const sweeping = loader.sweep();
    const during = gen(c, 'a');
    await sweeping;
    expect((await during).flatMap((x) => x.tokens)).toHaveLength(2);
    // keep_alive 0 on EnsureModel: loaded, then unloaded at the next sweep.
    const e = await unary<spb.EnsureModelRequest, spb.EnsureModelResponse>(c.ensureModel.bind(c), spb.EnsureModelRequest.fromPartial({ model: 'a', keepAliveMs: 0, hasKeepAlive: true }));
    expect(e.model!.expiresAtUnixMs).toBeGreaterThan(0);
    // (A sweep while another runs, as the periodic one may be: it waits for that one, then sweeps;
    // it returned at once, the model still there.)
    void loader.sweep();
    await loader.sweep();
    expect(await listed(c)).toEqual([]);
  }, 60_000);

  it("EnsureModel's context_length (Ollama's num_ctx): loads with it, reloads an idle model for more, never for less, not while in use", async () => {
    const { c, loader } = await scheduler({});
    await unloadAll(c);
    const ensure = async (contextLength: number, keep?: number) =>
      (await unary<spb.EnsureModelRequest, spb.EnsureModelResponse>(c.ensureModel.bind(c), spb.EnsureModelRequest.fromPartial({ model: 'a', contextLength, keepAliveMs: keep ?? 0, hasKeepAlive: keep !== undefined }))).model!;
    expect((await ensure(512)).contextLength).toBe(512);
    expect(loader.reloads).toBe(0);
    // Less, or no wish: as it is.
    expect((await ensure(128)).contextLength).toBe(512);
    expect((await ensure(0)).contextLength).toBe(512);
    // More: reloaded, its keep-alive (-1 here) kept.
    await ensure(512, -1);
    const more = await ensure(1024);
    expect(more.contextLength).toBe(1024);
    expect(more.expiresAtUnixMs).toBe(0);
    expect(loader.reloads).toBe(1);
    await gen(c, 'a');
    // In use: the request runs on the model as it is.
    const running = watch(c.submit(spb.SubmitRequest.fromPartial({ generate: { model: 'a', ...LONG } })));
    await running.first;
    expect((await ensure(2048)).contextLength).toBe(1024);
    running.stream.cancel();
    await running.done;
    expect(loader.reloads).toBe(1);
    await unloadAll(c);
  }, 60_000);

  it('--models-max: a new model unloads the least recently used idle one; all in use is RESOURCE_EXHAUSTED naming the limit', async () => {
    const { c, loader } = await scheduler({ maxModels: 1 });
    await unloadAll(c);
    await gen(c, 'a');
    await gen(c, 'b');
    expect((await listed(c)).map((x) => x.id)).toEqual(['b']);
    expect(loader.evicted).toBe(1);
    const running = watch(c.submit(spb.SubmitRequest.fromPartial({ generate: { model: 'b', ...LONG } })));
    await running.first;
    await expect(gen(c, 'a')).rejects.toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED, details: expect.stringMatching(/holds 1 models \(the limit, --models-max 1\) and none of them can be unloaded now .*: b/) });
    running.stream.cancel();
    await running.done;
    await until(async () => {
      try {
        await gen(c, 'a');
        return true;
      } catch {
        return false;
      }
    });
    expect((await listed(c)).map((x) => x.id)).toEqual(['a']);
    expect(loader.evicted).toBe(2);
    await unloadAll(c);
  }, 60_000);
});

// An engine whose profiled RAM budget holds one model: the next load is refused (KAIL_E_BUDGET)
// until the least recently used idle model is unloaded, which the loader does.
describe('scheduler: eviction when the engine refuses a load for lack of memory', () => {
  const dir = tempDir();
  let engine: RunningEngineServer;
  let host: LocalModelHost;
  let sched: RunningSchedulerServer;
  let client: spb.SchedulerServiceClient;

  beforeAll(async () => {
    const { planModel } = await import('@kailstream/engine');
    const src = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    fs.renameSync(src, `${dir}/a.gguf`);
    fs.copyFileSync(`${dir}/a.gguf`, `${dir}/b.gguf`);
    const plan = planModel(`${dir}/a.gguf`, { ramBytes: 2 ** 40, nCtx: 256, nSeqMax: 2, ramReserveBytes: 0 });
    const budget = plan.fixedBytes + 2 * plan.nMoeLayers * plan.expertEntryBytes;
    const profile = testHardwareProfile(dir, budget);
    host = new LocalModelHost({ seqsPerModel: 2, defaultContext: 256, modelsDir: dir, profile, loadOptions: { ramReserveBytes: 0 } });
    engine = await startEngineServer(host, { port: 0 });
    sched = await startSchedulerServer({ host: 'localhost', port: 0, engines: [`127.0.0.1:${engine.port}`], loadOnDemand: true });
    client = createSchedulerClient(`localhost:${sched.port}`);
  }, 60_000);

  afterAll(async () => {
    client.close();
    await sched.close(100);
    await engine.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('unloads the idle model that holds the budget and loads the new one', async () => {
    const gen = (model: string) => collect(client.submit(spb.SubmitRequest.fromPartial({ generate: { model, prompt: 'Hello', maxTokens: 2, sampling: common.SamplingParams.fromPartial({ temperature: 0 }) } })));
    const direct = (model: string) => host.loadModel(pb.LoadModelRequest.fromPartial({ path: `${dir}/${model}.gguf`, id: model }));
    expect((await gen('a')).flatMap((x) => x.tokens)).toHaveLength(2);
    // The engine alone refuses 'b' while 'a' holds the budget.
    await expect(direct('b')).rejects.toThrow(/held by the loaded models \(a: /);
    // Through the scheduler, 'a' (idle) makes room.
    expect((await gen('b')).flatMap((x) => x.tokens)).toHaveLength(2);
    const models = (await unary<spb.ListModelsRequest, spb.ListModelsResponse>(client.listModels.bind(client), {})).models.map((m) => m.id);
    expect(models).toEqual(['b']);
    expect(sched.dispatcher.loader!.evicted).toBe(1);
  }, 60_000);
});
