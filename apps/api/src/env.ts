import { z } from 'zod';

import { CORS_DEFAULTS, parseCorsOrigins } from './cors';
import { SamplingDefaultsSchema } from './sampling-defaults';

/** API configuration, validated once at start; bad values fail with a message naming the field. */
export const ApiConfigSchema = z.object({
  /** Interface to bind. Default 127.0.0.1 (loopback only). */
  host: z.string().min(1).default('127.0.0.1'),
  /** TCP port; 0 picks a free one. Default 8080. */
  port: z.coerce.number().int().min(0).max(65535).default(8080),
  /** Scheduler gRPC address host:port; empty = not connected (health only). */
  schedulerAddress: z.string().default(''),
  /** Bearer token for the scheduler's gRPC (KAIL_GRPC_TOKEN); empty = none. */
  schedulerToken: z.string().default(''),
  /**
   * Data directory holding the API key store (`keys.sqlite`); empty = no key store, which is
   * allowed only on loopback (no auth). `kail serve` passes its --data-dir.
   */
  dataDir: z.string().default(''),
  /** The models directory (KAIL_MODELS_DIR, as `kail serve --models-dir` sets it); empty: <dataDir>/models. */
  modelsDir: z.string().default(''),
  /** Deadline for one generation request, seconds from its arrival; 0 = none. Default 600. */
  requestTimeoutS: z.coerce.number().min(0).default(600),
  /**
   * Reasoning budget of chat requests that give none (llama-server's --reasoning-budget): the
   * most tokens a <think> block may take before the engine closes it; -1 = none (the default).
   */
  reasoningBudget: z.coerce.number().int().min(-1).max(1_000_000_000).default(-1),
  /**
   * reasoning_format of chat requests that give none (llama-server's --reasoning-format): 'none'
   * leaves a <think> block in the content; 'auto' (the default) and 'deepseek' move it to
   * message.reasoning_content.
   */
  reasoningFormat: z.enum(['none', 'auto', 'deepseek']).default('auto'),
  /**
   * Keys given at start (llama-server's --api-key / --api-key-file; `kail serve` passes them in
   * KAIL_API_KEYS, a line each): accepted besides the stored ones, and with any of them every
   * route but /health needs a key. Each is its own tenant; their usage is not stored.
   */
  staticKeys: z.array(z.string().min(1, 'an API key cannot be empty').regex(/^\S+$/, 'an API key cannot hold spaces')).default([]),
  /**
   * Other names of loaded models (llama-server's --alias; `kail serve --alias` passes them): name
   * → model id. A request that names one is served by that model, and /v1/models lists them.
   */
  aliases: z
    .record(z.string(), z.string().min(1, 'an alias needs the id of a model'))
    .superRefine((r, ctx) => {
      for (const name of Object.keys(r)) if (!/^[^\s,]+$/.test(name)) ctx.addIssue({ code: 'custom', path: [name], message: 'an alias is a name without spaces or commas' });
    })
    .default({}),
  /**
   * Cross-origin requests from browsers (llama-server's --cors-*): allowed origins, comma-separated
   * (`localhost`: pages of this machine, the default; `*`: any; or exact origins), the methods and
   * headers a preflight allows (`*`: those asked for), and whether credentials are allowed.
   */
  corsOrigins: z.string().default(CORS_DEFAULTS.origins),
  corsMethods: z.string().min(1).default(CORS_DEFAULTS.methods),
  corsHeaders: z.string().min(1).default(CORS_DEFAULTS.headers),
  corsCredentials: z.preprocess((v) => (v === 'true' ? true : v === 'false' ? false : v), z.boolean()).default(CORS_DEFAULTS.credentials),
  /** Sampling defaults for requests that set none (`kail serve --temp …`; apps/api/src/sampling-defaults.ts). */
  samplingDefaults: SamplingDefaultsSchema.default({}),
  /**
   * HTTPS (llama-server's --ssl-key-file / --ssl-cert-file): the PEM private key and certificate
   * the API serves with; both or neither. With them it also answers plain HTTP on a loopback port
   * of its own, for the console's proxy and the CLI on this machine (`local` in its start line).
   */
  sslKeyFile: z.string().default(''),
  sslCertFile: z.string().default(''),
  /**
   * A path every route is served under (llama-server's --api-prefix, for a reverse proxy that
   * forwards /llm/…): '/llm' serves /llm/v1/models; '' (the default) none.
   */
  apiPrefix: z
    .string()
    .regex(/^(\/[A-Za-z0-9._~-]+)*$/, "an API prefix is a path such as /llm: a leading '/', no trailing one, letters, digits and . _ ~ - between")
    .default(''),
  /** /ready needs an engine probe newer than this, seconds. Default 10. */
  readyMaxAgeS: z.coerce.number().gt(0).default(10),
});

export type ApiConfig = z.infer<typeof ApiConfigSchema>;

/** The environment variable holding the keys given at start, a line each (ApiConfig.staticKeys). */
export const STATIC_KEYS_ENV = 'KAIL_API_KEYS';

export function parseApiConfig(input: unknown): ApiConfig {
  const r = ApiConfigSchema.safeParse(input);
  if (!r.success) {
    const msg = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    throw new Error(`invalid API configuration: ${msg}`);
  }
  if (!r.data.sslKeyFile !== !r.data.sslCertFile) throw new Error('invalid API configuration: HTTPS needs both the key (--ssl-key-file) and the certificate (--ssl-cert-file)');
  try {
    parseCorsOrigins(r.data.corsOrigins);
  } catch (e) {
    throw new Error(`invalid API configuration: corsOrigins: ${(e as Error).message}`);
  }
  return r.data;
}
