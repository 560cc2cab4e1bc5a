import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation, type ServingStatus } from 'grpc-health-check';

import { protoFiles, protoRoot } from './paths';

/** Handles to the standard services every KailStream gRPC server carries. */
export interface StandardServices {
  /** Sets the grpc.health.v1 status of one service name ('' is the whole server). */
  setStatus(service: string, status: ServingStatus): void;
}

/**
 * Adds server reflection (v1 and v1alpha) over all KailStream contracts and the standard
 * grpc.health.v1 service, so grpcurl and clients in other languages work without our code.
 */
export function addStandardServices(server: grpc.Server, serviceNames: string[]): StandardServices {
  const pkg = protoLoader.loadSync(Object.values(protoFiles), {
    includeDirs: [protoRoot],
    keepCase: false,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  new ReflectionService(pkg).addToServer(server);
  const initial: Record<string, ServingStatus> = { '': 'SERVING' };
  for (const name of serviceNames) initial[name] = 'SERVING';
  const health = new HealthImplementation(initial);
  health.addToServer(server);
  return { setStatus: (service, status) => health.setStatus(service, status) };
}

/** Binds `server` to host:port (port 0 picks a free one) and resolves the port actually bound. */
export function bindServer(server: grpc.Server, host: string, port: number, credentials = grpc.ServerCredentials.createInsecure()): Promise<number> {
  const address = host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`;
  return new Promise((resolve, reject) => {
    server.bindAsync(address, credentials, (err, bound) => (err ? reject(err) : resolve(bound)));
  });
}

/** Stops accepting calls, waits up to graceMs for running ones, then cancels the rest. */
export function shutdownServer(server: grpc.Server, graceMs = 2000): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, graceMs);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
