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
