import * as grpc from '@grpc/grpc-js';
import { common, engine as pb, scheduler as spb } from '@kailstream/proto';

import { createSchedulerClient, startSchedulerServer, type RunningSchedulerServer } from './scheduler-service';

function unary<Req, Res>(fn: (req: Req, cb: (err: grpc.ServiceError | null, res: Res) => void) => unknown, req: Req): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, (err, res) => (err ? reject(err) : resolve(res))));
}

// A real engine gRPC server (generated service definition) that serves one model and streams
// three chunks, so dispatch is exercised over the wire without the model engine.
async function startEchoEngine(): Promise<{ port: number; close: () => void }> {
  const server = new grpc.Server();
  const model = common.ModelInfo.fromPartial({ id: 'echo', architecture: 'test', loaded: true });
  const impl: pb.EngineServiceServer = {
    health: (_c, cb) => cb(null, { status: common.ServingStatus.SERVING_STATUS_SERVING, version: 't', detail: '', uptimeSeconds: 0 }),
    listModels: (_c, cb) => cb(null, { models: [model] }),
    loadModel: (_c, cb) => cb(null, { model }),
    unloadModel: (_c, cb) => cb(null, {}),
    generate: (call) => {
      for (const w of call.request.prompt.split(' ')) call.write(pb.GenerateResponse.fromPartial({ text: w }));
      call.write(pb.GenerateResponse.fromPartial({ finishReason: common.FinishReason.FINISH_REASON_STOP }));
      call.end();
    },
    cancel: (_c, cb) => cb(null, { cancelled: false }),
    watchTelemetry: (call) => call.end(),
  };
  server.addService(pb.EngineServiceService, impl);
  const port = await new Promise<number>((res, rej) =>
    server.bindAsync('localhost:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))),
  );
  return { port, close: () => server.forceShutdown() };
}

describe('scheduler gRPC service', () => {
  let sched: RunningSchedulerServer;
  let client: spb.SchedulerServiceClient;
  let engine: { port: number; close: () => void };

  beforeAll(async () => {
    engine = await startEchoEngine();
    sched = await startSchedulerServer({ host: 'localhost', port: 0 });
    client = createSchedulerClient(`localhost:${sched.port}`);
  });

  afterAll(async () => {
    client.close();
    await sched.close(100);
    engine.close();
  });

  it('answers health', async () => {
    const res = await unary<common.HealthRequest, common.HealthResponse>(client.health.bind(client), {});
    expect(res.status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
  });

  it('registers an engine and lists its models', async () => {
    await unary(client.registerEngine.bind(client), { address: `localhost:${engine.port}` });
    const engines = await unary<spb.ListEnginesRequest, spb.ListEnginesResponse>(client.listEngines.bind(client), {});
    expect(engines.engines).toHaveLength(1);
    expect(engines.engines[0].status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
    const models = await unary<spb.ListModelsRequest, spb.ListModelsResponse>(client.listModels.bind(client), {});
    expect(models.models.map((m) => m.id)).toEqual(['echo']);
  });

  it('dispatches a submitted request to the engine and streams its output back', async () => {
    const stream = client.submit(spb.SubmitRequest.fromPartial({ tenant: 't', generate: { requestId: 'r1', model: 'echo', prompt: 'a b c' } }));
    const chunks: pb.GenerateResponse[] = [];
    await new Promise<void>((resolve, reject) => {
      stream.on('data', (c: pb.GenerateResponse) => chunks.push(c));
      stream.on('end', resolve);
      stream.on('error', reject);
    });
    expect(chunks.map((c) => c.text).join('|')).toBe('a|b|c|');
    expect(chunks.at(-1)?.finishReason).toBe(common.FinishReason.FINISH_REASON_STOP);
  });

  it('refuses a model no engine serves with NOT_FOUND', async () => {
    const stream = client.submit(spb.SubmitRequest.fromPartial({ generate: { requestId: 'r2', model: 'missing' } }));
    const err = await new Promise<grpc.ServiceError>((resolve) => stream.on('error', resolve));
    expect(err.code).toBe(grpc.status.NOT_FOUND);
  });
});
