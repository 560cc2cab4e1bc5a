// Everything in the engine: its core (core.ts) and the gRPC engine service.
export * from './core';
export { ENGINE_SERVICE_NAME, createEngineClient, createEngineServiceImpl, startEngineServer } from './service/engine-service';
export type { EngineServerOptions, RunningEngineServer } from './service/engine-service';
export { LocalModelHost, copyModelInDirectory, existingModelFile, listModelsDirectory, modelsDirectoryFile, removeModelFiles, samplingFromProto } from './service/model-host';
export type { LocalModelHostOptions } from './service/model-host';
export type { ModelHost } from './service/model-host';
