// OpenAI's Responses API (POST /v1/responses; GET and DELETE /v1/responses/{id}), as vLLM and
// Ollama serve it, for clients written against it (the openai SDKs' `responses`, coding agents).
//
// A request becomes the same engine request as a chat completion: `instructions` as the system
// turn, input items as chat turns (messages; reasoning items as the assistant turn's reasoning;
// function_call items as its tool calls; function_call_output items as tool messages), function
// tools as the chat template's tools, `text.format` as the response format, `reasoning.effort` as
// the template's `reasoning_effort` ('none' sets `enable_thinking` false instead). The answer comes
// back as output items (reasoning, message, function_call), whole or as the API's event stream.
//
// Stored responses (`store`, true by default as OpenAI's) are kept in this process's memory, per
// API key, the oldest dropped past STORE_LIMITS: `previous_response_id` continues one (its
// conversation, with its output, before the new input; its instructions are not carried over, as
// OpenAI's are not), GET returns it, DELETE drops it. They do not survive a restart of the API.
// `include: ["message.output_text.logprobs"]` (with `top_logprobs`) gives the message text's tokens
// their log probabilities (tokens of reasoning are left out; tool-call text in a message counts as
// the message's). Not served: background responses, built-in tools (web search, file search,
// computer use…), images and files in the input, truncation 'auto' (an over-long conversation is a 400).
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type * as grpc from '@grpc/grpc-js';
import { common, engine as pb, scheduler as spb } from '@kailstream/proto';
import { z } from 'zod';
import { ReasoningSplitter, splitReasoning } from '@kailstream/engine/reasoning';

import { seedParams } from '../seed';
import { MemoryResponseStore, type ResponseStore } from './response-store';
import { callFailure, functionTool, grpcToHttp, reasoningBudget, recordFinished, requestModel, RESPONSE_FORMATS, submitAll, unary, withLogitBias, withModelfileMessages, type OpenAiDeps } from './routes';
import { openAiError, sampling, zodToOpenAi } from './schemas';
import { ToolCallStream, type ToolCallDelta } from './tool-call-stream';
import { parseToolCalls, type ToolCall } from './tool-calls';

const KNOWN_PARTS = ['input_text', 'output_text', 'refusal'];
const part = z
  .object({ type: z.string(), text: z.string().optional(), refusal: z.string().optional() })
  .passthrough()
  .superRefine((p, ctx) => {
    if (['input_image', 'input_file', 'input_audio'].includes(p.type))
      ctx.addIssue({ code: 'custom', message: `content parts of type '${p.type}' are not supported: the models served here read text only` });
    else if (!KNOWN_PARTS.includes(p.type)) ctx.addIssue({ code: 'custom', message: `unknown content part type '${p.type}'` });
    else if (p.type === 'refusal' ? p.refusal === undefined : p.text === undefined)
      ctx.addIssue({ code: 'custom', message: `a '${p.type}' part needs its ${p.type === 'refusal' ? 'refusal' : 'text'} string` });
  })
  .transform((p) => p.text ?? p.refusal ?? '');
const content = z.union([z.string(), z.array(part)]).transform((c) => (typeof c === 'string' ? c : c.join('')));

const ITEM_TYPES = ['message', 'function_call', 'function_call_output', 'reasoning'];
const item = z
  .object({ type: z.string().optional() })
  .passthrough()
  .superRefine((v, ctx) => {
    const type = v.type ?? 'message';
    if (!ITEM_TYPES.includes(type))
      ctx.addIssue({ code: 'custom', message: `input items of type '${type}' are not supported (${ITEM_TYPES.join(', ')} are)` });
  })
  .transform((v) => ({ ...v, type: v.type ?? 'message' }))
  .pipe(
    z.discriminatedUnion('type', [
      z.object({ type: z.literal('message'), role: z.enum(['user', 'assistant', 'system', 'developer']), content }),
      z.object({ type: z.literal('function_call'), call_id: z.string().min(1), name: z.string().min(1), arguments: z.string() }),
      z.object({ type: z.literal('function_call_output'), call_id: z.string().min(1), output: content }),
      z.object({
        type: z.literal('reasoning'),
        summary: z.array(z.object({ type: z.literal('summary_text'), text: z.string() })).optional().nullable(),
        content: z.array(z.object({ type: z.literal('reasoning_text'), text: z.string() })).optional().nullable(),
        encrypted_content: z.string().optional().nullable(),
      }),
    ]),
  );
export type InputItem = z.infer<typeof item>;

const tool = z
  .object({ type: z.string() })
  .passthrough()
  .superRefine((t, ctx) => {
    if (t.type !== 'function') ctx.addIssue({ code: 'custom', message: `tools of type '${t.type}' are not supported: only function tools, which the client runs` });
  })
  .pipe(
    z.object({
      type: z.literal('function'),
      name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'function names are 1-64 letters, digits, _ or -'),
      description: z.string().optional().nullable(),
      parameters: z.record(z.string(), z.unknown()).optional().nullable(),
      strict: z.boolean().optional().nullable(),
    }),
  );

/** `include` values accepted: there is no encrypted reasoning here (reasoning items carry their text). */
const INCLUDES = ['reasoning.encrypted_content', 'message.output_text.logprobs'];

export const ResponsesRequest = z
  .object({
    /** Absent: the one model served (as the other OpenAI routes). */
    model: z.string().min(1).optional(),
    // (Items parsed on their own, so that a bad one's error names it rather than the union's "Invalid input".)
    input: z.union([z.string(), z.array(z.unknown()).min(1, 'input must not be empty')]).transform((v, ctx) => {
      if (typeof v === 'string') return v;
      const r = z.array(item).safeParse(v);
      if (r.success) return r.data;
      for (const i of r.error.issues) ctx.addIssue({ code: 'custom', message: i.message, path: i.path as (string | number)[] });
      return z.NEVER;
    }),
    instructions: z.string().optional().nullable(),
    max_output_tokens: z.number().int().min(1).max(1_000_000).optional().nullable(),
    temperature: sampling.temperature,
    top_p: sampling.top_p,
    tools: z.array(tool).max(128).optional().nullable(),
    tool_choice: z
      .union([z.enum(['none', 'auto', 'required']), z.object({ type: z.literal('function'), name: z.string().min(1) })])
      .optional()
      .nullable(),
    parallel_tool_calls: z.boolean().optional().nullable(),
    text: z
      .object({
        format: z
          .discriminatedUnion('type', [
            z.object({ type: z.literal('text') }),
            z.object({ type: z.literal('json_object') }),
            z.object({
              type: z.literal('json_schema'),
              name: z.string().min(1),
              schema: z.record(z.string(), z.unknown()),
              description: z.string().optional().nullable(),
              strict: z.boolean().optional().nullable(),
            }),
          ])
          .optional()
          .nullable(),
        verbosity: z.enum(['low', 'medium', 'high']).optional().nullable(),
      })
      .optional()
      .nullable(),
    reasoning: z
      .object({
        effort: z.enum(['none', 'minimal', 'low', 'medium', 'high']).optional().nullable(),
        summary: z.enum(['auto', 'concise', 'detailed']).optional().nullable(),
      })
      .optional()
      .nullable(),
    stream: z.boolean().optional().nullable(),
    store: z.boolean().optional().nullable(),
    previous_response_id: z.string().min(1).optional().nullable(),
    metadata: z
      .record(z.string().max(64), z.string().max(512))
      .refine((m) => Object.keys(m).length <= 16, 'metadata holds at most 16 pairs')
      .optional()
      .nullable(),
    /** With include message.output_text.logprobs: this many alternatives per token. */
    top_logprobs: z.number().int().min(0).max(20).optional().nullable(),
    include: z
      .array(z.string())
      .superRefine((list, ctx) => {
        for (const x of list)
          if (!INCLUDES.includes(x)) ctx.addIssue({ code: 'custom', message: `include '${x}' is not supported (${INCLUDES.join(', ')} is accepted)` });
      })
      .optional()
      .nullable(),
    background: z
      .boolean()
      .refine((v) => !v, 'background responses are not supported: ask without background (streaming shows progress)')
      .optional()
      .nullable(),
    truncation: z
      .enum(['auto', 'disabled'])
      .refine((v) => v === 'disabled', "truncation 'auto' is not supported: the conversation is never cut (one too long for the context is a 400)")
      .optional()
      .nullable(),
    user: sampling.user,
    // Not OpenAI's here, as in the chat route: a sampling seed, llama.cpp's samplers, template variables.
    seed: sampling.seed,
    top_k: sampling.top_k,
    min_p: sampling.min_p,
    repeat_penalty: sampling.repeat_penalty,
    chat_template_kwargs: z.record(z.string(), z.unknown()).optional().nullable(),
  })
  .superRefine((b, ctx) => {
    const choice = b.tool_choice;
    if (choice == null || choice === 'none' || choice === 'auto') return;
    if (!b.tools?.length) ctx.addIssue({ code: 'custom', path: ['tool_choice'], message: 'a tool_choice that requires a call needs tools' });
    else if (typeof choice === 'object' && !b.tools.some((t) => t.name === choice.name))
      ctx.addIssue({ code: 'custom', path: ['tool_choice'], message: `tool_choice names the function '${choice.name}', which is not among the tools` });
  });
/** A request with its model: the one it names, else the one served. */
export type ResponsesRequest = z.infer<typeof ResponsesRequest> & { model: string };

/**
 * Items as the engine's chat turns. An assistant turn gathers the reasoning, message and
 * function_call items that follow each other (a response's output, sent back); a function call's
 * output becomes a tool message naming the call's function (from `known`, the earlier turns' calls,
 * or this input's).
 */
export function toChatMessages(items: InputItem[], known: pb.ChatMessage[] = []): pb.ChatMessage[] {
  const names = new Map<string, string>();
  for (const m of known)
    if (m.toolCallsJson) for (const c of JSON.parse(m.toolCallsJson) as ToolCall[]) names.set(c.id, c.function.name);
  const out: pb.ChatMessage[] = [];
  let turn: { content: string; reasoning: string; calls: ToolCall[] } | null = null;
  const flush = () => {
    if (turn)
      out.push(pb.ChatMessage.fromPartial({ role: 'assistant', content: turn.content, reasoningContent: turn.reasoning, toolCallsJson: turn.calls.length ? JSON.stringify(turn.calls) : '' }));
    turn = null;
  };
  for (const x of items) {
    if (x.type === 'reasoning') {
      if (turn && (turn.content || turn.calls.length)) flush();
      turn ??= { content: '', reasoning: '', calls: [] };
      const text = x.content?.length ? x.content.map((c) => c.text).join('') : (x.summary ?? []).map((s) => s.text).join('\n\n');
      turn.reasoning += text;
    } else if (x.type === 'message' && x.role === 'assistant') {
      if (turn && (turn.content || turn.calls.length)) flush();
      turn ??= { content: '', reasoning: '', calls: [] };
      turn.content += x.content;
    } else if (x.type === 'function_call') {
      turn ??= { content: '', reasoning: '', calls: [] };
      names.set(x.call_id, x.name);
      turn.calls.push({ id: x.call_id, type: 'function', function: { name: x.name, arguments: x.arguments } });
    } else {
      flush();
      if (x.type === 'function_call_output') out.push(pb.ChatMessage.fromPartial({ role: 'tool', toolCallId: x.call_id, name: names.get(x.call_id) ?? '', content: x.output }));
      else out.push(pb.ChatMessage.fromPartial({ role: x.role === 'developer' ? 'system' : x.role, content: x.content }));
    }
  }
  flush();
  return out;
}

// Output items, as the API returns them.
type ReasoningItem = { id: string; type: 'reasoning'; summary: never[]; content: { type: 'reasoning_text'; text: string }[]; encrypted_content: null; status: ItemStatus };
type Logprob = { token: string; logprob: number; bytes: number[]; top_logprobs: { token: string; logprob: number; bytes: number[] }[] };
type OutputText = { type: 'output_text'; text: string; annotations: never[]; logprobs: Logprob[] };
type MessageItem = { id: string; type: 'message'; role: 'assistant'; status: ItemStatus; content: OutputText[] };
type CallItem = { id: string; type: 'function_call'; call_id: string; name: string; arguments: string; status: ItemStatus };
type OutputItem = ReasoningItem | MessageItem | CallItem;
type ItemStatus = 'in_progress' | 'completed' | 'incomplete';

const hex = () => randomUUID().replace(/-/g, '');
const reasoningItem = (text: string, status: ItemStatus = 'completed'): ReasoningItem => ({ id: `rs_${hex()}`, type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text }], encrypted_content: null, status });
const outputText = (text: string, logprobs: Logprob[] = []): OutputText => ({ type: 'output_text', text, annotations: [], logprobs });
const messageItem = (text: string, status: ItemStatus = 'completed', logprobs: Logprob[] = []): MessageItem => ({ id: `msg_${hex()}`, type: 'message', role: 'assistant', status, content: [outputText(text, logprobs)] });
const bytesOf = (t: string) => [...Buffer.from(t, 'utf8')];
/** A message's token logprobs as the Responses API writes them. */
const logprobsOf = (msg: pb.GenerateResponse): Logprob[] =>
  msg.logprobs.map((l, i) => ({
    token: l.text, logprob: l.logprob, bytes: bytesOf(l.text),
    top_logprobs: (msg.topLogprobs[i]?.candidates ?? []).map((c) => ({ token: c.text, logprob: c.logprob, bytes: bytesOf(c.text) })),
  }));
const callItem = (c: { id: string; name: string; arguments: string }, status: ItemStatus = 'completed'): CallItem => ({ id: `fc_${hex()}`, type: 'function_call', call_id: c.id, name: c.name, arguments: c.arguments, status });

/** The output items as input items (a stored response's turn in its conversation). */
const asInput = (items: OutputItem[]): InputItem[] =>
  items.map((x) =>
    x.type === 'reasoning' ? { type: 'reasoning', content: x.content }
    : x.type === 'message' ? { type: 'message', role: 'assistant', content: x.content.map((c) => c.text).join('') }
    : { type: 'function_call', call_id: x.call_id, name: x.name, arguments: x.arguments },
  );

const notFound = (id: string, param: string | null) => openAiError(`Response with id '${id}' not found.`, 'invalid_request_error', param, param ? 'previous_response_not_found' : 'not_found');

export function registerResponsesRoutes(app: FastifyInstance, deps: OpenAiDeps, store: ResponseStore = new MemoryResponseStore()): void {
  /** The request and its whole conversation (a stored previous response's first), or the reply sent for a bad one. */
  const conversationOf = async (req: FastifyRequest, reply: FastifyReply): Promise<{ b: ResponsesRequest; conversation: pb.ChatMessage[] } | FastifyReply> => {
    const parsed = ResponsesRequest.safeParse(req.body);
    if (!parsed.success) return reply.code(400).send(zodToOpenAi(parsed.error));
    const model = await requestModel(reply, deps, parsed.data.model);
    if (model === null) return reply;
    const b = { ...parsed.data, model };
    let before: pb.ChatMessage[] = [];
    if (b.previous_response_id) {
      const prev = store.get(b.previous_response_id, deps.tenantOf(req));
      if (!prev) return reply.code(404).send(notFound(b.previous_response_id, 'previous_response_id'));
      before = prev.conversation;
    }
    return { b, conversation: [...before, ...toChatMessages(inputList(b.input), before)] };
  };

  app.post('/v1/responses', async (req, reply) => {
    const c = await conversationOf(req, reply);
    if (!('b' in c)) return c;
    const scheduler = deps.scheduler();
    if (!scheduler) return reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
    return respond(req, reply, deps, scheduler, store, c.b, c.conversation);
  });

  // The tokens the request's input would take (its whole prompt: instructions, conversation, tools).
  app.post('/v1/responses/input_tokens', async (req, reply) => {
    const c = await conversationOf(req, reply);
    if (!('b' in c)) return c;
    const scheduler = deps.scheduler();
    if (!scheduler) return reply.code(503).send(openAiError('no scheduler is connected', 'server_error', null, 'unavailable'));
    const { tools: _tools, ...chat } = chatOf(deps, c.b, c.conversation);
    try {
      const r = await unary<pb.TokenizeRequest, pb.TokenizeResponse>(scheduler.tokenize.bind(scheduler), pb.TokenizeRequest.fromPartial(chat));
      return reply.send({ object: 'response.input_tokens', input_tokens: r.tokens.length });
    } catch (e) {
      const f = grpcToHttp(e as grpc.ServiceError);
      if (f.retryAfter) reply.header('retry-after', String(f.retryAfter));
      return reply.code(f.status).send(f.body);
    }
  });

  // A stored response's input items, paged as OpenAI's lists are (order desc by default).
  app.get('/v1/responses/:id/input_items', async (req, reply) => {
    const { id } = req.params as { id: string };
    const e = store.get(id, deps.tenantOf(req));
    if (!e) return reply.code(404).send(notFound(id, null));
    const q = InputItemsQuery.safeParse(req.query ?? {});
    if (!q.success) return reply.code(400).send(zodToOpenAi(q.error));
    const { limit, order, after, before } = q.data;
    let items = order === 'asc' ? e.input : [...e.input].reverse();
    for (const [cursor, name] of [[after, 'after'], [before, 'before']] as const) {
      if (cursor === undefined) continue;
      const i = items.findIndex((x) => x.id === cursor);
      if (i < 0) return reply.code(404).send(openAiError(`No input item with id '${cursor}' in response '${id}'.`, 'invalid_request_error', name, 'not_found'));
      items = name === 'after' ? items.slice(i + 1) : items.slice(0, i);
    }
    const page = before !== undefined && after === undefined ? items.slice(-limit) : items.slice(0, limit);
    const more = before !== undefined && after === undefined ? items.length > limit : items.length > page.length;
    return reply.send({ object: 'list', data: page, first_id: page[0]?.id ?? null, last_id: page.at(-1)?.id ?? null, has_more: more });
  });

  app.get('/v1/responses/:id', async (req, reply) => {
    const { id } = req.params as { id: string };
    const e = store.get(id, deps.tenantOf(req));
    return e ? reply.send(e.response) : reply.code(404).send(notFound(id, null));
  });

  app.delete('/v1/responses/:id', async (req, reply) => {
    const { id } = req.params as { id: string };
    return store.delete(id, deps.tenantOf(req)) ? reply.send({ id, object: 'response', deleted: true }) : reply.code(404).send(notFound(id, null));
  });
}

const InputItemsQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  order: z.enum(['asc', 'desc']).default('desc'),
  after: z.string().min(1).optional(),
  before: z.string().min(1).optional(),
  include: z.unknown().optional(),
});

function inputList(input: ResponsesRequest['input']): InputItem[] {
  return typeof input === 'string' ? [{ type: 'message', role: 'user', content: input }] : input;
}

/** A request's input as OpenAI lists it (input_items): every item with an id, a message's text as one part. */
export function inputItemsOf(input: ResponsesRequest['input']): Record<string, unknown>[] {
  return inputList(input).map((it) => {
    switch (it.type) {
      case 'message':
        return {
          id: `msg_${hex()}`, type: 'message', role: it.role, status: 'completed',
          content: [it.role === 'assistant' ? { type: 'output_text', text: it.content, annotations: [] } : { type: 'input_text', text: it.content }],
        };
      case 'function_call':
        return { id: `fc_${hex()}`, type: 'function_call', status: 'completed', call_id: it.call_id, name: it.name, arguments: it.arguments };
      case 'function_call_output':
        return { id: `fco_${hex()}`, type: 'function_call_output', status: 'completed', call_id: it.call_id, output: it.output };
      case 'reasoning':
        return { id: `rs_${hex()}`, type: 'reasoning', summary: it.summary ?? [], content: it.content ?? [], encrypted_content: null };
    }
  });
}

/**
 * The engine request's chat fields: instructions as the system turn, the conversation, tools and
 * template variables; a model's Modelfile adds its system prompt (unless instructions or the
 * conversation give one), opening messages and template, as Ollama's Responses route (a chat to it)
 * does. (They are not stored with the conversation: the next turn adds them again.)
 */
function chatOf(deps: OpenAiDeps, b: ResponsesRequest, conversation: pb.ChatMessage[]) {
  const tools = b.tools?.length && b.tool_choice !== 'none' ? b.tools.map((t) => functionTool(t.name, t.description, t.parameters, t.strict ?? true)) : undefined;
  const mf = deps.modelfileOf?.(b.model) ?? {};
  return {
    model: b.model,
    messages: withModelfileMessages(mf, [...(b.instructions ? [pb.ChatMessage.fromPartial({ role: 'system', content: b.instructions })] : []), ...conversation]),
    toolsJson: tools ? JSON.stringify(tools) : '',
    chatTemplateKwargsJson: kwargs(b),
    goTemplate: mf.template ?? '',
    tools,
  };
}

/** The template's variables: reasoning.effort ('none': thinking off), under the request's chat_template_kwargs. */
function kwargs(b: ResponsesRequest): string {
  const effort = b.reasoning?.effort;
  const all = { ...(effort === 'none' ? { enable_thinking: false } : effort ? { reasoning_effort: effort } : {}), ...(b.chat_template_kwargs ?? {}) };
  return Object.keys(all).length ? JSON.stringify(all) : '';
}

async function respond(
  req: FastifyRequest, reply: FastifyReply, deps: OpenAiDeps, scheduler: spb.SchedulerServiceClient, store: ResponseStore,
  b: ResponsesRequest, conversation: pb.ChatMessage[],
) {
  const id = `resp_${hex()}`;
  const choice = b.tool_choice;
  const { tools, ...chat } = chatOf(deps, b, conversation);
  const format = b.text?.format ?? { type: 'text' as const };
  const wantLp = !!b.include?.includes('message.output_text.logprobs');
  const gen = pb.GenerateRequest.fromPartial({
    requestId: id,
    ...chat,
    ...reasoningBudget(deps),
    maxTokens: b.max_output_tokens ?? 1024,
    sampling: withLogitBias(null, {
      temperature: b.temperature ?? 1, topP: b.top_p ?? 1, topK: b.top_k ?? 0, minP: b.min_p ?? 0, repetitionPenalty: b.repeat_penalty ?? 1,
      ...seedParams(b.seed),
    }),
    toolChoice: typeof choice === 'object' && choice ? pb.ToolChoice.TOOL_CHOICE_FUNCTION : choice === 'required' ? pb.ToolChoice.TOOL_CHOICE_REQUIRED : pb.ToolChoice.TOOL_CHOICE_AUTO,
    toolChoiceFunction: typeof choice === 'object' && choice ? choice.name : '',
    singleToolCall: b.parallel_tool_calls === false,
    responseFormat: RESPONSE_FORMATS[format.type],
    jsonSchema: format.type === 'json_schema' ? JSON.stringify(format.schema) : '',
    wantLogprobs: wantLp,
    topLogprobs: wantLp ? (b.top_logprobs ?? 0) : 0,
  });
  const store_ = b.store ?? true;
  const base = (): Record<string, unknown> => ({
    id, object: 'response', created_at: Math.floor(Date.now() / 1000), status: 'in_progress', background: false, error: null, incomplete_details: null,
    instructions: b.instructions ?? null, max_output_tokens: b.max_output_tokens ?? null, model: b.model, output: [] as OutputItem[],
    parallel_tool_calls: b.parallel_tool_calls ?? true, previous_response_id: b.previous_response_id ?? null,
    reasoning: { effort: b.reasoning?.effort ?? null, summary: b.reasoning?.summary ?? null }, store: store_,
    temperature: b.temperature ?? 1, text: { format, ...(b.text?.verbosity ? { verbosity: b.text.verbosity } : {}) },
    tool_choice: choice ?? 'auto', tools: b.tools ?? [], top_p: b.top_p ?? 1, truncation: 'disabled', usage: null, user: b.user ?? null, metadata: b.metadata ?? {},
  });
  const response = base();

  const t0 = performance.now();
  let tFirst = 0;
  let all = '';
  let last: pb.GenerateResponse | undefined;
  let reasoningOpen = false;
  let streamedTokens = 0;
  // Reasoning tokens: those of messages that start, continue or close the reasoning.
  // (The same splitter also cuts the stream into reasoning and message items.)
  let splitter: ReasoningSplitter | null = null;
  let reasoningTokens = 0;
  // With logprobs: the message text's tokens, and those not yet known to be reasoning or message
  // (their text held back by the splitter) waiting for the text that decides.
  const msgLp: Logprob[] = [];
  let pendingLp: Logprob[] = [];
  let sentLp = 0;
  const settleLp = (split: { reasoning: string; content: string }) => {
    if (split.content) msgLp.push(...pendingLp.splice(0));
    else if (split.reasoning) pendingLp = [];
  };

  // The stream: items opened and closed as the text shows them, each event numbered.
  let seq = 0;
  let headersSent = false;
  const stream = b.stream ? { tools: tools ? new ToolCallStream(tools) : null } : null;
  const items: OutputItem[] = [];
  type Open = { item: ReasoningItem | MessageItem; text: string };
  let open: Open | null = null;
  const calls = new Map<number, CallItem>();
  const event = (type: string, data: object) => reply.raw.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`);
  const start = () => {
    if (headersSent) return;
    headersSent = true;
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    event('response.created', { response });
    event('response.in_progress', { response });
  };
  const closeOpen = (status: ItemStatus = 'completed') => {
    if (!open) return;
    const output_index = items.indexOf(open.item);
    const item_id = open.item.id;
    if (open.item.type === 'reasoning') {
      open.item.content = [{ type: 'reasoning_text', text: open.text }];
      event('response.reasoning_text.done', { item_id, output_index, content_index: 0, text: open.text });
      event('response.content_part.done', { item_id, output_index, content_index: 0, part: open.item.content[0] });
    } else {
      open.item.content = [outputText(open.text, msgLp)];
      event('response.output_text.done', { item_id, output_index, content_index: 0, text: open.text, logprobs: msgLp });
      event('response.content_part.done', { item_id, output_index, content_index: 0, part: open.item.content[0] });
    }
    open.item.status = status;
    event('response.output_item.done', { output_index, item: open.item });
    open = null;
  };
  const ensure = (kind: 'reasoning' | 'message') => {
    if (open?.item.type !== kind) {
      closeOpen();
      const item = kind === 'reasoning' ? { ...reasoningItem(''), content: [], status: 'in_progress' as const } : { ...messageItem(''), content: [], status: 'in_progress' as const };
      items.push(item);
      open = { item, text: '' };
      const output_index = items.length - 1;
      event('response.output_item.added', { output_index, item });
      event('response.content_part.added', { item_id: item.id, output_index, content_index: 0, part: kind === 'reasoning' ? { type: 'reasoning_text', text: '' } : outputText('') });
    }
  };
  const write = (kind: 'reasoning' | 'message', s: string) => {
    if (!s) return;
    ensure(kind);
    open!.text += s;
    const at = { item_id: open!.item.id, output_index: items.length - 1, content_index: 0 };
    if (kind === 'reasoning') event('response.reasoning_text.delta', { ...at, delta: s });
    else {
      // The message tokens not sent yet go with this piece of its text.
      const lp = msgLp.slice(sentLp);
      sentLp = msgLp.length;
      event('response.output_text.delta', { ...at, delta: s, logprobs: lp });
    }
  };
  const closeCall = (c: CallItem, status: ItemStatus) => {
    const output_index = items.indexOf(c);
    c.status = status;
    event('response.function_call_arguments.done', { item_id: c.id, output_index, name: c.name, arguments: c.arguments });
    event('response.output_item.done', { output_index, item: c });
  };
  /** Calls as they are written: each its own function_call item, its arguments in pieces. */
  const writeCalls = (deltas: ToolCallDelta[]) => {
    for (const d of deltas) {
      let c = calls.get(d.index);
      if (!c) {
        closeOpen();
        const prev = [...calls.values()].at(-1);
        if (prev && prev.status === 'in_progress') closeCall(prev, 'completed');
        c = { ...callItem({ id: d.id ?? `call_${hex().slice(0, 24)}`, name: d.function.name ?? '', arguments: '' }), status: 'in_progress' };
        calls.set(d.index, c);
        items.push(c);
        event('response.output_item.added', { output_index: items.length - 1, item: c });
      }
      if (d.function.arguments) {
        c.arguments += d.function.arguments;
        event('response.function_call_arguments.delta', { item_id: c.id, output_index: items.indexOf(c), delta: d.function.arguments });
      }
    }
  };
  const emit = (split: { reasoning: string; content: string }) => {
    if (!stream) return;
    write('reasoning', split.reasoning);
    write('message', stream.tools ? stream.tools.push(split.content) : split.content);
    if (stream.tools) writeCalls(stream.tools.deltas());
  };

  try {
    await submitAll(req, reply, deps, scheduler, [gen], (_i, msg) => {
      if (msg.tokens.length && !tFirst) tFirst = performance.now();
      reasoningOpen = msg.reasoningOpen;
      splitter ??= new ReasoningSplitter(msg.reasoningOpen);
      const wasIn = splitter.inReasoning;
      const split = splitter.push(msg.text);
      if (wasIn || splitter.inReasoning || (split.reasoning && !split.content)) reasoningTokens += msg.tokens.length;
      if (wantLp) {
        pendingLp.push(...logprobsOf(msg));
        settleLp(split);
      }
      all += msg.text;
      streamedTokens += msg.tokens.length;
      last = msg;
      if (stream && msg.text) {
        start();
        emit(split);
      }
    });
  } catch (e) {
    deps.onUsage?.(req, 0, streamedTokens);
    const failed = callFailure(reply, e);
    if (!failed) return reply;
    if (headersSent) {
      deps.metrics?.requestErrors.inc({ status: String(failed.status) });
      const error = { code: failed.body.error.code ?? 'server_error', message: failed.body.error.message };
      event('error', { ...error, param: null });
      event('response.failed', { response: { ...response, status: 'failed', error, output: items } });
      reply.raw.end();
      return reply;
    }
    if (failed.retryAfter) reply.header('retry-after', String(failed.retryAfter));
    return reply.code(failed.status).send(failed.body);
  }
  recordFinished(deps, req, b.model, last, t0, tFirst);
  const usage = last?.usage ?? common.Usage.fromPartial({});
  const incomplete = last?.finishReason === common.FinishReason.FINISH_REASON_LENGTH;
  const final = {
    ...response,
    status: incomplete ? 'incomplete' : 'completed',
    incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    usage: {
      input_tokens: usage.promptTokens, input_tokens_details: { cached_tokens: usage.cachedPromptTokens },
      output_tokens: usage.completionTokens, output_tokens_details: { reasoning_tokens: Math.min(reasoningTokens, usage.completionTokens) },
      total_tokens: usage.promptTokens + usage.completionTokens,
    },
  };
  // The last item is the one a cut-off answer left unfinished.
  const lastStatus = (i: number, n: number): ItemStatus => (incomplete && i === n - 1 ? 'incomplete' : 'completed');

  let output: OutputItem[];
  if (stream) {
    start();
    const rest = (splitter as ReasoningSplitter | null)?.finish();
    if (rest) settleLp(rest);
    if (rest) {
      write('reasoning', rest.reasoning);
      write('message', stream.tools ? stream.tools.push(rest.content) : rest.content);
    }
    if (stream.tools) {
      const done = stream.tools.finish();
      writeCalls(done.deltas);
      write('message', done.content);
    }
    // An answer with nothing in it is still a message (as the whole answer's).
    if (!items.length) ensure('message');
    // Close what is still open, the last item as the finish left it.
    // (TypeScript cannot see the callbacks above set `open`.)
    const still = open as Open | null;
    const pending = [...(still ? [still.item] : []), ...[...calls.values()].filter((c) => c.status === 'in_progress')];
    for (const x of pending) {
      const status = lastStatus(items.indexOf(x), items.length);
      if (x.type === 'function_call') closeCall(x, status);
      else closeOpen(status);
    }
    output = items;
  } else {
    const split = splitReasoning(all, reasoningOpen);
    const parsed = tools ? parseToolCalls(split.content, tools) : { content: split.content, calls: [], cut: false };
    const rest = (splitter as ReasoningSplitter | null)?.finish();
    if (rest) settleLp(rest);
    output = [
      ...(split.reasoning ? [reasoningItem(split.reasoning)] : []),
      ...(parsed.content || (!parsed.calls.length && !split.reasoning) ? [messageItem(parsed.content, 'completed', msgLp)] : []),
      ...parsed.calls.map((c) => callItem({ id: c.id, name: c.function.name, arguments: c.function.arguments })),
    ];
    output.forEach((x, i) => (x.status = lastStatus(i, output.length)));
  }
  Object.assign(final, { output });
  if (store_) store.put(id, deps.tenantOf(req), final, [...conversation, ...toChatMessages(asInput(output))], inputItemsOf(b.input));
  if (stream) {
    event(incomplete ? 'response.incomplete' : 'response.completed', { response: final });
    reply.raw.end();
    return reply;
  }
  return reply.send(final);
}
