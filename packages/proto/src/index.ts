// Generated contracts (ts-proto, from /proto). Regenerate: npx nx run proto:generate.
export * as common from './gen/kailstream/common/v1/common';
export * as engine from './gen/kailstream/engine/v1/engine';
export * as scheduler from './gen/kailstream/scheduler/v1/scheduler';
export { protoRoot, protoFiles } from './paths';
export { addStandardServices, bindServer, shutdownServer } from './server';
export type { StandardServices } from './server';
export { AUTH_TOKEN_ENV, MAX_MESSAGE_BYTES, MESSAGE_LIMITS, bearerAuthInterceptors, bearerClientOptions } from './auth';
export { parseDurationMs } from './duration';
