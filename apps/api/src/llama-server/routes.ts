// llama-server's own endpoints, for the clients written against it: /completion (and
// /completions), /infill (code completion in editors: llama.vim, llama.vscode), /tokenize,
// /detokenize, /apply-template and /props. Request fields and response shapes follow llama.cpp's tools/server; errors keep
// this server's OpenAI shape. `model` may be left out when exactly one model is served.
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import * as grpc from '@grpc/grpc-js';
import { embdNormalize } from '@kailstream/engine/embedding';
import { common, engine as pb, scheduler as spb } from '@kailstream/proto';
import { z } from 'zod';

import { loraField, loraScales, penaltyWindow, repeatLastN, samplerExtraFields, samplerExtras, samplerExtrasJson, slotFields, slotRequest, diffusionFields, diffusionRequest } from '../sampler-extras';
import { seedField, seedParams } from '../seed';
import { StructuredOutputError, structuredFields, structuredOutput } from '../structured-output';
import { callFailure, chatMessagesToProto, continuesFinal, grpcToHttp, recordFinished, submitAll, templateKwargs, unary, withLogitBias, type OpenAiDeps } from '../openai/routes';
import { chatMessages, openAiError, sampling, stop, tools, zodToOpenAi } from '../openai/schemas';
import { llamaTimings } from '../timings';
import { VERSION } from '../version';
import type { ModelSlots } from '../trpc/telemetry-hub';

/** The routes this module serves (for the error counter). */
export const LLAMA_SERVER_ROUTES = ['/completion', '/completions', '/infill', '/tokenize', '/detokenize', '/apply-template', '/props', '/slots', '/embedding', '/embeddings', '/models', '/models/load', '/models/unload', '/rerank', '/reranking', '/score'] as const;

const tokenIds = z.array(z.number().int().min(0).max(2_147_483_647));

/** Sampling and length fields of /completion and /infill, with llama-server's defaults applied later. */
const generation = {
  model: z.string().min(1).optional(),
  /** -1 (llama-server's default): until end of generation or the context is full. */
  n_predict: z.number().int().min(-1).max(1_000_000).optional().nullable(),
  max_tokens: z.number().int().min(-1).max(1_000_000).optional().nullable(),
  temperature: z.number().min(0).max(10).optional().nullable(),
  top_k: sampling.top_k,
  top_p: z.number().min(0).max(1).optional().nullable(),
  min_p: sampling.min_p,
  repeat_penalty: sampling.repeat_penalty,
  repeat_last_n: repeatLastN,
  ...samplerExtraFields,
  // json_schema and grammar (GBNF), and vLLM's guided_json / guided_choice / guided_grammar (structured-output.ts)
  ...structuredFields,
  /** Completions per prompt (`n` its alias); with a seed, completion j of a prompt samples with seed + j. */
  n_cmpl: z.number().int().min(1).max(16).optional().nullable(),
  n: z.number().int().min(1).max(16).optional().nullable(),
  /** Only these fields of each final answer; "a/b" takes b out of a, under the key "a/b" (llama-server's json_get_nested_values). */
  response_fields: z.array(z.string().max(200)).max(64).optional().nullable(),
  /** llama-server's probabilities after the sampling chain (`prob` and `top_probs` instead of `logprob` and `top_logprobs`). */
  post_sampling_probs: z.boolean().optional().nullable(),
  /** LoRA adapters' scales for this request (llama-server's `lora`: [{id, scale}], the others 0). */
  lora: loraField,
  presence_penalty: sampling.presence_penalty,
  frequency_penalty: sampling.frequency_penalty,
  /** -1 (the default): a random seed. */
  seed: seedField,
  stop,
  stream: z.boolean().optional().nullable(),
  timings_per_token: sampling.timings_per_token,
  ignore_eos: sampling.ignore_eos,
  /** Probabilities of the n most likely tokens at each step (completion_probabilities). */
  n_probs: z.number().int().min(0).max(20).optional().nullable(),
  /** Include each message's token ids (`tokens`). */
  return_tokens: z.boolean().optional().nullable(),
  ...slotFields,
  ...diffusionFields,
  /** Code completion: lines after the first newline need this many leading spaces/tabs, else the output ends there (0 or less: off). */
  n_indent: z.number().int().max(1_000_000).optional().nullable(),
  /** Code completion: past this many ms of generation, the output ends at the next newline (0 or less: off; -1 is llama-server's default). */
  t_max_predict_ms: z.number().int().max(86_400_000).optional().nullable(),
  /** llama-server's forms: an object of id -> bias, or [[id, bias], …] where a bias of false bans the token. */
  logit_bias: z
    .union([
      sampling.logit_bias,
      z.array(z.tuple([z.number().int().min(0), z.union([z.number().min(-100).max(100), z.literal(false)])])).max(1024),
    ])
    .optional()
    .nullable(),
};

const CompletionBody = z.object({
  ...generation,
  /** Checked by parsePrompts: llama-server's shapes. */
  prompt: z.unknown().optional(),
});

/** One prompt as llama-server takes it: text, token ids, or token ids and text mixed. */
type Subprompt = string | (string | number)[];

const PROMPT_SHAPES =
  'prompt must be a string, an array of token ids, an array mixing token ids and strings, an object {"prompt_string": …}, or an array of these (several prompts)';

/**
 * llama-server's prompt shapes (tokenize_input_prompts): a string, token ids, ids and strings
 * mixed, {prompt_string}; an array without any integer is several prompts. Throws HttpError 400.
 */
function parsePrompts(prompt: unknown): { items: Subprompt[]; many: boolean } {
  const bad = (msg: string) => new HttpError(400, openAiError(msg, 'invalid_request_error', 'prompt', 'invalid_value'));
  const isId = (x: unknown) => typeof x === 'number' && Number.isInteger(x);
  const one = (p: unknown, where: string): Subprompt => {
    if (typeof p === 'string') {
      if (!p.length) throw bad(`${where} must not be empty`);
      return p;
    }
    if (Array.isArray(p) && p.length && p.every((x) => typeof x === 'string' || isId(x))) {
      const ids = p.filter(isId) as number[];
      const badId = ids.find((t) => t < 0 || t > 2_147_483_647);
      if (badId !== undefined) throw bad(`${where}: token id ${badId} is not a valid token id`);
      return p as (string | number)[];
    }
    if (p && typeof p === 'object' && !Array.isArray(p) && 'prompt_string' in p) {
      const o = p as Record<string, unknown>;
      if (o.multimodal_data !== undefined) throw bad(`${where}: multimodal_data is not supported: the models served here read text only`);
      return one(o.prompt_string, `${where}.prompt_string`);
    }
    if (Array.isArray(p) && !p.length) throw bad(`${where} must not be empty`);
    throw bad(`${where}: ${PROMPT_SHAPES}`);
  };
  if (prompt === undefined || prompt === null) throw bad('prompt is required');
  if (Array.isArray(prompt) && !prompt.some(isId)) {
    if (!prompt.length) throw bad('prompt must not be empty');
    if (prompt.length > 64) throw bad('at most 64 prompts in one request');
    return { items: prompt.map((p, i) => one(p, `prompt.${i}`)), many: true };
  }
  return { items: [one(prompt, 'prompt')], many: false };
}

/** A prompt's engine fields: text as text; ids as ids; mixed ids and strings tokenized here (BOS only when a string comes first, as llama-server). */
async function promptSpec(s: spb.SchedulerServiceClient, model: string, p: Subprompt): Promise<PromptSpec> {
  if (typeof p === 'string') return { prompt: { prompt: p }, text: p };
  if (p.every((x) => typeof x === 'number')) return { prompt: { promptTokens: p as number[] } };
  const tokens: number[] = [];
  for (const [i, x] of p.entries()) {
    if (typeof x === 'number') tokens.push(x);
    else {
      const r = await unary<pb.TokenizeRequest, pb.TokenizeResponse>(s.tokenize.bind(s), pb.TokenizeRequest.fromPartial({ model, text: x, addSpecial: i === 0, parseSpecial: true }));
      tokens.push(...r.tokens);
    }
  }
  if (!tokens.length) throw new HttpError(400, openAiError('prompt has no tokens', 'invalid_request_error', 'prompt', 'invalid_value'));
  return { prompt: { promptTokens: tokens } };
}

const InfillBody = z.object({
  ...generation,
  input_prefix: z.string({ message: 'input_prefix is required (a string)' }),
  input_suffix: z.string({ message: 'input_suffix is required (a string)' }),
  /** The project's other files, put before the prefix. */
  input_extra: z
    .array(z.object({ filename: z.string().optional(), text: z.string({ message: 'each input_extra chunk needs a text string' }) }), {
      message: 'input_extra must be an array of {"filename": string, "text": string}',
    })
    .max(1024)
    .optional()
    .nullable(),
  /** Text at the start of the gap, after the prefix. */
  prompt: z.string({ message: 'prompt must be a string' }).optional().nullable(),
});

const EmbeddingBody = z.object({
  model: z.string().min(1).optional(),
  /** llama-server's field; `input` (the OpenAI name) is taken too. Checked by parsePrompts. */
  content: z.unknown().optional(),
  input: z.unknown().optional(),
  /** -1 none, 0 max-absolute (to the int16 range), 1 taxicab, 2 Euclidean (the default), p > 2 p-norm. */
  embd_normalize: z.number().int().min(-1).max(1000).optional().nullable(),
});

const TokenizeBody = z.object({
  model: z.string().min(1).optional(),
  content: z.string({ message: 'content must be a string' }).optional(),
  add_special: z.boolean().optional(),
  parse_special: z.boolean().optional(),
  with_pieces: z.boolean().optional(),
});

const ApplyTemplateBody = z.object({
  model: z.string().min(1).optional(),
  messages: chatMessages,
  tools,
  chat_template_kwargs: z.record(z.string(), z.unknown()).optional().nullable(),
  reasoning_effort: z.enum(['minimal', 'low', 'medium', 'high']).optional().nullable(),
});

const DetokenizeBody = z.object({
  model: z.string().min(1).optional(),
  tokens: tokenIds.max(10_000_000).optional(),
});

type Generation = z.infer<z.ZodObject<typeof generation>>;

export class HttpError extends Error {
  constructor(readonly status: number, readonly body: ReturnType<typeof openAiError>, readonly retryAfter?: number) {
    super(body.error.message);
  }
}

/** A failed call's HTTP answer: an HttpError as it is, anything else by its gRPC status (grpcToHttp). */
export function failureOf(e: unknown): ReturnType<typeof grpcToHttp> {
  return e instanceof HttpError ? { status: e.status, body: e.body, retryAfter: e.retryAfter } : grpcToHttp(e as grpc.ServiceError);
}

/** The served models (a failed call as an HttpError). */
export async function servedModels(scheduler: spb.SchedulerServiceClient): Promise<common.ModelInfo[]> {
  try {
    return (await unary<spb.ListModelsRequest, spb.ListModelsResponse>(scheduler.listModels.bind(scheduler), {})).models;
  } catch (e) {
    const f = grpcToHttp(e as grpc.ServiceError);
    throw new HttpError(f.status, f.body, f.retryAfter);
  }
}

/**
 * The model by id when it is loaded, or once the scheduler has loaded it from an engine's models
 * directory (load on demand; a large model can take minutes); null when no engine has it.
 */
export async function ensureModel(scheduler: spb.SchedulerServiceClient, id: string, keepAliveMs?: number, contextLength = 0): Promise<common.ModelInfo | null> {
  try {
    const req = { model: id, keepAliveMs: keepAliveMs ?? 0, hasKeepAlive: keepAliveMs !== undefined, contextLength };
    const r = await unary<spb.EnsureModelRequest, spb.EnsureModelResponse>(scheduler.ensureModel.bind(scheduler), req, 900_000);
    return r.model ?? null;
  } catch (e) {
    const err = e as grpc.ServiceError;
    if (err.code === grpc.status.NOT_FOUND || err.code === grpc.status.UNIMPLEMENTED) return null;
    const f = grpcToHttp(err);
    throw new HttpError(f.status, f.body, f.retryAfter);
  }
}

/**
 * Unloads a model from the engine that has it; with `ifIdle`, only when nothing runs or waits on
 * it ('in-use' otherwise).
 */
export async function unloadModel(scheduler: spb.SchedulerServiceClient, id: string, ifIdle: boolean): Promise<'unloaded' | 'not-loaded' | 'in-use'> {
  try {
    await unary<spb.UnloadModelRequest, pb.UnloadModelResponse>(scheduler.unloadModel.bind(scheduler), { engineId: '', unload: { id, ifIdle } }, 120_000);
    return 'unloaded';
  } catch (e) {
    const err = e as grpc.ServiceError;
    if (err.code === grpc.status.NOT_FOUND) return 'not-loaded';
    if (ifIdle && err.code === grpc.status.RESOURCE_EXHAUSTED) return 'in-use';
    const f = grpcToHttp(err);
    throw new HttpError(f.status, f.body, f.retryAfter);
  }
}

/** Ids of the GGUF files in the engine's models directory that are not loaded (what load on demand can serve). */
export async function unloadedModelFiles(scheduler: spb.SchedulerServiceClient): Promise<pb.ModelFile[]> {
  try {
    const r = await unary<spb.ListModelFilesRequest, pb.ListModelFilesResponse>(scheduler.listModelFiles.bind(scheduler), { engineId: '' });
    return r.files.filter((f) => !f.error && !f.info?.loaded);
  } catch {
    return [];
  }
}

/** The request's model (or the only one served) and its context length. */
export async function resolveModel(scheduler: spb.SchedulerServiceClient, model: string | undefined): Promise<common.ModelInfo> {
  const models = await servedModels(scheduler);
  const served = models.map((m) => m.id);
  if (model === undefined) {
    if (models.length === 1) return models[0];
    const why = models.length ? `${models.length} models are served (${served.join(', ')})` : 'no model is loaded';
    throw new HttpError(400, openAiError(`model is required: ${why}`, 'invalid_request_error', 'model', 'invalid_value'));
  }
  const m = models.find((x) => x.id === model) ?? (await ensureModel(scheduler, model));
  if (!m) throw new HttpError(404, openAiError(`The model '${model}' does not exist (served: ${served.join(', ') || 'none'})`, 'invalid_request_error', 'model', 'model_not_found'));
  return m;
}

/** llama-server's sampling defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05) under the request's fields. */
function samplingOf(b: Generation): common.SamplingParams {
  const bias: Record<string, number> = {};
  if (Array.isArray(b.logit_bias)) for (const [id, v] of b.logit_bias) bias[String(id)] = v === false ? -100 : v;
  else Object.assign(bias, b.logit_bias ?? {});
  return withLogitBias(bias, {
    temperature: b.temperature ?? 0.8,
    topK: b.top_k ?? 40,
    topP: b.top_p ?? 0.95,
    minP: b.min_p ?? 0.05,
    ...penaltyWindow(b.repeat_last_n, { repetitionPenalty: b.repeat_penalty ?? 1, presencePenalty: b.presence_penalty ?? 0, frequencyPenalty: b.frequency_penalty ?? 0 }),
    ...seedParams(b.seed),
    extras: samplerExtras(b),
  });
}

/** The `n_predict`: -1 or absent means until the context is full (the engine stops there). */
function predictOf(b: Generation, contextLength: number): number {
  const n = b.n_predict ?? b.max_tokens ?? -1;
  return n < 0 ? Math.max(1, contextLength) : n;
}

const STOP_TYPE = (finish: common.FinishReason, stopWord: string) =>
  finish === common.FinishReason.FINISH_REASON_STOP ? (stopWord ? 'word' : 'eos') : finish === common.FinishReason.FINISH_REASON_LENGTH ? 'limit' : 'none';

/**
 * completion_probabilities entries: each token with its bytes, logprob and the top alternatives;
 * after the sampling chain (post_sampling_probs), `prob` and `top_probs` as llama-server writes them.
 */
function probabilities(msg: pb.GenerateResponse, post: boolean) {
  const entry = (t: common.TokenLogprob) => ({ id: t.token, token: t.text, bytes: [...Buffer.from(t.text, 'utf8')], ...(post ? { prob: Math.exp(t.logprob) } : { logprob: t.logprob }) });
  return msg.logprobs.map((l, i) => ({ ...entry(l), [post ? 'top_probs' : 'top_logprobs']: (msg.topLogprobs[i]?.candidates ?? []).map(entry) }));
}

/** generation_settings (and /props' default_generation_settings.params): the settings a request ran with. */
function settingsJson(b: Generation, sampling: common.SamplingParams, stops: string[]) {
  return {
    n_predict: b.n_predict ?? b.max_tokens ?? -1,
    seed: b.seed ?? -1,
    temperature: sampling.temperature,
    top_k: sampling.topK,
    top_p: sampling.topP,
    min_p: sampling.minP,
    repeat_penalty: sampling.repetitionPenalty,
    presence_penalty: sampling.presencePenalty,
    frequency_penalty: sampling.frequencyPenalty,
    repeat_last_n: b.repeat_last_n ?? 64,
    ...samplerExtrasJson(sampling.extras),
    stop: stops,
    ignore_eos: !!b.ignore_eos,
    n_probs: b.n_probs ?? 0,
    n_keep: b.n_keep ?? 0,
    n_discard: b.n_discard ?? 0,
    n_indent: b.n_indent ?? 0,
    t_max_predict_ms: b.t_max_predict_ms ?? -1,
    stream: !!b.stream,
  };
}

/** One prompt of a /completion (or /infill) request: the engine's prompt fields, and its text to echo. */
interface PromptSpec {
  prompt: Partial<pb.GenerateRequest>;
  text?: string;
}

/**
 * Runs the request's generations (one per prompt) and answers as llama-server's /completion does:
 * one JSON body (an array of them for several prompts), or (stream) server-sent events of
 * {index, content, tokens, stop: false, …} and, per prompt, a last one with stop: true, the stop
 * type, the settings and the timings.
 */
async function complete(
  req: FastifyRequest, reply: FastifyReply, deps: OpenAiDeps, b: Generation,
  prompts: (s: spb.SchedulerServiceClient, model: string) => Promise<PromptSpec[]>, many = false,
) {
  const scheduler = deps.scheduler();
  if (!scheduler) return reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
  let model: common.ModelInfo;
  let specs: PromptSpec[];
  let structured: Partial<pb.GenerateRequest> | undefined;
  try {
    structured = structuredOutput(b, false);
  } catch (e) {
    if (e instanceof StructuredOutputError) return reply.code(400).send(e.body);
    throw e;
  }
  try {
    model = await resolveModel(scheduler, b.model);
    specs = await prompts(scheduler, model.id);
  } catch (e) {
    return sendFailure(reply, e);
  }
  const nProbs = b.n_probs ?? 0;
  const nPredict = predictOf(b, model.contextLength);
  const stops = b.stop == null ? [] : (Array.isArray(b.stop) ? b.stop : [b.stop]).filter((s) => s.length > 0);
  const sampling = samplingOf(b);
  // n_cmpl completions per prompt, prompt by prompt (completion j of a seeded request: seed + j).
  const nCmpl = b.n_cmpl ?? b.n ?? 1;
  if (nCmpl > 1) {
    specs = specs.flatMap((spec) => Array.from({ length: nCmpl }, () => spec));
    many = true;
  }
  const gens = specs.map((spec, i) =>
    pb.GenerateRequest.fromPartial({
      ...spec.prompt,
      requestId: `cmpl-${randomUUID()}`,
      model: model.id,
      maxTokens: nPredict,
      // n_predict 0: the prompt computed into a slot's cache (editor plugins warm it so), nothing generated.
      promptOnly: nPredict === 0,
      stop: stops,
      sampling: i % nCmpl && sampling.hasSeed ? { ...sampling, seed: (sampling.seed + (i % nCmpl)) % Number.MAX_SAFE_INTEGER } : sampling,
      wantLogprobs: nProbs > 0,
      topLogprobs: nProbs,
      postSamplingProbs: !!b.post_sampling_probs,
      ignoreEos: !!b.ignore_eos,
      nIndent: Math.max(0, b.n_indent ?? 0),
      tMaxPredictMs: Math.max(0, b.t_max_predict_ms ?? 0),
      ...slotRequest(b),
      diffusion: diffusionRequest(b),
      lora: b.lora ?? [],
      ...structured,
    }),
  );
  const settings = settingsJson(b, sampling, stops);
  const returnTokens = !!b.return_tokens;
  const runs = specs.map(() => ({ content: '', tokens: [] as number[], probs: [] as ReturnType<typeof probabilities>, last: undefined as pb.GenerateResponse | undefined, tFirst: 0 }));
  let headersSent = false;
  const sse = (obj: unknown) => reply.raw.write(`data: ${JSON.stringify(obj)}\n\n`);
  const startStream = () => {
    if (headersSent) return;
    headersSent = true;
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  };
  const t0 = performance.now();
  const finalOf = (i: number) => {
    const r = runs[i];
    const usage = r.last?.usage ?? common.Usage.fromPartial({});
    const timings = r.last?.timings ?? common.Timings.fromPartial({});
    const finish = r.last?.finishReason ?? common.FinishReason.FINISH_REASON_UNSPECIFIED;
    const stopWord = r.last?.stopWord ?? '';
    recordFinished(deps, req, model.id, r.last, t0, r.tFirst);
    const genN = usage.completionTokens;
    return {
      index: i,
      content: b.stream ? '' : r.content,
      tokens: returnTokens && !b.stream ? r.tokens : [],
      id_slot: r.last?.idSlot ?? -1,
      stop: true,
      model: model.id,
      tokens_predicted: genN,
      tokens_evaluated: usage.promptTokens,
      generation_settings: settings,
      ...(specs[i].text !== undefined ? { prompt: specs[i].text } : {}),
      has_new_line: r.content.includes('\n'),
      // A context shift dropped tokens (llama-server's slot.truncated).
      truncated: (r.last?.contextShifted ?? 0) > 0,
      stop_type: STOP_TYPE(finish, stopWord),
      stopping_word: stopWord,
      tokens_cached: usage.cachedPromptTokens,
      timings: llamaTimings(usage, timings),
      ...(!b.stream && r.probs.length ? { completion_probabilities: r.probs } : {}),
    };
  };
  const fields = b.response_fields;
  const finalJson = (i: number) => (fields?.length ? pickFields(finalOf(i), fields) : finalOf(i));
  const finals: Record<string, unknown>[] = [];
  try {
    await submitAll(req, reply, deps, scheduler, gens, (i, msg) => {
      const r = runs[i];
      if (msg.tokens.length && !r.tFirst) r.tFirst = performance.now();
      r.content += msg.text;
      r.tokens.push(...msg.tokens);
      const p = nProbs > 0 ? probabilities(msg, !!b.post_sampling_probs) : [];
      r.probs.push(...p);
      r.last = msg;
      const done = msg.finishReason !== common.FinishReason.FINISH_REASON_UNSPECIFIED;
      if (b.stream && (msg.text || msg.tokens.length) && !done) {
        startStream();
        sse({
          index: i, content: msg.text, tokens: returnTokens ? msg.tokens : [], stop: false, id_slot: msg.progressUsage ? msg.idSlot : -1,
          tokens_predicted: r.tokens.length, tokens_evaluated: 0,
          ...(b.timings_per_token && msg.progressUsage ? { timings: llamaTimings(msg.progressUsage, msg.progressTimings) } : {}),
          ...(p.length ? { completion_probabilities: p } : {}),
        });
      }
      if (done) {
        finals[i] = finalJson(i);
        // Streamed: each prompt's last event as soon as it ends.
        if (b.stream) {
          startStream();
          sse(finals[i]);
        }
      }
    });
  } catch (e) {
    runs.forEach((r, i) => finals[i] === undefined && deps.onUsage?.(req, 0, r.tokens.length));
    const failed = callFailure(reply, e);
    if (!failed) return reply;
    if (headersSent) {
      deps.metrics?.requestErrors.inc({ status: String(failed.status) });
      sse(failed.body);
      reply.raw.end();
      return reply;
    }
    if (failed.retryAfter) reply.header('retry-after', String(failed.retryAfter));
    return reply.code(failed.status).send(failed.body);
  }
  for (let i = 0; i < runs.length; i++) {
    if (finals[i] !== undefined) continue;
    finals[i] = finalJson(i);
    if (b.stream) {
      startStream();
      sse(finals[i]);
    }
  }
  if (b.stream) {
    startStream();
    reply.raw.end();
    return reply;
  }
  return reply.send(many ? finals : finals[0]);
}

/** llama-server's response_fields: each path's value (a/b: b inside a), keyed by the path; missing ones left out. */
function pickFields(obj: Record<string, unknown>, paths: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const p of paths) {
    let cur: unknown = obj;
    let ok = true;
    for (const k of p.split('/')) {
      if (ok && cur && typeof cur === 'object' && !Array.isArray(cur) && Object.prototype.hasOwnProperty.call(cur, k)) cur = (cur as Record<string, unknown>)[k];
      else ok = false;
    }
    if (ok) out[p] = cur;
  }
  return out;
}

/** Valid UTF-8 bytes as their string, else the byte values (llama-server's with_pieces). */
function pieceJson(bytes: Uint8Array): string | number[] {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    return [...bytes];
  }
}

/** failureOf, or null when a gRPC call was cancelled because the client went away (nothing to answer). */
export function replyFailure(reply: FastifyReply, e: unknown): ReturnType<typeof grpcToHttp> | null {
  return e instanceof HttpError ? failureOf(e) : callFailure(reply, e);
}

/** A failed whole-body answer (replyFailure), with Retry-After where it has one; nothing when the client left. */
export function sendFailure(reply: FastifyReply, e: unknown): FastifyReply {
  const failed = replyFailure(reply, e);
  if (!failed) return reply;
  if (failed.retryAfter) reply.header('retry-after', String(failed.retryAfter));
  return reply.code(failed.status).send(failed.body);
}

/** Runs a tokenizer call with the request's model, answering errors in the API's shape. */
async function withModel<T>(reply: FastifyReply, deps: OpenAiDeps, model: string | undefined, fn: (s: spb.SchedulerServiceClient, id: string, info: common.ModelInfo) => Promise<T>) {
  const scheduler = deps.scheduler();
  if (!scheduler) return reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
  try {
    const info = await resolveModel(scheduler, model);
    return reply.send(await fn(scheduler, info.id, info));
  } catch (e) {
    return sendFailure(reply, e);
  }
}

/**
 * llama-server's /slots entries for one model: its sequence slots on every engine that has it
 * loaded, numbered across engines, from the engines' telemetry (at most the telemetry interval
 * old). Sampling parameters are the running request's, with llama-server's names.
 */
export function slotsJson(models: readonly ModelSlots[], model: string) {
  const out = [];
  for (const m of models) {
    if (m.model !== model) continue;
    for (const s of m.slots) {
      const p = s.sampling;
      out.push({
        id: out.length,
        engine_id: m.engineId,
        request_id: s.requestId || null,
        n_ctx: s.nCtx,
        speculative: s.speculative,
        is_processing: s.processing,
        n_prompt_tokens: s.promptTokens,
        n_prompt_tokens_processed: s.promptTokensProcessed,
        n_cached_tokens: s.cachedTokens,
        params: p
          ? { seed: p.seed, temperature: p.temperature, top_k: p.topK, top_p: p.topP, min_p: p.minP, repeat_last_n: p.penaltyLastN, repeat_penalty: p.repetitionPenalty, presence_penalty: p.presencePenalty, frequency_penalty: p.frequencyPenalty, ...samplerExtrasJson(p.extras) }
          : null,
        next_token: { has_next_token: s.processing, has_new_line: false, n_remain: s.processing ? s.remainingTokens : -1, n_decoded: s.decodedTokens },
      });
    }
  }
  return out;
}

/**
 * `slots`: every loaded model's slots from the engines' telemetry (the console's telemetry hub),
 * for /slots; without it /slots is a 501.
 */
export function registerLlamaServerRoutes(app: FastifyInstance, deps: OpenAiDeps, slots?: () => readonly ModelSlots[]): void {
  const completion = async (req: FastifyRequest, reply: FastifyReply) => {
    const parsed = CompletionBody.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const b = parsed.data;
    let prompts: ReturnType<typeof parsePrompts>;
    try {
      prompts = parsePrompts(b.prompt);
    } catch (e) {
      if (!(e instanceof HttpError)) throw e;
      return reply.code(e.status).send(e.body);
    }
    return complete(req, reply, deps, b, (s, model) => Promise.all(prompts.items.map((p) => promptSpec(s, model, p))), prompts.many);
  };
  app.post('/completion', completion);
  app.post('/completions', completion);

  app.post('/infill', async (req, reply) => {
    const parsed = InfillBody.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const b = parsed.data;
    const prompt = {
      prompt: b.input_prefix,
      suffix: b.input_suffix,
      infill: { middle: b.prompt ?? '', extra: (b.input_extra ?? []).map((c) => ({ filename: c.filename ?? '', text: c.text })) },
    };
    return complete(req, reply, deps, b, async () => [{ prompt }]);
  });

  app.post('/tokenize', async (req, reply) => {
    const parsed = TokenizeBody.safeParse(req.body ?? {});
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const b = parsed.data;
    return withModel(reply, deps, b.model, async (s, model) => {
      if (b.content === undefined) return { tokens: [] };
      const r = await unary<pb.TokenizeRequest, pb.TokenizeResponse>(
        s.tokenize.bind(s),
        pb.TokenizeRequest.fromPartial({ model, text: b.content, addSpecial: b.add_special ?? false, parseSpecial: b.parse_special ?? true, withPieces: !!b.with_pieces }),
      );
      return { tokens: b.with_pieces ? r.tokens.map((id, i) => ({ id, piece: pieceJson(r.pieces[i]) })) : r.tokens };
    });
  });

  // The chat prompt the model would be given (its template, the assistant turn's opening last),
  // without generating: to edit and send to /completion.
  app.post('/apply-template', async (req, reply) => {
    const parsed = ApplyTemplateBody.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const b = parsed.data;
    const messages = chatMessagesToProto(b.messages);
    return withModel(reply, deps, b.model, async (s, model) => {
      const r = await unary<pb.TokenizeRequest, pb.TokenizeResponse>(
        s.tokenize.bind(s),
        pb.TokenizeRequest.fromPartial({
          model,
          messages,
          continueFinalMessage: continuesFinal(messages),
          toolsJson: b.tools?.length ? JSON.stringify(b.tools) : '',
          chatTemplateKwargsJson: templateKwargs(b.chat_template_kwargs, b.reasoning_effort),
        }),
      );
      return { prompt: r.prompt };
    });
  });

  // The server's properties for the model (the only one served, or ?model=ID): its context,
  // sequence slots, file, chat template, and the defaults /completion applies.
  // The model's sequence slots and what runs in them (monitoring, load balancers);
  // ?fail_on_no_slot=1 answers 503 when every slot is busy.
  app.get('/slots', async (req, reply) => {
    const q = (req.query ?? {}) as Record<string, unknown>;
    if (q.model !== undefined && (typeof q.model !== 'string' || !q.model))
      return reply.code(400).send(openAiError('model must be a model id', 'invalid_request_error', 'model', 'invalid_value'));
    if (!slots) return reply.code(501).send(openAiError('this server does not follow the engines\' telemetry, so it cannot show slots', 'not_supported_error', null, 'not_supported'));
    return withModel(reply, deps, q.model as string | undefined, async (_s, model) => {
      const list = slotsJson(slots(), model);
      if (!list.length) throw new HttpError(503, openAiError(`no telemetry from the engine serving '${model}' yet; retry in a moment`, 'server_error', null, 'unavailable'));
      if ((q.fail_on_no_slot === '1' || q.fail_on_no_slot === 'true') && list.every((s) => s.is_processing))
        throw new HttpError(503, openAiError('no slot available', 'unavailable_error', null, 'unavailable'));
      return list;
    });
  });

  // llama-server's slot actions: POST /slots/ID?action=save|restore with {"filename": NAME} (a
  // file in the engine's --slot-save-path directory), or action=erase; the slot must be idle.
  const SlotBody = z.object({ filename: z.string().max(255).optional().nullable() }).passthrough();
  app.post('/slots/:id', async (req, reply) => {
    const q = (req.query ?? {}) as Record<string, unknown>;
    const id = Number((req.params as { id: string }).id);
    if (!Number.isInteger(id) || id < 0) return reply.code(400).send(openAiError(`slot id must be a non-negative integer, got '${(req.params as { id: string }).id}'`, 'invalid_request_error', 'id_slot', 'invalid_value'));
    const kinds: Record<string, pb.SlotActionKind> = { save: pb.SlotActionKind.SLOT_ACTION_SAVE, restore: pb.SlotActionKind.SLOT_ACTION_RESTORE, erase: pb.SlotActionKind.SLOT_ACTION_ERASE };
    const action = typeof q.action === 'string' ? kinds[q.action] : undefined;
    if (action === undefined) return reply.code(400).send(openAiError('Invalid action: action must be save, restore or erase', 'invalid_request_error', 'action', 'invalid_value'));
    if (q.model !== undefined && (typeof q.model !== 'string' || !q.model))
      return reply.code(400).send(openAiError('model must be a model id', 'invalid_request_error', 'model', 'invalid_value'));
    const parsed = SlotBody.safeParse(req.body ?? {});
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const filename = parsed.data.filename ?? '';
    if (action !== pb.SlotActionKind.SLOT_ACTION_ERASE && !filename) return reply.code(400).send(openAiError('Invalid filename: filename is required', 'invalid_request_error', 'filename', 'invalid_value'));
    return withModel(reply, deps, q.model as string | undefined, async (s, model) => {
      const r = await unary<spb.SlotActionRequest, pb.SlotActionResponse>(s.slotAction.bind(s), { engineId: '', action: { model, slot: id, action, filename } });
      if (action === pb.SlotActionKind.SLOT_ACTION_SAVE) return { id_slot: id, filename, n_saved: r.nTokens, n_written: r.nBytes, timings: { save_ms: r.ms } };
      if (action === pb.SlotActionKind.SLOT_ACTION_RESTORE) return { id_slot: id, filename, n_restored: r.nTokens, n_read: r.nBytes, timings: { restore_ms: r.ms } };
      return { id_slot: id, n_erased: r.nTokens };
    });
  });

  // llama-server's router mode: the models the engines have and the models directory's files
  // (which load on demand), loading and unloading one by name.
  const ModelBody = z.object({ model: z.string().min(1, 'model is required').max(200) });
  const admin = async (reply: FastifyReply, fn: (s: spb.SchedulerServiceClient) => Promise<unknown>) => {
    const s = deps.scheduler();
    if (!s) return reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
    try {
      return reply.send(await fn(s));
    } catch (e) {
      return sendFailure(reply, e);
    }
  };
  app.get('/models', (_req, reply) =>
    admin(reply, async (s) => {
      const loaded = await servedModels(s);
      const files = (await unloadedModelFiles(s)).filter((f) => !loaded.some((m) => m.id === f.id));
      return {
        data: [
          ...loaded.map((m) => ({ id: m.id, path: m.path, status: { value: 'loaded' } })),
          ...files.map((f) => ({ id: f.id, path: f.path, status: { value: 'unloaded' } })),
        ],
      };
    }),
  );
  app.post('/models/load', (req, reply) => {
    const parsed = ModelBody.safeParse(req.body ?? {});
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    return admin(reply, async (s) => {
      await resolveModel(s, parsed.data.model);
      return { success: true };
    });
  });
  app.post('/models/unload', (req, reply) => {
    const parsed = ModelBody.safeParse(req.body ?? {});
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    return admin(reply, async (s) => {
      const r = await unloadModel(s, parsed.data.model, true);
      if (r === 'not-loaded') throw new HttpError(404, openAiError(`model '${parsed.data.model}' is not loaded`, 'invalid_request_error', 'model', 'model_not_found'));
      if (r === 'in-use') throw new HttpError(409, openAiError(`model '${parsed.data.model}' is in use: not unloaded (try again when its requests are done)`, 'invalid_request_error', 'model', 'model_in_use'));
      return { success: true };
    });
  });

  // llama-server's POST /props: it changes nothing either, and answers so unless started with --props.
  app.post('/props', async (_req, reply) =>
    reply.code(501).send(openAiError('This server does not support changing global properties (llama-server answers so without --props, and changes nothing with it)', 'not_supported_error', null, 'not_supported')),
  );
  app.get('/props', async (req, reply) => {
    const q = (req.query ?? {}) as Record<string, unknown>;
    if (q.model !== undefined && (typeof q.model !== 'string' || !q.model))
      return reply.code(400).send(openAiError('model must be a model id', 'invalid_request_error', 'model', 'invalid_value'));
    return withModel(reply, deps, q.model as string | undefined, async (_s, model, info) => ({
      default_generation_settings: {
        id: 0,
        id_task: -1,
        n_ctx: info.contextLength,
        speculative: false,
        is_processing: false,
        // (With the server's defaults, kail serve --temp …, as llama-server's reflect its flags.)
        params: settingsJson({ ...deps.samplingDefaults }, samplingOf({ ...deps.samplingDefaults }), []),
        prompt: '',
      },
      total_slots: info.slots,
      model_alias: model,
      model_path: info.path,
      chat_template: info.chatTemplate,
      modalities: { vision: false, audio: false },
      build_info: `kailstream ${VERSION}`,
      is_sleeping: false,
    }));
  });

  // llama-server's GET /lora-adapters: the model's adapters with the scales requests get by default.
  app.get('/lora-adapters', async (req, reply) => {
    const q = (req.query ?? {}) as Record<string, unknown>;
    if (q.model !== undefined && (typeof q.model !== 'string' || !q.model))
      return reply.code(400).send(openAiError('model must be a model id', 'invalid_request_error', 'model', 'invalid_value'));
    return withModel(reply, deps, q.model as string | undefined, async (_s, _model, info) => info.loraAdapters.map((l, id) => ({ id, path: l.path, scale: l.scale })));
  });
  // llama-server's POST /lora-adapters: [{id, scale}] become the scales of requests that give none
  // (the adapters left out at 0), until the model is reloaded.
  app.post('/lora-adapters', async (req, reply) => {
    const q = (req.query ?? {}) as Record<string, unknown>;
    if (q.model !== undefined && (typeof q.model !== 'string' || !q.model))
      return reply.code(400).send(openAiError('model must be a model id', 'invalid_request_error', 'model', 'invalid_value'));
    const parsed = loraScales.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    return withModel(reply, deps, q.model as string | undefined, async (s, model) => {
      await unary<spb.SetLoraAdaptersRequest, pb.SetLoraAdaptersResponse>(s.setLoraAdapters.bind(s), { engineId: '', set: { model, lora: parsed.data } });
      return { success: true };
    });
  });

  // llama-server's own embeddings (not OpenAI's shape): per prompt {index, embedding: [vector]},
  // the model's pooled embedding (as /v1/embeddings computes it) normalized by embd_normalize.
  const embedding = async (req: FastifyRequest, reply: FastifyReply) => {
    const parsed = EmbeddingBody.safeParse(req.body ?? {});
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const b = parsed.data;
    const input = b.content ?? b.input;
    if (input === undefined) return reply.code(400).send(openAiError('"input" or "content" must be provided', 'invalid_request_error', 'content', 'invalid_value'));
    const scheduler = deps.scheduler();
    if (!scheduler) return reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
    try {
      const prompts = parsePrompts(input).items;
      const model = await resolveModel(scheduler, b.model);
      const specs = await Promise.all(prompts.map((p) => promptSpec(scheduler, model.id, p)));
      const id = `embd-${randomUUID()}`;
      const vectors: number[][] = specs.map(() => []);
      const tokens = specs.map(() => 0);
      const perToken = specs.map(() => false);
      await submitAll(req, reply, deps, scheduler, specs.map((spec, i) =>
        pb.GenerateRequest.fromPartial({ ...spec.prompt, requestId: `${id}-${i}`, model: model.id, maxTokens: 1, embed: pb.EmbedPooling.EMBED_MODEL }),
      ), (i, msg) => {
        if (msg.embedding.length) [vectors[i], perToken[i]] = [msg.embedding, msg.embeddingPerToken];
        if (msg.usage) tokens[i] = msg.usage.promptTokens;
      });
      deps.onUsage?.(req, tokens.reduce((a, n) => a + n, 0), 0);
      // Under --pooling none, each token's row as it is (llama-server normalizes pooled ones only).
      return reply.send(
        vectors.map((v, index) => {
          if (!perToken[index]) return { index, embedding: [Array.from(embdNormalize(v, b.embd_normalize ?? 2))] };
          const w = v.length / Math.max(1, tokens[index]);
          return { index, embedding: Array.from({ length: tokens[index] }, (_, t) => v.slice(t * w, (t + 1) * w)) };
        }),
      );
    } catch (e) {
      return sendFailure(reply, e);
    }
  };
  app.post('/embedding', embedding);
  app.post('/embeddings', embedding);

  // llama-server's /rerank (Jina's and Cohere's shape; TEI's with `texts`): each document scored
  // against the query by a reranker model (pooling rank, a cls.output head), highest first.
  const RerankBody = z.object({
    model: z.string().max(200).optional().nullable(),
    query: z.string('"query" must be a string').max(1 << 20),
    documents: z.array(z.string().max(1 << 20)).max(1000).optional().nullable(),
    /** TEI's name for the documents; the answer is then TEI's array of {index, score, text}. */
    texts: z.array(z.string().max(1 << 20)).max(1000).optional().nullable(),
    top_n: z.number().int().min(0).optional().nullable(),
    return_text: z.boolean().optional().nullable(),
  });
  // (Documents are scored 16 at a time: a long list stays within the scheduler's per-key queue.)
  const RERANK_IN_FLIGHT = 16;
  /** Each (query, document) pair's relevance score from the reranker `model` (null when the client left), and the prompt tokens. */
  const scorePairs = async (req: FastifyRequest, reply: FastifyReply, scheduler: spb.SchedulerServiceClient, model: string, pairs: [string, string][]) => {
    const id = `rerank-${randomUUID()}`;
    const scores: number[] = pairs.map(() => 0);
    let promptTokens = 0;
    await submitAll(req, reply, deps, scheduler, pairs.map(([query, document], i) =>
      pb.GenerateRequest.fromPartial({ requestId: `${id}-${i}`, model, maxTokens: 1, rerank: { query, document } }),
    ), (i, msg) => {
      if (msg.embedding.length) scores[i] = msg.embedding[0];
      if (msg.usage) promptTokens += msg.usage.promptTokens;
    }, {}, RERANK_IN_FLIGHT);
    deps.onUsage?.(req, promptTokens, 0);
    return { scores, promptTokens };
  };
  const rerank = async (req: FastifyRequest, reply: FastifyReply) => {
    const parsed = RerankBody.safeParse(req.body ?? {});
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const b = parsed.data;
    const tei = b.texts != null;
    const docs = b.documents ?? b.texts;
    if (!docs || docs.length === 0) return reply.code(400).send(openAiError('"documents" must be a non-empty array of strings', 'invalid_request_error', 'documents', 'invalid_value'));
    const scheduler = deps.scheduler();
    if (!scheduler) return reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
    try {
      const model = await resolveModel(scheduler, b.model ?? undefined);
      const { scores, promptTokens } = await scorePairs(req, reply, scheduler, model.id, docs.map((d) => [b.query, d]));
      const order = docs.map((_, i) => i).sort((x, y) => scores[y] - scores[x] || x - y).slice(0, b.top_n ?? docs.length);
      if (tei) return reply.send(order.map((i) => ({ index: i, score: scores[i], ...(b.return_text ? { text: docs[i] } : {}) })));
      return reply.send({
        model: model.id,
        object: 'list',
        usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
        results: order.map((i) => ({ index: i, relevance_score: scores[i], ...(b.return_text ? { document: { text: docs[i] } } : {}) })),
      });
    } catch (e) {
      return sendFailure(reply, e);
    }
  };
  // (vLLM serves Cohere's v2 shape, the same, at /v2/rerank.)
  for (const p of ['/rerank', '/reranking', '/v1/rerank', '/v1/reranking', '/v2/rerank']) app.post(p, rerank);

  // vLLM's score API: text_1 against each text_2 (one to one when both are lists of one length),
  // answered {data: [{index, object: "score", score}], usage} in input order.
  const texts = z.union([z.string().max(1 << 20), z.array(z.string().max(1 << 20)).min(1).max(1000)]);
  const ScoreBody = z.object({ model: z.string().max(200).optional().nullable(), text_1: texts, text_2: texts });
  const score = async (req: FastifyRequest, reply: FastifyReply) => {
    const parsed = ScoreBody.safeParse(req.body ?? {});
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const b = parsed.data;
    const t1 = typeof b.text_1 === 'string' ? [b.text_1] : b.text_1;
    const t2 = typeof b.text_2 === 'string' ? [b.text_2] : b.text_2;
    if (t1.length !== 1 && t1.length !== t2.length)
      return reply.code(400).send(openAiError(`text_1 has ${t1.length} texts and text_2 ${t2.length}: give one text_1, or as many as text_2`, 'invalid_request_error', 'text_1', 'invalid_value'));
    const scheduler = deps.scheduler();
    if (!scheduler) return reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
    try {
      const model = await resolveModel(scheduler, b.model ?? undefined);
      const { scores, promptTokens } = await scorePairs(req, reply, scheduler, model.id, t2.map((d, i) => [t1.length === 1 ? t1[0] : t1[i], d]));
      return reply.send({
        id: `score-${randomUUID()}`,
        object: 'list',
        created: Math.floor(Date.now() / 1000),
        model: model.id,
        data: scores.map((s, index) => ({ index, object: 'score', score: s })),
        usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 },
      });
    } catch (e) {
      return sendFailure(reply, e);
    }
  };
  for (const p of ['/score', '/v1/score']) app.post(p, score);

  app.post('/detokenize', async (req, reply) => {
    const parsed = DetokenizeBody.safeParse(req.body ?? {});
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const b = parsed.data;
    return withModel(reply, deps, b.model, async (s, model) => {
      if (!b.tokens?.length) return { content: '' };
      const r = await unary<pb.DetokenizeRequest, pb.DetokenizeResponse>(s.detokenize.bind(s), { model, tokens: b.tokens, renderSpecial: true });
      return { content: r.text };
    });
  });
}
