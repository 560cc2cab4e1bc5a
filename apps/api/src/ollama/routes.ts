// Ollama's own API (/api/chat, /api/generate, /api/embed, /api/embeddings, /api/tags, /api/ps,
// /api/show, /api/version), for clients written against it (ollama-js and ollama-python, Open
// WebUI, editor plugins), as Ollama's docs/api.md describes it: newline-delimited JSON streams
// (`stream` is true unless the request says false), `options` with Ollama's names and defaults,
// durations in nanoseconds, errors as {"error": "..."}.
//
// Requests run through the same scheduler and engine as the OpenAI routes: a chat is the model's
// template over the messages (tools shown to it, calls parsed from its answer and returned with
// arguments as objects, as Ollama returns them; a <think> block as `thinking`); `format` "json" or
// a JSON schema is constrained decoding. Names: a served model `ID` is listed as `ID:latest`, and
// `ID` or `ID:latest` both find it. Models are loaded by `kail serve -m`, or on demand when a
// request names a GGUF file of the models directory (<data dir>/models/ID.gguf), and stay loaded
// for `keep_alive` after their last request (the scheduler's --keep-alive, Ollama's 5 minutes, for
// a model loaded on demand; a request's own for any model the models directory can bring back;
// negative: until unloaded; 0: unloaded once idle); copying, deleting and creating (from an
// uploaded GGUF blob or another model, with a system prompt, default options and opening
// messages: modelfiles.ts) work on the models directory; pulling and pushing are errors that say so.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import * as grpc from '@grpc/grpc-js';
import { common, engine as pb, parseDurationMs, scheduler as spb } from '@kailstream/proto';
import type { OllamaModel } from '@kailstream/tools';
import { z } from 'zod';
import { OllamaTemplate } from '@kailstream/engine/ollama-template';
import { ReasoningSplitter, splitReasoning } from '@kailstream/engine/reasoning';

import { modelFileTime } from '../file-times';
import { ensureModel, failureOf, HttpError, replyFailure, servedModels, unloadedModelFiles, unloadModel } from '../llama-server/routes';
import { callFailure, continuesFinal, functionTool, reasoningBudget, recordFinished, submitAll, unary, withLogitBias, withModelfileMessages, type OpenAiDeps } from '../openai/routes';
import { ToolCallStream } from '../openai/tool-call-stream';
import { parseToolCalls, type ToolCall } from '../openai/tool-calls';
import { ollamaOptionDefaults, type SamplingDefaults } from '../sampling-defaults';
import { diffusionFields, diffusionRequest, samplerExtraFields, samplerExtras } from '../sampler-extras';
import { seedField, seedParams } from '../seed';
import { openAiError } from '../openai/schemas';
import { VERSION } from '../version';
import { DIGESTS_FILE, ModelDigests } from './digests';
import { blobDigest, BlobStore, MODELFILES_FILE, ModelfileStore, type Modelfile } from './modelfiles';
import { MODEL_NAMES_FILE, PulledNames } from './model-names';

/** The routes this module serves (for the error counter). */
export const OLLAMA_ROUTES = ['/api/chat', '/api/generate', '/api/embed', '/api/embeddings', '/api/tags', '/api/ps', '/api/show', '/api/version', '/api/delete', '/api/copy', '/api/create'] as const;

/** Ollama's sampling defaults (a model without a Modelfile of its own). */
export const OLLAMA_DEFAULTS = { temperature: 0.8, top_k: 40, top_p: 0.9, min_p: 0, repeat_penalty: 1.1, repeat_last_n: 64, num_keep: 4 } as const;

// `options`: the ones that change the output are honoured or refused; the runtime ones (threads,
// GPU layers, mmap, batch, NUMA…) describe Ollama's runner and are ignored, as Ollama ignores
// options it does not know.
const options = z
  .object({
    num_predict: z.number().int().min(-2).max(1_000_000).optional().nullable(),
    temperature: z.number().min(0).max(10).optional().nullable(),
    top_k: z.number().int().min(0).transform((k) => Math.min(k, 2_147_483_647)).optional().nullable(),
    top_p: z.number().min(0).max(1).optional().nullable(),
    min_p: z.number().min(0).max(1).optional().nullable(),
    seed: seedField,
    stop: z.union([z.string(), z.array(z.string()).max(16)]).optional().nullable(),
    repeat_penalty: z.number().min(0).max(10).optional().nullable(),
    repeat_last_n: z.number().int().min(-1).max(1_000_000).optional().nullable(),
    presence_penalty: z.number().min(-2).max(2).optional().nullable(),
    frequency_penalty: z.number().min(-2).max(2).optional().nullable(),
    /** The request's context (a model loads, or reloads when idle, with a larger one; see resolve). */
    num_ctx: z.number().int().min(1).optional().nullable(),
    /** Prompt tokens kept when a context shift drops old ones (the server runs with --context-shift). */
    num_keep: z.number().int().min(-1).max(Number.MAX_SAFE_INTEGER).optional().nullable(),
    // Ollama's mirostat, mirostat_tau, mirostat_eta, typical_p, and llama.cpp's other samplers under their llama-server names.
    ...samplerExtraFields,
    // A diffusion model's loop (diffusion_steps, _algorithm, _block_length, _eps), as on the OpenAI routes.
    ...diffusionFields,
    tfs_z: z.number().refine((v) => v >= 1, 'tail-free sampling is not supported (tfs_z 1 only)').optional().nullable(),
  })
  .passthrough();
type Options = z.infer<typeof options>;

/** "json", or a JSON schema the output follows. */
const format = z.union([z.literal('json'), z.literal(''), z.record(z.string(), z.unknown())]).optional().nullable();
// How long the model stays loaded after the request (the scheduler keeps it; zero unloads it once
// the request is answered and nothing else runs on it: `ollama stop` sends an empty request with
// keep_alive 0). keep_alive as Ollama reads it: a number of seconds, or a Go duration string ("5m", "1h30m",
// "300ms", "0"); negative means until unloaded by hand. Parsed to milliseconds (-1 for negative).
const FOREVER_MS = 1000 * 365.25 * 24 * 3_600_000;
const keepAlive = z
  .union([z.string(), z.number()])
  .optional()
  .nullable()
  .transform((v, ctx) => {
    if (v === undefined || v === null) return undefined;
    const ms = typeof v === 'number' ? (Number.isFinite(v) ? v * 1000 : NaN) : parseDurationMs(v);
    if (Number.isNaN(ms)) {
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: `keep_alive must be seconds or a duration such as "5m", "1h30m" or "-1", got ${JSON.stringify(v)}` });
      return z.NEVER;
    }
    // Negative, or past what a date can hold (a thousand years and more): until unloaded.
    return ms < 0 || ms >= FOREVER_MS ? -1 : Math.round(ms);
  });
const unloadsNow = (ms: number | undefined) => ms === 0;

const think = z.union([z.boolean(), z.enum(['low', 'medium', 'high'])]).optional().nullable();
const noImages = z
  .array(z.unknown())
  .refine((v) => v.length === 0, 'images are not supported: the models served here read text only')
  .optional()
  .nullable();

/** The fields /api/chat and /api/generate share: output format, options, streaming, thinking, logprobs. */
const answerFields = {
  format,
  options: options.optional().nullable(),
  stream: z.boolean().optional().nullable(),
  think,
  keep_alive: keepAlive,
  logprobs: z.boolean().optional().nullable(),
  top_logprobs: z.number().int().min(0).max(20).optional().nullable(),
};

const toolCall = z.object({ function: z.object({ name: z.string().min(1), arguments: z.record(z.string(), z.unknown()).optional().nullable() }), id: z.string().optional() });

export const ChatRequest = z.object({
  model: z.string().min(1, 'model is required'),
  messages: z
    .array(
      z.object({
        role: z.enum(['system', 'user', 'assistant', 'tool']),
        content: z.string().optional().nullable(),
        thinking: z.string().optional().nullable(),
        images: noImages,
        tool_calls: z.array(toolCall).max(128).optional().nullable(),
        tool_name: z.string().optional().nullable(),
      }),
    )
    .optional()
    .nullable(),
  tools: z
    .array(
      z.object({
        type: z.literal('function').optional(),
        function: z.object({
          name: z.string().regex(/^[a-zA-Z0-9_.-]{1,64}$/, 'function names are 1-64 letters, digits, _, . or -'),
          description: z.string().optional().nullable(),
          parameters: z.record(z.string(), z.unknown()).optional().nullable(),
        }),
      }),
    )
    .max(128)
    .optional()
    .nullable(),
  ...answerFields,
});
export type ChatRequest = z.infer<typeof ChatRequest>;

export const GenerateRequest = z.object({
  model: z.string().min(1, 'model is required'),
  prompt: z.string().optional().nullable(),
  suffix: z.string().optional().nullable(),
  system: z.string().optional().nullable(),
  /** An Ollama (Go) template in place of the Modelfile's or the model's, checked to parse. */
  template: z.string().superRefine(refineGoTemplate).optional().nullable(),
  /** An earlier answer's `context`: its tokens go before this prompt's. */
  context: z.array(z.number().int().min(0).max(2_147_483_647)).max(1_000_000).optional().nullable(),
  raw: z.boolean().optional().nullable(),
  images: noImages,
  ...answerFields,
});
export type GenerateRequest = z.infer<typeof GenerateRequest>;

const EmbedRequest = z.object({
  model: z.string().min(1, 'model is required'),
  input: z.union([z.string(), z.array(z.string()).min(1, 'input must not be empty').max(64)]),
  truncate: z.boolean().optional().nullable(),
  dimensions: z.number().int().min(1).optional().nullable(),
  options: options.optional().nullable(),
  keep_alive: keepAlive,
});
const LegacyEmbedRequest = z.object({ model: z.string().min(1, 'model is required'), prompt: z.string(), options: options.optional().nullable(), keep_alive: keepAlive });
const DeleteRequest = z
  .object({ model: z.string().min(1).optional(), name: z.string().min(1).optional() })
  .refine((b) => b.model ?? b.name, 'model is required');
const CopyRequest = z.object({ source: z.string().min(1, 'source is required'), destination: z.string().min(1, 'destination is required') });
const Message = z.object({ role: z.enum(['system', 'user', 'assistant']), content: z.string() });
const PullRequest = z
  .object({ model: z.string().min(1).optional(), name: z.string().min(1).optional(), stream: z.boolean().optional().nullable(), insecure: z.boolean().optional().nullable() })
  .refine((b) => b.model !== undefined || b.name !== undefined, 'model is required');
/** A template that Ollama's parser would refuse is a 400 naming Go's error. */
function refineGoTemplate(t: string, ctx: z.RefinementCtx): void {
  if (!t) return;
  try {
    new OllamaTemplate(t);
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: (e as Error).message });
  }
}

const CreateRequest = z
  .object({
    model: z.string().min(1).optional(),
    /** Ollama before 0.5 named it `name`. */
    name: z.string().min(1).optional(),
    from: z.string().min(1).optional().nullable(),
    /** File name -> "sha256:<hex>" of an uploaded blob. */
    files: z.record(z.string(), z.string()).optional().nullable(),
    /** File name -> "sha256:<hex>" of an uploaded LoRA adapter blob (the Modelfile's ADAPTER lines). */
    adapters: z.record(z.string(), z.string()).optional().nullable(),
    /** The Modelfile's TEMPLATE (Go text/template), checked to parse; '' keeps the source's. */
    template: z.string().superRefine(refineGoTemplate).optional().nullable(),
    license: z.union([z.string(), z.array(z.string())]).optional().nullable(),
    system: z.string().optional().nullable(),
    parameters: options.optional().nullable(),
    messages: z.array(Message).max(256).optional().nullable(),
    /** `ollama create -q TYPE`: the uploaded GGUF (`files`) is quantized to TYPE (kail quantize's types). */
    quantize: z.string().optional().nullable(),
    /** Ollama before 0.5 sent the Modelfile's text. */
    modelfile: z.string().refine((m) => m === '', 'modelfile (Ollama before 0.5) is not supported: send from or files, with system, parameters and messages').optional().nullable(),
    stream: z.boolean().optional().nullable(),
  })
  .refine((b) => b.model || b.name, 'model is required');
const ShowRequest = z.object({ model: z.string().min(1).optional(), name: z.string().min(1).optional(), verbose: z.boolean().optional().nullable() }).refine((b) => b.model || b.name, 'model is required');

/** The tools (loaded on the first `create -q` or pull: they bring the native core into this process). */
function tools(): typeof import('@kailstream/tools') {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('@kailstream/tools') as typeof import('@kailstream/tools');
}

/** Ollama's error body. */
const ollamaError = (message: string) => ({ error: message });

function zodMessage(e: z.ZodError): string {
  const i = e.issues[0];
  return `${i.path.length ? `${i.path.join('.')}: ` : ''}${i.message}`;
}

/** A request's options over the model's Modelfile parameters (Ollama's PARAMETER lines), over the server's defaults (kail serve --temp …). */
function withModelfile(o: Options | null | undefined, mf: Modelfile, server: SamplingDefaults = {}): Options | null | undefined {
  const base = { ...ollamaOptionDefaults(server), ...(mf.parameters ?? {}) };
  return Object.keys(base).length ? ({ ...base, ...(o ?? {}) } as Options) : o;
}

/**
 * A Modelfile value as Ollama writes one (parser.go's quote): bare, or in "…" when it spans lines
 * or has spaces at an end, in """…""" when it also holds a quote; so `ollama create` (and
 * `kail create`) read it back as it was. (Also quoted: empty, or starting with a quote.)
 */
function modelfileQuote(s: string): string {
  if (s && !s.includes('\n') && !/^\s|\s$/.test(s) && !s.startsWith('"')) return s;
  return s.includes('"') ? `"""${s}"""` : `"${s}"`;
}

/** /api/show's modelfile text. */
function modelfileText(file: string, mf: Modelfile, adapters: readonly { path: string }[] = []): string {
  const lines = ['# Served by KailStream from its GGUF file', `FROM ${file}`, ...adapters.map((a) => `ADAPTER ${a.path}`)];
  if (mf.system) lines.push(`SYSTEM ${modelfileQuote(mf.system)}`);
  for (const [k, v] of Object.entries(mf.parameters ?? {})) for (const x of Array.isArray(v) ? v : [v]) lines.push(`PARAMETER ${k} ${modelfileQuote(String(x))}`);
  for (const m of mf.messages ?? []) lines.push(`MESSAGE ${m.role} ${modelfileQuote(m.content)}`);
  if (mf.license) lines.push(`LICENSE ${modelfileQuote(mf.license)}`);
  // (Always in """ as Ollama writes it: templates are many lines, with quotes.)
  if (mf.template) lines.push(`TEMPLATE """${mf.template}"""`);
  return lines.join('\n') + '\n';
}

/** One of Ollama's status lines of a pull or a create (NDJSON). */
interface PullStatus {
  status: string;
  digest?: string;
  total?: number;
  completed?: number;
}

/** A served model's listed name: its id, tagged :latest unless it has a tag. */
export const ollamaName = (id: string) => (id.includes(':') ? id : `${id}:latest`);

/** A request's keep_alive for the scheduler's SubmitRequest. */
const keepAliveFields = (ms: number | undefined): Partial<spb.SubmitRequest> => (ms === undefined ? {} : { keepAliveMs: ms, hasKeepAlive: true });

/** The ids a request's model name may mean: the name, and without its :latest tag. */
const idsOf = (name: string): string[] => (name.endsWith(':latest') ? [name, name.slice(0, -7)] : [name]);
/** The model of `models` a request names (its id, or its id tagged :latest). */
const byName = <T extends { id: string }>(models: readonly T[], name: string): T | undefined => idsOf(name).map((id) => models.find((x) => x.id === id)).find((x) => x);

/** The served model a request names: its id, or its id tagged :latest. */
async function resolve(scheduler: spb.SchedulerServiceClient, name: string, numCtx?: number | null): Promise<common.ModelInfo> {
  const models = await servedModels(scheduler);
  // Loaded, else loaded now from the models directory (as Ollama loads a model a request names).
  let m = byName(models, name) ?? null;
  // A larger num_ctx than it was loaded with: the scheduler reloads it with that, if it can (idle,
  // from the models directory); else the request's window is the model's context.
  if (m && numCtx && numCtx > m.contextLength) m = (await ensureModel(scheduler, m.id, undefined, numCtx)) ?? m;
  for (const id of idsOf(name)) m ??= await ensureModel(scheduler, id, undefined, numCtx ?? 0);
  if (!m) throw new HttpError(404, { error: { message: `model '${name}' not found (served: ${models.map((x) => ollamaName(x.id)).join(', ') || 'none'})`, type: 'not_found', param: 'model', code: null } });
  // Ollama's num_ctx is the request's context: within the model's, the window it may fill.
  return numCtx && numCtx < m.contextLength ? { ...m, contextLength: numCtx } : m;
}

/**
 * Ollama's preload (an empty request): the model is loaded (resolve saw to it). It counts as a use,
 * as in Ollama: the keep-alive timer starts again now (with the request's keep_alive, if any), also
 * for a model that was already loaded.
 */
async function preload(scheduler: spb.SchedulerServiceClient, m: common.ModelInfo, keepAliveMs: number | undefined): Promise<'load'> {
  await ensureModel(scheduler, m.id, keepAliveMs);
  return 'load';
}

/**
 * Ollama's unload (an empty request with keep_alive 0): the model named (or its untagged id), if
 * loaded and idle. 'unload'; a model still in use is a 409 that says so.
 */
async function unload(scheduler: spb.SchedulerServiceClient, name: string): Promise<'unload'> {
  const m = byName(await servedModels(scheduler), name);
  if (!m) return 'unload';
  if (!(await reloadable(scheduler, m)))
    throw new HttpError(400, { error: { message: `model '${name}' was loaded from ${m.path}, outside the models directory, so it could not come back on demand: it stays loaded`, type: 'invalid_request_error', param: 'keep_alive', code: null } });
  if ((await unloadModel(scheduler, m.id, true)) === 'in-use')
    throw new HttpError(409, { error: { message: `model '${name}' is in use: not unloaded (try again when its requests are done)`, type: 'conflict', param: 'model', code: null } });
  return 'unload';
}

/**
 * Whether load on demand can bring the model back: it was loaded from its models-directory file
 * (a model `kail serve -m` loaded from elsewhere stays loaded whatever keep_alive says).
 */
async function reloadable(scheduler: spb.SchedulerServiceClient, m: common.ModelInfo): Promise<boolean> {
  try {
    const r = await unary<spb.ListModelFilesRequest, pb.ListModelFilesResponse>(scheduler.listModelFiles.bind(scheduler), { engineId: '' });
    return r.files.some((f) => f.id === m.id && f.path === m.path);
  } catch {
    return false;
  }
}

/**
 * After an answer with keep_alive 0 (sent already): unloads the model once nothing runs on it,
 * trying for a second (the engine may still be closing this request); others using it keep it loaded.
 */
async function unloadWhenIdle(scheduler: spb.SchedulerServiceClient, m: common.ModelInfo): Promise<void> {
  if (!(await reloadable(scheduler, m))) return;
  for (let i = 0; i < 10; i++) {
    const r = await unloadModel(scheduler, m.id, true).catch(() => 'not-loaded' as const);
    if (r !== 'in-use') return;
    await new Promise((res) => setTimeout(res, 100));
  }
}

/**
 * Ollama's history truncation: a chat whose prompt does not fit the context keeps its system
 * messages and the most recent turns that fit, cut before a user message (templates that insist on
 * alternating roles accept it), the last message always. Here the kept prompt also leaves room for
 * the answer: a quarter of the context, or num_predict if that is less (Ollama shifts the context
 * while it generates instead, which this engine does not). A conversation whose last turn alone is
 * too long goes as it is, and the engine's 400 says so.
 */
export async function fitHistory(scheduler: spb.SchedulerServiceClient, m: common.ModelInfo, gen: pb.GenerateRequest): Promise<pb.ChatMessage[]> {
  const msgs = gen.messages;
  const ctx = m.contextLength;
  const limit = ctx - Math.min(Math.floor(ctx / 4), gen.maxTokens > 0 ? gen.maxTokens : ctx);
  // Every token covers at least a byte of the text, so a chat whose text, with an allowance of 64
  // bytes a message for the template's own, is within the limit fits without counting.
  const bytes = msgs.reduce((a, x) => a + 64 + Buffer.byteLength(x.content) + Buffer.byteLength(x.reasoningContent) + Buffer.byteLength(x.toolCallsJson), Buffer.byteLength(gen.toolsJson));
  if (msgs.length < 2 || bytes <= limit) return msgs;
  const keep = (i: number) => [...msgs.slice(0, i).filter((x) => x.role === 'system'), ...msgs.slice(i)];
  const count = async (i: number) =>
    (
      await unary<pb.TokenizeRequest, pb.TokenizeResponse>(
        scheduler.tokenize.bind(scheduler),
        pb.TokenizeRequest.fromPartial({ model: m.id, messages: keep(i), toolsJson: gen.toolsJson, chatTemplateKwargsJson: gen.chatTemplateKwargsJson, continueFinalMessage: gen.continueFinalMessage, goTemplate: gen.goTemplate }),
      )
    ).tokens.length;
  if ((await count(0)) <= limit) return msgs;
  // Where the kept part may start: a user message after the first non-system one, else the last.
  const cuts = msgs.map((x, i) => (i > 0 && x.role === 'user' ? i : -1)).filter((i) => i > 0);
  if (!cuts.length || cuts[cuts.length - 1] !== msgs.length - 1) cuts.push(msgs.length - 1);
  // Fewer turns, fewer tokens: the earliest cut that fits.
  let lo = 0;
  let hi = cuts.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((await count(cuts[mid])) <= limit) hi = mid;
    else lo = mid + 1;
  }
  return keep(cuts[lo]);
}

/** The model's details block: format, family (architecture), size in parameters, file type (else the main tensor type). */
function details(m: common.ModelInfo) {
  const n = Number(m.parameterCount);
  const size = n >= 1e9 ? `${(n / 1e9).toFixed(1)}B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : `${n}`;
  const types = Object.entries(m.tensorTypeBytes).sort((a, b) => Number(b[1]) - Number(a[1]));
  return { parent_model: '', format: 'gguf', family: m.architecture, families: [m.architecture], parameter_size: size, quantization_level: m.fileType || (types[0]?.[0] ?? '') };
}

/**
 * Ollama's capabilities of a model, as Ollama finds them: by what its template refers to ('embedding'
 * alone for an embedding model). A Modelfile's TEMPLATE (Go) by its variables, as Ollama's: .Tools,
 * .Think.
 */
function capabilities(m: common.ModelInfo, goTemplate?: string): string[] {
  if (m.embeddingOnly) return ['embedding'];
  if (goTemplate) {
    const vars = new OllamaTemplate(goTemplate).vars;
    return ['completion', ...(vars.includes('tools') ? ['tools'] : []), ...(vars.includes('think') ? ['thinking'] : [])];
  }
  const t = m.chatTemplate;
  return ['completion', ...(/\btools\b/.test(t) ? ['tools'] : []), ...(t.includes('<think>') || /enable_thinking|reasoning_content/.test(t) ? ['thinking'] : [])];
}

/** Sampling from Ollama's options and defaults. */
function sampling(o: Options | null | undefined, contextLength: number): common.SamplingParams {
  const lastN = o?.repeat_last_n ?? OLLAMA_DEFAULTS.repeat_last_n;
  const penalties = lastN !== 0;
  return withLogitBias(null, {
    temperature: o?.temperature ?? OLLAMA_DEFAULTS.temperature,
    topK: o?.top_k ?? OLLAMA_DEFAULTS.top_k,
    topP: o?.top_p ?? OLLAMA_DEFAULTS.top_p,
    minP: o?.min_p ?? OLLAMA_DEFAULTS.min_p,
    // repeat_last_n 0 turns the penalties off; -1 looks at the whole context.
    repetitionPenalty: penalties ? (o?.repeat_penalty ?? OLLAMA_DEFAULTS.repeat_penalty) : 1,
    presencePenalty: penalties ? (o?.presence_penalty ?? 0) : 0,
    frequencyPenalty: penalties ? (o?.frequency_penalty ?? 0) : 0,
    penaltyLastN: lastN < 0 ? contextLength : lastN,
    ...seedParams(o?.seed),
    extras: samplerExtras(o),
  });
}

/** The engine request's fields from the options (length, stops, sampling), the format and logprobs. */
function generationFields(b: ChatRequest | GenerateRequest, m: common.ModelInfo, kind: string): Partial<pb.GenerateRequest> {
  const o = b.options;
  const f = b.format;
  const n = o?.num_predict ?? -1;
  const stops = o?.stop == null ? [] : (Array.isArray(o.stop) ? o.stop : [o.stop]).filter((s) => s.length > 0);
  return {
    model: m.id,
    // -1 (the default): until the end of generation (the context full ends it, unless the engine
    // shifts it: kail serve --context-shift, as Ollama does); -2: until the context is full.
    maxTokens: n === -1 ? 1 << 30 : n < 0 ? Math.max(1, m.contextLength) : n,
    // (resolve made m's context the request's num_ctx when that is smaller.)
    contextWindow: o?.num_ctx ? m.contextLength : 0,
    nKeep: o?.num_keep ?? OLLAMA_DEFAULTS.num_keep,
    promptOnly: n === 0,
    stop: stops,
    sampling: sampling(o, m.contextLength),
    responseFormat: f === 'json' ? pb.ResponseFormat.RESPONSE_FORMAT_JSON_OBJECT : f && typeof f === 'object' ? pb.ResponseFormat.RESPONSE_FORMAT_JSON_SCHEMA : pb.ResponseFormat.RESPONSE_FORMAT_TEXT,
    jsonSchema: f && typeof f === 'object' ? JSON.stringify(f) : '',
    wantLogprobs: !!b.logprobs,
    topLogprobs: b.logprobs ? (b.top_logprobs ?? 0) : 0,
    requestId: `ollama-${kind}-${randomUUID()}`,
    diffusion: diffusionRequest(o ?? {}),
  };
}

/** `think`: false turns a switchable template's thinking off; a level becomes its reasoning_effort. */
function thinkKwargs(t: ChatRequest['think']): string {
  if (t === false) return JSON.stringify({ enable_thinking: false });
  // (Said, so that an Ollama template sees IsThinkSet; a Jinja template's default is on anyway.)
  if (t === true) return JSON.stringify({ enable_thinking: true });
  if (typeof t === 'string') return JSON.stringify({ reasoning_effort: t });
  return '';
}

/** Ollama's chat messages as the engine's: calls get ids, a tool answer the id of the call it answers. */
export function toChatMessages(messages: NonNullable<ChatRequest['messages']>): pb.ChatMessage[] {
  const pending: { id: string; name: string }[] = [];
  let n = 0;
  return messages.map((m) => {
    if (m.role === 'assistant' && m.tool_calls?.length) {
      const calls: ToolCall[] = m.tool_calls.map((c) => ({ id: c.id ?? `call_${n++}`, type: 'function', function: { name: c.function.name, arguments: JSON.stringify(c.function.arguments ?? {}) } }));
      pending.push(...calls.map((c) => ({ id: c.id, name: c.function.name })));
      return pb.ChatMessage.fromPartial({ role: 'assistant', content: m.content ?? '', reasoningContent: m.thinking ?? '', toolCallsJson: JSON.stringify(calls) });
    }
    if (m.role === 'tool') {
      // The earliest unanswered call of that name (or the earliest unanswered call).
      const i = m.tool_name ? pending.findIndex((p) => p.name === m.tool_name) : 0;
      const call = i >= 0 ? pending.splice(i, 1)[0] : undefined;
      return pb.ChatMessage.fromPartial({ role: 'tool', content: m.content ?? '', toolCallId: call?.id ?? '', name: m.tool_name ?? call?.name ?? '' });
    }
    return pb.ChatMessage.fromPartial({ role: m.role, content: m.content ?? '', reasoningContent: m.thinking ?? '' });
  });
}

/** A parsed call as Ollama returns it: arguments as an object. */
const ollamaCall = (c: ToolCall) => {
  let args: unknown = {};
  try {
    args = JSON.parse(c.function.arguments || '{}');
  } catch {
    args = {};
  }
  return { id: c.id, function: { name: c.function.name, arguments: args } };
};

const nowIso = () => new Date().toISOString();
const ns = (ms: number) => Math.round(ms * 1e6);

export function registerOllamaRoutes(app: FastifyInstance, deps: OpenAiDeps, opts: { dataDir?: string; modelsDir?: string; modelfiles?: ModelfileStore } = {}): void {
  // What create keeps besides the weights, and the blobs uploaded for it.
  const modelfiles = opts.modelfiles ?? new ModelfileStore(opts.dataDir ? path.join(opts.dataDir, MODELFILES_FILE) : null, opts.modelsDir ?? null);
  const blobs = opts.dataDir ? new BlobStore(path.join(opts.dataDir, 'blobs')) : null;
  const digests = new ModelDigests(opts.dataDir ? path.join(opts.dataDir, DIGESTS_FILE) : null);
  const modelfileOf = (name: string): Modelfile => modelfiles.of(name);
  // Names models were pulled by (hf.co/USER/REPO:QUANT): a request's model (or an Ollama route's
  // name, or a copy's source) given so is read as the model's id, on every route.
  const pulledNames = new PulledNames(opts.dataDir ? path.join(opts.dataDir, MODEL_NAMES_FILE) : null);
  app.addHook('preHandler', async (req) => {
    // (A pull names what to fetch, not a model here; the console's calls name models by id.)
    const route = req.url.split('?')[0];
    if (route === '/api/pull' || route.startsWith('/trpc/')) return;
    const body = req.body as Record<string, unknown> | undefined;
    if (!body || typeof body !== 'object' || Array.isArray(body)) return;
    for (const k of ['model', 'name', 'source'] as const) {
      const v = body[k];
      const id = typeof v === 'string' && v.includes('/') ? pulledNames.idFor(v) : undefined;
      if (id !== undefined) body[k] = id;
    }
  });
  /** Runs fn with the scheduler, answering failures (a gRPC error or an HttpError) in Ollama's shape. */
  const guarded = async (reply: FastifyReply, fn: (s: spb.SchedulerServiceClient) => Promise<unknown>) => {
    const s = deps.scheduler();
    if (!s) return reply.code(503).send(ollamaError('no scheduler is connected'));
    try {
      const r = await fn(s);
      // (undefined: fn answered itself.)
      return r === undefined ? reply : reply.send(r);
    } catch (e) {
      const f = replyFailure(reply, e);
      if (!f) return reply;  // the client went away
      if (f.retryAfter) reply.header('retry-after', String(f.retryAfter));
      return reply.code(f.status).send(ollamaError(f.body.error.message));
    }
  };
  const bad = (reply: FastifyReply, message: string, status = 400) => reply.code(status).send(ollamaError(message));
  const started = new Date();

  // Ollama's liveness probe (clients check it before anything else; HEAD too, which Fastify adds).
  app.get('/', async (_req, reply) => reply.type('text/plain').send('KailStream is running (Ollama API at /api, OpenAI API at /v1)'));

  app.get('/api/version', async () => ({ version: VERSION }));

  app.get('/api/tags', (_req, reply) =>
    guarded(reply, async (s) => ({
      // Loaded models, then the models directory's files that load on demand.
      models: [...(await servedModels(s)), ...(await unloadedModelFiles(s)).flatMap((f) => (f.info ? [f.info] : []))].map((m) => ({
        name: ollamaName(m.id), model: ollamaName(m.id), modified_at: modelFileTime(m.path, started).toISOString(), size: Number(m.fileBytes), digest: digests.of(m.path), details: details(m),
      })),
    })),
  );

  // Loaded models, with when each unloads if unused (a keep-alive; the scheduler's).
  app.get('/api/ps', (_req, reply) =>
    guarded(reply, async (s) => ({
      models: (await servedModels(s)).filter((m) => m.loaded).map((m) => {
        const r = m.residency;
        const ram = r ? Number(r.residentBytes) + Number(r.kvBytes) + Number(r.ramExpertCacheBytes) : Number(m.fileBytes);
        return {
          name: ollamaName(m.id), model: ollamaName(m.id), size: ram + Number(r?.vramExpertCacheBytes ?? 0), digest: digests.of(m.path), details: details(m),
          // No keep-alive: Ollama's "forever" (a negative keep_alive), the year 2318 it reports then.
          expires_at: m.expiresAtUnixMs > 0 && m.expiresAtUnixMs < Date.now() + FOREVER_MS ? new Date(m.expiresAtUnixMs).toISOString() : '2318-01-01T00:00:00Z', size_vram: Number(r?.vramExpertCacheBytes ?? 0), context_length: m.contextLength,
        };
      }),
    })),
  );

  app.post('/api/show', (req, reply) => {
    const parsed = ShowRequest.safeParse(req.body ?? {});
    if (!parsed.success) return bad(reply, zodMessage(parsed.error));
    return guarded(reply, async (s) => {
      // A file of the models directory is described from its header, not loaded (clients call
      // /api/show for every model they list).
      const name = (parsed.data.model ?? parsed.data.name)!;
      const m = byName(await servedModels(s), name) ?? byName(await unloadedModelFiles(s), name)?.info ?? (await resolve(s, name));
      const a = m.architecture;
      const mf = modelfileOf(m.id);
      return {
        license: mf.license ?? '',
        modelfile: modelfileText(m.path, mf, m.loraAdapters),
        parameters: Object.entries({ ...OLLAMA_DEFAULTS, ...(mf.parameters ?? {}) })
          .flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => `${k.padEnd(30)} ${typeof x === 'string' ? JSON.stringify(x) : x}`))
          .join('\n'),
        template: mf.template ?? m.chatTemplate,
        system: mf.system ?? '',
        ...(mf.messages?.length ? { messages: mf.messages } : {}),
        details: details(m),
        model_info: {
          'general.architecture': a,
          'general.parameter_count': Number(m.parameterCount),
          [`${a}.context_length`]: m.contextLength,
          [`${a}.block_count`]: m.layerCount,
          ...(m.expertCount ? { [`${a}.expert_count`]: m.expertCount, [`${a}.expert_used_count`]: m.expertUsedCount } : {}),
        },
        capabilities: capabilities(m, mf.template),
        modified_at: modelFileTime(m.path, started).toISOString(),
      };
    });
  });

  app.post('/api/chat', async (req, reply) => {
    const parsed = ChatRequest.safeParse(req.body);
    if (!parsed.success) return bad(reply, zodMessage(parsed.error));
    const b = parsed.data;
    const mf = modelfileOf(b.model);
    b.options = withModelfile(b.options, mf, deps.samplingDefaults);
    return guarded(reply, async (s) => {
      if (!b.messages?.length && unloadsNow(b.keep_alive)) return { model: b.model, created_at: nowIso(), message: { role: 'assistant', content: '' }, done_reason: await unload(s, b.model), done: true };
      const m = await resolve(s, b.model, b.options?.num_ctx);
      // No messages: Ollama loads the model and says so (resolve loaded it if it was not).
      if (!b.messages?.length) return { model: b.model, created_at: nowIso(), message: { role: 'assistant', content: '' }, done_reason: await preload(s, m, b.keep_alive), done: true };
      const tools = b.tools?.length ? b.tools.map((t) => functionTool(t.function.name, t.function.description, t.function.parameters)) : undefined;
      // The model's own system prompt (unless the chat has one) and opening messages, as Ollama adds its Modelfile's.
      const messages = withModelfileMessages(mf, toChatMessages(b.messages));
      const gen = pb.GenerateRequest.fromPartial({
        ...generationFields(b, m, 'chat'),
        ...reasoningBudget(deps),
        messages,
        // A final assistant message is continued (Ollama's prefill).
        continueFinalMessage: continuesFinal(messages),
        toolsJson: tools ? JSON.stringify(tools) : '',
        chatTemplateKwargsJson: thinkKwargs(b.think),
        // The Modelfile's TEMPLATE renders the chat, as Ollama's (the model's own template else).
        goTemplate: mf.template ?? '',
      });
      // A history too long for the context loses its oldest turns, as Ollama's does.
      gen.messages = await fitHistory(s, m, gen);
      await answer(req, reply, deps, s, b, gen, 'chat', tools);
      if (unloadsNow(b.keep_alive)) await unloadWhenIdle(s, m);
    });
  });

  app.post('/api/generate', async (req, reply) => {
    const parsed = GenerateRequest.safeParse(req.body);
    if (!parsed.success) return bad(reply, zodMessage(parsed.error));
    const b = parsed.data;
    const mf = modelfileOf(b.model);
    b.options = withModelfile(b.options, mf, deps.samplingDefaults);
    b.system ??= mf.system;
    return guarded(reply, async (s) => {
      const prompt = b.prompt ?? '';
      if (!prompt && !b.suffix && unloadsNow(b.keep_alive)) return { model: b.model, created_at: nowIso(), response: '', done: true, done_reason: await unload(s, b.model) };
      const m = await resolve(s, b.model, b.options?.num_ctx);
      if (!prompt && !b.suffix) return { model: b.model, created_at: nowIso(), response: '', done: true, done_reason: await preload(s, m, b.keep_alive) };
      let tokens: number[] = [];
      let reasoningOpen = false;
      let promptFields: Partial<pb.GenerateRequest>;
      if (b.suffix) {
        // Fill in the middle: the model's FIM tokens around the prompt and the suffix (as /infill).
        if (b.context?.length) throw new HttpError(400, { error: { message: 'context cannot be combined with suffix', type: 'invalid_request_error', param: 'context', code: null } });
        promptFields = { prompt, suffix: b.suffix };
      } else {
        // The prompt as tokens (so that the answer's `context` holds them): raw text, or the
        // template's rendering of the system and user turns, after an earlier answer's context.
        const t = await unary<pb.TokenizeRequest, pb.TokenizeResponse>(
          s.tokenize.bind(s),
          b.raw
            ? pb.TokenizeRequest.fromPartial({ model: m.id, text: prompt, addSpecial: !b.context?.length, parseSpecial: true })
            : pb.TokenizeRequest.fromPartial({
                model: m.id,
                messages: [...(b.system ? [pb.ChatMessage.fromPartial({ role: 'system', content: b.system })] : []), pb.ChatMessage.fromPartial({ role: 'user', content: prompt })],
                chatTemplateKwargsJson: thinkKwargs(b.think),
                // The request's template, else the Modelfile's (Go, as Ollama's), else the model's own.
                goTemplate: b.template || mf.template || '',
              }),
        );
        // Going on from an earlier answer: the rendering's BOS would be a second one (Ollama
        // tokenizes the context's text and the new turn as one prompt).
        const fresh = b.context?.length && t.addedBos ? t.tokens.slice(1) : t.tokens;
        tokens = [...(b.context ?? []), ...fresh];
        // (Sent as tokens, the prompt's open reasoning is the template's, which Tokenize reports.)
        reasoningOpen = !b.raw && t.reasoningOpen;
        promptFields = { promptTokens: tokens };
      }
      const gen = pb.GenerateRequest.fromPartial({
        ...generationFields(b, m, 'generate'),
        ...promptFields,
      });
      await answer(req, reply, deps, s, b, gen, 'generate', undefined, { tokens, reasoningOpen, split: !b.raw });
      if (unloadsNow(b.keep_alive)) await unloadWhenIdle(s, m);
    });
  });

  const embed = async (reply: FastifyReply, req: FastifyRequest, s: spb.SchedulerServiceClient, model: string, inputs: string[], truncate: boolean, keepAliveMs?: number, numCtx?: number | null) => {
    const m = await resolve(s, model, numCtx);
    const t0 = performance.now();
    const gens: pb.GenerateRequest[] = [];
    for (const [i, input] of inputs.entries()) {
      let promptTokens: number[] | undefined;
      if (truncate) {
        const t = await unary<pb.TokenizeRequest, pb.TokenizeResponse>(s.tokenize.bind(s), pb.TokenizeRequest.fromPartial({ model: m.id, text: input, addSpecial: true, parseSpecial: true }));
        promptTokens = t.tokens.slice(0, Math.max(1, m.contextLength));
      }
      gens.push(pb.GenerateRequest.fromPartial({
        requestId: `ollama-embed-${randomUUID()}-${i}`, model: m.id, maxTokens: 1, embed: pb.EmbedPooling.EMBED_MODEL, contextWindow: numCtx ? m.contextLength : 0,
        ...(promptTokens ? { promptTokens } : { prompt: input }),
      }));
    }
    const vectors: number[][] = inputs.map(() => []);
    let promptTokens = 0;
    let perToken = false;
    await submitAll(
      req, reply, deps, s, gens,
      (i, msg) => {
        if (msg.embedding.length) vectors[i] = msg.embedding;
        if (msg.embeddingPerToken) perToken = true;
        if (msg.usage) promptTokens += msg.usage.promptTokens;
      },
      keepAliveFields(keepAliveMs),
    );
    if (perToken) throw new HttpError(400, { error: { message: "the server's pooling is none (one vector per token): Ollama's embeddings need a pooled vector", type: 'invalid_request_error', param: null, code: null } });
    deps.onUsage?.(req, promptTokens, 0);
    return { vectors, promptTokens, ms: performance.now() - t0 };
  };

  // Unit vectors, as Ollama's /api/embed returns them (cut to `dimensions` first, then normalized).
  app.post('/api/embed', (req, reply) => {
    const parsed = EmbedRequest.safeParse(req.body);
    if (!parsed.success) return bad(reply, zodMessage(parsed.error));
    const b = parsed.data;
    return guarded(reply, async (s) => {
      const inputs = typeof b.input === 'string' ? [b.input] : b.input;
      const r = await embed(reply, req, s, b.model, inputs, b.truncate ?? true, b.keep_alive, b.options?.num_ctx);
      const width = r.vectors[0]?.length ?? 0;
      if (b.dimensions && b.dimensions > width) throw new HttpError(400, { error: { message: `dimensions ${b.dimensions} is more than the model's ${width}`, type: 'invalid_request_error', param: 'dimensions', code: null } });
      const embeddings = r.vectors.map((v) => {
        const cut = b.dimensions ? v.slice(0, b.dimensions) : v;
        const norm = Math.sqrt(cut.reduce((a, x) => a + x * x, 0));
        return norm > 0 ? cut.map((x) => x / norm) : cut;
      });
      return { model: b.model, embeddings, total_duration: ns(r.ms), load_duration: 0, prompt_eval_count: r.promptTokens };
    });
  });

  // The older endpoint: one prompt, the vector as the model gives it (not normalized, as Ollama's).
  app.post('/api/embeddings', (req, reply) => {
    const parsed = LegacyEmbedRequest.safeParse(req.body);
    if (!parsed.success) return bad(reply, zodMessage(parsed.error));
    return guarded(reply, async (s) => ({ embedding: (await embed(reply, req, s, parsed.data.model, [parsed.data.prompt], false, parsed.data.keep_alive, parsed.data.options?.num_ctx)).vectors[0] }));
  });

  // `ollama rm` / `ollama cp` on the models directory (ID.gguf; ID:latest names it too).
  const untag = (name: string) => idsOf(name).at(-1)!;
  /** A file operation's failure: a model in use (the engine's RESOURCE_EXHAUSTED) is a 409. */
  const inUseAsConflict = (e: unknown): never => {
    const err = e as grpc.ServiceError;
    if (err.code === grpc.status.RESOURCE_EXHAUSTED) throw new HttpError(409, { error: { message: err.details, type: 'conflict', param: 'model', code: null } });
    throw e;
  };
  const fileOp = (reply: FastifyReply, fn: (s: spb.SchedulerServiceClient) => Promise<unknown>) =>
    guarded(reply, async (s) => {
      await fn(s).catch(inUseAsConflict);
      // (Ollama answers an empty 200; undefined: answered here.)
      reply.code(200).send();
      return undefined;
    });
  app.delete('/api/delete', (req, reply) => {
    const parsed = DeleteRequest.safeParse(req.body ?? {});
    if (!parsed.success) return bad(reply, zodMessage(parsed.error));
    const id = untag((parsed.data.model ?? parsed.data.name)!);
    return fileOp(reply, async (s) => {
      await unary<spb.DeleteModelFileRequest, pb.DeleteModelFileResponse>(s.deleteModelFile.bind(s), { engineId: '', delete: { id } });
      modelfiles.delete(id);
      pulledNames.forgetId(id);
    });
  });
  app.post('/api/copy', (req, reply) => {
    const parsed = CopyRequest.safeParse(req.body ?? {});
    if (!parsed.success) return bad(reply, zodMessage(parsed.error));
    const copy = { sourceId: untag(parsed.data.source), destinationId: untag(parsed.data.destination), sourcePath: '', lora: [] };
    return fileOp(reply, async (s) => {
      await unary<spb.CopyModelFileRequest, pb.CopyModelFileResponse>(s.copyModelFile.bind(s), { engineId: '', copy });
      modelfiles.copy(copy.sourceId, copy.destinationId);
    });
  });

  // `ollama create`: blobs first (HEAD to ask, POST to upload, checked against their SHA-256), then
  // the model from a GGUF blob or from another model, with a system prompt, default options and
  // opening messages kept for it (modelfiles.ts). Blobs live in the data directory, so the engine
  // must share this machine's file system (as under `kail serve`).
  const noBlobs = (reply: FastifyReply) => bad(reply, 'blobs need a data directory (kail serve --data-dir)', 501);
  app.head('/api/blobs/:digest', (req, reply) => {
    if (!blobs) return noBlobs(reply);
    const hex = blobDigest((req.params as { digest: string }).digest);
    if (!hex) return bad(reply, 'the digest must be sha256:<64 lowercase hex digits>');
    return reply.code(blobs.has(hex) ? 200 : 404).send();
  });
  app.register(async (raw) => {
    // The body is the file, of any size and type: read as it streams, never parsed.
    raw.removeAllContentTypeParsers();
    raw.addContentTypeParser('*', (_req, _payload, done) => done(null));
    raw.post('/api/blobs/:digest', async (req, reply) => {
      if (!blobs) return noBlobs(reply);
      const hex = blobDigest((req.params as { digest: string }).digest);
      if (!hex) return bad(reply, 'the digest must be sha256:<64 lowercase hex digits>');
      if (blobs.has(hex)) {
        req.raw.resume();
        return reply.code(201).send();
      }
      const r = await blobs.put(hex, req.raw);
      if (!r.ok) return bad(reply, `the body's SHA-256 is sha256:${r.got}, not sha256:${hex}`);
      return reply.code(201).send();
    });
  });
  app.post('/api/create', (req, reply) => {
    const parsed = CreateRequest.safeParse(req.body ?? {});
    if (!parsed.success) return bad(reply, zodMessage(parsed.error));
    const b = parsed.data;
    const id = untag((b.model ?? b.name)!);
    const ggufs = Object.entries(b.files ?? {});
    if (ggufs.length && b.from) return bad(reply, 'give from or files, not both');
    if (!ggufs.length && !b.from) return bad(reply, 'give from (a model) or files (an uploaded GGUF blob)');
    if (ggufs.length > 1 || (ggufs.length && !ggufs[0][0].toLowerCase().endsWith('.gguf')))
      return bad(reply, `files must be one GGUF file (got ${ggufs.map(([f]) => f).join(', ')}): safetensors are not imported, convert them to GGUF first`);
    let blob: string | null = null;
    if (ggufs.length) {
      if (!blobs) return noBlobs(reply);
      const hex = blobDigest(ggufs[0][1]);
      if (!hex) return bad(reply, `files.${ggufs[0][0]}: the digest must be sha256:<64 lowercase hex digits>`);
      if (!blobs.has(hex)) return bad(reply, `blob sha256:${hex} is not on the server: upload it with POST /api/blobs/sha256:${hex}`);
      blob = blobs.path(hex);
    }
    const fromName = b.from ? untag(b.from) : id;
    // ADAPTER lines: uploaded GGUF LoRA blobs the new model loads with (the engine checks each).
    const lora: { path: string; scale: number }[] = [];
    for (const [name, digest] of Object.entries(b.adapters ?? {})) {
      if (!blobs) return noBlobs(reply);
      const hex = blobDigest(digest);
      if (!hex) return bad(reply, `adapters.${name}: the digest must be sha256:<64 lowercase hex digits>`);
      if (!blobs.has(hex)) return bad(reply, `blob sha256:${hex} is not on the server: upload it with POST /api/blobs/sha256:${hex}`);
      lora.push({ path: blobs.path(hex), scale: 1 });
    }
    if (lora.length && !blob && fromName === id) return bad(reply, 'adapters need from (another model) or files: the new model is a copy that loads them');
    // `-q TYPE`: the uploaded file is quantized on a worker thread (the API keeps answering).
    let quantize: { name: string } | null = null;
    if (b.quantize) {
      if (!blob) return bad(reply, 'quantize needs files: an uploaded F32, F16 or BF16 GGUF, which is quantized as it is imported (from a model: kail quantize its file)');
      try {
        quantize = tools().parseQuantFileType(b.quantize);
      } catch (e) {
        return bad(reply, `quantize: ${(e as Error).message}`);
      }
    }
    // Statuses stream as they happen (NDJSON, as Ollama's create: a quantization's progress with
    // total and completed); a failure after the first line is an {error} line.
    const stream = b.stream !== false;
    let opened = false;
    const emit = (o: PullStatus) => {
      if (!stream) return;
      if (!opened) {
        reply.hijack();
        reply.raw.writeHead(200, { 'content-type': 'application/x-ndjson' });
        opened = true;
      }
      reply.raw.write(JSON.stringify(o) + '\n');
    };
    return guarded(reply, async (s) => {
      try {
        await createModel(s, emit);
      } catch (e) {
        if (!opened) throw e;
        const f = failureOf(e);
        reply.raw.end(JSON.stringify({ error: f.body.error.message }) + '\n');
        return undefined;
      }
      if (!stream) return { status: 'success' };
      emit({ status: 'success' });
      reply.raw.end();
      return undefined;
    });
    async function createModel(s: spb.SchedulerServiceClient, say: typeof emit): Promise<void> {
      const copy = (c: Partial<pb.CopyModelFileRequest>) => unary<spb.CopyModelFileRequest, pb.CopyModelFileResponse>(s.copyModelFile.bind(s), { engineId: '', copy: { sourceId: '', destinationId: id, sourcePath: '', lora, ...c } });
      const replace = async (c: Partial<pb.CopyModelFileRequest>) => {
        try {
          await copy(c);
        } catch (e) {
          if ((e as grpc.ServiceError).code !== grpc.status.ALREADY_EXISTS) throw e;
          // Ollama's create replaces a model of that name.
          await unary<spb.DeleteModelFileRequest, pb.DeleteModelFileResponse>(s.deleteModelFile.bind(s), { engineId: '', delete: { id } }).catch(inUseAsConflict);
          await copy(c);
        }
      };
      // FROM a model named as it was pulled, or one this machine's Ollama has (linked in first).
      let from = fromName;
      if (b.from && !blob) {
        const pulled = pulledNames.idFor(b.from);
        const local = pulled ? null : await modelOfOllamaStore(s, b.from);
        if (pulled) from = pulled;
        else if (local) {
          from = local.id;
          say({ status: `using ollama's model ${local.ollama}` });
        } else if (opts.modelsDir && /^(hf\.co|huggingface\.co)\//i.test(b.from) && tools().parseRepoRef(b.from)) {
          // (FROM hf.co/USER/REPO:QUANT, as Ollama's create: pulled first.)
          from = await pullFromHub(b.from, opts.modelsDir, say);
        }
      }
      if (blob && quantize) {
        say({ status: `using existing layer sha256:${blobDigest(ggufs[0][1])}` });
        const label = `quantizing model to ${quantize.name}`;
        say({ status: label });
        // (Beside the blobs, on the same file system: the engine links it into its models directory.)
        const tmp = path.join(path.dirname(blob), `.quantize-${randomUUID()}.gguf`);
        let last = 0;
        try {
          await tools().quantizeModelInWorker(blob, tmp, { type: quantize.name }, (done, total) => {
            if (Date.now() - last < 500) return;
            last = Date.now();
            say({ status: label, total, completed: done });
          });
        } catch (e) {
          throw new HttpError(400, openAiError(`quantize: ${(e as Error).message.replaceAll(tmp, 'the new model')}`, 'invalid_request_error'));
        }
        try {
          say({ status: 'creating new layer' });
          await replace({ sourcePath: tmp });
        } finally {
          fs.rmSync(tmp, { force: true });
        }
      } else if (blob) {
        const hex = blobDigest(ggufs[0][1])!;
        say({ status: `using existing layer sha256:${hex}` });
        await replace({ sourcePath: blob });
        if (opts.modelsDir) digests.remember(path.join(opts.modelsDir, `${id}.gguf`), hex);
      } else if (from !== id) {
        say({ status: `using existing model ${from}` });
        // (A model kail serve -m loaded from elsewhere comes in from its file.)
        const inModelsDir = !!opts.modelsDir && fs.existsSync(path.join(opts.modelsDir, `${from}.gguf`));
        const served = inModelsDir ? undefined : byName(await servedModels(s), from);
        await replace(served ? { sourcePath: served.path } : { sourceId: from });
      }
      for (const digest of Object.values(b.adapters ?? {})) say({ status: `using adapter layer ${digest}` });
      // The new model's Modelfile: the source's (when made from a model), then this request's.
      const base = blob ? {} : (modelfiles.get(from) ?? {});
      modelfiles.set(id, {
        system: b.system ?? base.system,
        template: b.template || base.template,
        parameters: { ...(base.parameters ?? {}), ...(b.parameters ?? {}) },
        messages: b.messages ?? base.messages,
        license: b.license == null ? base.license : Array.isArray(b.license) ? b.license.join('\n') : b.license,
      });
      say({ status: 'writing manifest' });
    }
  });
  // `ollama pull hf.co/USER/REPO[:QUANT]`: the repository's GGUF file into the models directory,
  // as `kail pull` does it (tools/src/models/pull.ts), its progress in Ollama's status lines; the
  // model then answers to the name it was pulled by. (No Ollama registry: other names are a 501.)
  app.post('/api/pull', async (req, reply) => {
    const parsed = PullRequest.safeParse(req.body ?? {});
    if (!parsed.success) return bad(reply, zodMessage(parsed.error));
    const name = (parsed.data.model ?? parsed.data.name)!;
    // A model this machine's Ollama has downloaded (its store: $OLLAMA_MODELS, ~/.ollama/models)
    // is linked in from there, not downloaded again.
    const stores = tools().ollamaStoreDirs();
    let local: OllamaModel | null = null;
    try {
      local = tools().parseOllamaName(name) ? tools().findOllamaModel(name, stores) : null;
    } catch {
      local = null;
    }
    if (!local && (!/^(hf\.co|huggingface\.co)\//i.test(name) || !tools().parseRepoRef(name)))
      return reply.code(501).send(ollamaError(`'${name}' is neither a Hugging Face model (hf.co/USER/REPO[:QUANT], a GGUF repository) nor a model of this machine's Ollama store (${stores.join(', ')}); there is no Ollama registry`));
    if (!opts.modelsDir) return bad(reply, 'pulling needs a data directory (kail serve --data-dir)', 501);
    const modelsDir = opts.modelsDir;
    if (local) return pullFromOllamaStore(reply, local, name, modelsDir, parsed.data.stream ?? true);
    const stream = parsed.data.stream ?? true;
    const lines: object[] = [];
    const say = (o: object) => {
      if (stream) reply.raw.write(JSON.stringify(o) + '\n');
      else lines.push(o);
    };
    if (stream) {
      reply.hijack();
      reply.raw.writeHead(200, { 'content-type': 'application/x-ndjson' });
    }
    try {
      await pullFromHub(name, modelsDir, say);
      say({ status: 'writing manifest' });
      say({ status: 'success' });
      if (!stream) return { status: 'success' };
    } catch (e) {
      const message = (e as Error).message;
      if (!stream) return bad(reply, message, e instanceof tools().PullError ? 400 : 500);
      say({ error: message });
    }
    if (stream) reply.raw.end();
    return reply;
  });
  /**
   * hf.co/USER/REPO[:QUANT] into the models directory as `kail pull` fetches it, its progress in
   * Ollama's status lines; the model then answers to that name. Returns its id.
   */
  const pullFromHub = async (name: string, modelsDir: string, say: (o: PullStatus) => void): Promise<string> => {
    say({ status: 'pulling manifest' });
    const plan = await tools().planRepoPull(name, undefined);
    let last = 0;
    const digestOf = (f: { sha256?: string; name: string }) => `sha256:${f.sha256 ?? f.name}`;
    const r = await tools().runPull(plan, modelsDir, {
      events: {
        start: (f) => say({ status: `pulling ${(f.sha256 ?? f.name).slice(0, 12)}`, digest: digestOf(f), total: f.size ?? 0, completed: 0 }),
        progress: (f, done, total) => {
          if (Date.now() - last < 250) return;
          last = Date.now();
          say({ status: `pulling ${(f.sha256 ?? f.name).slice(0, 12)}`, digest: digestOf(f), total, completed: done });
        },
        end: (f, how) => {
          if (!how.error) say({ status: `pulling ${(f.sha256 ?? f.name).slice(0, 12)}`, digest: digestOf(f), total: f.size ?? 0, completed: f.size ?? 0 });
        },
      },
    });
    say({ status: 'verifying sha256 digest' });
    pulledNames.set(name, r.id);
    return r.id;
  };
  /**
   * A model that is neither served nor in the models directory, found in this machine's Ollama
   * store and linked in (as /api/pull does), for create's `from`; null when the store has none.
   */
  const modelOfOllamaStore = async (s: spb.SchedulerServiceClient, name: string): Promise<{ id: string; ollama: string } | null> => {
    if (!opts.modelsDir || fs.existsSync(path.join(opts.modelsDir, `${untag(name)}.gguf`)) || byName(await servedModels(s), name)) return null;
    let m: OllamaModel;
    try {
      m = tools().findOllamaModel(name, tools().ollamaStoreDirs());
    } catch {
      return null;
    }
    return { id: await linkOllamaModel(m, name, opts.modelsDir), ollama: m.name };
  };
  /**
   * Links a model of the Ollama store into the models directory (tools/src/models/ollama-store.ts)
   * unless that file is there already, and names it by `name`; another file under its id is a 409.
   */
  const linkOllamaModel = async (m: OllamaModel, name: string, modelsDir: string): Promise<string> => {
    const id = tools().ollamaModelId(m.name);
    const file = path.join(modelsDir, `${id}.gguf`);
    if (!fs.existsSync(file)) {
      await tools().importOllamaModel(m, modelsDir, id);
      digests.remember(file, path.basename(m.model).slice(7));
    }
    else {
      // (The same file: a hard link of the blob, or its copy from another file system.)
      const [have, blob] = [fs.statSync(file), fs.statSync(m.model)];
      if (have.ino !== blob.ino && have.size !== blob.size)
        throw new HttpError(409, openAiError(`model '${id}' is already in the models directory as another file: delete it first (ollama rm ${id})`, 'invalid_request_error'));
    }
    pulledNames.set(name, id);
    return id;
  };
  /** /api/pull of a model of the Ollama store, answered in Ollama's status lines. */
  const pullFromOllamaStore = async (reply: FastifyReply, m: OllamaModel, name: string, modelsDir: string, stream: boolean) => {
    try {
      await linkOllamaModel(m, name, modelsDir);
    } catch (e) {
      return e instanceof HttpError ? bad(reply, e.body.error.message, e.status) : bad(reply, (e as Error).message, 500);
    }
    const digest = `sha256:${path.basename(m.model).slice(7)}`;
    const lines = [{ status: 'pulling manifest' }, { status: `using ollama's layer ${digest.slice(7, 19)}`, digest, total: m.size, completed: m.size }, { status: 'writing manifest' }, { status: 'success' }];
    if (!stream) return { status: 'success' };
    reply.header('content-type', 'application/x-ndjson');
    return lines.map((l) => JSON.stringify(l)).join('\n') + '\n';
  };
  app.all('/api/push', async (_req, reply) =>
    reply.code(501).send(ollamaError('/api/push is not supported: KailStream serves the GGUF files given to `kail serve -m` or put in its models directory (no model registry)')),
  );
}

/**
 * Runs one generation and answers as Ollama does: NDJSON chunks (`message` pieces for a chat,
 * `response` pieces for a generate, reasoning as `thinking`) and a last chunk with done: true,
 * the reason and the counts and durations; or, with stream false, one object with all of it.
 */
async function answer(
  req: FastifyRequest, reply: FastifyReply, deps: OpenAiDeps, scheduler: spb.SchedulerServiceClient,
  b: ChatRequest | GenerateRequest, gen: pb.GenerateRequest, kind: 'chat' | 'generate',
  tools?: { function: { name: string; parameters?: Record<string, unknown> } }[],
  g?: { tokens: number[]; reasoningOpen: boolean; split: boolean },
): Promise<void> {
  const stream = b.stream ?? true;
  const t0 = performance.now();
  let tFirst = 0;
  let all = '';
  let last: pb.GenerateResponse | undefined;
  let reasoningOpen = g?.reasoningOpen ?? false;
  const generated: number[] = [];
  const logprobs: { token: string; logprob: number; top_logprobs?: { token: string; logprob: number }[] }[] = [];
  const split = kind === 'chat' || g?.split !== false;
  let splitter: ReasoningSplitter | null = null;
  const calls = stream && tools ? new ToolCallStream(tools) : null;
  let headersSent = false;
  const line = (obj: object) => reply.raw.write(`${JSON.stringify(obj)}\n`);
  const start = () => {
    if (headersSent) return;
    headersSent = true;
    reply.raw.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-cache' });
  };
  const piece = (content: string, thinking: string, lp: typeof logprobs = []) => {
    if (!content && !thinking && !lp.length) return;
    const extra = lp.length ? { logprobs: lp } : {};
    if (kind === 'chat') line({ model: b.model, created_at: nowIso(), message: { role: 'assistant', content, ...(thinking ? { thinking } : {}) }, done: false, ...extra });
    else line({ model: b.model, created_at: nowIso(), response: content, ...(thinking ? { thinking } : {}), done: false, ...extra });
  };

  try {
    await submitAll(req, reply, deps, scheduler, [gen], (_i, msg) => {
      if (msg.tokens.length && !tFirst) tFirst = performance.now();
      if (!g) reasoningOpen = msg.reasoningOpen;
      all += msg.text;
      generated.push(...msg.tokens);
      last = msg;
      const lp = b.logprobs ? msg.logprobs.map((l, i) => ({ token: l.text, logprob: l.logprob, top_logprobs: (msg.topLogprobs[i]?.candidates ?? []).map((c) => ({ token: c.text, logprob: c.logprob })) })) : [];
      if (!stream) {
        logprobs.push(...lp);
        return;
      }
      start();
      if (!split) return piece(msg.text, '', lp);
      splitter ??= new ReasoningSplitter(reasoningOpen);
      const out = splitter.push(msg.text);
      piece(calls ? calls.push(out.content) : out.content, out.reasoning, lp);
    }, keepAliveFields(b.keep_alive));
  } catch (e) {
    deps.onUsage?.(req, 0, generated.length);
    const failed = callFailure(reply, e);
    if (!failed) return;
    if (headersSent) {
      deps.metrics?.requestErrors.inc({ status: String(failed.status) });
      line(ollamaError(failed.body.error.message));
      reply.raw.end();
      return;
    }
    if (failed.retryAfter) reply.header('retry-after', String(failed.retryAfter));
    reply.code(failed.status).send(ollamaError(failed.body.error.message));
    return;
  }
  recordFinished(deps, req, gen.model, last, t0, tFirst);
  const usage = last?.usage ?? common.Usage.fromPartial({});
  const timings = last?.timings ?? common.Timings.fromPartial({});
  const stats = {
    done: true,
    done_reason: last?.finishReason === common.FinishReason.FINISH_REASON_LENGTH ? 'length' : 'stop',
    total_duration: ns(performance.now() - t0),
    load_duration: 0,
    prompt_eval_count: usage.promptTokens,
    prompt_eval_duration: ns(timings.promptMs),
    eval_count: usage.completionTokens,
    eval_duration: ns(timings.generationMs),
    ...(kind === 'generate' && g?.tokens.length ? { context: [...g.tokens, ...generated] } : {}),
  };

  if (stream) {
    start();
    const rest = (splitter as ReasoningSplitter | null)?.finish();
    if (rest) piece(calls ? calls.push(rest.content) : rest.content, rest.reasoning);
    if (calls) {
      const done = calls.finish();
      piece(done.content, '');
      if (done.calls.length) line({ model: b.model, created_at: nowIso(), message: { role: 'assistant', content: '', tool_calls: done.calls.map(ollamaCall) }, done: false });
    }
    if (kind === 'chat') line({ model: b.model, created_at: nowIso(), message: { role: 'assistant', content: '' }, ...stats });
    else line({ model: b.model, created_at: nowIso(), response: '', ...stats });
    reply.raw.end();
    return;
  }
  const parts = split ? splitReasoning(all, reasoningOpen) : { reasoning: '', content: all };
  const lp = logprobs.length ? { logprobs } : {};
  if (kind === 'generate') {
    reply.send({ model: b.model, created_at: nowIso(), response: parts.content, ...(parts.reasoning ? { thinking: parts.reasoning } : {}), ...stats, ...lp });
    return;
  }
  const parsedCalls = tools ? parseToolCalls(parts.content, tools) : { content: parts.content, calls: [] as ToolCall[], cut: false };
  const message = {
    role: 'assistant', content: parsedCalls.content,
    ...(parts.reasoning ? { thinking: parts.reasoning } : {}),
    ...(parsedCalls.calls.length ? { tool_calls: parsedCalls.calls.map(ollamaCall) } : {}),
  };
  reply.send({ model: b.model, created_at: nowIso(), message, ...stats, ...lp });
}
