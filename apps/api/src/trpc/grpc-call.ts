import * as grpc from '@grpc/grpc-js';
import { TRPCError } from '@trpc/server';

type TrpcCode = ConstructorParameters<typeof TRPCError>[0]['code'];

/** gRPC status -> tRPC error code (the one place this mapping lives for the console). */
export function grpcToTrpc(e: grpc.ServiceError): TRPCError {
  const map: Partial<Record<grpc.status, TrpcCode>> = {
    [grpc.status.NOT_FOUND]: 'NOT_FOUND',
    [grpc.status.INVALID_ARGUMENT]: 'BAD_REQUEST',
    [grpc.status.OUT_OF_RANGE]: 'BAD_REQUEST',
    [grpc.status.FAILED_PRECONDITION]: 'PRECONDITION_FAILED',
    [grpc.status.ALREADY_EXISTS]: 'CONFLICT',
    [grpc.status.RESOURCE_EXHAUSTED]: 'TOO_MANY_REQUESTS',
    [grpc.status.UNAVAILABLE]: 'SERVICE_UNAVAILABLE',
    [grpc.status.DEADLINE_EXCEEDED]: 'TIMEOUT',
    [grpc.status.UNIMPLEMENTED]: 'NOT_IMPLEMENTED',
    [grpc.status.UNAUTHENTICATED]: 'UNAUTHORIZED',
  };
  return new TRPCError({ code: map[e.code] ?? 'INTERNAL_SERVER_ERROR', message: e.details || e.message, cause: e });
}

type UnaryFn<Req, Res> = (req: Req, md: grpc.Metadata, opts: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r?: Res) => void) => unknown;

/** One unary call with a deadline; gRPC errors become tRPC errors with the service's message. */
export function unary<Req, Res>(client: grpc.Client | undefined, fn: UnaryFn<Req, Res> | undefined, req: Req, timeoutMs = 10_000): Promise<Res> {
  if (!client || !fn) throw new TRPCError({ code: 'SERVICE_UNAVAILABLE', message: 'the API is not connected to a scheduler' });
  return new Promise((resolve, reject) =>
    fn.call(client, req, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (e, r) => (e ? reject(grpcToTrpc(e)) : resolve(r as Res))),
  );
}
