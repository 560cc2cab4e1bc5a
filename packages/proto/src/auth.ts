import { timingSafeEqual } from 'node:crypto';

import * as grpc from '@grpc/grpc-js';

/** Environment variable both services and their clients read the bearer token from. */
export const AUTH_TOKEN_ENV = 'KAIL_GRPC_TOKEN';

// Health stays open so load balancers, supervisors and grpc_health_probe need no secret.
const OPEN_METHODS = /^\/(grpc\.health\.v1\.Health\/|kailstream\.[a-z]+\.v1\.[A-Za-z]+Service\/Health$)/;

function sameToken(got: string, want: Buffer): boolean {
  const g = Buffer.from(got);
  return g.length === want.length && timingSafeEqual(g, want);
}

/**
 * A server interceptor that answers UNAUTHENTICATED unless the call carries
 * `authorization: Bearer <token>`; health methods stay open. Without a token (undefined or ''),
 * no interceptor: every call is accepted (loopback use).
 */
export function bearerAuthInterceptors(token: string | undefined): grpc.ServerInterceptor[] {
  if (!token) return [];
  const want = Buffer.from(token);
  const interceptor: grpc.ServerInterceptor = (method, call) => {
    if (OPEN_METHODS.test(method.path)) return new grpc.ServerInterceptingCall(call);
    const listener = new grpc.ServerListenerBuilder()
      .withOnReceiveMetadata((metadata, next) => {
        const [value] = metadata.get('authorization');
        const m = typeof value === 'string' ? /^Bearer (.+)$/i.exec(value.trim()) : null;
        if (m && sameToken(m[1], want)) return next(metadata);
        call.sendStatus({
          code: grpc.status.UNAUTHENTICATED,
          details: value === undefined ? 'this service requires authorization: Bearer <token> metadata (KAIL_GRPC_TOKEN)' : 'the bearer token is not valid',
          metadata: new grpc.Metadata(),
        });
      })
      .build();
    return new grpc.ServerInterceptingCall(call, new grpc.ResponderBuilder().withStart((next) => next(listener)).build());
  };
  return [interceptor];
}

/** Client options that add `authorization: Bearer <token>` to every call (none without a token). */
/**
 * The largest gRPC message the services and their clients accept, either way: above the API's
 * 64 MiB request bodies (a long prompt's text or token ids going in, its scores coming back), so
 * that a big request is refused for what it asks, never as an oversized message (RESOURCE_EXHAUSTED,
 * which reads as "overloaded, retry").
 */
export const MAX_MESSAGE_BYTES = 80 * 1024 * 1024;

/** Channel options for MAX_MESSAGE_BYTES. */
export const MESSAGE_LIMITS = { 'grpc.max_receive_message_length': MAX_MESSAGE_BYTES, 'grpc.max_send_message_length': MAX_MESSAGE_BYTES } as const;

export function bearerClientOptions(token: string | undefined): grpc.ClientOptions {
  if (!token) return { ...MESSAGE_LIMITS };
  const interceptor: grpc.Interceptor = (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set('authorization', `Bearer ${token}`);
        next(metadata, listener);
      },
    });
  return { ...MESSAGE_LIMITS, interceptors: [interceptor] };
}
