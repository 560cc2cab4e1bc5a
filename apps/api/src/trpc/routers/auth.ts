import { publicProcedure, router } from '../trpc';

export const authRouter = router({
  /** Whether this server needs a key and whether the request's key is good: the console's login check. */
  session: publicProcedure.query(({ ctx }) => ({
    required: ctx.auth.required,
    authenticated: !!ctx.auth.key,
    key: ctx.auth.key,
    keyStore: !!ctx.deps.keys?.(),
  })),
});
