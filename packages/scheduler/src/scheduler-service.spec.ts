import fs from 'node:fs';

import * as grpc from '@grpc/grpc-js';
import { LocalModelHost, startEngineServer, type RunningEngineServer } from '@kailstream/engine';
import { tempDir, writeTestModel } from '@kailstream/engine/testing';
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
    await unary(client.registerEngine.bind(client), { address: `127.0.0.1:${engine.port}` });
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

  it('merges engine telemetry with the engine id', async () => {
    const call = client.watchTelemetry({ intervalMs: 100 });
    const first = await new Promise<spb.EngineTelemetry>((resolve, reject) => {
      call.on('data', (t: spb.EngineTelemetry) => resolve(t));
      call.on('error', reject);
    });
    call.cancel();
    expect(first.engineId).toBe('engine-1');
    expect(first.snapshot?.model).toBe('tiny');
    expect(first.snapshot?.kvCapacityBytes).toBeGreaterThan(0);
  });
});
