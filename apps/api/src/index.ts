export { startApi } from './server';
export type { RunningApi } from './server';
export { ApiConfigSchema, parseApiConfig } from './env';
export type { ApiConfig } from './env';
export type { AppRouter, TelemetryPoint, TierPoint, ExpertWindow, ExpertSource, ModelSlots, ModelView, PullJob } from './trpc';
