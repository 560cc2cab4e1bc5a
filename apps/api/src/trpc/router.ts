import { authRouter } from './routers/auth';
import { keysRouter } from './routers/keys';
import { modelsRouter } from './routers/models';
import { requestsRouter } from './routers/requests';
import { telemetryRouter } from './routers/telemetry';
import { router } from './trpc';

/** The console's API: thin routers per domain over the scheduler, the telemetry hub and the key store. */
export const appRouter = router({
  auth: authRouter,
  models: modelsRouter,
  telemetry: telemetryRouter,
  requests: requestsRouter,
  keys: keysRouter,
});

/** The router's type; apps/web imports only this (a type-only import, erased at build). */
export type AppRouter = typeof appRouter;
