export { native, systemInfo } from './native';
export type { SystemInfo } from '@kailstream/core-native';
export { EngineError, toEngineError } from './errors';
export type { EngineErrorCode } from './errors';
export { VERSION } from './version';
export { ENGINE_SERVICE_NAME, createEngineClient, createEngineServiceImpl, startEngineServer } from './service/engine-service';
export type { EngineServerOptions, RunningEngineServer } from './service/engine-service';
export { LocalModelHost } from './service/model-host';
export type { ModelHost } from './service/model-host';
