// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens), for clients written
// against it (the Anthropic SDKs, coding agents pointed at a local server), as llama-server serves
// it. The request becomes the same engine request as a chat completion: system text, user and
// assistant turns, tool_use / tool_result blocks as tool calls and tool messages, tools as the
// chat template's tools, thinking blocks as reasoning. The answer comes back as content blocks
// (thinking, text, tool_use) with Anthropic's stop reasons and usage, or as its stream of events.
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import * as grpc from '@grpc/grpc-js';
import { common, engine as pb, scheduler as spb } from '@kailstream/proto';
import { z } from 'zod';
import { ReasoningSplitter, splitReasoning } from '@kailstream/engine/reasoning';

import { seedField, seedParams } from '../seed';
import { callFailure, continuesFinal, functionTool, grpcToHttp, reasoningBudget, recordFinished, submitAll, unary, withModelfileMessages, type OpenAiDeps } from '../openai/routes';
import { ToolCallStream } from '../openai/tool-call-stream';
import { parseToolCalls, type ToolCall } from '../openai/tool-calls';

const text = z.object({ type: z.literal('text'), text: z.string() });
const block = z
  .object({ type: z.string() })
  .passthrough()
  .superRefine((b, ctx) => {
    if (b.type === 'image' || b.type === 'document')
      ctx.addIssue({ code: 'custom', message: `content blocks of type '${b.type}' are not supported: the models served here read text only` });
    else if (!['text', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking'].includes(b.type))
      ctx.addIssue({ code: 'custom', message: `unknown content block type '${b.type}'` });
  })
  .pipe(
    z.discriminatedUnion('type', [
      text,
      z.object({ type: z.literal('tool_use'), id: z.string().min(1), name: z.string().min(1), input: z.record(z.string(), z.unknown()) }),
      z.object({
        type: z.literal('tool_result'),
        tool_use_id: z.string().min(1),
        content: z.union([z.string(), z.array(text)]).optional(),
        is_error: z.boolean().optional(),
      }),
      z.object({ type: z.literal('thinking'), thinking: z.string(), signature: z.string().optional() }),
      z.object({ type: z.literal('redacted_thinking'), data: z.string() }),
    ]),
  );

const jsonOutput = z.object({ type: z.literal('json_schema'), schema: z.record(z.string(), z.unknown()) });

export const MessagesRequest = z.object({
  model: z.string().min(1),
  max_tokens: z.number({ message: 'max_tokens is required (a positive integer)' }).int().min(1).max(1_000_000),
  messages: z
    .array(z.object({ role: z.enum(['user', 'assistant']), content: z.union([z.string(), z.array(block)]) }))
    .min(1, 'messages must not be empty'),
  system: z.union([z.string(), z.array(text)]).optional().nullable(),
  stop_sequences: z.array(z.string()).max(16).optional().nullable(),
  // Anthropic's range is 0-1 (default 1).
  temperature: z.number().min(0).max(1).optional().nullable(),
  top_p: z.number().gt(0).max(1).optional().nullable(),
  top_k: z.number().int().min(0).optional().nullable(),
  stream: z.boolean().optional().nullable(),
  tools: z
    .array(
      z.object({
        name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'tool names are 1-64 letters, digits, _ or -'),
        description: z.string().optional(),
        input_schema: z.record(z.string(), z.unknown()),
        /** Calls to it follow input_schema (held by constrained decoding once the model starts one). */
        strict: z.boolean().optional().nullable(),
      }),
    )
    .max(128)
    .optional()
    .nullable(),
  tool_choice: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('auto'), disable_parallel_tool_use: z.boolean().optional() }),
      z.object({ type: z.literal('any'), disable_parallel_tool_use: z.boolean().optional() }),
      z.object({ type: z.literal('tool'), name: z.string().min(1), disable_parallel_tool_use: z.boolean().optional() }),
      z.object({ type: z.literal('none') }),
    ])
    .optional()
    .nullable(),
  // Extended thinking: on or off for templates that switch it (enable_thinking), and budget_tokens
  // (default 10000, as llama-server's) the most tokens the <think> block may take: the engine
  // closes it then and the model answers.
  thinking: z
    .object({ type: z.enum(['enabled', 'disabled']), budget_tokens: z.number().int().min(0).max(1_000_000_000).optional() })
    .optional()
    .nullable(),
  metadata: z.object({ user_id: z.string().optional().nullable() }).optional().nullable(),
  /** Structured outputs: the answer's text is one JSON object of `format.schema` (constrained decoding). */
  output_config: z.object({ format: jsonOutput.optional().nullable() }).passthrough().optional().nullable(),
  /** The same, under its beta name (structured-outputs-2025-11-13). */
  output_format: jsonOutput.optional().nullable(),
  /** Not Anthropic's: a sampling seed, for reproducible answers (as OpenAI's seed). */
  seed: seedField,
});
export type MessagesRequest = z.infer<typeof MessagesRequest>;

const CountTokensRequest = MessagesRequest.omit({ max_tokens: true, stream: true, stop_sequences: true, temperature: true, top_p: true, top_k: true, metadata: true, seed: true });

/** Anthropic's error body. */
export function anthropicError(status: number, message: string) {
  const type =
    status === 400 ? 'invalid_request_error'
    : status === 401 ? 'authentication_error'
    : status === 403 ? 'permission_error'
    : status === 404 ? 'not_found_error'
    : status === 413 ? 'request_too_large'
    : status === 429 ? 'rate_limit_error'
    : status === 503 ? 'overloaded_error'
    : 'api_error';
  return { type: 'error', error: { type, message } };
}

function zodMessage(e: z.ZodError): string {
  const i = e.issues[0];
  return `${i.path.length ? `${i.path.join('.')}: ` : ''}${i.message}`;
}

class BadRequest extends Error {}

/** The conversation as the engine's chat messages (tool results become tool messages, in order). */
export function toChatMessages(b: Pick<MessagesRequest, 'messages' | 'system'>): pb.ChatMessage[] {
  const out: pb.ChatMessage[] = [];
  const system = typeof b.system === 'string' ? b.system : (b.system ?? []).map((t) => t.text).join('\n');
  if (system) out.push(pb.ChatMessage.fromPartial({ role: 'system', content: system }));
  const names = new Map<string, string>();
  for (const m of b.messages) {
    if (typeof m.content === 'string') {
      out.push(pb.ChatMessage.fromPartial({ role: m.role, content: m.content }));
      continue;
    }
    if (m.role === 'assistant') {
      let content = '';
      let reasoning = '';
      const calls: ToolCall[] = [];
      for (const x of m.content) {
        if (x.type === 'text') content += x.text;
        else if (x.type === 'thinking') reasoning += x.thinking;
        else if (x.type === 'tool_use') {
          names.set(x.id, x.name);
          calls.push({ id: x.id, type: 'function', function: { name: x.name, arguments: JSON.stringify(x.input) } });
        } else if (x.type === 'tool_result') throw new BadRequest('tool_result blocks belong in a user message');
      }
      out.push(pb.ChatMessage.fromPartial({ role: 'assistant', content, reasoningContent: reasoning, toolCallsJson: calls.length ? JSON.stringify(calls) : '' }));
      continue;
    }
    let content = '';
    for (const x of m.content) {
      if (x.type === 'text') content += x.text;
      else if (x.type === 'tool_result') {
        const result = typeof x.content === 'string' ? x.content : (x.content ?? []).map((t) => t.text).join('');
        out.push(pb.ChatMessage.fromPartial({ role: 'tool', toolCallId: x.tool_use_id, name: names.get(x.tool_use_id) ?? '', content: x.is_error ? `Error: ${result}` : result }));
      } else throw new BadRequest(`${x.type} blocks belong in an assistant message`);
    }
    if (content) out.push(pb.ChatMessage.fromPartial({ role: 'user', content }));
  }
  return out;
}

/** Tools, tool choice and template switches as the engine request's fields. */
function chatFields(
  b: Pick<MessagesRequest, 'tools' | 'tool_choice' | 'thinking' | 'model'> & { messages: MessagesRequest['messages']; system?: MessagesRequest['system'] },
  deps: Pick<OpenAiDeps, 'reasoningBudget' | 'modelfileOf'>,
): Partial<pb.GenerateRequest> & { tools?: ReturnType<typeof functionTool>[] } {
  const choice = b.tool_choice;
  const tools = b.tools?.length && choice?.type !== 'none'
    ? b.tools.map((t) => functionTool(t.name, t.description, t.input_schema, t.strict))
    : undefined;
  if (choice?.type === 'tool' && !tools?.some((t) => t.function.name === choice.name)) throw new BadRequest(`tool_choice names '${choice.name}', which is not in tools`);
  if (choice && choice.type !== 'auto' && choice.type !== 'none' && !tools) throw new BadRequest(`tool_choice '${choice.type}' needs tools`);
  const kwargs = b.thinking ? JSON.stringify({ enable_thinking: b.thinking.type === 'enabled' }) : '';
  // A Modelfile's system prompt (unless the request has one), opening messages and TEMPLATE, as on the OpenAI route.
  const mf = deps.modelfileOf?.(b.model) ?? {};
  const messages = withModelfileMessages(mf, toChatMessages(b));
  return {
    model: b.model,
    messages,
    goTemplate: mf.template ?? '',
    // A final assistant message is the start of the answer (Anthropic's prefill).
    continueFinalMessage: continuesFinal(messages),
    toolsJson: tools ? JSON.stringify(tools) : '',
    toolChoice: choice?.type === 'any' ? pb.ToolChoice.TOOL_CHOICE_REQUIRED : choice?.type === 'tool' ? pb.ToolChoice.TOOL_CHOICE_FUNCTION : pb.ToolChoice.TOOL_CHOICE_AUTO,
    toolChoiceFunction: choice?.type === 'tool' ? choice.name : '',
    singleToolCall: !!(choice && 'disable_parallel_tool_use' in choice && choice.disable_parallel_tool_use),
    chatTemplateKwargsJson: kwargs,
    ...reasoningBudget(deps, b.thinking?.type === 'enabled' ? (b.thinking.budget_tokens ?? 10_000) : undefined),
    tools,
  };
}

type Block = { type: 'text'; text: string } | { type: 'thinking'; thinking: string; signature: string } | { type: 'tool_use'; id: string; name: string; input: unknown };

/** Anthropic's tool_use ids start with toolu_. */
const toolUseId = (id: string) => (id.startsWith('toolu_') ? id : `toolu_${id}`);

const toolUseBlock = (c: ToolCall): Block => {
  let input: unknown = {};
  try {
    input = JSON.parse(c.function.arguments || '{}');
  } catch {
    input = {};
  }
  return { type: 'tool_use', id: toolUseId(c.id), name: c.function.name, input };
};

function stopReason(finish: common.FinishReason, stopWord: string, toolCalls: boolean): string {
  if (toolCalls) return 'tool_use';
  if (finish === common.FinishReason.FINISH_REASON_LENGTH) return 'max_tokens';
  if (stopWord) return 'stop_sequence';
  return 'end_turn';
}

export function registerAnthropicRoutes(app: FastifyInstance, deps: OpenAiDeps): void {
  const fail = (reply: FastifyReply, status: number, message: string) => reply.code(status).send(anthropicError(status, message));

  app.post('/v1/messages', async (req, reply) => {
    const parsed = MessagesRequest.safeParse(req.body);
    if (!parsed.success) return fail(reply, 400, zodMessage(parsed.error));
    const b = parsed.data;
    let fields: ReturnType<typeof chatFields>;
    try {
      fields = chatFields(b, deps);
    } catch (e) {
      if (e instanceof BadRequest) return fail(reply, 400, e.message);
      throw e;
    }
    const { tools, ...prompt } = fields;
    const scheduler = deps.scheduler();
    if (!scheduler) return fail(reply, 503, 'no scheduler is connected');
    return messages(req, reply, deps, scheduler, b, prompt, tools);
  });

  app.post('/v1/messages/count_tokens', async (req, reply) => {
    const parsed = CountTokensRequest.safeParse(req.body);
    if (!parsed.success) return fail(reply, 400, zodMessage(parsed.error));
    const scheduler = deps.scheduler();
    if (!scheduler) return fail(reply, 503, 'no scheduler is connected');
    try {
      const { tools: _tools, ...f } = chatFields(parsed.data, deps);
      const r = await unary<pb.TokenizeRequest, pb.TokenizeResponse>(
        scheduler.tokenize.bind(scheduler),
        pb.TokenizeRequest.fromPartial({ model: f.model, messages: f.messages, toolsJson: f.toolsJson, chatTemplateKwargsJson: f.chatTemplateKwargsJson, continueFinalMessage: f.continueFinalMessage, goTemplate: f.goTemplate }),
      );
      return reply.send({ input_tokens: r.tokens.length });
    } catch (e) {
      if (e instanceof BadRequest) return fail(reply, 400, e.message);
      const f = grpcToHttp(e as grpc.ServiceError);
      return fail(reply, f.status, f.body.error.message);
    }
  });
}

async function messages(
  req: FastifyRequest, reply: FastifyReply, deps: OpenAiDeps, scheduler: spb.SchedulerServiceClient,
  b: MessagesRequest, prompt: Partial<pb.GenerateRequest>, tools: ReturnType<typeof chatFields>['tools'],
) {
  const id = `msg_${randomUUID().replace(/-/g, '')}`;
  const format = b.output_config?.format ?? b.output_format;
  const gen = pb.GenerateRequest.fromPartial({
    ...prompt,
    ...(format ? { responseFormat: pb.ResponseFormat.RESPONSE_FORMAT_JSON_SCHEMA, jsonSchema: JSON.stringify(format.schema) } : {}),
    requestId: id,
    maxTokens: b.max_tokens,
    stop: (b.stop_sequences ?? []).filter((s) => s.length > 0),
    sampling: common.SamplingParams.fromPartial({ temperature: b.temperature ?? 1, topP: b.top_p ?? 1, topK: b.top_k ?? 0, repetitionPenalty: 1, ...seedParams(b.seed) }),
  });
  const t0 = performance.now();
  let all = '';
  let last: pb.GenerateResponse | undefined;
  let reasoningOpen = false;
  let tFirst = 0;
  let outTokens = 0;

  // The stream: blocks opened and closed as the text shows them.
  let headersSent = false;
  let index = -1;
  let open: 'text' | 'thinking' | null = null;
  const splitter = b.stream ? { reasoning: null as ReasoningSplitter | null, tools: tools ? new ToolCallStream(tools) : null } : null;
  const event = (name: string, data: object) => reply.raw.write(`event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`);
  const start = () => {
    if (headersSent) return;
    headersSent = true;
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    event('message_start', { message: { id, type: 'message', role: 'assistant', model: b.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 0, output_tokens: 0 } } });
  };
  const close = () => {
    if (open) event('content_block_stop', { index });
    open = null;
  };
  const write = (kind: 'text' | 'thinking', s: string) => {
    if (!s) return;
    if (open !== kind) {
      close();
      index++;
      open = kind;
      event('content_block_start', { index, content_block: kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' } });
    }
    event('content_block_delta', { index, delta: kind === 'text' ? { type: 'text_delta', text: s } : { type: 'thinking_delta', thinking: s } });
  };
  /** Calls as they are written: each its own tool_use block, its input in input_json_delta pieces. */
  const callIndex = new Map<number, number>();
  const writeCalls = (deltas: ReturnType<ToolCallStream['deltas']>) => {
    for (const d of deltas) {
      if (!callIndex.has(d.index)) {
        close();
        index++;
        callIndex.set(d.index, index);
        const callId = d.id ?? `call_${d.index}`;
        event('content_block_start', { index, content_block: { type: 'tool_use', id: toolUseId(callId), name: d.function.name ?? '', input: {} } });
      }
      if (d.function.arguments) event('content_block_delta', { index: callIndex.get(d.index)!, delta: { type: 'input_json_delta', partial_json: d.function.arguments } });
    }
  };
  const push = (s: string) => {
    if (!splitter) return;
    splitter.reasoning ??= new ReasoningSplitter(reasoningOpen);
    const split = splitter.reasoning.push(s);
    write('thinking', split.reasoning);
    const content = splitter.tools ? splitter.tools.push(split.content) : split.content;
    write('text', content);
    if (splitter.tools) writeCalls(splitter.tools.deltas());
  };

  try {
    await submitAll(req, reply, deps, scheduler, [gen], (_i, msg) => {
      if (msg.tokens.length && !tFirst) tFirst = performance.now();
      reasoningOpen = msg.reasoningOpen;
      all += msg.text;
      outTokens += msg.tokens.length;
      last = msg;
      if (b.stream && msg.text) {
        start();
        push(msg.text);
      }
    });
  } catch (e) {
    deps.onUsage?.(req, 0, outTokens);
    const failed = callFailure(reply, e);
    if (!failed) return reply;
    if (headersSent) {
      deps.metrics?.requestErrors.inc({ status: String(failed.status) });
      event('error', { error: anthropicError(failed.status, failed.body.error.message).error });
      reply.raw.end();
      return reply;
    }
    if (failed.retryAfter) reply.header('retry-after', String(failed.retryAfter));
    return reply.code(failed.status).send(anthropicError(failed.status, failed.body.error.message));
  }
  const usage = last?.usage ?? common.Usage.fromPartial({});
  const finish = last?.finishReason ?? common.FinishReason.FINISH_REASON_UNSPECIFIED;
  const stopWord = last?.stopWord ?? '';
  recordFinished(deps, req, b.model, last, t0, tFirst);
  const usageJson = { input_tokens: usage.promptTokens - usage.cachedPromptTokens, cache_read_input_tokens: usage.cachedPromptTokens, cache_creation_input_tokens: 0, output_tokens: usage.completionTokens };

  if (b.stream && splitter) {
    start();
    const rest = splitter.reasoning?.finish();
    if (rest) {
      write('thinking', rest.reasoning);
      write('text', splitter.tools ? splitter.tools.push(rest.content) : rest.content);
    }
    let called = false;
    if (splitter.tools) {
      const done = splitter.tools.finish();
      writeCalls(done.deltas);
      write('text', done.content);
      called = done.calls.length > 0 && !done.cut;
    }
    close();
    // The prompt's counts are known only now (message_start said 0); the SDKs take them from here.
    event('message_delta', { delta: { stop_reason: stopReason(finish, stopWord, called), stop_sequence: stopWord || null }, usage: usageJson });
    event('message_stop', {});
    reply.raw.end();
    return reply;
  }

  const split = splitReasoning(all, reasoningOpen);
  const { content, calls, cut } = tools ? parseToolCalls(split.content, tools) : { content: split.content, calls: [], cut: false };
  const blocks: Block[] = [];
  if (split.reasoning) blocks.push({ type: 'thinking', thinking: split.reasoning, signature: '' });
  if (content) blocks.push({ type: 'text', text: content });
  blocks.push(...calls.map(toolUseBlock));
  return reply.send({
    id, type: 'message', role: 'assistant', model: b.model,
    content: blocks,
    stop_reason: stopReason(finish, stopWord, calls.length > 0 && !cut),
    stop_sequence: stopWord || null,
    usage: usageJson,
  });
}
