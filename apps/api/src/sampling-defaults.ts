// The server's sampling defaults (llama-server's --temp, --top-k, --top-p, --min-p, --seed,
// --repeat-penalty, --repeat-last-n, --presence-penalty, --frequency-penalty, -n, as `kail serve`
// takes them): a model card's recommended settings given once at start (`--temp 0.6 --top-p 0.95
// --top-k 20 --min-p 0`) apply to every request that does not set them, on every route, in place
// of the route's own default. A request's value wins; on Ollama's routes so does the model's
// Modelfile PARAMETER, which is also the default on the OpenAI routes of a model that has one.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';

import { MessagesRequest } from './anthropic/messages';
import type { Modelfile } from './ollama/modelfiles';
import { ResponsesRequest } from './openai/responses';
import { ChatCompletionRequest, CompletionRequest } from './openai/schemas';

export const SamplingDefaultsSchema = z
  .object({
    // (OpenAI's range: a default every route's schema takes.)
    temperature: z.number().min(0).max(2),
    top_k: z.number().int().min(0),
    // (Above 0: every route takes it; 1 turns it off.)
    top_p: z.number().gt(0).max(1),
    min_p: z.number().min(0).max(1),
    seed: z.number().int().min(0).max(2 ** 32 - 1),
    repeat_penalty: z.number().min(0).max(100),
    repeat_last_n: z.number().int().min(-1),
    presence_penalty: z.number().min(-2).max(2),
    frequency_penalty: z.number().min(-2).max(2),
    /** Most tokens generated (-1: until the context is full or the model stops). */
    n_predict: z.number().int().min(-1),
  })
  .partial()
  .strict();
export type SamplingDefaults = z.infer<typeof SamplingDefaultsSchema>;

type Field = Exclude<keyof SamplingDefaults, 'n_predict'>;
const ALL: readonly Field[] = ['temperature', 'top_k', 'top_p', 'min_p', 'seed', 'repeat_penalty', 'repeat_last_n', 'presence_penalty', 'frequency_penalty'];

/**
 * The routes whose body the defaults go into: the sampling fields each reads, and its field for
 * the most tokens generated (with the other names a request may give it in).
 */
interface RouteFields {
  fields: readonly Field[];
  max?: readonly string[];
  /** Fields whose range is narrower on this route: a default above it is left out there (the route's own applies). */
  above?: Partial<Record<Field, number>>;
}
const OPENAI: RouteFields = { fields: ALL, max: ['max_tokens', 'max_completion_tokens'] };
const LLAMA_SERVER: RouteFields = { fields: ALL, max: ['n_predict', 'max_tokens'] };
const ROUTES: ReadonlyMap<string, RouteFields> = new Map<string, RouteFields>([
  ['/v1/chat/completions', OPENAI],
  ['/v1/completions', OPENAI],
  ['/completion', LLAMA_SERVER],
  ['/completions', LLAMA_SERVER],
  ['/infill', LLAMA_SERVER],
  ['/v1/responses', { fields: ['temperature', 'top_p', 'top_k', 'min_p', 'repeat_penalty', 'seed'], max: ['max_output_tokens'] }],
  // (Anthropic's max_tokens is required: no default goes there.)
  // (Its temperature goes up to 1: a higher default is left to the route's own, 1.)
  ['/v1/messages', { fields: ['temperature', 'top_p', 'top_k', 'seed'], above: { temperature: 1 } }],
]);

/** Ollama's options for the defaults (num_predict for n_predict), under a Modelfile's parameters. */
export function ollamaOptionDefaults(d: SamplingDefaults): Record<string, number> {
  const { n_predict, ...rest } = d;
  return { ...rest, ...(n_predict !== undefined ? { num_predict: n_predict } : {}) } as Record<string, number>;
}

/**
 * The OpenAI (and Anthropic) routes a model's Modelfile PARAMETERs reach: each one's request schema
 * and its field for the most tokens generated (num_predict's), with the others a request may give
 * it in.
 */
const MODELFILE_ROUTES: ReadonlyMap<string, { schema: z.ZodObject<z.ZodRawShape>; max: readonly string[] }> = new Map([
  ['/v1/chat/completions', { schema: ChatCompletionRequest, max: ['max_tokens', 'max_completion_tokens'] }],
  ['/v1/completions', { schema: CompletionRequest, max: ['max_tokens'] }],
  ['/v1/responses', { schema: ResponsesRequest, max: ['max_output_tokens'] }],
  ['/v1/messages', { schema: MessagesRequest, max: ['max_tokens'] }],
]);

/**
 * A model's Modelfile PARAMETERs (kail create, Ollama's create) as defaults of the OpenAI routes'
 * bodies that name the model, above the server's defaults (registered before them) and under the
 * request's own, as Ollama's OpenAI routes apply them; num_predict is the most tokens generated. A
 * value the route would refuse (a temperature of 3: Ollama takes it, OpenAI's range does not) is
 * left out, as is a parameter the route has no field for (num_ctx, num_gpu …).
 */
export function registerModelfileParameters(app: FastifyInstance, modelfileOf: (model: string) => Modelfile): void {
  app.addHook('preHandler', async (req) => {
    const route = MODELFILE_ROUTES.get(req.url.split('?')[0]);
    const body = req.body as Record<string, unknown> | undefined;
    if (!route || !body || typeof body !== 'object' || Array.isArray(body) || typeof body.model !== 'string') return;
    const params = modelfileOf(body.model).parameters ?? {};
    for (const [k, v] of Object.entries(params)) {
      const field = k === 'num_predict' ? route.max[0] : k;
      if (k === 'num_predict' && (typeof v !== 'number' || v <= 0 || route.max.some((m) => body[m] != null))) continue;
      const check = route.schema.shape[field] as z.ZodType | undefined;
      if (check && body[field] == null && check.safeParse(v).success) body[field] = v;
    }
  });
}

/** Puts the defaults into the bodies of the routes above where the request leaves a field out (or null). */
export function registerSamplingDefaults(app: FastifyInstance, d: SamplingDefaults): void {
  if (!Object.values(d).some((v) => v !== undefined)) return;
  app.addHook('preHandler', async (req) => {
    const route = ROUTES.get(req.url.split('?')[0]);
    const body = req.body as Record<string, unknown> | undefined;
    if (!route || !body || typeof body !== 'object' || Array.isArray(body)) return;
    for (const f of route.fields) {
      const v = d[f];
      if (v !== undefined && body[f] == null && !(v > (route.above?.[f] ?? Infinity))) body[f] = v;
    }
    if (d.n_predict !== undefined && route.max && route.max.every((k) => body[k] == null)) {
      // (-1 is "until the end" for llama-server's n_predict; elsewhere leaving the field out says that.)
      if (d.n_predict > 0 || route.max[0] === 'n_predict') body[route.max[0]] = d.n_predict;
    }
  });
}
