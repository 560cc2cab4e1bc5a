import type { NativeExpertStreamStats } from '@kailstream/core-native';

import { EngineError } from '../errors';
import type { EngineModel } from '../model/model';
import { summarizeStream } from '../model/stream-summary';
import { createSampler, type SamplerParams } from '../sampling/sampler';
import type { SpeculativeDecoder, SpeculativeStats } from './speculative-decoder';

export interface SpecBenchOptions {
  prompt: readonly number[];
  /** Tokens to generate (end-of-generation tokens do not stop it). */
  genTokens: number;
  sampling?: SamplerParams;
  /** Without it: one target pass per token (the baseline). */
  speculative?: SpeculativeDecoder;
  /** Target sequence slot. Default 0; a target drafting for itself uses seq + 1. */
  seq?: number;
}

export interface SpecBenchResult {
  tokens: number[];
  genTokens: number;
  ms: number;
  tokensPerSecond: number;
  targetPasses: number;
  /** Expert bytes the target read from storage during generation; null in RAM. */
  bytesRead: number | null;
  bytesReadPerToken: number | null;
  hitRate: number | null;
  speculative: SpeculativeStats | null;
}

/**
 * Times generation alone, from the same state with and without speculation: the prompt but its
 * last token is prefilled (not timed), then every generated token costs one target pass
 * (baseline) or each verification pass commits 1..k+1 (speculative). Expert bytes read come from
 * the target's streaming counters over the timed part.
 */
export async function benchmarkSpeculative(model: EngineModel, opts: SpecBenchOptions): Promise<SpecBenchResult> {
  const { prompt, genTokens } = opts;
  if (prompt.length < 1) throw new EngineError('KAIL_E_INVALID_ARG', 'the prompt is empty');
  if (prompt.length + genTokens > model.nCtx) throw new EngineError('KAIL_E_CONTEXT_OVERFLOW', `${prompt.length} + ${genTokens} tokens do not fit the context of ${model.nCtx}`);
  const seq = opts.seq ?? 0;
  model.truncate(seq, 0);
  const history = [...prompt];
  const spec = opts.speculative;
  const seqState = spec?.begin(seq, opts.sampling ?? {}, spec.draft === model ? seq + 1 : seq);
  if (prompt.length > 1) {
    const pre = prompt.slice(0, -1);
    // An MTP draft reads the target's hidden state of every position (as generate records them).
    if (seqState?.needsHidden) seqState.recordHidden(0, (await model.evaluateWithHidden(seq, pre, 'last')).hidden, pre.length);
    else await model.evaluate(seq, pre, 'last');
  }
  // Warm the draft's cache with the prompt too, so drafting time is generation time only.
  if (seqState && spec?.draft) await seqState.propose(history, 1);
  const statsBefore = spec?.stats();
  const streamBefore = model.runtime.stats().stream;
  const sampler = createSampler(opts.sampling ?? {});
  let passes = 0;
  const t0 = performance.now();
  while (history.length - prompt.length < genTokens) {
    const left = genTokens - (history.length - prompt.length);
    if (seqState) {
      history.push(...(await seqState.step(history, left)).tokens.slice(0, left));
    } else {
      const logits = await model.evaluate(seq, [history[history.length - 1]], 'last');
      history.push(sampler.sample(logits, history).token);
    }
    passes++;
  }
  const ms = performance.now() - t0;
  const streamAfter = model.runtime.stats().stream;
  const st = streamDelta(streamBefore, streamAfter);
  let stats: SpeculativeStats | null = null;
  if (spec && statsBefore) {
    const a = spec.stats();
    const drafted = a.draftedTokens - statsBefore.draftedTokens;
    const accepted = a.acceptedTokens - statsBefore.acceptedTokens;
    const committed = a.committedTokens - statsBefore.committedTokens;
    stats = {
      ...a,
      draftedTokens: drafted,
      acceptedTokens: accepted,
      targetPasses: passes,
      committedTokens: committed,
      tokensPerPass: committed / passes,
      acceptanceRate: drafted ? accepted / drafted : 0,
      verifySeconds: a.verifySeconds - statsBefore.verifySeconds,
      draftSeconds: a.draftSeconds - statsBefore.draftSeconds,
      timeSavedSeconds: a.timeSavedSeconds - statsBefore.timeSavedSeconds,
    };
  }
  return {
    tokens: history.slice(prompt.length),
    genTokens,
    ms,
    tokensPerSecond: genTokens / (ms / 1000),
    targetPasses: passes,
    bytesRead: st ? st.bytesRead : null,
    bytesReadPerToken: st ? st.bytesRead / genTokens : null,
    hitRate: st ? st.hitRate : null,
    speculative: stats,
  };
}

function streamDelta(before: NativeExpertStreamStats | null, after: NativeExpertStreamStats | null) {
  if (!before || !after) return null;
  return summarizeStream(after, before);
}
