import { initTRPC, TRPCError } from '@trpc/server';
import { ZodError } from 'zod';

import type { TrpcContext } from './context';

// One tRPC instance for the console (create-t3-app's shape): the error formatter puts zod's
// issues next to the message so the console can name the bad field.
const t = initTRPC.context<TrpcContext>().create({
  errorFormatter({ shape, error }) {
    const cause = error.cause;
    return {
      ...shape,
      data: {
        ...shape.data,
        zodIssues: cause instanceof ZodError ? cause.issues.map((i) => ({ path: i.path.join('.'), message: i.message })) : null,
      },
    };
  },
});

export const router = t.router;

/** Open to anyone who can reach the API: only what the console needs to know whether to ask for a key. */
export const publicProcedure = t.procedure;

/**
 * Needs a valid API key whenever the API requires one (a key exists, or the API is bound beyond
 * loopback); the same rule as the HTTP routes.
 */
export const protectedProcedure = t.procedure.use(({ ctx, next }) => {
  if (ctx.auth.required && !ctx.auth.key) {
    throw new TRPCError({
      code: 'UNAUTHORIZED',
      message: ctx.auth.presented ? 'the API key is not valid (unknown or revoked)' : 'this server requires an API key (Authorization: Bearer <key>)',
    });
  }
  return next();
});
