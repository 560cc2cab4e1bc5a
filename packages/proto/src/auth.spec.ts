import * as grpc from '@grpc/grpc-js';

import { MESSAGE_LIMITS, bearerAuthInterceptors, bearerClientOptions } from './auth';
import { bindServer, shutdownServer } from './server';
import * as common from './gen/kailstream/common/v1/common';
import * as engine from './gen/kailstream/engine/v1/engine';

// A real gRPC server with the interceptor: health open, everything else needs the bearer token.
describe('bearer-token interceptors', () => {
  let server: grpc.Server;
  let port: number;

  beforeAll(async () => {
    server = new grpc.Server({ interceptors: bearerAuthInterceptors('s3cret') });
    const impl: Partial<engine.EngineServiceServer> = {
      health: (_c, cb) => cb(null, { status: common.ServingStatus.SERVING_STATUS_SERVING, version: 't', detail: '', uptimeSeconds: 0 }),
      listModels: (_c, cb) => cb(null, { models: [] }),
    };
    server.addService(engine.EngineServiceService, impl as engine.EngineServiceServer);
    port = await bindServer(server, '127.0.0.1', 0);
  });

  afterAll(() => shutdownServer(server, 100));

  const list = (token?: string) => {
    const c = new engine.EngineServiceClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), bearerClientOptions(token));
    return new Promise<grpc.ServiceError | null>((resolve) => c.listModels({}, (e) => (c.close(), resolve(e))));
  };

  it('accepts the token, refuses none or a wrong one, and leaves Health open', async () => {
    expect(await list('s3cret')).toBeNull();
    expect((await list())?.code).toBe(grpc.status.UNAUTHENTICATED);
    expect((await list('S3cret'))?.code).toBe(grpc.status.UNAUTHENTICATED);
    const c = new engine.EngineServiceClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const h = await new Promise<grpc.ServiceError | null>((resolve) => c.health({}, (e) => (c.close(), resolve(e))));
    expect(h).toBeNull();
  });

  it('adds nothing without a token', () => {
    expect(bearerAuthInterceptors(undefined)).toEqual([]);
    expect(bearerAuthInterceptors('')).toEqual([]);
    expect(bearerClientOptions('')).toEqual(MESSAGE_LIMITS);
  });
});
