import { z } from 'zod';

import { diffusionFields, loraField, repeatLastN, samplerExtraFields, slotFields } from '../sampler-extras';
import { seedField } from '../seed';
import { structuredFields } from '../structured-output';

// Request bodies in the order of OpenAI's API reference. Unknown fields are ignored, as OpenAI's
// own server and llama-server do; wrong types and out-of-range values are 400s naming the field.

export const stop = z.union([z.string(), z.array(z.string()).max(16)]).optional().nullable();
const maxTokens = z.number().int().min(1).max(1_000_000).optional().nullable();

/** vLLM's extra sampling parameters. */
const vllmFields = {
  /** End-of-generation and stop_token_ids cannot be drawn before this many tokens. */
  min_tokens: z.number().int().min(0).max(1_000_000).optional().nullable(),
  /** More token ids that end the answer (finish_reason stop; their text left out). */
  stop_token_ids: z.array(z.number().int().min(0).max(2_147_483_647)).max(64).optional().nullable(),
  /** The stop string that ended the answer stays at its end. */
  include_stop_str_in_output: z.boolean().optional().nullable(),
  /** vLLM's name for the repetition penalty: over the whole prompt and answer unless repeat_last_n says otherwise. */
  repetition_penalty: z.number().gt(0).max(10).optional().nullable(),
};

export const sampling = {
  temperature: z.number().min(0).max(2).optional().nullable(),
  top_p: z.number().gt(0).max(1).optional().nullable(),
  /** Any integer; -1: a random seed, as llama-server reads it (the default: none). See seed.ts. */
  seed: seedField,
  presence_penalty: z.number().min(-2).max(2).optional().nullable(),
  frequency_penalty: z.number().min(-2).max(2).optional().nullable(),
  /** Choices per request, each its own sequence (sampled with seed + index when a seed is given). */
  n: z.number().int().min(1).max(16).optional().nullable(),
  stream: z.boolean().optional().nullable(),
  /** Token id (a decimal string, as JSON object keys are) -> bias in [-100, 100] added to its logit. */
  logit_bias: z
    .record(z.string().regex(/^(0|[1-9][0-9]{0,9})$/, 'logit_bias keys must be token ids'), z.number().min(-100).max(100))
    .refine((m) => Object.keys(m).length <= 1024, 'logit_bias may name at most 1024 tokens')
    .optional()
    .nullable(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).optional().nullable(),
  /** llama-server's: every streamed chunk carries `timings` (counts, times and speeds so far). */
  timings_per_token: z.boolean().optional().nullable(),
  /**
   * 'text'; 'json_object': the output is one JSON object; 'json_schema': one object following
   * `json_schema.schema` (constrained decoding; the engine refuses, naming them, schema keywords it
   * cannot hold the output to).
   */
  response_format: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('text') }),
      z.object({ type: z.literal('json_object') }),
      z.object({
        type: z.literal('json_schema'),
        json_schema: z.object({
          name: z.string().optional(),
          description: z.string().optional(),
          schema: z.record(z.string(), z.unknown()).optional(),
          strict: z.boolean().optional().nullable(),
        }),
      }),
    ])
    .optional()
    .nullable(),
  user: z.string().optional(),
  // llama.cpp extensions many clients send
  // Any k >= the vocabulary keeps every token, as 0 does; larger values than the engine's int32
  // field are clamped rather than refused (llama-server takes any int).
  top_k: z.number().int().min(0).transform((k) => Math.min(k, 2_147_483_647)).optional(),
  min_p: z.number().min(0).max(1).optional(),
  repeat_penalty: z.number().gt(0).max(10).optional(),
  /** Keep generating past end-of-generation tokens until max_tokens (llama-server, vLLM). */
  ignore_eos: z.boolean().optional(),
};

// Text parts only: the served models read text. Any other part (image_url, input_audio, file) is
// a 400 that says so, rather than zod's "invalid input".
const contentPart = z
  .object({ type: z.string(), text: z.string().optional() })
  .superRefine((p, ctx) => {
    if (p.type !== 'text') ctx.addIssue({ code: 'custom', message: `content parts of type '${p.type}' are not supported: the models served here read text only` });
    else if (p.text === undefined) ctx.addIssue({ code: 'custom', path: ['text'], message: "a 'text' content part needs a text string" });
  })
  .transform((p) => ({ type: 'text' as const, text: p.text ?? '' }));

const toolCall = z.object({
  id: z.string(),
  type: z.literal('function'),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});

const tool = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'function names are 1-64 letters, digits, _ or -'),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().optional().nullable(),
  }),
});

/** Chat turns as OpenAI's chat completions take them (also llama-server's /apply-template). */
export const chatMessages = z
  .array(
    z.object({
      role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
      content: z.union([z.string(), z.array(contentPart)]).nullable().optional(),
      name: z.string().optional(),
      /** An assistant turn's calls, sent back with the tools' answers. */
      tool_calls: z.array(toolCall).max(128).optional().nullable(),
      /** A tool message: the call it answers. */
      tool_call_id: z.string().optional(),
      /** An assistant turn's reasoning, for templates that show it (llama-server, vLLM). */
      reasoning_content: z.string().optional().nullable(),
    }),
  )
  .min(1, 'messages must not be empty');

export const tools = z.array(tool).max(128).optional().nullable();

const reasoningBudgetTokens = z.number().int().min(-1).max(1_000_000_000).optional().nullable();

/** The fields both completion routes take beyond OpenAI's own (and top_p, user). */
const sharedFields = {
  top_p: sampling.top_p,
  user: sampling.user,
  top_k: sampling.top_k,
  min_p: sampling.min_p,
  repeat_penalty: sampling.repeat_penalty,
  repeat_last_n: repeatLastN,
  ignore_eos: sampling.ignore_eos,
  // llama-server's further samplers (DRY, XTC, top-n-sigma, typical, dynamic temperature, Mirostat)
  ...samplerExtraFields,
  // llama-server's per-request LoRA scales, slot and context-shift fields
  lora: loraField,
  ...slotFields,
  // a diffusion model's loop (diffusion_steps, _algorithm, _block_length, _eps)
  ...diffusionFields,
  // llama-server's json_schema, vLLM's guided_json / guided_choice (structured-output.ts)
  ...structuredFields,
  ...vllmFields,
};

/** A request's model; absent: the only one served, as llama-server and vLLM take a request without one. */
const servedModel = z.string().min(1).optional();

export const ChatCompletionRequest = z.object({
  messages: chatMessages,
  model: servedModel,
  frequency_penalty: sampling.frequency_penalty,
  logit_bias: sampling.logit_bias,
  logprobs: z.boolean().optional().nullable(),
  top_logprobs: z.number().int().min(0).max(20).optional().nullable(),
  max_completion_tokens: maxTokens,
  max_tokens: maxTokens,
  n: sampling.n,
  presence_penalty: sampling.presence_penalty,
  seed: sampling.seed,
  stop,
  stream: sampling.stream,
  stream_options: sampling.stream_options,
  timings_per_token: sampling.timings_per_token,
  response_format: sampling.response_format,
  temperature: sampling.temperature,
  /** Functions the model may call (shown to it through its chat template). */
  tools,
  /**
   * 'auto' (the default with tools), 'none', 'required' (the answer is calls of the tools), or a
   * named function (calls of that one): the last two are held to the model's tool-call format by
   * constrained decoding, where the engine knows the format (else a 400 naming it).
   */
  tool_choice: z
    .union([z.enum(['none', 'auto', 'required']), z.object({ type: z.literal('function'), function: z.object({ name: z.string() }) })])
    .optional()
    .nullable(),
  parallel_tool_calls: z.boolean().optional().nullable(),
  /** Extra chat template variables (vLLM's and llama-server's), e.g. {"enable_thinking": false} for Qwen3. */
  chat_template_kwargs: z.record(z.string(), z.unknown()).optional().nullable(),
  /**
   * Where a reasoning model's <think> block goes: 'deepseek' or 'auto' (the default), into
   * message.reasoning_content; 'none', left in the content (llama-server's reasoning_format).
   */
  reasoning_format: z.enum(['none', 'auto', 'deepseek']).optional().nullable(),
  /**
   * OpenAI's reasoning effort, given to the chat template as `reasoning_effort` (gpt-oss's template
   * writes it into its system message, "Reasoning: high"), unless chat_template_kwargs sets it.
   */
  reasoning_effort: z.enum(['minimal', 'low', 'medium', 'high']).optional().nullable(),
  /**
   * llama-server's reasoning budget (thinking_budget_tokens is its other name): the most tokens
   * the model's <think> block may take before the engine closes it, writing
   * reasoning_budget_message and </think>; -1 or absent = no budget, 0 = no reasoning.
   */
  reasoning_budget_tokens: reasoningBudgetTokens,
  thinking_budget_tokens: reasoningBudgetTokens,
  reasoning_budget_message: z.string().max(4096).optional().nullable(),
  /**
   * Continue the final assistant message instead of answering in a new turn (vLLM's name; by
   * default a final assistant message with text is continued, as llama-server's prefill does);
   * add_generation_prompt true opens a new turn instead.
   */
  continue_final_message: z.boolean().optional().nullable(),
  add_generation_prompt: z.boolean().optional().nullable(),
  ...sharedFields,
}).superRefine((b, ctx) => {
  if (b.continue_final_message && b.add_generation_prompt)
    ctx.addIssue({ code: 'custom', path: ['continue_final_message'], message: 'continue_final_message and add_generation_prompt cannot both be true' });
  // (OpenAI's rule, and vLLM's: top_logprobs alone would be dropped without a word.)
  if (b.top_logprobs && !b.logprobs) ctx.addIssue({ code: 'custom', path: ['top_logprobs'], message: 'requires logprobs: true' });
  const choice = b.tool_choice;
  if (choice == null || choice === 'none' || choice === 'auto') return;
  if (!b.tools?.length) ctx.addIssue({ code: 'custom', path: ['tool_choice'], message: 'a tool_choice that requires a call needs tools' });
  else if (typeof choice === 'object' && !b.tools.some((t) => t.function.name === choice.function.name))
    ctx.addIssue({ code: 'custom', path: ['tool_choice'], message: `tool_choice names the function '${choice.function.name}', which is not among the tools` });
});
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

/** A prompt or input field (one, or a list of strings or token-id lists) as its list of items. */
export function itemList(v: string | number[] | string[] | number[][]): (string | number[])[] {
  return typeof v === 'string' || typeof v[0] === 'number' ? [v as string | number[]] : (v as (string | number[])[]);
}

/** Most sequences one request may start: prompts x max(n, best_of). */
export const MAX_SEQUENCES_PER_REQUEST = 64;

const tokenIds = z.array(z.number().int().min(0)).min(1, 'a token-id prompt must not be empty');

export const CompletionRequest = z.object({
  model: servedModel,
  /** A prompt, or a batch of them (OpenAI's string | string[] | token ids | token-id lists); each gets n choices. */
  prompt: z.union([
    z.string(),
    tokenIds,
    z.array(z.string().min(1, 'prompts in a list must not be empty')).min(1, 'prompt must not be an empty list'),
    z.array(tokenIds).min(1, 'prompt must not be an empty list'),
  ]),
  /** Generate best_of choices per prompt and return the n with the highest log probability per token. */
  best_of: z.number().int().min(1).max(MAX_SEQUENCES_PER_REQUEST).optional().nullable(),
  echo: z.boolean().optional().nullable(),
  frequency_penalty: sampling.frequency_penalty,
  logit_bias: sampling.logit_bias,
  logprobs: z.number().int().min(0).max(20).optional().nullable(),
  /** 0 only with echo: the prompt (and its logprobs), nothing generated (OpenAI's legacy scoring). */
  max_tokens: z.number().int().min(0).max(1_000_000).optional().nullable(),
  n: sampling.n,
  presence_penalty: sampling.presence_penalty,
  seed: sampling.seed,
  stop,
  stream: sampling.stream,
  stream_options: sampling.stream_options,
  timings_per_token: sampling.timings_per_token,
  response_format: sampling.response_format,
  /** Fill-in-the-middle: the text after the gap (the prompt is the text before it); needs a model with FIM tokens. */
  suffix: z.string().optional().nullable(),
  temperature: sampling.temperature,
  ...sharedFields,
}).superRefine((b, ctx) => {
  const n = b.n ?? 1;
  const bestOf = b.best_of ?? n;
  if (b.max_tokens === 0 && !b.echo) ctx.addIssue({ code: 'custom', path: ['max_tokens'], message: 'max_tokens 0 needs echo: true (it returns the prompt, and with logprobs its scores, generating nothing)' });
  if (b.suffix && b.echo) ctx.addIssue({ code: 'custom', path: ['suffix'], message: 'suffix (fill-in-the-middle) cannot be combined with echo' });
  if (bestOf < n) ctx.addIssue({ code: 'custom', path: ['best_of'], message: `best_of (${bestOf}) must be at least n (${n})` });
  if (bestOf > n && b.stream) ctx.addIssue({ code: 'custom', path: ['best_of'], message: 'best_of cannot be used with stream (the best choices are known only at the end)' });
  const prompts = itemList(b.prompt).length;
  if (prompts * bestOf > MAX_SEQUENCES_PER_REQUEST)
    ctx.addIssue({ code: 'custom', path: ['prompt'], message: `${prompts} prompts x ${bestOf} choices each is ${prompts * bestOf} sequences; one request may start at most ${MAX_SEQUENCES_PER_REQUEST}` });
});
export type CompletionRequest = z.infer<typeof CompletionRequest>;

/** /v1/embeddings: one input or a list (strings or token-id lists), as OpenAI's API takes them. */
export const EmbeddingRequest = z.object({
  model: servedModel,
  input: z.union([
    z.string().min(1, 'input must not be empty'),
    tokenIds,
    z.array(z.string().min(1, 'inputs in a list must not be empty')).min(1, 'input must not be an empty list').max(MAX_SEQUENCES_PER_REQUEST),
    z.array(tokenIds).min(1, 'input must not be an empty list').max(MAX_SEQUENCES_PER_REQUEST),
  ]),
  /** 'float' (default) or 'base64': the little-endian float32 bytes, base64 (the openai clients' default). */
  encoding_format: z.enum(['float', 'base64']).optional().nullable(),
  /** Keep the first N dimensions (renormalized). */
  dimensions: z.number().int().min(1).optional().nullable(),
  user: z.string().optional(),
});
export type EmbeddingRequest = z.infer<typeof EmbeddingRequest>;

/** OpenAI's error body. */
export function openAiError(message: string, type: string, param: string | null = null, code: string | null = null) {
  return { error: { message, type, param, code } };
}

/** The first zod issue as an OpenAI 400 body naming the field. */
export function zodToOpenAi(err: z.ZodError) {
  const issue = err.issues[0];
  const param = issue.path.length ? issue.path.join('.') : null;
  return openAiError(`${param ? `${param}: ` : ''}${issue.message}`, 'invalid_request_error', param, 'invalid_value');
}
