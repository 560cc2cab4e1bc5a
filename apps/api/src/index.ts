export { startApi } from './server';
export type { RunningApi } from './server';
export { ApiConfigSchema, parseApiConfig } from './env';
export type { ApiConfig } from './env';
