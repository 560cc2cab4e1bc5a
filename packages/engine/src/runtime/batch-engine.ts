import { EngineError, toEngineError } from '../errors';
import { DiffusionTextStream, diffusionGenerateWith, resolveDiffusionParams, type DiffusionOptions, type DiffusionParams, type DiffusionPiece } from '../model/diffusion';
import type { EngineModel } from '../model/model';
import { GbnfRecognizer, GbnfStacks, type GbnfGrammar } from '../sampling/gbnf';
import { LazyGbnfRecognizer, type LazyTriggers } from '../sampling/gbnf-lazy';
import { JsonConstraint, OutputConstraint } from '../sampling/json-constraint';
import { anyObjectGrammar, compileJsonSchema, type JsonGrammar } from '../sampling/json-schema';
import { PatternRecognizer, type OutputPattern } from '../sampling/tool-call-grammar';
import { logprobs as computeLogprobs, type TokenLogprobs } from '../sampling/logprobs';
import { createSampler, isGreedy, type ResolvedSamplerParams, type SampleResult, type Sampler, type SamplerParams } from '../sampling/sampler';
import { LineLimits } from '../sampling/line-limits';
import { ReasoningBudget, type ReasoningBudgetSpec } from '../sampling/reasoning-budget';
import { StopMatcher } from '../sampling/stop';
import { contextShiftSpan, type ContextShift } from './context-shift';
import { proposeMany, type Draft, type SpeculativeDecoder, type SpeculativeSequence, type SpeculativeStats } from '../speculative/speculative-decoder';
import type { TokenStreamDecoder } from '../tokenizer/tokenizer';

export type FinishReason = 'stop' | 'length' | 'cancelled' | 'error';

/** A chunk streamed to the caller: text decoded so far (complete UTF-8) and its tokens. */
export interface GenerationProgress {
  promptTokens: number;
  /** Prompt tokens whose cache was kept from the slot's previous request (not computed again). */
  cachedPromptTokens: number;
  completionTokens: number;
  /** From the start of the prompt's computation to its end (the first token's logits). */
  promptMs: number;
  /** Since the prompt was done. */
  generationMs: number;
  /** The sequence slot the request runs in (llama-server's id_slot); -1 before it has one. */
  slot: number;
}

export interface GenerationChunk {
  text: string;
  tokens: number[];
  logprobs?: TokenLogprobs[];
  /**
   * With GenerationRequest.promptLogprobs: prompt tokens 1..n-1 given the tokens before each, in
   * one chunk (no text, no tokens) ahead of the first generated token.
   */
  promptLogprobs?: TokenLogprobs[];
  /** With GenerationRequest.embed: the pooled hidden state (not normalized), on the last chunk. */
  embedding?: Float32Array;
  /** On chunks with a generated token: the counts and times so far (llama-server's timings_per_token). */
  progress?: GenerationProgress;
  /**
   * A diffusion job's piece: the loop's passes run when it was sent (its tokens, the canvas's
   * newly settled start, were all unmasked by then).
   */
  diffusionPass?: number;
  /** Set on the last chunk. */
  finish?: GenerationProgress & {
    reason: FinishReason;
    timeToFirstTokenMs: number;
    queueMs: number;
    /** The stop string that ended the output (reason 'stop' by a string, not an end-of-generation token). */
    stopWord?: string;
    /** Cached positions context shifts dropped (GenerationRequest.contextShift). */
    contextShifted: number;
    error?: EngineError;
  };
}

export interface GenerationRequest {
  id: string;
  prompt: readonly number[];
  maxTokens: number;
  sampling?: SamplerParams;
  stop?: string[];
  /** Return the chosen token's logprob (and `topLogprobs` alternatives) with each token. */
  logprobs?: boolean;
  topLogprobs?: number;
  /**
   * The logprobs are those of the distribution each token was drawn from, after the sampling chain
   * (llama-server's post_sampling_probs), not the model's own; alternatives with probability 0
   * are left out. Such a sequence does not speculate.
   */
  postSamplingProbs?: boolean;
  /**
   * Also score the prompt: each prompt token's logprob given the ones before it (and `topLogprobs`
   * alternatives), sent in one chunk before the first generated token (OpenAI's echo with
   * logprobs, lm-evaluation-harness's loglikelihood). The whole prompt is computed, none taken
   * from a slot's cache, in chunks of at most PROMPT_LOGPROB_CHUNK tokens.
   */
  promptLogprobs?: boolean;
  /**
   * Return the prompt's embedding instead of generating: the program's hidden rows (the
   * normalized final hidden states) averaged over the prompt ('mean') or taken at its last or
   * first token ('last', 'cls'), or every token's row, one after another ('none', llama.cpp's
   * pooling none). The prompt is computed whole (no slot-cache reuse); the request ends when it
   * is in, with the embedding on its last chunk.
   */
  embed?: 'mean' | 'last' | 'cls' | 'none';
  /** Ignore end-of-generation tokens (benchmarks). */
  ignoreEog?: boolean;
  /** Keep the stop string that ended the output at its end (vLLM's include_stop_str_in_output). Default false. */
  includeStopString?: boolean;
  /** More tokens that end the generation (vLLM's stop_token_ids; also with ignoreEog), counted as EOG. */
  stopTokens?: readonly number[];
  /**
   * End-of-generation and stop tokens cannot be drawn before this many tokens are generated
   * (vLLM's min_tokens); such a sequence does not speculate. Default 0.
   */
  minTokens?: number;
  /**
   * 'json_object': the output is one JSON object, then the generation ends; 'json_schema': one
   * object following `jsonSchema` (constrained decoding, `sampling/json-constraint.ts` and
   * `json-schema.ts`; such a sequence speculates only when greedy). Default 'text'.
   */
  responseFormat?: 'text' | 'json_object' | 'json_schema';
  /** The JSON Schema (parsed) for 'json_schema'. */
  jsonSchema?: unknown;
  /** Control tokens whose text goes into the output anyway (a tool-call format's markers). */
  preserveTokens?: ReadonlySet<number>;
  /**
   * The output follows this pattern, then the generation ends (forced tool calls,
   * `sampling/tool-call-grammar.ts`; the preserved tokens write its markers). Not with a JSON
   * response format; such a sequence speculates only when greedy.
   */
  pattern?: OutputPattern;
  /**
   * The output is a text of this GBNF grammar (llama.cpp's `grammar`, `sampling/gbnf.ts`): a
   * token is allowed when its text (control tokens' included, as llama.cpp reads them) continues
   * one, or the grammar names it; end of generation once the text is whole. Not with a JSON
   * response format or a pattern; such a sequence speculates only when greedy (each drafted
   * position's target token is then the allowed argmax, as without speculation).
   */
  gbnf?: GbnfGrammar;
  /** With gbnf: the grammar holds only from one of these triggers on (llama.cpp's lazy grammars, `sampling/gbnf-lazy.ts`). */
  gbnfLazy?: LazyTriggers;
  /** llama-server's code-completion limits (`sampling/line-limits.ts`); 0 or absent = off. */
  nIndent?: number;
  tMaxPredictMs?: number;
  /**
   * A token budget for the reasoning block (`sampling/reasoning-budget.ts`); its tags are matched
   * on the tokens' bytes with `preserveTokens`' text. With a pattern that lets the reasoning run
   * free up to `</think>` (model-host's reasoning-then-form patterns) the forced tokens are that
   * text too. A speculating sequence drafts no further than the budget leaves the model, and
   * takes the forced tokens one per pass.
   */
  reasoningBudget?: ReasoningBudgetSpec;
  /**
   * The scale of each of the model's LoRA adapters for this request (llama-server's per-request
   * `lora`; one per adapter, in load order). Default: the scales the model was loaded with. A slot's
   * cache is reused only by a request with the same scales (the K and V rows depend on them).
   */
  loraScales?: readonly number[];
  /**
   * Context shift (llama-server's --context-shift with the request's n_keep / n_discard): when the
   * sequence fills the context while generating, `discard` cached positions after the first `keep`
   * prompt tokens are dropped and the later ones moved down (EngineModel.shiftContext), so the
   * generation goes on past the context length instead of ending with 'length'. `keep` -1 keeps the
   * whole prompt; a BOS the tokenizer adds is kept on top of it, as llama-server does; at most
   * nCtx - 4 are kept. `discard` 0 (the default) drops half of what is not kept. Absent: no shift.
   * The sequence stops speculating at its first shift.
   */
  contextShift?: ContextShift;
  /**
   * The request's own context window (Ollama's num_ctx) when smaller than the model's: the prompt
   * must be shorter, and the output stops (or shifts) when prompt and output fill it.
   */
  contextWindow?: number;
  /** Run in this sequence slot (llama-server's id_slot), waiting for it while another request holds it. Default: any. */
  slot?: number;
  /**
   * A diffusion model's text request (EngineModel.diffusion; required for one, refused for others):
   * `maxTokens` is the canvas's generated length, the sampling's temperature, top-k, top-p and seed
   * drive the loop. It runs as one exclusive job between passes: once it is first in the queue, no
   * request is admitted past it, the running ones finish, the loop runs alone (cancellation stops
   * it before its next step), and the text (stop strings cut it) comes as one chunk.
   */
  diffusion?: DiffusionOptions;
}

interface Active {
  req: GenerationRequest;
  /**
   * The prompt's tokens as the caller gave them (usage's prompt tokens): req.prompt's, but for an
   * encoder-decoder's appended decoder start token, which is neither prompt nor completion (as
   * llama.cpp's examples count them: the encoded prompt, then the tokens generated).
   */
  nPrompt: number;
  slot: number;
  /** The LoRA scales this sequence runs with, as a key ('' for a model without adapters). */
  lora: string;
  sampler: Sampler;
  /** With req.postSamplingProbs: the last draw (undefined for a token the reasoning budget forced). */
  lastDraw?: SampleResult;
  /** With req.minTokens: the tokens masked until then (end of generation and stop tokens). */
  stopIds: ReadonlySet<number>;
  stop: StopMatcher;
  limits: LineLimits | null;
  /** With req.reasoningBudget. */
  budget: ReasoningBudget | null;
  decoder: TokenStreamDecoder;
  history: number[];
  /** Prompt tokens already in the KV cache. */
  prefilled: number;
  /** The token to feed next while decoding. */
  pending: number | undefined;
  generated: number;
  push: (c: GenerationChunk) => void;
  end: () => void;
  cancelled: boolean;
  t0: number;
  tQueue: number;
  tFirst: number;
  tPromptDone: number;
  /** Speculation state while decoding (BatchEngineOptions.speculative). */
  spec: SpeculativeSequence | null;
  /** Prompt tokens taken from the slot's cache. */
  reused: number;
  /** Recurrent models: the prompt position at which a context checkpoint is taken (the pass stops there). */
  checkpointAt?: number;
  /** The output constraint of a JSON or pattern request, else null. */
  constraint: OutputConstraint | null;
  /** With req.promptLogprobs: the prompt tokens' logprobs so far (sent before the first token). */
  promptLps: TokenLogprobs[] | null;
  /** With req.embed: the pooled hidden rows so far (a sum for 'mean'). */
  emb: Float64Array | null;
  /** Positions dropped by context shifts so far (req.contextShift). */
  shifted: number;
  /** After a shift: the tokens the cache held then, and history.length then (the cache is shiftBase + history[shiftAt..]). */
  shiftBase: number[] | null;
  shiftAt: number;
  /** With req.diffusion: the loop's parameters, checked, and the generated length (req.maxTokens, or less with `fit`). */
  diffusion: { params: DiffusionParams; nGen: number } | null;
}

/** Most prompt tokens of a promptLogprobs request in one pass (each takes a row of logits). */
const PROMPT_LOGPROB_CHUNK = 64;

/** One sequence slot (BatchEngine.slotStates). */
export interface SlotState {
  id: number;
  processing: boolean;
  /** Of the running request ('' when idle). */
  requestId: string;
  nCtx: number;
  /** Of the running request (0 when idle, as the counts below). */
  promptTokens: number;
  promptTokensProcessed: number;
  decodedTokens: number;
  remainingTokens: number;
  /** Tokens in the slot's KV cache (an idle slot keeps its last request's for reuse). */
  cachedTokens: number;
  sampling: Readonly<ResolvedSamplerParams> | null;
  speculative: boolean;
}

export interface BatchEngineOptions {
  /** Most tokens in one forward pass (prompt chunks plus one per decoding sequence). Default 512; at most the model's nBatch. */
  maxBatchTokens?: number;
  /**
   * While sequences are decoding, a pass carries no more prompt tokens than take about this long
   * (from the measured time per token of earlier passes, at least 16 tokens), so a long prompt
   * arriving stalls the running streams for at most about this much per token they emit, instead
   * of a whole maxBatchTokens chunk (seconds on a CPU). Default 500 ms; 0 = no limit.
   */
  maxDecodeStallMs?: number;
  /**
   * Keep each free slot's cache and start a request in the free slot whose cached tokens share the
   * longest prefix with its prompt, computing only the rest (a chat's next turn re-sends the whole
   * conversation). The output is the same bits as without (a token's cache rows do not depend on
   * the batch that computed them). Default on; off with speculative decoding, whose draft keeps
   * caches of its own.
   */
  reusePrefix?: boolean;
  /**
   * Recurrent models (Qwen3.5, Qwen3-Next, Nemotron-H, Granite 4.0-H, Jamba, LFM2): a state holds a sequence's whole
   * past and cannot be cut back, so a prompt that shares only a start with a slot's cache (a chat
   * regenerated, or its next turn re-rendered without the last answer's reasoning) would be
   * computed whole. Instead each prompt of at least 64 tokens stops one token short, the states
   * there are kept (a context checkpoint, as llama-server's --ctx-checkpoints), and a later prompt
   * that starts with those tokens restores them and computes only the rest. This many per slot,
   * the newest kept; each costs the model's recurrent state bytes per sequence (outside the RAM
   * budget). Default 2; 0 = off, and off with speculative decoding (as reusePrefix).
   */
  contextCheckpoints?: number;
  /**
   * Speculative decoding for every sequence: each decoding sequence drafts (draft model in the
   * same slot number, or prompt lookup) and contributes [pending, drafts…] to the shared forward
   * pass, with logits for each; the verification rule commits 1..k+1 tokens per sequence per pass.
   * The decoder's target must be this engine's model; a draft model needs at least as many
   * sequence slots, and must not be the target itself. Default: off.
   */
  speculative?: SpeculativeDecoder;
}

export interface BatchEngineStats {
  running: number;
  waiting: number;
  tokensGenerated: number;
  promptTokens: number;
  steps: number;
  /** Prompt tokens not computed because a slot's cache already held them (prefix reuse). */
  promptTokensReused: number;
  /** Of those, the ones copied from another slot's cache (a start that conversations share). */
  promptTokensCopied: number;
  /** Of those, the ones restored from a recurrent model's context checkpoint. */
  promptTokensFromCheckpoints: number;
  /** Recurrent models: context checkpoints held and their bytes (outside the KV budget). */
  contextCheckpoints: { count: number; bytes: number };
  /** Decode tokens per second over the last few seconds. */
  tokensPerSecond: number;
  /** Speculation counters (shaped like the proto's SpeculativeStats); null when off. */
  speculative: SpeculativeStats | null;
}

/**
 * Continuous batching over one model: every running sequence advances in each forward pass,
 * requests join and leave between passes, prompts are fed in chunks under a per-step token
 * budget so a long prompt does not stall everyone else's decoding, and an expert read once
 * serves every sequence routed to it in that pass. The model's sequence slots bound how many run
 * at once; the rest wait in arrival order.
 */
export class BatchEngine {
  private readonly waiting: Active[] = [];
  private readonly running = new Map<number, Active>();
  private readonly freeSlots: number[];
  private loopRunning = false;
  private closed = false;
  private readonly maxBatchTokens: number;
  private readonly maxDecodeStallMs: number;
  /** Moving average of a pass's time per token (ms), from passes that carried prompt tokens. */
  private msPerToken = 0;
  private readonly eog = new Set<number>();
  private tokensGenerated = 0;
  private promptTokens = 0;
  private steps = 0;
  private readonly recent: { t: number; n: number }[] = [];
  private readonly spec: SpeculativeDecoder | null;
  private readonly reusePrefix: boolean;
  /**
   * Per slot: the tokens its cache holds while it is free (empty when unknown or in use), the
   * prompt length of the request that left them, and when it was released (for choosing among
   * slots that share nothing).
   */
  /**
   * Per slot: what its cache holds, for prefix reuse (`lora`: the scales it was computed with), and
   * a recurrent model's context checkpoints (each consistent with the slot's cache rows before its
   * position: dropped when those are rewritten).
   */
  private readonly slots: { tokens: number[]; promptLen: number; released: number; lora: string; checkpoints: ContextCheckpoint[] }[];
  private readonly maxCheckpoints: number;
  private promptTokensFromCheckpoints = 0;
  private releases = 0;
  private promptTokensReused = 0;
  private promptTokensCopied = 0;
  private readonly tokenPieces = new WeakMap<ReadonlySet<number>, Uint8Array[]>();
  private maskRow: Float32Array | null = null;

  constructor(
    readonly model: EngineModel,
    opts: BatchEngineOptions = {},
  ) {
    // Never more than the model's batch: its scratch is planned for it, and sliding-window rings hold one batch.
    // (An encoder takes each input whole: by default a pass may hold a whole context.)
    this.maxBatchTokens = Math.max(1, Math.min(opts.maxBatchTokens ?? (model.encoder ? model.nBatch : 512), model.nBatch));
    this.maxDecodeStallMs = Math.max(0, opts.maxDecodeStallMs ?? 500);
    this.spec = opts.speculative ?? null;
    if (this.spec) {
      if (this.spec.target !== model) throw new EngineError('KAIL_E_INVALID_ARG', 'the speculative decoder was made for another target model');
      const d = this.spec.draft;
      if (d === model) throw new EngineError('KAIL_E_INVALID_ARG', 'in a BatchEngine the draft model cannot be the target itself (their sequence slots would collide); load it a second time');
      if (this.spec.mtp && this.spec.mtp.nSeqMax < model.nSeqMax)
        throw new EngineError('KAIL_E_INVALID_ARG', `the MTP model has ${this.spec.mtp.nSeqMax} sequence slot(s), the target ${model.nSeqMax}`);
      if (d && d.nSeqMax < model.nSeqMax)
        throw new EngineError('KAIL_E_INVALID_ARG', `the draft model has ${d.nSeqMax} sequence slot(s), the target ${model.nSeqMax}; load the draft with nSeqMax ≥ ${model.nSeqMax}`);
    }
    this.freeSlots = Array.from({ length: model.nSeqMax }, (_, i) => model.nSeqMax - 1 - i);
    if (this.spec && model.encoderDecoder) throw new EngineError('KAIL_E_UNSUPPORTED', `${model.path}: speculative decoding of an encoder-decoder model (${model.hparams.arch}) is not supported`);
    // (An encoder-decoder's cache holds the encoded prompt both ways: no prefix of it can be reused.)
    this.reusePrefix = (opts.reusePrefix ?? true) && !this.spec && !model.encoderDecoder;
    this.slots = Array.from({ length: model.nSeqMax }, () => ({ tokens: [], promptLen: 0, released: 0, lora: this.loraKey(undefined), checkpoints: [] }));
    const nCk = opts.contextCheckpoints ?? 2;
    if (!Number.isInteger(nCk) || nCk < 0) throw new EngineError('KAIL_E_INVALID_ARG', `contextCheckpoints must be a non-negative integer, got ${nCk}`);
    this.maxCheckpoints = model.recurrent && this.reusePrefix ? nCk : 0;
    for (let id = 0; id < model.nVocab; id++) if (model.tokenizer.isEog(id)) this.eog.add(id);
  }

  /** Starts a generation; chunks stream until the last one carries `finish`. */
  generate(req: GenerationRequest, signal?: AbortSignal): AsyncIterable<GenerationChunk> {
    if (this.closed) throw new EngineError('KAIL_E_INVALID_ARG', 'the model is being unloaded');
    if (req.prompt.length === 0) throw new EngineError('KAIL_E_INVALID_ARG', 'the prompt is empty');
    if (req.embed && !this.model.hiddenWidth) throw new EngineError('KAIL_E_UNSUPPORTED', `${this.model.path}: this model's program gives no hidden states to embed`);
    if (req.embed && this.model.extractLayers)
      throw new EngineError('KAIL_E_UNSUPPORTED', `${this.model.path}: loaded for an EAGLE-3 or DFlash draft, its hidden rows are the inputs of layers [${this.model.extractLayers.join(', ')}], not embeddings; serve it without the draft to embed`);
    if (req.embed && this.model.nextnHidden && this.model.hiddenWidth !== this.model.hparams.nEmbd)
      throw new EngineError('KAIL_E_UNSUPPORTED', `${this.model.path}: loaded for its MTP block, its hidden rows are the ${this.model.hiddenWidth} floats per position that block reads, not embeddings; serve it without MTP decoding to embed`);
    const refusal = req.embed || (req.diffusion && this.model.diffusion) ? null : this.model.generationRefusal();
    if (refusal) throw refusal;
    if (req.diffusion && !this.model.diffusion) throw new EngineError('KAIL_E_INVALID_ARG', `diffusion settings are for a diffusion language model; this one (${this.model.hparams.arch}) generates token by token`);
    if (this.model.encoderDecoder) {
      const unsupported = [req.embed && 'embeddings', req.promptLogprobs && 'prompt logprobs', req.contextShift && 'context shift'].filter(Boolean);
      if (unsupported.length) throw new EngineError('KAIL_E_UNSUPPORTED', `${this.model.path}: an encoder-decoder model (${this.model.hparams.arch}) encodes its prompt whole: ${unsupported.join(', ')} cannot apply`);
      // The decoder starts from its start token, at the position after the prompt's (the prompt
      // below is what the sequence's cache holds: the encoded prompt, then the decoder's inputs).
      req = { ...req, prompt: [...req.prompt, this.model.decoderStartToken] };
      if (req.prompt.length - 1 > this.maxBatchTokens)
        throw new EngineError('KAIL_E_INVALID_ARG', `input is too large to process: ${req.prompt.length - 1} tokens, and this encoder-decoder model (${this.model.hparams.arch}) encodes a prompt in one pass of at most ${this.maxBatchTokens} tokens`);
    }
    const grammar = grammarOf(req);
    if (grammar && req.pattern) throw new EngineError('KAIL_E_INVALID_ARG', 'a JSON response format and forced tool calls cannot be combined');
    if (req.gbnf && (grammar || req.pattern)) throw new EngineError('KAIL_E_INVALID_ARG', `a GBNF grammar cannot be combined with ${grammar ? 'a JSON response format' : 'forced tool calls or output choices'}`);
    if (!Number.isInteger(req.maxTokens) || req.maxTokens < 0) throw new EngineError('KAIL_E_INVALID_ARG', `max tokens must be a non-negative integer, got ${req.maxTokens}`);
    if (req.slot !== undefined && (!Number.isInteger(req.slot) || req.slot < 0 || req.slot >= this.model.nSeqMax))
      throw new EngineError('KAIL_E_INVALID_ARG', `slot ${req.slot} does not exist (0..${this.model.nSeqMax - 1})`);
    if (req.contextWindow !== undefined && (!Number.isInteger(req.contextWindow) || req.contextWindow < 1)) throw new EngineError('KAIL_E_INVALID_ARG', `the context window must be a positive integer, got ${req.contextWindow}`);
    // (An embedding generates nothing: its prompt may fill the context.) An encoder-decoder's
    // prompt is checked without the decoder's start token: the start token takes the row the last
    // generated token (never fed back) leaves, so prompt + generated tokens fill the context as a
    // decoder-only model's do, and a prompt of nCtx - 1 tokens still gives its first token.
    const nPrompt = req.prompt.length - (this.model.encoderDecoder ? 1 : 0);
    const startToken = this.model.encoderDecoder ? " (and the decoder's start token after them)" : '';
    if (nPrompt > this.model.nCtx || (nPrompt === this.model.nCtx && !req.embed))
      throw new EngineError('KAIL_E_CONTEXT_OVERFLOW', `the prompt has ${nPrompt} tokens${startToken}; the context holds ${this.model.nCtx}`);
    if (req.contextWindow !== undefined && nPrompt >= req.contextWindow)
      throw new EngineError('KAIL_E_CONTEXT_OVERFLOW', `the prompt has ${nPrompt} tokens${startToken}; the request's context window (num_ctx) holds ${req.contextWindow}`);
    const inputError = this.model.encoderInputError(0, req.prompt.length, this.maxBatchTokens);
    if (inputError) throw new EngineError('KAIL_E_INVALID_ARG', inputError);
    for (const t of req.prompt)
      if (!Number.isInteger(t) || t < 0 || t >= this.model.nVocab) throw new EngineError('KAIL_E_INVALID_ARG', `token id ${t} is outside the vocabulary (0..${this.model.nVocab - 1})`);
    for (const k of Object.keys(req.sampling?.logitBias ?? {}))
      if (Number(k) >= this.model.nVocab) throw new EngineError('KAIL_E_INVALID_ARG', `logit bias names token id ${k}, outside the vocabulary (0..${this.model.nVocab - 1})`);
    const constraint = this.constraintOf(req, grammar);
    const lora = this.loraKey(req.loraScales);
    const sampler = createSampler(this.samplingOf(req));
    let diffusion: Active['diffusion'] = null;
    if (req.diffusion && !req.embed) {
      // (Only the loop's own sampling applies: no output forms, logprobs or token-by-token limits.)
      const unsupported = [constraint && 'a response format, grammar or forced tool calls', req.pattern && 'forced tool calls', (req.logprobs || req.promptLogprobs) && 'logprobs', req.minTokens && 'min tokens', req.reasoningBudget && 'a reasoning budget', req.contextShift && 'context shift'].filter(Boolean);
      if (unsupported.length) throw new EngineError('KAIL_E_INVALID_ARG', `a diffusion model generates its whole output at once: ${unsupported.join(', ')} cannot apply`);
      const sp = sampler.params;
      diffusion = resolveDiffusionParams(this.model, req.prompt.length, req.maxTokens, req.diffusion, { temperature: sp.temperature, topK: sp.topK, topP: sp.topP, seed: sp.seed });
    }
    if (req.reasoningBudget) for (const t of req.reasoningBudget.forced) if (!Number.isInteger(t) || t < 0 || t >= this.model.nVocab) throw new EngineError('KAIL_E_INVALID_ARG', `reasoning budget: token id ${t} is outside the vocabulary`);
    for (const t of req.stopTokens ?? [])
      if (!Number.isInteger(t) || t < 0 || t >= this.model.nVocab) throw new EngineError('KAIL_E_INVALID_ARG', `stop token id ${t} is outside the vocabulary (0..${this.model.nVocab - 1})`);
    if (req.minTokens !== undefined && (!Number.isInteger(req.minTokens) || req.minTokens < 0)) throw new EngineError('KAIL_E_INVALID_ARG', `min tokens must be a non-negative integer, got ${req.minTokens}`);
    if (req.contextShift) {
      const { keep, discard = 0 } = req.contextShift;
      if (!Number.isInteger(keep) || keep < -1) throw new EngineError('KAIL_E_INVALID_ARG', `n_keep must be an integer >= -1, got ${keep}`);
      if (!Number.isInteger(discard) || discard < 0) throw new EngineError('KAIL_E_INVALID_ARG', `n_discard must be a non-negative integer, got ${discard}`);
    }
    // End of generation and the request's stop tokens (min tokens masks them all; ignoreEog keeps only the stop tokens as ends).
    const ends: ReadonlySet<number> = req.stopTokens?.length ? new Set([...this.eog, ...req.stopTokens]) : this.eog;
    const stopSet: ReadonlySet<number> = req.ignoreEog ? new Set(req.stopTokens ?? []) : ends;
    const queue: GenerationChunk[] = [];
    let wake: (() => void) | undefined;
    let done = false;
    const a: Active = {
      req,
      nPrompt: req.prompt.length - (this.model.encoderDecoder ? 1 : 0),
      slot: -1,
      lora,
      // (With post-sampling probs the sampler reports its own distribution's top candidates.)
      sampler,
      stopIds: req.minTokens ? ends : new Set(),
      stop: new StopMatcher({ stop: req.stop, eogTokens: stopSet }),
      limits: req.nIndent || req.tMaxPredictMs ? new LineLimits(req.nIndent ?? 0, req.tMaxPredictMs ?? 0) : null,
      budget: req.reasoningBudget ? new ReasoningBudget(req.reasoningBudget, this.specialPieces()) : null,
      decoder: this.model.tokenizer.createStreamDecoder({ preserve: req.preserveTokens }),
      history: [...req.prompt],
      prefilled: 0,
      pending: undefined,
      generated: 0,
      push: (c) => {
        queue.push(c);
        wake?.();
      },
      end: () => {
        done = true;
        wake?.();
      },
      cancelled: false,
      t0: performance.now(),
      tQueue: 0,
      tFirst: 0,
      tPromptDone: 0,
      spec: null,
      reused: 0,
      constraint,
      promptLps: req.promptLogprobs ? [] : null,
      emb: req.embed ? new Float64Array(this.model.hiddenWidth * (req.embed === 'none' ? req.prompt.length : 1)) : null,
      shifted: 0,
      shiftBase: null,
      shiftAt: 0,
      diffusion,
    };
    const onAbort = () => this.cancelActive(a);
    signal?.addEventListener('abort', onAbort, { once: true });
    this.waiting.push(a);
    this.kick();
    return {
      [Symbol.asyncIterator]: () => ({
        next: async (): Promise<IteratorResult<GenerationChunk>> => {
          for (;;) {
            if (queue.length) return { value: queue.shift()!, done: false };
            if (done) {
              signal?.removeEventListener('abort', onAbort);
              return { value: undefined, done: true };
            }
            await new Promise<void>((r) => (wake = r));
            wake = undefined;
          }
        },
        return: async () => {
          this.cancelActive(a);
          signal?.removeEventListener('abort', onAbort);
          return { value: undefined, done: true };
        },
      }),
    };
  }

  /** Cancels by request id; takes effect before the next forward pass. */
  cancel(id: string): boolean {
    for (const a of [...this.waiting, ...this.running.values()]) {
      if (a.req.id === id) {
        this.cancelActive(a);
        return true;
      }
    }
    return false;
  }

  stats(): BatchEngineStats {
    const now = performance.now();
    while (this.recent.length && now - this.recent[0].t > 5000) this.recent.shift();
    const n = this.recent.reduce((s, r) => s + r.n, 0);
    const span = this.recent.length ? Math.max(1000, now - this.recent[0].t) : 1000;
    return {
      running: this.running.size,
      waiting: this.waiting.length,
      tokensGenerated: this.tokensGenerated,
      promptTokens: this.promptTokens,
      promptTokensReused: this.promptTokensReused,
      promptTokensCopied: this.promptTokensCopied,
      promptTokensFromCheckpoints: this.promptTokensFromCheckpoints,
      contextCheckpoints: this.slots.reduce((c, s) => ({ count: c.count + s.checkpoints.length, bytes: c.bytes + s.checkpoints.reduce((b, k) => b + k.states.byteLength, 0) }), { count: 0, bytes: 0 }),
      steps: this.steps,
      tokensPerSecond: (n * 1000) / span,
      speculative: this.spec ? this.spec.stats() : null,
    };
  }

  /** Each sequence slot's state, in slot order (llama-server's /slots). */
  slotStates(): SlotState[] {
    return this.slots.map((cached, id) => {
      const a = this.running.get(id);
      if (!a) return { id, processing: false, requestId: '', nCtx: this.model.nCtx, promptTokens: 0, promptTokensProcessed: 0, decodedTokens: 0, remainingTokens: 0, cachedTokens: cached.tokens.length, sampling: null, speculative: false };
      return {
        id,
        processing: true,
        requestId: a.req.id,
        nCtx: this.model.nCtx,
        promptTokens: a.nPrompt,
        promptTokensProcessed: Math.min(a.prefilled, a.nPrompt),
        decodedTokens: a.generated,
        remainingTokens: Math.max(0, a.req.maxTokens - a.generated),
        cachedTokens: this.model.seqLen(id),
        sampling: a.sampler.params,
        speculative: !!a.spec,
      };
    });
  }

  /** How many of `prompt`'s first tokens a slot's cache holds (a running slot's: its history up to the positions fed so far). */
  private cachedStart(slot: number, prompt: readonly number[], lora: string): number {
    const r = this.running.get(slot);
    if ((r ? r.lora : this.slots[slot].lora) !== lora) return 0;
    const n = r ? sharedPrefix(this.cacheTokens(r), prompt, this.model.seqLen(slot)) : sharedPrefix(this.slots[slot].tokens, prompt);
    // A recurrent state holds the whole cached past: only a prompt that continues all of it, past
    // it, can use it (the last prompt token is always computed; a context checkpoint serves the rest).
    return this.model.recurrent && (n < this.model.seqLen(slot) || n >= prompt.length) ? 0 : n;
  }

  /**
   * A recurrent model's free slot: its newest context checkpoint from which `prompt` can go on
   * (its tokens start the prompt, and at least the prompt's last token is left to compute).
   */
  private checkpointFor(slot: number, prompt: readonly number[], lora: string): ContextCheckpoint | undefined {
    if (this.running.has(slot)) return undefined;
    let best: ContextCheckpoint | undefined;
    for (const c of this.slots[slot].checkpoints)
      if (c.lora === lora && c.tokens.length < prompt.length && (!best || c.tokens.length > best.tokens.length) && sharedPrefix(c.tokens, prompt) === c.tokens.length) best = c;
    return best;
  }

  /** The positions a sequence may fill: the model's context, or the request's smaller window. */
  private nCtxOf(a: Active): number {
    return Math.min(this.model.nCtx, a.req.contextWindow ?? Infinity);
  }

  /** The tokens a running sequence's cache holds, in position order, up to the ones fed so far (and beyond: cut at seqLen). */
  private cacheTokens(a: Active): number[] {
    return a.shiftBase ? [...a.shiftBase, ...a.history.slice(a.shiftAt)] : a.history;
  }

  /**
   * Context shift for a sequence that fills the context (llama-server's): drops `discard` cached
   * positions after the first `keep` and moves the rest down. False (and the sequence finished with
   * an error) when the model cannot shift.
   */
  private shiftContext(a: Active): boolean {
    const len = this.model.seqLen(a.slot);
    const { keep, discard } = contextShiftSpan(this.model.tokenizer.vocab, a.req.prompt, len, this.nCtxOf(a), a.req.contextShift!);
    if (discard <= 0) {
      this.finish(a, 'length');
      return false;
    }
    const before = this.cacheTokens(a).slice(0, len);
    try {
      this.model.shiftContext(a.slot, keep, discard);
    } catch (e) {
      this.finish(a, 'error', toEngineError(e));
      return false;
    }
    a.shiftBase = [...before.slice(0, keep), ...before.slice(keep + discard)];
    a.shiftAt = a.history.length - 1;  // the pending token (history's last) is not in the cache yet
    a.shifted += discard;
    // The draft's cache (or MTP's hidden rows) follows the history's positions: no more speculation.
    a.spec = null;
    return true;
  }

  /** A request's LoRA scales checked against the model, as the key of what a cache holds. */
  private loraKey(scales: readonly number[] | undefined): string {
    if (scales !== undefined) this.model.checkLoraScales(scales);
    return (scales ?? this.model.loraScales).join(',');
  }

  /** An idle slot, else KAIL_E_BUDGET (a running request holds it) or KAIL_E_INVALID_ARG (no such slot). */
  private idleSlot(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.slots.length) throw new EngineError('KAIL_E_INVALID_ARG', `slot ${id} does not exist (0..${this.slots.length - 1})`);
    if (this.running.has(id) || !this.freeSlots.includes(id)) throw new EngineError('KAIL_E_BUDGET', `slot ${id} is busy with a request; retry when it is done`);
  }

  /** llama-server's slot save: an idle slot's cached tokens, the LoRA scales they were computed with, and its KV cache. */
  saveSlot(id: number): { tokens: number[]; lora: string; state: Uint8Array } {
    this.idleSlot(id);
    const c = this.slots[id];
    const n = Math.min(c.tokens.length, this.model.seqLen(id));
    this.model.truncate(id, n);
    return { tokens: c.tokens.slice(0, n), lora: c.lora, state: this.model.saveSequence(id) };
  }

  /** llama-server's slot restore: an idle slot takes a saved cache; the next request whose prompt starts with its tokens reuses them. */
  restoreSlot(id: number, tokens: readonly number[], lora: string, state: Uint8Array): void {
    this.idleSlot(id);
    // (Until the cache is in, the slot offers nothing for reuse.)
    this.slots[id] = { tokens: [], promptLen: 0, released: ++this.releases, lora, checkpoints: [] };
    this.model.restoreSequence(id, state);
    const held = this.model.seqLen(id);
    if (held !== tokens.length) {
      this.model.truncate(id, 0);
      throw new EngineError('KAIL_E_INVALID_ARG', `the saved cache holds ${held} positions for ${tokens.length} tokens`);
    }
    this.slots[id] = { ...this.slots[id], tokens: [...tokens], promptLen: tokens.length };
  }

  /** llama-server's slot erase: an idle slot's cache emptied; returns the tokens it held. */
  eraseSlot(id: number): number {
    this.idleSlot(id);
    const n = this.slots[id].tokens.length;
    this.model.truncate(id, 0);
    this.slots[id] = { ...this.slots[id], tokens: [], promptLen: 0, checkpoints: [] };
    return n;
  }

  /** Cancels everything and waits for the loop to stop. */
  async close(): Promise<void> {
    this.closed = true;
    for (const a of [...this.waiting, ...this.running.values()]) this.cancelActive(a);
    while (this.loopRunning) await new Promise((r) => setTimeout(r, 5));
  }

  private cancelActive(a: Active): void {
    if (a.cancelled) return;
    a.cancelled = true;
    const i = this.waiting.indexOf(a);
    if (i >= 0) {
      this.waiting.splice(i, 1);
      this.finish(a, 'cancelled');
    }
    // Running ones are finished by the loop between passes.
    this.kick();
  }

  private kick(): void {
    if (this.loopRunning) return;
    this.loopRunning = true;
    setImmediate(() => void this.loop());
  }

  private admit(): void {
    for (let w = 0; w < this.waiting.length && this.freeSlots.length; ) {
      const a = this.waiting[w];
      // A diffusion job runs alone (loop): none is admitted past it.
      if (a.diffusion) break;
      // A request pinned to a slot (llama-server's id_slot) waits for that one; the others go past it.
      if (a.req.slot !== undefined && !this.freeSlots.includes(a.req.slot)) {
        w++;
        continue;
      }
      this.waiting.splice(w, 1);
      // A prompt that continues a free slot's cached conversation (contains the prompt that left
      // the cache, but for its last few tokens, which may tokenize differently once the answer
      // follows them) takes the slot that saves the most; any other takes an empty slot, else the
      // one released longest ago, so one conversation's cache is not given up to save another's
      // common preamble (a system prompt; it still reuses what it shares with the slot it gets).
      // How much of the prompt's start each slot's cache holds (free or running).
      const shares = this.slots.map((_, slot) => (this.reusePrefix ? this.cachedStart(slot, a.req.prompt, a.lora) : 0));
      // A recurrent model's slot may also go on from a context checkpoint.
      const ckpts = this.slots.map((_, slot) => (this.maxCheckpoints && !a.req.promptLogprobs && !a.req.embed ? this.checkpointFor(slot, a.req.prompt, a.lora) : undefined));
      const usable = shares.map((n, slot) => Math.max(n, ckpts[slot]?.tokens.length ?? 0));
      let best = -1;
      let bestShared = 0;
      for (let i = 0; i < this.freeSlots.length && this.reusePrefix; i++) {
        const c = this.slots[this.freeSlots[i]];
        const shared = usable[this.freeSlots[i]];
        if (c.tokens.length > 0 && shared >= Math.max(1, c.promptLen - 4) && shared > bestShared) {
          best = i;
          bestShared = shared;
        }
      }
      if (a.req.slot !== undefined) {
        best = this.freeSlots.indexOf(a.req.slot);
      } else if (best < 0) {
        best = this.freeSlots.length - 1;
        for (let i = 0; i < this.freeSlots.length; i++) {
          const s = this.slots[this.freeSlots[i]], b = this.slots[this.freeSlots[best]];
          const emptier = (s.tokens.length === 0 ? 0 : 1) - (b.tokens.length === 0 ? 0 : 1);
          if (emptier < 0 || (emptier === 0 && s.released < b.released)) best = i;
        }
      }
      a.slot = this.freeSlots.splice(best, 1)[0];
      bestShared = shares[a.slot];
      this.slots[a.slot].tokens = [];
      if (this.model.loraScales.length) this.model.setLoraScales(a.slot, a.req.loraScales ?? this.model.loraScales);
      a.tQueue = performance.now();
      // Another slot, free or running, may hold a longer start of this prompt (a system prompt and
      // tools every conversation shares): its cache rows are the same bits computing them would
      // give, so they are copied instead of computed.
      let copied = false;
      if (this.reusePrefix && !a.req.promptLogprobs && !a.req.embed) {
        let src = -1;
        for (let slot = 0; slot < shares.length; slot++) if (slot !== a.slot && (src < 0 || shares[slot] > shares[src])) src = slot;
        if (src >= 0 && shares[src] >= Math.max(bestShared, ckpts[a.slot]?.tokens.length ?? 0) + MIN_COPIED_PREFIX) {
          this.model.copySequence(src, a.slot);
          this.slots[a.slot].checkpoints = [];
          bestShared = shares[src];
          copied = true;
        }
      }
      const ck = ckpts[a.slot];
      if (!copied && ck && ck.tokens.length > bestShared) {
        try {
          bestShared = this.model.restoreStates(a.slot, ck.tokens.length, ck.states);
          this.promptTokensFromCheckpoints += bestShared;
        } catch {
          // (Not expected: the checkpoint was taken from this slot at a length it still holds.
          // Then nothing is reused.)
          this.slots[a.slot].checkpoints = [];
          bestShared = 0;
        }
      }
      // The last prompt token is always computed: its logits choose the first new token.
      a.reused = a.req.promptLogprobs || a.req.embed ? 0 : Math.max(0, Math.min(bestShared, a.req.prompt.length - 1));
      // A sliding-window cache may keep less than the shared prefix (then nothing).
      a.reused = this.model.truncate(a.slot, a.reused);
      // Cache rows from a.reused on are rewritten: checkpoints past it no longer hold.
      const kept = this.slots[a.slot].checkpoints.filter((c) => c.tokens.length <= a.reused);
      this.slots[a.slot].checkpoints = kept;
      // This prompt's own checkpoint, one token before its end (where the same prompt, or one that
      // goes on from it, starts computing again).
      if (this.maxCheckpoints && !a.req.embed && a.req.prompt.length >= CHECKPOINT_MIN_PROMPT && a.reused < a.req.prompt.length - 1) a.checkpointAt = a.req.prompt.length - 1;
      a.prefilled = a.reused;
      this.promptTokensReused += a.reused;
      if (copied) this.promptTokensCopied += a.reused;
      // (A constrained sequence speculates when greedy: the target's choice at each drafted
      // position is then the allowed argmax, as without speculation.)
      if (this.spec && (!a.constraint || isGreedy(a.sampler.params)) && !a.sampler.stateful && !a.req.minTokens && !a.req.postSamplingProbs) a.spec = this.spec.begin(a.slot, a.sampler.params, a.slot);
      // A speculating sequence's recurrent target and draft keep rollback checkpoints (armed by
      // begin); a slot's earlier request may have left them armed.
      if (!a.spec) {
        this.model.keepRollback(a.slot, false);
        this.spec?.draft?.keepRollback(a.slot, false);
      }
      this.running.set(a.slot, a);
    }
  }

  private async loop(): Promise<void> {
    try {
      for (;;) {
        for (const a of [...this.running.values()]) if (a.cancelled) this.finish(a, 'cancelled');
        this.admit();
        if (this.running.size === 0) {
          // A diffusion job first in the queue: the running sequences are done, it runs alone.
          const head = this.waiting[0];
          if (!head?.diffusion) break;
          this.waiting.shift();
          await this.runDiffusion(head);
          continue;
        }
        await this.step();
      }
    } finally {
      this.loopRunning = false;
      if (this.waiting.length || this.running.size) this.kick();
    }
  }

  private async step(): Promise<void> {
    const tokens: number[] = [];
    const pos: number[] = [];
    const seq: number[] = [];
    const output: number[] = [];
    /** Sequences with output rows in this pass: `n` rows from `row` on; `draft` when speculating. */
    const rows: { a: Active; row: number; n: number; draft: Draft | null }[] = [];
    let nRows = 0;
    let budget = this.maxBatchTokens;
    let draftMs = 0;
    // Decoding sequences first (one token each, or the pending token and its drafts), then prompt
    // chunks with what budget is left.
    const decodingNow: Active[] = [];
    const asks: { seq: SpeculativeSequence; history: readonly number[]; maxDraft: number }[] = [];
    let planned = budget;
    // An encoder-decoder's encoding pass holds only prompts to encode (whole, no logits): while one
    // waits with room in a pass, decoding pauses for that one pass.
    const encDec = this.model.encoderDecoder;
    const encoding = encDec && [...this.running.values()].some((a) => !a.cancelled && a.slot >= 0 && a.pending === undefined && a.prefilled === 0 && a.req.prompt.length - 1 <= budget);
    for (const a of this.running.values()) {
      if (encoding || a.pending === undefined || planned <= 0 || a.cancelled) continue;
      decodingNow.push(a);
      if (a.spec) {
        // Bounded so the committed tokens fit max tokens, the context, this pass's budget and the
        // tokens a reasoning budget leaves the model before it forces the block closed.
        const free = a.budget ? a.budget.freeTokens : Infinity;
        const maxDraft = Math.max(0, Math.min(a.req.maxTokens - a.generated - 1, this.nCtxOf(a) - (a.history.length - a.shifted) - 1, planned - 1, free - 1));
        asks.push({ seq: a.spec, history: a.history, maxDraft });
        planned -= 1 + Math.min(maxDraft, a.spec.k);
      } else planned--;
    }
    let drafts: Draft[] = [];
    if (asks.length) {
      const t = performance.now();
      try {
        drafts = await proposeMany(asks);
      } catch (e) {
        // A failed draft pass fails the sequences that drafted; the others go on.
        const err = toEngineError(e);
        for (const a of decodingNow) if (a.spec) this.finish(a, 'error', err);
        return;
      }
      draftMs = performance.now() - t;
    }
    let di = 0;
    for (const a of decodingNow) {
      const draft = a.spec ? drafts[di++] : null;
      if (a.cancelled || a.slot < 0) continue;
      const p0 = a.req.prompt.length + a.generated - 1 - a.shifted;
      const feed = [a.pending!, ...(draft?.tokens ?? [])];
      feed.forEach((t, i) => {
        tokens.push(t);
        pos.push(p0 + i);
        seq.push(a.slot);
        output.push(1);
      });
      rows.push({ a, row: nRows, n: feed.length, draft });
      nRows += feed.length;
      budget -= feed.length;
    }
    const prefilling: Active[] = [];
    // Streams are decoding: keep this pass's prompt part short enough not to stall them long.
    if (rows.length && this.maxDecodeStallMs > 0 && this.msPerToken > 0)
      budget = Math.min(budget, Math.max(16, Math.floor(this.maxDecodeStallMs / this.msPerToken)));
    /** Prompt chunks in this pass (row of the batch, first position, length), for MTP's hidden rows. */
    const chunks: { a: Active; at: number; start: number; n: number }[] = [];
    /** Rows that score a prompt token (promptLogprobs): the logits at one position, the token after it. */
    const promptRows: { a: Active; row: number; next: number }[] = [];
    for (const a of this.running.values()) {
      if (a.pending !== undefined || a.prefilled >= a.req.prompt.length || budget <= 0) continue;
      // An encoder's sequence goes in whole (non-causal attention); it waits for a pass with room.
      if (this.model.encoder && a.req.prompt.length > budget) continue;
      // An encoder-decoder: the prompt but its last token (the decoder start) in an encoding pass,
      // then the start token with the decoding rows.
      if (encDec && (a.prefilled === 0) !== encoding) continue;
      if (encDec && encoding && a.req.prompt.length - 1 > budget) continue;
      const n = encDec ? (encoding ? a.req.prompt.length - 1 : 1) : Math.min(budget, (a.checkpointAt ?? a.req.prompt.length) - a.prefilled, a.promptLps ? PROMPT_LOGPROB_CHUNK : Infinity);
      chunks.push({ a, at: tokens.length, start: a.prefilled, n });
      for (let i = 0; i < n; i++) {
        tokens.push(a.req.prompt[a.prefilled + i]);
        pos.push(a.prefilled + i);
        seq.push(a.slot);
        const last = a.prefilled + i === a.req.prompt.length - 1;
        output.push(last || a.promptLps ? 1 : 0);
        if (last) rows.push({ a, row: nRows++, n: 1, draft: null });
        else if (a.promptLps) promptRows.push({ a, row: nRows++, next: a.req.prompt[a.prefilled + i + 1] });
      }
      a.prefilled += n;
      budget -= n;
      // (An encoder-decoder's decoder start token is not a prompt token.)
      this.promptTokens += Math.min(a.prefilled, a.nPrompt) - Math.min(a.prefilled - n, a.nPrompt);
      prefilling.push(a);
    }
    if (tokens.length === 0) return;
    let logits: Float32Array;
    let hidden: Float32Array | null = null;
    const tPass = performance.now();
    // (An MTP block and an EAGLE-3 draft read the target's hidden rows.)
    const mtp = !!this.spec?.mtp;
    try {
      const batch = { tokens: Int32Array.from(tokens), pos: Int32Array.from(pos), seq: Int32Array.from(seq), output: Uint8Array.from(output) };
      if (mtp || chunks.some((c) => c.a.emb)) ({ logits, hidden } = await this.model.forwardBatchWithHidden(batch));
      else logits = await this.model.forwardBatch(batch);
    } catch (e) {
      // A failed pass fails the sequences in it; the engine keeps serving the others.
      const err = toEngineError(e);
      const inPass = new Set([...rows.map((r) => r.a), ...prefilling]);
      for (const a of inPass) this.finish(a, 'error', err);
      return;
    }
    const passMs = performance.now() - tPass;
    for (const a of prefilling) if (a.checkpointAt !== undefined && a.prefilled === a.checkpointAt) this.takeCheckpoint(a);
    this.steps++;
    if (prefilling.length) {
      const perToken = passMs / tokens.length;
      this.msPerToken = this.msPerToken > 0 ? 0.7 * this.msPerToken + 0.3 * perToken : perToken;
    }
    if (hidden && mtp) for (const c of chunks) c.a.spec?.recordHidden(c.start, hidden, c.n, c.at);
    if (hidden) for (const c of chunks) if (c.a.emb) this.pool(c.a, hidden, c.start, c.n, c.at);
    const nv = this.model.nVocab;
    for (const { a, row, next } of promptRows) a.promptLps?.push(computeLogprobs(logits.subarray(row * nv, (row + 1) * nv), next, a.req.topLogprobs ?? 0));
    const now = performance.now();
    let produced = 0;
    const decoding = rows.filter((r) => r.a.pending !== undefined).length || 1;
    for (const { a, row, n, draft } of rows) {
      if (a.cancelled || a.slot < 0) continue;
      const rowsOf = logits.subarray(row * nv, (row + n) * nv);
      if (a.generated === 0) a.tPromptDone = now;
      if (a.promptLps) {
        a.push({ text: '', tokens: [], promptLogprobs: a.promptLps });
        a.promptLps = null;
      }
      if (a.emb) {
        const n = a.req.embed === 'mean' ? a.req.prompt.length : 1;
        a.push({ text: '', tokens: [], embedding: Float32Array.from(a.emb, (v) => v / n) });
        this.finish(a, 'stop');
        continue;
      }
      if (a.req.maxTokens === 0) {
        this.finish(a, 'length');
        continue;
      }
      let commit: number[];
      if (draft && a.spec && a.budget?.forcedToken === undefined) {
        const h = a.history.length;
        let res: ReturnType<typeof a.spec.verify>;
        try {
          res = a.spec.verify(a.history, draft, rowsOf, a.constraint);
        } catch (e) {
          // (A constraint no token satisfies fails this sequence only, as below.)
          this.model.rollback(a.slot, h);
          this.finish(a, 'error', toEngineError(e));
          continue;
        }
        // Keep [0, h + accepted): the accepted drafts stay cached, the new pending token is not.
        this.model.rollback(a.slot, h + res.accepted);
        if (hidden && mtp) a.spec.recordHidden(h - 1, hidden, res.accepted + 1, row);
        // The pass is shared: each decoding sequence is charged an equal part of its time.
        this.spec!.record({ n, ms: passMs / decoding, drafted: draft.tokens.length, accepted: res.accepted, committed: res.tokens.length, draftMs: draftMs / decoding });
        a.spec.adapt(draft.tokens.length, res.accepted);
        commit = res.tokens;
      } else {
        try {
          commit = [this.sampleOne(a, rowsOf.subarray(0, nv))];
          if (draft && a.spec) {
            // A speculating sequence whose reasoning budget forces this token: no drafts (maxDraft
            // was 0), the pending token's row kept, and MTP's hidden state recorded as verify does.
            this.model.rollback(a.slot, a.history.length);
            if (hidden && mtp) a.spec.recordHidden(a.history.length - 1, hidden, 1, row);
          }
        } catch (e) {
          // A row nothing can be drawn from (NaN logits, a constraint no token satisfies) fails
          // this sequence only.
          this.finish(a, 'error', toEngineError(e));
          continue;
        }
      }
      for (let i = 0; i < commit.length; i++) {
        const token = commit[i];
        a.history.push(token);
        a.budget?.accept(token);
        a.generated++;
        produced++;
        if (a.generated === 1) a.tFirst = now;
        const lp = !a.req.logprobs ? undefined : a.req.postSamplingProbs ? [postSampling(a, token)] : [computeLogprobs(rowsOf.subarray(i * nv, (i + 1) * nv), token, a.req.topLogprobs ?? 0)];
        const step = a.stop.pushToken(token, a.decoder.push(token));
        const limited = a.limits?.push(step.text, now - a.tFirst);
        // Every token goes out in its chunk (the text may lag while a stop string or a UTF-8 sequence is incomplete).
        a.push({ text: limited ? limited.text : step.text, tokens: [token], logprobs: lp, progress: progressOf(a, now) });
        if (step.done || (a.constraint?.done && a.req.ignoreEog)) {
          this.finish(a, 'stop', undefined, step.done && step.reason === 'stop' ? step.stop : undefined);
          break;
        }
        if (limited?.end) {
          // A line cut for its indentation drops what follows it (text held back included).
          this.finish(a, 'length', undefined, undefined, limited.cut);
          break;
        }
        if (a.generated >= a.req.maxTokens) {
          this.finish(a, 'length');
          break;
        }
        a.pending = token;
      }
      // The context is full (the drafts were bounded to fit it, so only after the last token):
      // shift it, the pending token going after what stays, or end.
      // (An encoder-decoder's prompt holds the decoder's start token, whose row the last generated token does not take.)
      if (a.slot >= 0 && this.running.get(a.slot) === a && a.req.prompt.length - (this.model.encoderDecoder ? 1 : 0) + a.generated - a.shifted >= this.nCtxOf(a)) {
        if (a.req.contextShift) this.shiftContext(a);
        else this.finish(a, 'length');
      }
    }
    this.tokensGenerated += produced;
    this.recent.push({ t: now, n: produced });
  }

  /**
   * One token from a row of logits: the reasoning budget's forced token while it closes the
   * block. Under a JSON constraint the unconstrained draw is kept when it
   * fits, else the row is masked to the tokens that do and drawn again (llama.cpp's grammar
   * sampling: a draw from the masked distribution, one token check in the common case).
   */
  /**
   * The request's sampler settings: with post-sampling probs the sampler reports its own
   * distribution's top candidates; ignoring end of generation bans its tokens (but the request's
   * own stop tokens) by logit bias, as llama-server's ignore_eos does, so they are never drawn.
   */
  private samplingOf(req: GenerationRequest): SamplerParams {
    let s: SamplerParams = req.sampling ?? {};
    if (req.postSamplingProbs && req.logprobs) s = { ...s, nProbs: Math.max(1, req.topLogprobs ?? 0) };
    if (req.ignoreEog) {
      const bias: Record<number, number> = { ...(s.logitBias ?? {}) };
      const keep = new Set(req.stopTokens ?? []);
      for (const t of this.eog) if (!keep.has(t)) bias[t] = -Infinity;
      s = { ...s, logitBias: bias };
    }
    return s;
  }

  private sampleOne(a: Active, row: Float32Array): number {
    const forced = a.budget?.forcedToken;
    a.lastDraw = undefined;
    if (forced !== undefined) {
      // (A constraint that follows the reasoning takes any text inside it.)
      if (a.constraint && !a.constraint.allows(forced)) throw new EngineError('KAIL_E_INTERNAL', `the output constraint refuses the reasoning budget's forced token ${forced}`);
      a.constraint?.accept(forced);
      a.sampler.accept?.(forced);
      return forced;
    }
    if (a.req.minTokens && a.generated < a.req.minTokens) {
      // Not yet: end-of-generation and stop tokens are out of the draw.
      const masked = (this.maskRow ??= new Float32Array(row.length));
      masked.set(row);
      for (const t of a.stopIds) if (t < masked.length) masked[t] = -Infinity;
      row = masked;
    }
    const sample = (r: Float32Array) => a.sampler.sample(r, a.history);
    a.lastDraw = a.constraint ? a.constraint.draw(row, sample) : sample(row);
    a.sampler.accept?.(a.lastDraw.token);
    return a.lastDraw.token;
  }

  /**
   * Each token's output bytes (empty for control tokens, except `preserve`d ones), for output
   * constraints; built once per set of preserved tokens (the model host keeps one set per model).
   */
  private pieces(preserve?: ReadonlySet<number>): readonly Uint8Array[] {
    const key = preserve?.size ? preserve : NO_PRESERVED;
    let p = this.tokenPieces.get(key);
    if (!p) {
      const tok = this.model.tokenizer;
      p = tok.allPieces(this.model.nVocab, { preserve: key });
      this.tokenPieces.set(key, p);
    }
    return p;
  }

  private special?: readonly Uint8Array[];

  /** Each token's bytes with every control token's text (what the reasoning budget reads its tags from), built once. */
  private specialPieces(): readonly Uint8Array[] {
    if (!this.special) {
      const tok = this.model.tokenizer;
      this.special = tok.allPieces(this.model.nVocab, { special: true });
    }
    return this.special;
  }

  /** The constraint a request's output follows, or null for free text. */
  private constraintOf(req: GenerationRequest, grammar: JsonGrammar | null): OutputConstraint | null {
    if (req.gbnf && req.gbnfLazy) {
      const table = new GbnfStacks();
      return new OutputConstraint(this.specialPieces(), this.eog, LazyGbnfRecognizer.create(req.gbnf, req.gbnfLazy, table), LazyGbnfRecognizer.create(req.gbnf, req.gbnfLazy, table));
    }
    if (req.gbnf) return new OutputConstraint(this.specialPieces(), this.eog, new GbnfRecognizer(req.gbnf), new GbnfRecognizer(req.gbnf));
    if (grammar) return new JsonConstraint(this.pieces(req.preserveTokens), this.eog, grammar);
    if (req.pattern) {
      const pieces = this.pieces(req.preserveTokens);
      return new OutputConstraint(pieces, this.eog, new PatternRecognizer(req.pattern), new PatternRecognizer(req.pattern));
    }
    return null;
  }

  /** Adds an embedding request's hidden rows (prompt positions start.., batch rows at..) to its pool. */
  private pool(a: Active, hidden: Float32Array, start: number, n: number, at: number): void {
    const w = this.model.hiddenWidth;
    const emb = a.emb!;
    for (let i = 0; i < n; i++) {
      const pos = start + i;
      const take = a.req.embed === 'mean' || a.req.embed === 'none' || (a.req.embed === 'last' && pos === a.req.prompt.length - 1) || (a.req.embed === 'cls' && pos === 0);
      if (!take) continue;
      const row = hidden.subarray((at + i) * w, (at + i + 1) * w);
      if (a.req.embed === 'mean') for (let j = 0; j < w; j++) emb[j] += row[j];
      else emb.set(row, a.req.embed === 'none' ? pos * w : 0);
    }
  }

  /** Keeps the states of a's slot now (after its prompt's first checkpointAt tokens), the slot's newest. */
  private takeCheckpoint(a: Active): void {
    const slot = this.slots[a.slot];
    const n = a.checkpointAt!;
    a.checkpointAt = undefined;
    // (Admission dropped the slot's checkpoints past the reused prefix, which is shorter than n.)
    slot.checkpoints.push({ tokens: a.req.prompt.slice(0, n), states: this.model.recurrentStates(a.slot), lora: a.lora });
    if (slot.checkpoints.length > this.maxCheckpoints) slot.checkpoints.splice(0, slot.checkpoints.length - this.maxCheckpoints);
  }

  /**
   * One diffusion request, alone on the model: its loop over a free slot (the slot's cache is
   * cleared before and after each pass), checking for cancellation before each step. The text
   * streams as the canvas settles (DiffusionTextStream, as kail run's): what a pass's settled
   * start adds goes out as a piece through the request's stop strings, the rest at the end; the
   * first stop string ends the loop at the next pass (finish reason 'stop', the settled tokens
   * then counted as generated).
   */
  private async runDiffusion(a: Active): Promise<void> {
    const i = a.req.slot !== undefined ? this.freeSlots.indexOf(a.req.slot) : this.freeSlots.length - 1;
    a.slot = this.freeSlots.splice(i, 1)[0];
    this.slots[a.slot] = { ...this.slots[a.slot], tokens: [], promptLen: 0, checkpoints: [] };
    if (this.model.loraScales.length) this.model.setLoraScales(a.slot, a.req.loraScales ?? this.model.loraScales);
    this.running.set(a.slot, a);
    a.tQueue = performance.now();
    a.tPromptDone = a.tQueue;
    const { params: p, nGen } = a.diffusion!;
    const nIn = a.req.prompt.length;
    const text = new DiffusionTextStream(this.model.tokenizer, nIn, p.maskTokenId, a.stop);
    const send = (piece: DiffusionPiece | undefined, pass: number) => {
      if (!piece || (!piece.tokens.length && !piece.text)) return;
      a.generated += piece.tokens.length;
      const now = performance.now();
      a.tFirst ||= now;
      a.push({ text: piece.text, tokens: piece.tokens, progress: progressOf(a, now), diffusionPass: pass });
    };
    let result;
    try {
      result = await diffusionGenerateWith(this.model, a.req.prompt, nGen, p, {
        seq: a.slot,
        // (A stop string ends the loop at the next pass: all before it is settled.)
        onStep: () => !a.cancelled && !text.cut,
        onPass: (s) => {
          if (!a.cancelled) send(text.pass(s), s.pass);
        },
      });
    } catch (e) {
      this.finish(a, 'error', toEngineError(e));
      return;
    }
    this.steps += result.steps;
    this.promptTokens += a.req.prompt.length;
    if (a.cancelled) {
      this.finish(a, 'cancelled');
      return;
    }
    send(text.end(result.generated), result.steps);
    // (Cut by a stop string: the tokens settled then; else the whole canvas's generated part.)
    a.generated = text.cut ? text.cut.settled : result.generated.length;
    this.tokensGenerated += a.generated;
    this.recent.push({ t: performance.now(), n: a.generated });
    a.tFirst ||= performance.now();
    if (text.cut) this.finish(a, 'stop', undefined, text.cut.stop);
    else this.finish(a, 'length');
  }

  private finish(a: Active, reason: FinishReason, error?: EngineError, stopWord?: string, dropHeld = false): void {
    const slot = a.slot;
    if (a.slot >= 0 && this.running.get(a.slot) === a) {
      this.running.delete(a.slot);
      // The cache holds the history up to the positions it was fed (the last sampled token is
      // not); after a failed pass its state is unknown, so nothing is kept.
      this.slots[a.slot] = {
        tokens: this.reusePrefix && reason !== 'error' ? this.cacheTokens(a).slice(0, this.model.seqLen(a.slot)) : [],
        promptLen: a.req.prompt.length,
        released: ++this.releases,
        lora: a.lora,
        // (After a failed pass the cache rows are unknown.)
        checkpoints: reason !== 'error' ? this.slots[a.slot].checkpoints : [],
      };
      this.freeSlots.push(a.slot);
      a.slot = -1;
    }
    let tail = '';
    if (reason !== 'stop' && !a.stop.done && !dropHeld) {
      tail = a.stop.push(a.decoder.flush()).text;
      if (!a.stop.done) tail += a.stop.flush();
    }
    // vLLM's include_stop_str_in_output: the stop string that ended it, at the end of the text.
    if (reason === 'stop' && stopWord && a.req.includeStopString) tail += stopWord;
    const now = performance.now();
    a.push({
      text: tail,
      tokens: [],
      finish: {
        reason,
        ...progressOf(a, now, slot),
        queueMs: (a.tQueue || now) - a.t0,
        timeToFirstTokenMs: a.tFirst ? a.tFirst - a.t0 : 0,
        stopWord,
        error,
        contextShifted: a.shifted,
      },
    });
    a.end();
  }
}

/** A sequence's counts and times at `now`. */
function progressOf(a: Active, now: number, slot = a.slot): GenerationProgress {
  return {
    slot,
    promptTokens: a.nPrompt,
    cachedPromptTokens: a.reused,
    completionTokens: a.generated,
    promptMs: a.tPromptDone ? a.tPromptDone - (a.tQueue || a.t0) : 0,
    generationMs: a.tPromptDone ? now - a.tPromptDone : 0,
  };
}

const NO_PRESERVED: ReadonlySet<number> = new Set();

/** Shortest prompt start worth copying from another slot's cache rather than computing. */
const MIN_COPIED_PREFIX = 16;
/** Prompts shorter than this are recomputed rather than checkpointed (a pass and a state copy cost more). */
const CHECKPOINT_MIN_PROMPT = 64;

/** A recurrent model's states after a slot's first tokens.length positions (computed with the LoRA scales `lora`). */
interface ContextCheckpoint {
  tokens: number[];
  states: Float32Array;
  lora: string;
}

/** The grammar a request's response format asks for, or null for text; throws naming a bad format or schema. */
export function grammarOf(req: Pick<GenerationRequest, 'responseFormat' | 'jsonSchema'>): JsonGrammar | null {
  switch (req.responseFormat ?? 'text') {
    case 'text':
      return null;
    case 'json_object':
      return anyObjectGrammar();
    case 'json_schema':
      return compileJsonSchema(req.jsonSchema);
    default:
      throw new EngineError('KAIL_E_INVALID_ARG', `response format must be 'text', 'json_object' or 'json_schema', got ${JSON.stringify(req.responseFormat)}`);
  }
}

/** Length of the common prefix of two token lists (of a's first `aLen`). */
function sharedPrefix(a: readonly number[], b: readonly number[], aLen = a.length): number {
  const n = Math.min(aLen, a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/**
 * A token's logprobs from the distribution it was drawn from (llama-server's post_sampling_probs):
 * its own and the top candidates with probability above 0; a forced token has probability 1.
 */
function postSampling(a: Active, token: number): TokenLogprobs {
  const d = a.lastDraw;
  if (!d || d.token !== token) return { token, logprob: 0, top: [] };
  return { token, logprob: d.logprob, top: (d.top ?? []).filter((t) => t.logprob > -Infinity).slice(0, a.req.topLogprobs ?? 0) };
}
