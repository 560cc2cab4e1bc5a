import * as grpc from '@grpc/grpc-js';
import { common, engine as pb } from '@kailstream/proto';

import { createEngineClient, startEngineServer, type RunningEngineServer } from './engine-service';
import { LocalModelHost } from './model-host';

function unary<Req, Res>(fn: (req: Req, cb: (err: grpc.ServiceError | null, res: Res) => void) => unknown, req: Req): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, (err, res) => (err ? reject(err) : resolve(res))));
}

describe('engine gRPC service', () => {
  let running: RunningEngineServer;
  let client: pb.EngineServiceClient;

  beforeAll(async () => {
    running = await startEngineServer(new LocalModelHost(), { host: 'localhost', port: 0 });
    client = createEngineClient(`localhost:${running.port}`);
  });

  afterAll(async () => {
    client.close();
    await running.close(100);
  });

  it('answers health through the generated client', async () => {
    const res = await unary<common.HealthRequest, common.HealthResponse>(client.health.bind(client), {});
    expect(res.status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
    expect(res.version).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('lists models (none loaded yet)', async () => {
    const res = await unary<pb.ListModelsRequest, pb.ListModelsResponse>(client.listModels.bind(client), {});
    expect(res.models).toEqual([]);
  });

  it('maps a generate for an unknown model to NOT_FOUND with the stable code', async () => {
    const stream = client.generate(pb.GenerateRequest.fromPartial({ requestId: 'x', model: 'nope', prompt: 'hi' }));
    const err = await new Promise<grpc.ServiceError>((resolve) => stream.on('error', resolve));
    expect(err.code).toBe(grpc.status.NOT_FOUND);
    expect(err.metadata.get('kail-code')).toEqual(['KAIL_E_NOT_FOUND']);
    expect(err.details).toContain("'nope' is not loaded");
  });

  it('serves grpc.health.v1 and server reflection', async () => {
    const protoLoader = await import('@grpc/proto-loader');
    const path = await import('node:path');
    const healthProto = path.join(path.dirname(require.resolve('grpc-health-check/package.json')), 'proto/health/v1/health.proto');
    const def = protoLoader.loadSync(healthProto, { enums: String });
    const Health = (grpc.loadPackageDefinition(def) as any).grpc.health.v1.Health;
    const h = new Health(`localhost:${running.port}`, grpc.credentials.createInsecure());
    const res = await unary<any, any>(h.check.bind(h), { service: 'kailstream.engine.v1.EngineService' });
    expect(res.status).toBe('SERVING');
    h.close();

    const reflProto = path.join(path.dirname(require.resolve('@grpc/reflection/package.json')), 'build/proto/grpc/reflection/v1/reflection.proto');
    const rdef = protoLoader.loadSync(reflProto, { keepCase: true });
    const Reflection = (grpc.loadPackageDefinition(rdef) as any).grpc.reflection.v1.ServerReflection;
    const r = new Reflection(`localhost:${running.port}`, grpc.credentials.createInsecure());
    const call = r.ServerReflectionInfo();
    const services = await new Promise<string[]>((resolve, reject) => {
      call.on('data', (msg: any) => {
        resolve(msg.list_services_response.service.map((s: any) => s.name));
        call.end();
      });
      call.on('error', reject);
      call.write({ list_services: '' });
    });
    expect(services).toContain('kailstream.engine.v1.EngineService');
    r.close();
  });
});

describe('engine gRPC service with a loaded model', () => {
  const { tempDir, writeTestModel } = require('../testing') as typeof import('../testing');
  const fs = require('node:fs') as typeof import('node:fs');
  const dir = tempDir();
  let running: RunningEngineServer;
  let client: pb.EngineServiceClient;

  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    running = await startEngineServer(new LocalModelHost({ seqsPerModel: 4, defaultContext: 512 }), { port: 0 });
    client = createEngineClient(`127.0.0.1:${running.port}`);
    const res = await unary<pb.LoadModelRequest, pb.LoadModelResponse>(client.loadModel.bind(client), pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny' }));
    expect(res.model?.architecture).toBe('qwen3moe');
  }, 60_000);

  afterAll(async () => {
    client.close();
    await running.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('lists the loaded model with its residency', async () => {
    const res = await unary<pb.ListModelsRequest, pb.ListModelsResponse>(client.listModels.bind(client), {});
    expect(res.models.map((m) => m.id)).toEqual(['tiny']);
    expect(res.models[0].residency?.expertBytes).toBeGreaterThan(0);
  });

  it('streams a generation with usage on the last message', async () => {
    const stream = client.generate(pb.GenerateRequest.fromPartial({ requestId: 'g1', model: 'tiny', prompt: 'Hello', maxTokens: 8, wantLogprobs: true, topLogprobs: 2 }));
    const chunks: pb.GenerateResponse[] = [];
    await new Promise<void>((resolve, reject) => {
      stream.on('data', (c: pb.GenerateResponse) => chunks.push(c));
      stream.on('end', resolve);
      stream.on('error', reject);
    });
    const last = chunks.at(-1)!;
    expect(last.usage?.completionTokens).toBeGreaterThan(0);
    expect([common.FinishReason.FINISH_REASON_LENGTH, common.FinishReason.FINISH_REASON_STOP]).toContain(last.finishReason);
    const toks = chunks.flatMap((c) => c.tokens);
    expect(toks.length).toBe(last.usage?.completionTokens);
    expect(chunks.flatMap((c) => c.topLogprobs).every((t) => t.candidates.length === 2)).toBe(true);
  });

  it('answers a bad load with INVALID_ARGUMENT and keeps serving', async () => {
    const err = await unary(client.loadModel.bind(client), pb.LoadModelRequest.fromPartial({ path: __filename })).catch((e) => e as grpc.ServiceError);
    expect((err as grpc.ServiceError).code).toBe(grpc.status.INVALID_ARGUMENT);
    const h = await unary<common.HealthRequest, common.HealthResponse>(client.health.bind(client), {});
    expect(h.status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
  });
});
