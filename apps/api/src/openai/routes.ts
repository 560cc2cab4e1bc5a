import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import * as grpc from '@grpc/grpc-js';
import { common, engine as pb, scheduler as spb } from '@kailstream/proto';
import type { z } from 'zod';
import { ReasoningSplitter, splitReasoning } from '@kailstream/engine/reasoning';

import type { Modelfile } from '../ollama/modelfiles';
import type { SamplingDefaults } from '../sampling-defaults';
import type { ApiMetrics } from '../metrics';
import { diffusionRequest, penaltyWindow, samplerExtras, slotRequest } from '../sampler-extras';
import { seedParams } from '../seed';
import { StructuredOutputError, structuredOutput } from '../structured-output';
import { llamaTimings } from '../timings';
import { HttpError, resolveModel } from '../llama-server/routes';
import { ChatCompletionRequest, chatMessages, CompletionRequest, EmbeddingRequest, itemList, openAiError, zodToOpenAi } from './schemas';
import { ToolCallStream, type ToolCallDelta } from './tool-call-stream';
import { parseToolCalls, type ToolDefs } from './tool-calls';

type Finish = 'stop' | 'length' | 'tool_calls' | null;

function finishName(f: common.FinishReason): Finish {
  if (f === common.FinishReason.FINISH_REASON_STOP) return 'stop';
  if (f === common.FinishReason.FINISH_REASON_LENGTH) return 'length';
  return null;
}

/**
 * gRPC status -> HTTP status and OpenAI error body (the one place this mapping lives). Overload
 * and unavailability are 503 with Retry-After (clients such as `openai` retry those); a request
 * that ran past its deadline is 504.
 */
export function grpcToHttp(e: grpc.ServiceError): { status: number; body: ReturnType<typeof openAiError>; retryAfter?: number } {
  const msg = e.details || e.message;
  switch (e.code) {
    case grpc.status.NOT_FOUND:
      return { status: 404, body: openAiError(msg, 'invalid_request_error', 'model', 'model_not_found') };
    case grpc.status.INVALID_ARGUMENT:
    case grpc.status.FAILED_PRECONDITION:
      return { status: 400, body: openAiError(msg, 'invalid_request_error', null, 'invalid_value') };
    case grpc.status.OUT_OF_RANGE:
      return { status: 400, body: openAiError(msg, 'invalid_request_error', 'messages', 'context_length_exceeded') };
    case grpc.status.ALREADY_EXISTS:
      return { status: 409, body: openAiError(msg, 'invalid_request_error', null, 'conflict') };
    case grpc.status.UNAUTHENTICATED:
      return { status: 401, body: openAiError(msg, 'invalid_request_error', null, 'invalid_api_key') };
    case grpc.status.PERMISSION_DENIED:
      return { status: 403, body: openAiError(msg, 'invalid_request_error', null, 'permission_denied') };
    case grpc.status.RESOURCE_EXHAUSTED: {
      // The scheduler's hint (how soon a slot frees, from recent finish times) in whole seconds.
      const hint = Number(e.metadata?.get('retry-after-ms')?.[0]);
      return { status: 503, body: openAiError(msg, 'server_error', null, 'overloaded'), retryAfter: Number.isFinite(hint) && hint > 0 ? Math.ceil(hint / 1000) : 1 };
    }
    case grpc.status.UNAVAILABLE:
    case grpc.status.CANCELLED:
    case grpc.status.ABORTED:
      return { status: 503, body: openAiError(msg, 'server_error', null, 'unavailable'), retryAfter: 1 };
    case grpc.status.DEADLINE_EXCEEDED:
      return { status: 504, body: openAiError(msg, 'server_error', null, 'timeout') };
    case grpc.status.UNIMPLEMENTED:
      return { status: 501, body: openAiError(msg, 'invalid_request_error', null, 'unsupported') };
    default:
      return { status: 500, body: openAiError(msg, 'server_error', null, 'internal_error') };
  }
}

interface Common {
  model: string;
  max: number;
  stop: string[];
  sampling: common.SamplingParams;
  stream: boolean;
  includeUsage: boolean;
  /** llama-server's timings_per_token: `timings` on every streamed chunk. */
  timingsPerToken: boolean;
  logprobs: boolean;
  topLogprobs: number;
  /** Choices to generate. */
  n: number;
  responseFormat: pb.ResponseFormat;
  jsonSchema: string;
  /** vLLM's guided_choice: the output is one of these. */
  outputChoices: string[];
  /** llama-server's grammar, vLLM's guided_grammar (GBNF); '' for none. */
  grammar: string;
  grammarLazy: boolean;
  grammarTriggers: pb.GrammarTrigger[];
  /** vLLM's guided_regex; '' for none. */
  regex: string;
  /** vLLM's min_tokens, stop_token_ids, include_stop_str_in_output. */
  minTokens: number;
  stopTokenIds: number[];
  includeStopStr: boolean;
  /** The request's tools when the answers' tool calls are parsed (chat with tools, tool_choice not 'none'). */
  tools?: ToolDefs;
  /** A chat whose reasoning blocks go to reasoning_content. */
  reasoning?: boolean;
}

/** OpenAI's response-format names as the engine's (chat completions, Responses' text.format). */
export const RESPONSE_FORMATS = {
  text: pb.ResponseFormat.RESPONSE_FORMAT_TEXT,
  json_object: pb.ResponseFormat.RESPONSE_FORMAT_JSON_OBJECT,
  json_schema: pb.ResponseFormat.RESPONSE_FORMAT_JSON_SCHEMA,
} as const;

function commonFields(b: (ChatCompletionRequest | CompletionRequest) & { model: string }, defaultMax: number, logprobs: boolean, topLogprobs: number): Common {
  // llama-server's json_schema and vLLM's guided_json / guided_choice (throws StructuredOutputError).
  const structured = structuredOutput(b, !!b.response_format && b.response_format.type !== 'text');
  return {
    model: b.model,
    max: ('max_completion_tokens' in b && b.max_completion_tokens) || b.max_tokens || defaultMax,
    stop: b.stop == null ? [] : Array.isArray(b.stop) ? b.stop.filter((s) => s.length > 0) : b.stop ? [b.stop] : [],
    sampling: withLogitBias(b.logit_bias, {
      // OpenAI's default temperature is 1.
      temperature: b.temperature ?? 1,
      topP: b.top_p ?? 1,
      topK: b.top_k ?? 0,
      minP: b.min_p ?? 0,
      // vLLM's repetition_penalty looks at everything (llama.cpp's repeat_penalty at the last 64 tokens).
      ...penaltyWindow(b.repeat_penalty == null && b.repetition_penalty != null ? (b.repeat_last_n ?? -1) : b.repeat_last_n, {
        repetitionPenalty: b.repeat_penalty ?? b.repetition_penalty ?? 1,
        presencePenalty: b.presence_penalty ?? 0,
        frequencyPenalty: b.frequency_penalty ?? 0,
      }),
      ...seedParams(b.seed),
      extras: samplerExtras(b),
    }),
    stream: !!b.stream,
    includeUsage: !!b.stream_options?.include_usage,
    timingsPerToken: !!b.timings_per_token,
    logprobs,
    topLogprobs,
    n: b.n ?? 1,
    responseFormat: structured?.responseFormat ?? RESPONSE_FORMATS[b.response_format?.type ?? 'text'],
    jsonSchema: structured?.jsonSchema ?? (b.response_format?.type === 'json_schema' ? JSON.stringify(b.response_format.json_schema.schema ?? { type: 'object' }) : ''),
    outputChoices: structured?.outputChoices ?? [],
    grammar: structured?.grammar ?? '',
    grammarLazy: !!structured?.grammarLazy,
    grammarTriggers: structured?.grammarTriggers ?? [],
    regex: structured?.regex ?? '',
    minTokens: b.min_tokens ?? 0,
    stopTokenIds: b.stop_token_ids ?? [],
    includeStopStr: !!b.include_stop_str_in_output,
  };
}

/** A function tool in the chat completions' shape (what the engine's template gets), from the flat fields other APIs use. */
export function functionTool(name: string, description: string | null | undefined, parameters: Record<string, unknown> | null | undefined, strict?: boolean | null) {
  return { type: 'function' as const, function: { name, ...(description ? { description } : {}), ...(parameters ? { parameters } : {}), ...(strict ? { strict } : {}) } };
}

/** SamplingParams with the request's logit_bias (JSON object keys are strings; the proto map's are ids). */
export function withLogitBias(bias: Record<string, number> | null | undefined, fields: Partial<common.SamplingParams>): common.SamplingParams {
  const sampling = common.SamplingParams.fromPartial(fields);
  for (const [k, v] of Object.entries(bias ?? {})) sampling.logitBias[Number(k)] = v;
  return sampling;
}

/** The engine request: the fields both routes share, plus the route's prompt (messages or text). */
function generateRequest(c: Common, b: ChatCompletionRequest | CompletionRequest, prompt: Partial<pb.GenerateRequest>): pb.GenerateRequest {
  return pb.GenerateRequest.fromPartial({
    ...prompt,
    model: c.model,
    maxTokens: c.max,
    stop: c.stop,
    sampling: c.sampling,
    wantLogprobs: c.logprobs,
    topLogprobs: c.topLogprobs,
    ignoreEos: !!b.ignore_eos,
    responseFormat: c.responseFormat,
    jsonSchema: c.jsonSchema,
    outputChoices: c.outputChoices,
    grammar: c.grammar,
    grammarLazy: c.grammarLazy,
    grammarTriggers: c.grammarTriggers,
    regex: c.regex,
    minTokens: c.minTokens,
    stopTokenIds: c.stopTokenIds,
    includeStopStr: c.includeStopStr,
    lora: b.lora ?? [],
    ...slotRequest(b),
    diffusion: diffusionRequest(b),
  });
}

export interface OpenAiDeps {
  scheduler: () => spb.SchedulerServiceClient | undefined;
  /** Tenant (API key id) of a request, for fairness. */
  tenantOf: (req: FastifyRequest) => string;
  /** Called once per request that reached the scheduler (a failed one with the tokens streamed before it stopped). */
  onUsage?: (req: FastifyRequest, promptTokens: number, completionTokens: number) => void;
  metrics?: ApiMetrics;
  /** Deadline given to the scheduler, ms after the request arrives; 0 = none. */
  requestTimeoutMs?: number;
  /** Reasoning budget of chat requests that give none; -1 or absent = none. */
  reasoningBudget?: number;
  /** reasoning_format of chat requests that give none (llama-server's --reasoning-format; absent: auto). */
  reasoningFormat?: 'none' | 'auto' | 'deepseek';
  /** The server's sampling defaults (kail serve --temp …): Ollama's routes put them under a Modelfile's parameters; the others' bodies get them in a hook. */
  samplingDefaults?: SamplingDefaults;
  /** A model's Modelfile settings (kail create): its system prompt, opening messages and TEMPLATE reach its chats here too. */
  modelfileOf?: (model: string) => Modelfile;
}

/**
 * The model a request names, or the only one served when it names none (as llama-server and vLLM
 * answer such a request); null once the reply says why there is none (several served, none
 * loaded, no scheduler).
 */
export async function requestModel(reply: FastifyReply, deps: OpenAiDeps, model: string | undefined): Promise<string | null> {
  if (model !== undefined) return model;
  const scheduler = deps.scheduler();
  if (!scheduler) {
    reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
    return null;
  }
  try {
    return (await resolveModel(scheduler, undefined)).id;
  } catch (e) {
    if (!(e instanceof HttpError)) throw e;
    if (e.retryAfter) reply.header('retry-after', String(e.retryAfter));
    reply.code(e.status).send(e.body);
    return null;
  }
}

/** A chat after a Modelfile's system prompt (unless it has one) and opening messages, as Ollama's OpenAI route adds them. */
export function withModelfileMessages(mf: Modelfile, asked: pb.ChatMessage[]): pb.ChatMessage[] {
  const opening = [...(mf.system && !asked.some((m) => m.role === 'system' || m.role === 'developer') ? [{ role: 'system', content: mf.system }] : []), ...(mf.messages ?? [])];
  return [...opening.map((m) => pb.ChatMessage.fromPartial(m)), ...asked];
}

export function registerOpenAiRoutes(app: FastifyInstance, deps: OpenAiDeps): void {
  app.post('/v1/chat/completions', async (req, reply) => {
    const parsed = ChatCompletionRequest.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const model = await requestModel(reply, deps, parsed.data.model);
    if (model === null) return reply;
    const b = { ...parsed.data, model };
    const mf = deps.modelfileOf?.(model) ?? {};
    const messages = withModelfileMessages(mf, chatMessagesToProto(b.messages));
    let c: Common;
    try {
      c = commonFields(b, 1024, !!b.logprobs, b.top_logprobs ?? 0);
    } catch (e) {
      if (e instanceof StructuredOutputError) return reply.code(400).send(e.body);
      throw e;
    }
    // With tools (unless tool_choice is 'none') the template shows them and the answer's calls are parsed.
    if (b.tools?.length && b.tool_choice !== 'none') c.tools = b.tools;
    c.reasoning = (b.reasoning_format ?? deps.reasoningFormat ?? 'auto') !== 'none';
    const choice = b.tool_choice;
    const gen = generateRequest(c, b, {
      messages,
      toolsJson: c.tools ? JSON.stringify(c.tools) : '',
      toolChoice: typeof choice === 'object' && choice ? pb.ToolChoice.TOOL_CHOICE_FUNCTION : choice === 'required' ? pb.ToolChoice.TOOL_CHOICE_REQUIRED : pb.ToolChoice.TOOL_CHOICE_AUTO,
      toolChoiceFunction: typeof choice === 'object' && choice ? choice.function.name : '',
      singleToolCall: b.parallel_tool_calls === false,
      chatTemplateKwargsJson: templateKwargs(b.chat_template_kwargs, b.reasoning_effort),
      ...reasoningBudget(deps, b.reasoning_budget_tokens ?? b.thinking_budget_tokens, b.reasoning_budget_message),
      continueFinalMessage: continuesFinal(messages, b.continue_final_message, b.add_generation_prompt),
      goTemplate: mf.template ?? '',
    });
    return run(req, reply, deps, [gen], c, 'chat');
  });

  app.post('/v1/embeddings', async (req, reply) => {
    const parsed = EmbeddingRequest.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const model = await requestModel(reply, deps, parsed.data.model);
    if (model === null) return reply;
    return embeddings(req, reply, deps, { ...parsed.data, model });
  });

  app.post('/v1/completions', async (req, reply) => {
    const parsed = CompletionRequest.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const model = await requestModel(reply, deps, parsed.data.model);
    if (model === null) return reply;
    const b = { ...parsed.data, model };
    let c: Common;
    try {
      c = commonFields(b, 16, (b.logprobs ?? 0) > 0, b.logprobs ?? 0);
    } catch (e) {
      if (e instanceof StructuredOutputError) return reply.code(400).send(e.body);
      throw e;
    }
    // max_tokens 0 (with echo): the prompt scored, nothing generated.
    const scoreOnly = b.max_tokens === 0;
    if (scoreOnly) c.max = 0;
    // An empty prompt is fine before a suffix: fill-in-the-middle at the start of a file.
    if (typeof b.prompt === 'string' && b.prompt.length === 0 && !b.suffix) return reply.code(400).send(openAiError('prompt must not be empty', 'invalid_request_error', 'prompt', 'invalid_value'));
    // One prompt, or a batch: each gets its choices, numbered prompt by prompt (OpenAI's order).
    const prompts = itemList(b.prompt);
    const gens = prompts.map((p) =>
      // echo with logprobs scores the prompt too (its first token has no logprob: null, as OpenAI's).
      generateRequest(c, b, {
        ...(typeof p === 'string' ? { prompt: p } : { promptTokens: p, echoPrompt: !!b.echo }),
        promptLogprobs: (!!b.echo && c.logprobs) || scoreOnly,
        suffix: b.suffix ?? '',
      }),
    );
    const bestOf = b.best_of ?? c.n;
    return run(req, reply, deps, gens, c, 'text', { perPrompt: bestOf, echo: b.echo ? prompts.map((p) => (typeof p === 'string' ? p : null)) : undefined });
  });
}

/**
 * /v1/embeddings: each input is a request to the scheduler that computes the prompt and returns
 * the model's pooled final hidden state (EMBED_MODEL: the file's pooling type, else the last
 * token), L2-normalized as OpenAI's embeddings are, cut to `dimensions` (and renormalized) when
 * asked, as floats or base64 float32.
 */
async function embeddings(req: FastifyRequest, reply: FastifyReply, deps: OpenAiDeps, b: EmbeddingRequest & { model: string }) {
  const scheduler = deps.scheduler();
  if (!scheduler) return reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
  const inputs = itemList(b.input);
  const id = `embd-${randomUUID()}`;
  const gens = inputs.map((input, i) =>
    pb.GenerateRequest.fromPartial({
      requestId: `${id}-${i}`, model: b.model, maxTokens: 1, embed: pb.EmbedPooling.EMBED_MODEL,
      ...(typeof input === 'string' ? { prompt: input } : { promptTokens: input }),
    }),
  );
  const results: { embedding: number[]; promptTokens: number; perToken: boolean }[] = inputs.map(() => ({ embedding: [], promptTokens: 0, perToken: false }));
  try {
    await submitAll(req, reply, deps, scheduler, gens, (i, msg) => {
      if (msg.embedding.length) [results[i].embedding, results[i].perToken] = [msg.embedding, msg.embeddingPerToken];
      if (msg.usage) results[i].promptTokens = msg.usage.promptTokens;
    });
  } catch (e) {
    const failed = callFailure(reply, e);
    if (!failed) return reply;
    if (failed.retryAfter) reply.header('retry-after', String(failed.retryAfter));
    return reply.code(failed.status).send(failed.body);
  }
  // (llama-server's answer when its --pooling is none.)
  if (results.some((r) => r.perToken))
    return reply.code(400).send(openAiError("Pooling type 'none' is not OAI compatible. Please use a different pooling type", 'invalid_request_error', null, 'invalid_value'));
  const width = results[0]?.embedding.length ?? 0;
  if (b.dimensions && b.dimensions > width)
    return reply.code(400).send(openAiError(`dimensions ${b.dimensions} is more than the model's ${width}`, 'invalid_request_error', 'dimensions', 'invalid_value'));
  const promptTokens = results.reduce((a, r) => a + r.promptTokens, 0);
  deps.onUsage?.(req, promptTokens, 0);
  return reply.send({
    object: 'list',
    model: b.model,
    data: results.map((r, index) => {
      const v = Float32Array.from(b.dimensions ? r.embedding.slice(0, b.dimensions) : r.embedding);
      let norm = 0;
      for (const x of v) norm += x * x;
      norm = Math.sqrt(norm);
      if (norm > 0) for (let j = 0; j < v.length; j++) v[j] /= norm;
      const embedding = b.encoding_format === 'base64' ? Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') : Array.from(v);
      return { object: 'embedding', index, embedding };
    }),
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  });
}

/**
 * Submits one HTTP request's generations to the scheduler (its tenant and deadline) and waits for
 * all of them, `onData(i, msg)` seeing call i's messages as they come. A client that goes away
 * cancels them all, within one decode step in the engine (the response's 'close' is the signal: the
 * request's own 'close' fires as soon as its body is read). The first failure cancels the others
 * and rejects with its gRPC error.
 */
/** A unary call through the scheduler with a 30 s deadline, as a promise. */
export function unary<Req, Res>(fn: (req: Req, md: grpc.Metadata, opts: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r?: Res) => void) => unknown, req: Req, timeoutMs = 30_000): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (e, r) => (e ? reject(e) : resolve(r as Res))));
}

export async function submitAll(
  req: FastifyRequest, reply: FastifyReply, deps: OpenAiDeps, scheduler: spb.SchedulerServiceClient,
  gens: pb.GenerateRequest[], onData: (i: number, msg: pb.GenerateResponse) => void,
  /** More SubmitRequest fields (Ollama's keep_alive). */
  extra: Partial<spb.SubmitRequest> = {},
  /**
   * Most generations in flight at once (the rest start as those finish): a request of hundreds of
   * parts (a rerank of many documents) stays within the scheduler's per-key queue. Default: all.
   */
  limit = Infinity,
): Promise<void> {
  const tenant = deps.tenantOf(req);
  const timeout = deps.requestTimeoutMs ?? 0;
  const deadline = timeout > 0 ? Date.now() + timeout : 0;
  const active = new Set<grpc.ClientReadableStream<pb.GenerateResponse>>();
  let finished = false;
  let failed = false;
  reply.raw.on('close', () => {
    if (!finished && !reply.raw.writableFinished) {
      failed = true;
      for (const call of active) call.cancel();
    }
  });
  const run = (i: number) =>
    new Promise<void>((resolve, reject) => {
      const call = scheduler.submit(spb.SubmitRequest.fromPartial({ ...extra, generate: gens[i], tenant, deadlineUnixMs: deadline }));
      active.add(call);
      call.on('data', (msg: pb.GenerateResponse) => onData(i, msg));
      call.on('end', () => {
        active.delete(call);
        resolve();
      });
      call.on('error', (e: grpc.ServiceError) => {
        active.delete(call);
        reject(e);
      });
    });
  let next = 0;
  const worker = async () => {
    while (next < gens.length && !failed) await run(next++);
  };
  try {
    await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, gens.length)) }, worker));
  } catch (e) {
    failed = true;
    for (const call of active) call.cancel();
    throw e;
  } finally {
    finished = true;
  }
}

/**
 * A finished generation's accounting, the same for every route that answers one engine request:
 * the key's usage, and the metrics (tokens, finish reason, seconds end to end, time to first token;
 * `tFirst` 0 when no token came).
 */
export function recordFinished(deps: OpenAiDeps, req: FastifyRequest, model: string, last: pb.GenerateResponse | undefined, t0: number, tFirst: number): void {
  const usage = last?.usage ?? common.Usage.fromPartial({});
  deps.onUsage?.(req, usage.promptTokens, usage.completionTokens);
  const m = deps.metrics;
  if (!m) return;
  const reason = last?.finishReason === common.FinishReason.FINISH_REASON_LENGTH ? 'length' : 'stop';
  m.finished(model, { prompt: usage.promptTokens, cached: usage.cachedPromptTokens, completion: usage.completionTokens }, reason, (performance.now() - t0) / 1000);
  if (tFirst) m.ttft.observe({ model }, (tFirst - t0) / 1000);
}

/** The HTTP answer to a failed submitAll, or null when the client went away (nothing to send). */
export function callFailure(reply: FastifyReply, e: unknown): ReturnType<typeof grpcToHttp> | null {
  const err = e as grpc.ServiceError;
  if (err.code === grpc.status.CANCELLED && reply.raw.destroyed) return null;
  return grpcToHttp(err);
}

/** One choice's answer as it streams in. */
interface Choice {
  /** The prompt (of a batch) it answers. */
  prompt: number;
  /** With echo: the prompt's text, put before the first text (null: from the engine's prompt_text). */
  echo: string | null | undefined;
  text: string;
  finish: Finish;
  streamed: number;
  usage: { prompt_tokens: number; completion_tokens: number; cached_tokens: number };
  /** Logprobs of the tokens so far; with echo and logprobs the prompt's first (its first token's null). */
  lp: { token: string; logprob: number | null; top_logprobs: { token: string; logprob: number }[] | null }[];
  tLast: number;
  /** Holds back possible tool calls while streaming (chat with tools). */
  toolStream: ToolCallStream | null;
  /** Splits reasoning off while streaming (a chat); made at the first message, which says whether the prompt opened it. */
  reasoning: ReasoningSplitter | null;
  /** The engine's word that the prompt left a reasoning block open. */
  reasoningOpen: boolean;
  /** Sum and count of the sampled tokens' log probabilities (best_of ranks by their mean). */
  lpSum: number;
  lpCount: number;
  /** Length of the echoed prompt at the start of text. */
  echoLen: number;
  /** The engine's counts and times: so far (progress), then the last message's. */
  engineUsage?: common.Usage;
  engineTimings?: common.Timings;
}

/** OpenAI's chat turns as the engine's (a developer message is a system message; text parts joined). */
/**
 * Whether a chat continues its final message: an assistant message with text at the end is
 * continued (llama-server's prefill_assistant, Anthropic's and Ollama's prefill) unless the
 * request says otherwise (continue_final_message false, or add_generation_prompt true); true
 * asks for it (vLLM's continue_final_message), which the engine checks.
 */
export function continuesFinal(messages: pb.ChatMessage[], continueFinal?: boolean | null, addGenerationPrompt?: boolean | null): boolean {
  if (continueFinal === true) return true;
  if (continueFinal === false || addGenerationPrompt === true) return false;
  const last = messages.at(-1);
  return !!last && last.role === 'assistant' && last.content.trim() !== '' && !last.toolCallsJson;
}

export function chatMessagesToProto(messages: z.infer<typeof chatMessages>): pb.ChatMessage[] {
  return messages.map((m) => ({
    role: m.role === 'developer' ? 'system' : m.role,
    content: typeof m.content === 'string' ? m.content : (m.content ?? []).map((p) => p.text).join(''),
    toolCallsJson: m.tool_calls?.length ? JSON.stringify(m.tool_calls) : '',
    toolCallId: m.tool_call_id ?? '',
    name: m.name ?? '',
    reasoningContent: m.reasoning_content ?? '',
  }));
}

/**
 * A chat request's reasoning budget as the engine request's fields: -1 or absent = the server's
 * (llama-server's rule), whose -1 = none.
 */
export function reasoningBudget(
  deps: Pick<OpenAiDeps, 'reasoningBudget'>, tokens?: number | null, message?: string | null,
): Pick<pb.GenerateRequest, 'reasoningBudget' | 'hasReasoningBudget' | 'reasoningBudgetMessage'> {
  const n = tokens == null || tokens < 0 ? (deps.reasoningBudget ?? -1) : tokens;
  return { reasoningBudget: Math.max(0, n), hasReasoningBudget: n >= 0, reasoningBudgetMessage: message ?? '' };
}

/** The chat template's extra variables: the request's chat_template_kwargs, with reasoning_effort unless they set it. */
export function templateKwargs(kwargs: Record<string, unknown> | null | undefined, effort: string | null | undefined): string {
  const all = { ...(effort ? { reasoning_effort: effort } : {}), ...(kwargs ?? {}) };
  return Object.keys(all).length ? JSON.stringify(all) : '';
}

/** A text completion's extras: sequences per prompt (best_of), echo of each prompt. */
interface TextOptions {
  perPrompt: number;
  echo?: (string | null)[];
}

/** OpenAI's legacy (completions) logprobs of some tokens, the first starting at text offset `at`. */
function legacyLogprobs(lp: Choice['lp'], at: number) {
  const offsets: number[] = [];
  const top = (l: Choice['lp'][number]) => (l.top_logprobs ? Object.fromEntries(l.top_logprobs.map((t) => [t.token, t.logprob])) : null);
  for (const l of lp) {
    offsets.push(at);
    at += l.token.length;
  }
  return { tokens: lp.map((l) => l.token), token_logprobs: lp.map((l) => l.logprob), top_logprobs: lp.map(top), text_offset: offsets };
}

/**
 * Submits the request's choices (per prompt, n sequences, or best_of of which the n with the
 * highest log probability per token are kept; choice i of a prompt samples with seed + i when a
 * seed is set) and answers with all of them, streamed as they come (each chunk names its choice's
 * index, prompt by prompt) or in one body. Usage counts each prompt once and every sequence's
 * completion. A failed choice fails the request and cancels the others; a client that goes away
 * cancels them all.
 */
async function run(req: FastifyRequest, reply: FastifyReply, deps: OpenAiDeps, gens: pb.GenerateRequest[], c: Common, kind: 'chat' | 'text', text?: TextOptions) {
  const scheduler = deps.scheduler();
  if (!scheduler) return reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
  const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const per = text?.perPrompt ?? c.n;
  const ranked = per > c.n;  // best_of: the sampled tokens' logprobs rank the choices
  const total = gens.length * per;
  const sequences = gens.flatMap((gen, p) =>
    Array.from({ length: per }, (_, i) => {
      const sampling = i > 0 && c.sampling.hasSeed ? { ...c.sampling, seed: (c.sampling.seed + i) % Number.MAX_SAFE_INTEGER } : c.sampling;
      return pb.GenerateRequest.fromPartial({ ...gen, requestId: total > 1 ? `${id}-${p * per + i}` : id, sampling, wantLogprobs: gen.wantLogprobs || ranked });
    }),
  );
  const m = deps.metrics;
  const t0 = performance.now();
  let firstToken = true;

  const choices: Choice[] = sequences.map((_, k) => ({
    prompt: Math.floor(k / per),
    echo: text?.echo?.[Math.floor(k / per)],
    lpSum: 0,
    lpCount: 0,
    echoLen: 0,
    text: '', finish: null, streamed: 0, usage: { prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0 }, lp: [], tLast: 0,
    toolStream: c.tools && c.stream ? new ToolCallStream(c.tools) : null,
    reasoning: null,
    reasoningOpen: false,
  }));
  // OpenAI's usage: each prompt once, every sequence's completion, and (prompt_tokens_details)
  // the prompt tokens served from a kept cache.
  const firsts = () => choices.filter((_, k) => k % per === 0);
  const usage = () => {
    const prompt = firsts().reduce((a, ch) => a + ch.usage.prompt_tokens, 0);
    const completion = choices.reduce((a, ch) => a + ch.usage.completion_tokens, 0);
    const cached = firsts().reduce((a, ch) => a + ch.usage.cached_tokens, 0);
    return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } };
  };
  let headersSent = false;
  const sse = (obj: unknown) => reply.raw.write(`data: ${JSON.stringify(obj)}\n\n`);
  const chunkObj = (index: number, delta: string | null, fin: Finish, chunkLp?: Choice['lp'], reasoning?: string, lpAt = 0) =>
    kind === 'chat'
      ? {
          id, object: 'chat.completion.chunk', created, model: c.model,
          choices: [{
            index,
            delta: { ...(delta === null ? {} : { content: delta }), ...(reasoning ? { reasoning_content: reasoning } : {}) },
            logprobs: chunkLp ? { content: chunkLp } : null,
            finish_reason: fin,
          }],
        }
      : { id, object: 'text_completion', created, model: c.model, choices: [{ index, text: delta ?? '', logprobs: chunkLp ? legacyLogprobs(chunkLp, lpAt) : null, finish_reason: fin }] };
  // Tool calls as they are written: a call's index, id and name first, then its arguments in pieces.
  const sendCalls = (index: number, deltas: ToolCallDelta[]) => {
    if (deltas.length)
      sse({ id, object: 'chat.completion.chunk', created, model: c.model, choices: [{ index, delta: { tool_calls: deltas }, logprobs: null, finish_reason: null }] });
  };
  const startStream = () => {
    if (headersSent) return;
    headersSent = true;
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    if (kind === 'chat')
      for (let index = 0; index < sequences.length; index++)
        sse({ id, object: 'chat.completion.chunk', created, model: c.model, choices: [{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] });
  };

  try {
    await submitAll(req, reply, deps, scheduler, sequences, (index, msg) => {
      const ch = choices[index];
      const promptLp: Choice['lp'] = msg.promptLogprobs.map((l, i) => ({
        token: l.text,
        logprob: i === 0 ? null : l.logprob,
        top_logprobs: i === 0 ? null : (msg.promptTopLogprobs[i]?.candidates ?? []).map((t) => ({ token: t.text, logprob: t.logprob })),
      }));
      const msgLp: Choice['lp'] = msg.logprobs.map((l, i) => ({
        token: l.text,
        logprob: l.logprob,
        top_logprobs: (msg.topLogprobs[i]?.candidates ?? []).map((t) => ({ token: t.text, logprob: t.logprob })),
      }));
      if (c.logprobs) ch.lp.push(...promptLp, ...msgLp);
      for (const l of msg.logprobs) {
        ch.lpSum += l.logprob;
        ch.lpCount++;
      }
      // echo: the prompt's text goes first (the engine sends it for token-id prompts).
      const echoed = ch.echo === undefined ? '' : (ch.echo ?? msg.promptText);
      ch.echo = undefined;
      ch.echoLen += echoed.length;
      // Where this message's first scored token starts in the text (a scored prompt: at its echo).
      const lpAt = ch.text.length + (promptLp.length ? 0 : echoed.length);
      if (msg.usage) ch.usage = { prompt_tokens: msg.usage.promptTokens, completion_tokens: msg.usage.completionTokens, cached_tokens: msg.usage.cachedPromptTokens };
      if (msg.usage || msg.progressUsage) {
        ch.engineUsage = msg.usage ?? msg.progressUsage;
        ch.engineTimings = msg.usage ? msg.timings : msg.progressTimings;
      }
      if (msg.finishReason !== common.FinishReason.FINISH_REASON_UNSPECIFIED) ch.finish = finishName(msg.finishReason);
      ch.text += echoed + msg.text;
      ch.streamed += msg.tokens.length;
      ch.reasoningOpen = msg.reasoningOpen;
      if (m && msg.tokens.length > 0) {
        const now = performance.now();
        if (firstToken) m.ttft.observe({ model: c.model }, (now - t0) / 1000);
        else if (ch.tLast > 0) for (let i = 0; i < msg.tokens.length; i++) m.perToken.observe({ model: c.model }, (now - ch.tLast) / 1000 / msg.tokens.length);
        firstToken = false;
        ch.tLast = now;
      }
      if (c.stream) {
        startStream();
        if (c.reasoning && !ch.reasoning) ch.reasoning = new ReasoningSplitter(msg.reasoningOpen);
        const split = ch.reasoning ? ch.reasoning.push(msg.text) : { reasoning: '', content: echoed + msg.text };
        const text = ch.toolStream ? ch.toolStream.push(split.content) : split.content;
        if (text || split.reasoning || (c.logprobs && (msgLp.length || promptLp.length))) {
          const chunk = chunkObj(index, text, null, c.logprobs ? [...promptLp, ...msgLp] : undefined, split.reasoning, lpAt);
          sse(c.timingsPerToken && msg.progressUsage ? { ...chunk, timings: llamaTimings(msg.progressUsage, msg.progressTimings) } : chunk);
        }
        if (ch.toolStream) sendCalls(index, ch.toolStream.deltas());
      }
    });
  } catch (e) {
    // A failed or abandoned request still counts, with the tokens it was sent before it stopped.
    deps.onUsage?.(req, choices[0].usage.prompt_tokens, choices.reduce((a, ch) => a + ch.streamed, 0));
    const failed = callFailure(reply, e);
    if (!failed) return reply;
    const { status, body, retryAfter } = failed;
    if (headersSent) {
      m?.requestErrors.inc({ status: String(status) });
      sse(body);
      reply.raw.end();
      return reply;
    }
    if (retryAfter) reply.header('retry-after', String(retryAfter));
    return reply.code(status).send(body);
  }
  const u = usage();
  // llama-server's timings on the final answer, for a single sequence.
  const timings = choices.length === 1 ? llamaTimings(choices[0].engineUsage, choices[0].engineTimings) : undefined;
  deps.onUsage?.(req, u.prompt_tokens, u.completion_tokens);
  m?.finished(c.model, { prompt: u.prompt_tokens, cached: u.prompt_tokens_details.cached_tokens, completion: u.completion_tokens }, choices[0].finish ?? 'stop', (performance.now() - t0) / 1000);
  if (c.stream) {
    startStream();
    choices.forEach((ch, index) => {
      const rest = ch.reasoning?.finish();
      if (rest?.reasoning) sse(chunkObj(index, null, null, undefined, rest.reasoning));
      if (rest?.content) {
        const text = ch.toolStream ? ch.toolStream.push(rest.content) : rest.content;
        if (text) sse(chunkObj(index, text, null));
      }
      if (ch.toolStream) {
        const { content, calls: toolCalls, deltas, cut } = ch.toolStream.finish();
        sendCalls(index, deltas);
        if (content) sse(chunkObj(index, content, null));
        // A call the output cut off keeps the engine's reason (length), as OpenAI's streams do.
        if (toolCalls.length && !cut) ch.finish = 'tool_calls';
      }
      // llama-server's: the last chunk carries the timings (one sequence's; the usage chunk when there is one).
      const last = chunkObj(index, null, ch.finish ?? 'stop');
      sse(timings && !c.includeUsage ? { ...last, timings } : last);
    });
    if (c.includeUsage) sse({ id, object: kind === 'chat' ? 'chat.completion.chunk' : 'text_completion', created, model: c.model, choices: [], usage: u, ...(timings ? { timings } : {}) });
    reply.raw.write('data: [DONE]\n\n');
    reply.raw.end();
    return reply;
  }
  if (kind === 'chat')
    return reply.send({
      id, object: 'chat.completion', created, model: c.model,
      choices: choices.map((ch, index) => {
        const split = c.reasoning ? splitReasoning(ch.text, ch.reasoningOpen) : { reasoning: '', content: ch.text };
        const { content, calls: toolCalls, cut } = c.tools ? parseToolCalls(split.content, c.tools) : { content: split.content, calls: [], cut: false };
        const message = {
          role: 'assistant',
          content: toolCalls.length ? content || null : content,
          ...(split.reasoning ? { reasoning_content: split.reasoning } : {}),
          ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
        };
        // A call the output cut off keeps the engine's reason (length), as in the stream.
        return { index, message, logprobs: c.logprobs ? { content: ch.lp } : null, finish_reason: toolCalls.length && !cut ? 'tool_calls' : (ch.finish ?? 'stop') };
      }),
      usage: u,
      ...(timings ? { timings } : {}),
    });
  // best_of: per prompt, the n choices with the highest mean log probability per token (stable).
  const mean = (ch: Choice) => (ch.lpCount ? ch.lpSum / ch.lpCount : -Infinity);
  const kept = ranked
    ? gens.flatMap((_, p) => choices.slice(p * per, (p + 1) * per).map((ch, i) => ({ ch, i })).sort((x, y) => mean(y.ch) - mean(x.ch) || x.i - y.i).slice(0, c.n).map((x) => x.ch))
    : choices;
  return reply.send({
    id, object: 'text_completion', created, model: c.model,
    choices: kept.map((ch, index) => ({
      index,
      text: ch.text,
      logprobs: c.logprobs ? legacyLogprobs(ch.lp, gens[ch.prompt].promptLogprobs ? 0 : ch.echoLen) : null,
      finish_reason: ch.finish ?? 'stop',
    })),
    usage: u,
    ...(timings ? { timings } : {}),
  });
}
