import { EngineError } from './errors';
import type { EngineModel } from './model/model';
import { createSampler, type SamplerParams } from './sampling/sampler';
import { StopMatcher } from './sampling/stop';

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
}

export interface GenerateResult {
  tokens: number[];
  text: string;
  finishReason: 'stop' | 'length' | 'cancelled';
  promptTokens: number;
  promptMs: number;
  generationMs: number;
  /** Prompt tokens per second. */
  promptTps: number;
  /** Decode forward passes per second (llama.cpp's eval rate). */
  genTps: number;
}

/** Evaluates the prompt, then samples tokens one at a time until EOG, a stop string or maxTokens. */
export async function generate(model: EngineModel, prompt: readonly number[], opts: GenerateOptions = {}): Promise<GenerateResult> {
  const maxTokens = opts.maxTokens ?? 128;
  if (!Number.isInteger(maxTokens) || maxTokens < 0) throw new EngineError('KAIL_E_INVALID_ARG', `maxTokens must be a non-negative integer, got ${maxTokens}`);
  if (prompt.length === 0) throw new EngineError('KAIL_E_INVALID_ARG', 'the prompt is empty');
  if (prompt.length + maxTokens > model.nCtx && prompt.length >= model.nCtx)
    throw new EngineError('KAIL_E_CONTEXT_OVERFLOW', `the prompt has ${prompt.length} tokens; the context holds ${model.nCtx}`);
  const seq = opts.seq ?? 0;
  model.truncate(seq, 0);
  const sampler = createSampler(opts.sampling ?? {});
  const eog = new Set<number>();
  for (let id = 0; id < model.nVocab; id++) if (model.tokenizer.isEog(id)) eog.add(id);
  const stop = new StopMatcher({ stop: opts.stop, eogTokens: eog });
  const decoder = model.tokenizer.createStreamDecoder();
  const history: number[] = [...prompt];
  const out: number[] = [];
  let text = '';
  const emit = (t: string) => {
    if (!t) return;
    text += t;
    opts.onText?.(t);
  };

  const t0 = performance.now();
  let logits = await model.evaluate(seq, prompt, 'last');
  const t1 = performance.now();
  let finish: GenerateResult['finishReason'] = 'length';
  let rng = (opts.sampling?.seed ?? 1) >>> 0 || 1;
  let decodeMs = 0;
  let decodes = 0;
  for (let i = 0; i < maxTokens; i++) {
    if (opts.signal?.aborted) {
      finish = 'cancelled';
      break;
    }
    const { token } = sampler.sample(logits, history);
    out.push(token);
    history.push(token);
    const step = stop.pushToken(token, decoder.push(token));
    emit(step.text);
    if (step.done) {
      finish = 'stop';
      break;
    }
    if (i + 1 === maxTokens || model.runtime.seqLen(seq) + 1 >= model.nCtx) break;
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
  const promptMs = t1 - t0;
  const generationMs = t2 - t1;
  return {
    tokens: out,
    text,
    finishReason: finish,
    promptTokens: prompt.length,
    promptMs,
    generationMs,
    promptTps: prompt.length / (promptMs / 1000),
    genTps: decodes > 0 ? decodes / (decodeMs / 1000) : 0,
  };
}
