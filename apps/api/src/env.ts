import { z } from 'zod';

/** API configuration, validated once at start; bad values fail with a message naming the field. */
export const ApiConfigSchema = z.object({
  /** Interface to bind. Default 127.0.0.1 (loopback only). */
  host: z.string().min(1).default('127.0.0.1'),
  /** TCP port; 0 picks a free one. Default 8080. */
  port: z.coerce.number().int().min(0).max(65535).default(8080),
  /** Scheduler gRPC address host:port; empty = not connected (health only). */
  schedulerAddress: z.string().default(''),
});

export type ApiConfig = z.infer<typeof ApiConfigSchema>;

export function parseApiConfig(input: unknown): ApiConfig {
  const r = ApiConfigSchema.safeParse(input);
  if (!r.success) {
    const msg = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    throw new Error(`invalid API configuration: ${msg}`);
  }
  return r.data;
}
