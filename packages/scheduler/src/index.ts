export { EnginePool } from './engine-pool';
export type { EngineEntry, EnginePoolOptions } from './engine-pool';
export { Dispatcher } from './dispatcher';
export type { DispatcherOptions } from './dispatcher';
export { RequestQueue } from './request-queue';
export type { QueueItem, QueueRefusal, RequestQueueOptions } from './request-queue';
export { SCHEDULER_SERVICE_NAME, createSchedulerClient, createSchedulerServiceImpl, startSchedulerServer } from './scheduler-service';
export type { RunningSchedulerServer, SchedulerServerOptions } from './scheduler-service';
export { VERSION } from './version';
