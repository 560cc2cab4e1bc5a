import { EngineError } from './errors';
import type { EngineModel } from './model/model';
import { createSampler, type SamplerParams } from './sampling/sampler';
import { StopMatcher } from './sampling/stop';
import { GbnfRecognizer, type GbnfGrammar } from './sampling/gbnf';
import { JsonConstraint, OutputConstraint } from './sampling/json-constraint';
import type { JsonGrammar } from './sampling/json-schema';
import type { SpeculativeDecoder, SpeculativeSequence, SpeculativeStats } from './speculative/speculative-decoder';
import { contextShiftSpan, type ContextShift } from './runtime/context-shift';
import { readSlotFile, writeSlotFile } from './runtime/slot-file';
import fs from 'node:fs';

export interface GenerateOptions {
  /** Most tokens to generate. Default 128. */
  maxTokens?: number;
  sampling?: SamplerParams;
  /** Stop strings; the text stops before them. */
  stop?: string[];
  /** Sequence slot of the model to use. Default 0 (cleared first). */
  seq?: number;
  signal?: AbortSignal;
  /** Called with each piece of text as soon as it is complete UTF-8 and cannot be part of a stop string. */
  onText?: (text: string) => void;
  /**
   * 'greedy' (default) feeds back the sampled token; 'random' feeds a random token id each step
   * instead (benchmarks: varies routing like real text, unlike a greedy loop on random weights).
   */
  feed?: 'sampled' | 'random';
  /**
   * Speculative decoding (draft model or prompt lookup, see SpeculativeDecoder): the same tokens
   * (greedy) or the same distribution (sampled) as without it, several tokens per target pass.
   * The draft model, when it is the target itself, drafts in sequence slot `seq + 1`.
   */
  speculative?: SpeculativeDecoder;
  /** The output follows this GBNF grammar (`sampling/gbnf.ts`; not with `speculative`). */
  grammar?: GbnfGrammar;
  /** The output is one JSON value of this compiled schema (`sampling/json-schema.ts`; not with `grammar` or `speculative`). */
  jsonSchema?: JsonGrammar;
  /**
   * llama-cli's --context-shift: when the context fills, drop cached positions after `keep` prompt
   * tokens (runtime/context-shift.ts) and go on, instead of ending with 'length'. Not with `speculative`.
   */
  contextShift?: ContextShift;
  /**
   * llama-cli's --prompt-cache FILE: the prompt's KV cache is read from the file where it holds a
   * start of this prompt (only the rest is computed), and the prompt's cache is written back to it
   * after the prompt (not with `readOnly`, llama-cli's --prompt-cache-ro). A file of another model
   * or cache type is an error naming why. With `all` (llama-cli's --prompt-cache-all) the file is
   * written again at the end with the generated tokens too (not after a context shift, nor with
   * feed 'random'). Not with `speculative`.
   */
  promptCache?: { file: string; readOnly?: boolean; all?: boolean };
  /**
   * The tokens sequence `seq`'s cache holds now: a previous call's `cacheTokens` (a chat's earlier
   * turns, as llama-cli's conversation mode keeps them). The start they share with this prompt is
   * kept and only the rest is computed (`promptCached`); a cache that no longer matches them, or
   * that cannot be cut back (a recurrent model, a sliding-window ring past the point), is cleared
   * and the prompt computed whole. Not with `promptCache`; with `speculative` the prompt is
   * computed whole (the draft keeps its own cache).
   */
  cachedTokens?: readonly number[];
}

export interface GenerateResult {
  tokens: number[];
  text: string;
  finishReason: 'stop' | 'length' | 'cancelled';
  /** The stop string that ended the output (GenerateOptions.stop), not part of `text`. */
  stopWord?: string;
  promptTokens: number;
  /** Cached positions context shifts dropped (GenerateOptions.contextShift). */
  contextShifted?: number;
  /** Prompt tokens whose cache came from the prompt cache file or was kept (GenerateOptions.promptCache, cachedTokens). */
  promptCached?: number;
  /**
   * The tokens the sequence's cache holds afterwards, in order (the prompt and every generated
   * token fed back), for the next call's `cachedTokens`; empty when they are no plain list of
   * what was computed (after a context shift, with feed 'random', after speculation).
   */
  cacheTokens: number[];
  promptMs: number;
  generationMs: number;
  /** Prompt tokens per second. */
  promptTps: number;
  /**
   * Decode forward passes per second (llama.cpp's eval rate); with speculation, tokens committed
   * after the first per second of decoding (drafting included).
   */
  genTps: number;
  /** Speculation counters of this call; only with `speculative`. */
  speculative?: SpeculativeStats;
}

/** What both generation loops keep about their output: stop matching, UTF-8 streaming, text. */
function startOutput(model: EngineModel, prompt: readonly number[], opts: GenerateOptions) {
  const eog = new Set<number>();
  for (let id = 0; id < model.nVocab; id++) if (model.tokenizer.isEog(id)) eog.add(id);
  const o = {
    eog,
    stop: new StopMatcher({ stop: opts.stop, eogTokens: eog }),
    decoder: model.tokenizer.createStreamDecoder(),
    history: [...prompt] as number[],
    out: [] as number[],
    text: '',
    emit: (t: string) => {
      if (!t) return;
      o.text += t;
      opts.onText?.(t);
    },
  };
  return o;
}

/** An output constraint to a GBNF grammar, on the tokens' text with control tokens' included (llama.cpp's reading). */
function grammarConstraint(model: EngineModel, grammar: GbnfGrammar, eog: ReadonlySet<number>): OutputConstraint {
  return new OutputConstraint(model.tokenizer.allPieces(model.nVocab, { special: true }), eog, new GbnfRecognizer(grammar), new GbnfRecognizer(grammar));
}

/** An output constraint to one JSON value of a schema, on the tokens' output text (control tokens write none). */
function jsonConstraint(model: EngineModel, grammar: JsonGrammar, eog: ReadonlySet<number>): OutputConstraint {
  return new JsonConstraint(model.tokenizer.allPieces(model.nVocab), eog, grammar);
}

/**
 * The prompt cache file's KV rows in `seq`, cut to the start they share with `prompt` (the last
 * prompt token always left to compute: its logits choose the first new token); returns how many
 * prompt tokens they cover. No file yet, or one computed at other LoRA scales: 0.
 */
function restorePromptCache(model: EngineModel, seq: number, prompt: readonly number[], file: string): number {
  if (!fs.existsSync(file)) return 0;
  const { header, state } = readSlotFile(file, model);
  if (header.lora !== model.loraScales.join(',')) return 0;
  model.restoreSequence(seq, state);
  return keepSharedStart(model, seq, prompt, header.tokens);
}

/**
 * Cuts `seq`'s cache, which holds `held`, to the start it shares with `prompt` (the last prompt
 * token always left to compute); returns the positions kept. A cache of another length than
 * `held`, or one that cannot be cut there (a sliding-window ring that no longer holds the window
 * before that point, a recurrent model's state), is cleared: 0.
 */
function keepSharedStart(model: EngineModel, seq: number, prompt: readonly number[], held: readonly number[]): number {
  if (model.seqLen(seq) !== held.length) return model.truncate(seq, 0);
  let n = 0;
  while (n < Math.min(held.length, prompt.length - 1) && held[n] === prompt[n]) n++;
  const kept = model.truncate(seq, n);
  return kept === n ? n : model.truncate(seq, 0);
}

/** Evaluates the prompt, then samples tokens one at a time until EOG, a stop string or maxTokens. */
export async function generate(model: EngineModel, prompt: readonly number[], opts: GenerateOptions = {}): Promise<GenerateResult> {
  const maxTokens = opts.maxTokens ?? 128;
  if (!Number.isInteger(maxTokens) || maxTokens < 0) throw new EngineError('KAIL_E_INVALID_ARG', `maxTokens must be a non-negative integer, got ${maxTokens}`);
  if (prompt.length === 0) throw new EngineError('KAIL_E_INVALID_ARG', 'the prompt is empty');
  const refusal = model.generationRefusal(model.path);
  if (refusal) throw refusal;
  if (prompt.length + maxTokens > model.nCtx && prompt.length >= model.nCtx)
    throw new EngineError('KAIL_E_CONTEXT_OVERFLOW', `the prompt has ${prompt.length} tokens; the context holds ${model.nCtx}`);
  const seq = opts.seq ?? 0;
  if (opts.speculative && (opts.grammar || opts.jsonSchema)) throw new EngineError('KAIL_E_INVALID_ARG', 'a grammar or JSON schema cannot be combined with speculative decoding');
  if (opts.grammar && opts.jsonSchema) throw new EngineError('KAIL_E_INVALID_ARG', 'a grammar and a JSON schema cannot be combined');
  if (opts.speculative && opts.promptCache) throw new EngineError('KAIL_E_INVALID_ARG', 'a prompt cache cannot be combined with speculative decoding');
  if (opts.promptCache && opts.cachedTokens) throw new EngineError('KAIL_E_INVALID_ARG', 'a prompt cache file and the tokens a sequence holds cannot be combined');
  if (opts.speculative && opts.contextShift) throw new EngineError('KAIL_E_INVALID_ARG', 'context shift cannot be combined with speculative decoding here (the draft keeps its own cache)');
  if (model.encoderDecoder && (opts.speculative || opts.promptCache || opts.cachedTokens || opts.contextShift))
    throw new EngineError('KAIL_E_UNSUPPORTED', `${model.path}: an encoder-decoder model (${model.hparams.arch}) encodes its prompt whole: speculative decoding, prompt caches and context shift cannot apply`);
  if (opts.speculative) return generateSpeculative(model, prompt, maxTokens, seq, opts.speculative, opts);
  const sampler = createSampler(opts.sampling ?? {});
  const o = startOutput(model, prompt, opts);
  const { stop, decoder, history, out, emit } = o;
  const constraint = opts.grammar ? grammarConstraint(model, opts.grammar, o.eog) : opts.jsonSchema ? jsonConstraint(model, opts.jsonSchema, o.eog) : null;

  const t0 = performance.now();
  if (!opts.cachedTokens) model.truncate(seq, 0);
  const cached = opts.promptCache
    ? restorePromptCache(model, seq, prompt, opts.promptCache.file)
    : opts.cachedTokens
      ? keepSharedStart(model, seq, prompt, opts.cachedTokens)
      : 0;
  let logits = await model.evaluate(seq, prompt.slice(cached), 'last');
  if (opts.promptCache && !opts.promptCache.readOnly) writeSlotFile(opts.promptCache.file, model, prompt, model.loraScales.join(','), model.saveSequence(seq));
  const t1 = performance.now();
  let finish: GenerateResult['finishReason'] = 'length';
  let stopWord: string | undefined;
  let rng = (opts.sampling?.seed ?? 1) >>> 0 || 1;
  let decodeMs = 0;
  let decodes = 0;
  let shifted = 0;
  for (let i = 0; i < maxTokens; i++) {
    if (opts.signal?.aborted) {
      finish = 'cancelled';
      break;
    }
    const sample = (row: Float32Array) => sampler.sample(row, history);
    const { token } = constraint ? constraint.draw(logits, sample) : sample(logits);
    sampler.accept?.(token);
    out.push(token);
    history.push(token);
    const step = stop.pushToken(token, decoder.push(token));
    emit(step.text);
    if (step.done) {
      finish = 'stop';
      if (step.reason === 'stop') stopWord = step.stop;
      break;
    }
    if (i + 1 === maxTokens) break;
    // (An encoder-decoder's cache holds the decoder's start token too: prompt + generated tokens may fill the context.)
    if (model.runtime.seqLen(seq) - (model.encoderDecoder ? 1 : 0) + 1 >= model.nCtx) {
      const span = opts.contextShift && contextShiftSpan(model.tokenizer.vocab, prompt, model.runtime.seqLen(seq), model.nCtx, opts.contextShift);
      if (!span || span.discard <= 0) break;
      model.shiftContext(seq, span.keep, span.discard);
      shifted += span.discard;
    }
    let next = token;
    if (opts.feed === 'random') {
      rng ^= rng << 13; rng >>>= 0; rng ^= rng >>> 17; rng ^= rng << 5; rng >>>= 0;
      next = rng % model.nVocab;
    }
    const td = performance.now();
    logits = await model.evaluate(seq, [next], 'last');
    decodeMs += performance.now() - td;
    decodes++;
  }
  if (finish !== 'stop') emit(stop.push(decoder.flush()).text + stop.flush());
  const t2 = performance.now();
  // The cache holds the prompt and every generated token fed back (the last one never is).
  // (An encoder-decoder's cache holds the decoder's start token after the prompt.)
  const cacheTokens = shifted === 0 && opts.feed !== 'random' && !model.encoderDecoder ? [...prompt, ...out].slice(0, model.runtime.seqLen(seq)) : [];
  const pc = opts.promptCache;
  if (pc?.all && !pc.readOnly && cacheTokens.length) writeSlotFile(pc.file, model, cacheTokens, model.loraScales.join(','), model.saveSequence(seq));
  const promptMs = t1 - t0;
  const generationMs = t2 - t1;
  return {
    tokens: out,
    text: o.text,
    finishReason: finish,
    stopWord,
    promptTokens: prompt.length,
    promptCached: cached,
    cacheTokens,
    contextShifted: shifted,
    promptMs,
    generationMs,
    promptTps: (prompt.length - cached) / (promptMs / 1000),
    genTps: decodes > 0 ? decodes / (decodeMs / 1000) : 0,
  };
}

/**
 * The speculative loop: the prompt but its last token is prefilled, then each step verifies
 * [pending, drafts…] in one target pass and commits 1..k+1 tokens, fed one by one through the
 * same stop matcher, so EOG, stop strings and maxTokens cut exactly where they would without
 * speculation (committed tokens past the cut are dropped).
 */
async function generateSpeculative(
  model: EngineModel,
  prompt: readonly number[],
  maxTokens: number,
  seq: number,
  spec: SpeculativeDecoder,
  opts: GenerateOptions,
): Promise<GenerateResult> {
  if (spec.target !== model) throw new EngineError('KAIL_E_INVALID_ARG', 'the speculative decoder was made for another target model');
  if (opts.feed === 'random') throw new EngineError('KAIL_E_INVALID_ARG', "feed 'random' cannot be combined with speculative decoding");
  model.truncate(seq, 0);
  const draftSeq = spec.draft === model ? seq + 1 : spec.mtp ? seq : 0;
  const s = spec.begin(seq, opts.sampling ?? {}, draftSeq);
  try {
    return await runSpeculative(model, prompt, maxTokens, seq, spec, s, opts);
  } finally {
    // (The rollback checkpoints a recurrent target and draft kept for this run.)
    model.keepRollback(seq, false);
    spec.draft?.keepRollback(draftSeq, false);
  }
}

async function runSpeculative(
  model: EngineModel,
  prompt: readonly number[],
  maxTokens: number,
  seq: number,
  spec: SpeculativeDecoder,
  s: SpeculativeSequence,
  opts: GenerateOptions,
): Promise<GenerateResult> {
  const before = spec.stats();
  const o = startOutput(model, prompt, opts);
  const { stop, decoder, history, out, emit } = o;
  const t0 = performance.now();
  if (prompt.length > 1) {
    const pre = prompt.slice(0, -1);
    // An MTP draft reads the target's hidden state of every position.
    if (s.needsHidden) s.recordHidden(0, (await model.evaluateWithHidden(seq, pre, 'last')).hidden, pre.length);
    else await model.evaluate(seq, pre, 'last');
  }
  const t1 = performance.now();
  let finish: GenerateResult['finishReason'] = 'length';
  let stopWord: string | undefined;
  // The first target pass also finishes the prompt: tokens/s counts what came after it.
  let tFirst = 0;
  let firstCount = -1;
  loop: while (out.length < maxTokens && history.length < model.nCtx) {
    if (opts.signal?.aborted) {
      finish = 'cancelled';
      break;
    }
    const maxNew = Math.min(maxTokens - out.length, model.nCtx - history.length);
    const { tokens } = await s.step(history, maxNew);
    if (firstCount < 0) {
      tFirst = performance.now();
      firstCount = Math.min(tokens.length, maxTokens);
    }
    for (const token of tokens) {
      out.push(token);
      history.push(token);
      const st = stop.pushToken(token, decoder.push(token));
      emit(st.text);
      if (st.done) {
        finish = 'stop';
        if (st.reason === 'stop') stopWord = st.stop;
        break loop;
      }
      if (out.length >= maxTokens || history.length >= model.nCtx) break loop;
    }
  }
  if (finish !== 'stop') emit(stop.push(decoder.flush()).text + stop.flush());
  const t2 = performance.now();
  const after = spec.stats();
  const promptMs = t1 - t0;
  const decodeMs = tFirst ? t2 - tFirst : 0;
  return {
    tokens: out,
    text: o.text,
    finishReason: finish,
    stopWord,
    promptTokens: prompt.length,
    promptMs,
    generationMs: t2 - t1,
    promptTps: prompt.length / (promptMs / 1000),
    genTps: decodeMs > 0 && out.length > firstCount ? (out.length - firstCount) / (decodeMs / 1000) : 0,
    cacheTokens: [],
    speculative: diffStats(before, after),
  };
}

function diffStats(a: SpeculativeStats, b: SpeculativeStats): SpeculativeStats {
  const drafted = b.draftedTokens - a.draftedTokens;
  const accepted = b.acceptedTokens - a.acceptedTokens;
  const passes = b.targetPasses - a.targetPasses;
  const committed = b.committedTokens - a.committedTokens;
  return {
    ...b,
    draftedTokens: drafted,
    acceptedTokens: accepted,
    targetPasses: passes,
    committedTokens: committed,
    tokensPerPass: passes ? committed / passes : 0,
    acceptanceRate: drafted ? accepted / drafted : 0,
    timeSavedSeconds: b.timeSavedSeconds - a.timeSavedSeconds,
    verifySeconds: b.verifySeconds - a.verifySeconds,
    draftSeconds: b.draftSeconds - a.draftSeconds,
  };
}
