export { EnginePool } from './engine-pool';
export type { EngineEntry } from './engine-pool';
export { SCHEDULER_SERVICE_NAME, createSchedulerClient, createSchedulerServiceImpl, startSchedulerServer } from './scheduler-service';
export type { RunningSchedulerServer, SchedulerServerOptions } from './scheduler-service';
export { VERSION } from './version';
