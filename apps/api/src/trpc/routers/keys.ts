import { TRPCError } from '@trpc/server';
import { z } from 'zod';

import type { KeyAdmin, TrpcContext } from '../context';
import { protectedProcedure, router } from '../trpc';

function store(ctx: TrpcContext): KeyAdmin {
  const k = ctx.deps.keys?.();
  if (!k) throw new TRPCError({ code: 'PRECONDITION_FAILED', message: 'this API runs without a key store (start it with a data directory)' });
  return k;
}

export const keysRouter = router({
  /** Creates a key; the response is the only time the raw key is shown. */
  create: protectedProcedure.input(z.object({ name: z.string().trim().min(1, 'name is required').max(100) })).mutation(({ ctx, input }) => {
    const k = store(ctx).create(input.name);
    return { id: k.id, name: k.name, key: k.key, prefix: k.prefix, createdAt: k.createdAt };
  }),

  list: protectedProcedure.query(({ ctx }) => store(ctx).list()),

  revoke: protectedProcedure.input(z.object({ id: z.string().min(1).max(200) })).mutation(({ ctx, input }) => {
    const s = store(ctx);
    if (!s.revoke(input.id)) {
      const known = s.list().some((k) => k.id === input.id);
      throw new TRPCError({ code: known ? 'CONFLICT' : 'NOT_FOUND', message: known ? `key '${input.id}' is already revoked` : `no key with id '${input.id}'` });
    }
    return { revoked: input.id };
  }),

  /** Requests and tokens per key, as the key store records them. */
  usage: protectedProcedure.query(({ ctx }) => store(ctx).usage()),
});
