import { z } from 'zod';

import { protectedProcedure, router } from '../trpc';

export const telemetryRouter = router({
  /**
   * The merged samples of the last `seconds` (the hub samples every 500 ms and keeps 5 minutes);
   * the console polls this once a second.
   */
  history: protectedProcedure.input(z.object({ seconds: z.number().min(1).max(3600).default(60) }).default({ seconds: 60 })).query(({ ctx, input }) => {
    const hub = ctx.deps.telemetry;
    hub.start();
    return { status: hub.status(), points: hub.recent(input.seconds) };
  }),

  /** Every loaded model's sequence slots: what runs in each, prompt progress, KV cache held. */
  slots: protectedProcedure.query(({ ctx }) => {
    const hub = ctx.deps.telemetry;
    hub.start();
    return hub.slots();
  }),

  /**
   * One model's layers × experts activation counts over a window (0 = since it was loaded), resident
   * experts marked, and the list of models that have a heatmap. Without engineId/model: the first.
   */
  experts: protectedProcedure
    .input(
      z
        .object({ windowSeconds: z.number().min(0).max(3600).default(60), engineId: z.string().max(200).optional(), model: z.string().max(200).optional() })
        .default({ windowSeconds: 60 }),
    )
    .query(({ ctx, input }) => {
      const hub = ctx.deps.telemetry;
      hub.start();
      return hub.experts(input.windowSeconds, input.engineId, input.model);
    }),
});
