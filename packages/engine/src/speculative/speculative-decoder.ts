import nodePath from 'node:path';

import { EngineError } from '../errors';
import type { engine as pb } from '@kailstream/proto';

import { EngineModel, draftLayersOf, eagle3LayersOf, isGemma4AssistantFile, type LoadModelOptions } from '../model/model';
import { dflashRow } from '../model/architectures/dflash';
import { Mt19937, foldSeed } from '../sampling/rng';
import type { OutputConstraint } from '../sampling/json-constraint';
import { createSampler, isGreedy, type ResolvedSamplerParams, type Sampler, type SamplerParams } from '../sampling/sampler';
import { lookupDraft, type LookupOptions } from './ngram-lookup';
import { checkVocabCompatible } from './vocab-check';

/** How speculation drafts and how many tokens it drafts per target pass. */
export interface SpeculativeOptions {
  /**
   * A smaller model with the same vocabulary (checked: refused with KAIL_E_INVALID_ARG otherwise).
   * It may be the target itself (an upper bound for benchmarks) when `draftSeq` names another
   * sequence slot. Exactly one of `draft` and `lookup` must be given.
   *
   * An EAGLE-3 draft (an `eagle3` file) drafts from the target's hidden states at its three layers:
   * the target must be loaded with `extractLayers: eagle3LayersOf(draftFile)` (refused with
   * KAIL_E_INVALID_ARG otherwise), and drafting runs as MTP's does (mode 'eagle3').
   *
   * A Gemma 4 assistant draft (a `gemma4-assistant` file loaded with `kvSource: target`) drafts over
   * the target's KV cache from its hidden states (mode 'assistant').
   *
   * A DFlash draft (a `dflash` file) keeps a KV cache of the target's hidden states at its layers
   * (the target loaded with `extractLayers: draftLayersOf(draftFile)`) and drafts a whole block of
   * up to dflash.block_size - 1 tokens in one pass (mode 'dflash').
   */
  draft?: EngineModel;
  /** Prompt-lookup (n-gram) drafting from the context instead of a draft model; true = default n-gram sizes. */
  lookup?: boolean | LookupOptions;
  /**
   * The target file's multi-token-prediction block (DeepSeek-V3 NextN), loaded with
   * `EngineModel.load(target.path, { mtp: true })`: it drafts from the target's own hidden states.
   * Exactly one of `draft`, `lookup` and `mtp` must be given.
   */
  mtp?: EngineModel;
  /** Drafted tokens per target pass to start from; an integer in [1, 32]. Default 4. */
  k?: number;
  /** Let k follow the measured acceptance rate (see `chooseK`). Default true. */
  adaptive?: boolean;
  /** Bounds for the adaptive k; integers, 1 ≤ kMin ≤ k ≤ kMax ≤ 32. Defaults 1 and 12. */
  kMin?: number;
  kMax?: number;
  /**
   * What one drafted token costs relative to one single-token target pass, for the adaptive rule.
   * Default: draft bytes per token / target bytes per token (weights read per token, from the
   * files; for a DFlash draft, which makes a block in one pass, divided by block_size - 1) plus 0.05
   * for the extra verified position; 0.05 for lookup.
   */
  draftCost?: number;
}

/**
 * Speculation counters of one decoder, shaped like the proto's SpeculativeStats
 * (kailstream.engine.v1): drafted_tokens, accepted_tokens, target_passes, tokens_per_pass,
 * current_k, time_saved_seconds.
 */
export interface SpeculativeStats {
  enabled: boolean;
  mode: SpeculativeMode;
  draftedTokens: number;
  acceptedTokens: number;
  /** Target forward passes while decoding (verification passes, and plain steps when nothing was drafted). */
  targetPasses: number;
  /** Tokens committed per target pass (accepted + the one the target adds). */
  tokensPerPass: number;
  /** acceptedTokens / draftedTokens. */
  acceptanceRate: number;
  currentK: number;
  /** Estimated: target time one pass per token would have taken, minus the time spent drafting and verifying. Can be negative. */
  timeSavedSeconds: number;
  /** Measured: time in target verification passes and in drafting. */
  verifySeconds: number;
  draftSeconds: number;
  committedTokens: number;
}

/** A proposal: drafted tokens and, for a sampled draft model, the distribution each was drawn from. */
export interface Draft {
  tokens: number[];
  /** q rows (dense over the vocabulary); null when the drafts are deterministic (greedy or lookup): q is one-hot. */
  q: Float32Array[] | null;
}

export interface VerifyResult {
  /** Tokens to commit: the accepted drafts, then the target's own token. */
  tokens: number[];
  accepted: number;
}

const MAX_K = 32;

/**
 * How drafts are made: a draft model, prompt lookup, the target's multi-token-prediction block, or
 * an EAGLE-3 draft (a `draft` whose file is one) reading the target's hidden states.
 */
export type SpeculativeMode = 'draft' | 'lookup' | 'mtp' | 'eagle3' | 'assistant' | 'dflash';

function checkInt(name: string, v: number, lo: number, hi: number): void {
  if (!Number.isInteger(v) || v < lo || v > hi) throw new EngineError('KAIL_E_INVALID_ARG', `${name} must be an integer in [${lo}, ${hi}], got ${v}`);
}

/**
 * The adaptive rule. With per-token acceptance rate a, drafting k tokens commits on average
 * E(k) = 1 + a + … + a^k tokens per target pass (the accepted run plus the target's own token) and
 * costs about 1 + c·k single-token passes (c = draftCost). k is the value in [kMin, kMax] that
 * maximizes E(k) / (1 + c·k): high acceptance and a cheap draft give long drafts, a draft that is
 * mostly wrong gives k = kMin. Deterministic in the accepted counts (not in timings), so a seed
 * still reproduces a run.
 */
export function chooseK(a: number, c: number, kMin: number, kMax: number): number {
  let best = kMin;
  let bestRate = -1;
  for (let k = kMin; k <= kMax; k++) {
    const e = a >= 1 ? k + 1 : (1 - a ** (k + 1)) / (1 - a);
    const rate = e / (1 + c * k);
    if (rate > bestRate + 1e-12) {
      best = k;
      bestRate = rate;
    }
  }
  return best;
}

/** Draws an index from a dense distribution that sums to ~1. */
function drawFrom(p: Float32Array, u: number, sum = 1): number {
  const target = u * sum;
  let run = 0;
  let last = -1;
  for (let i = 0; i < p.length; i++) {
    if (p[i] <= 0) continue;
    run += p[i];
    last = i;
    if (run > target) return i;
  }
  if (last < 0) throw new EngineError('KAIL_E_INTERNAL', 'speculative sampling: empty distribution');
  return last;
}

/**
 * Speculative decoding for one target model: a drafter (draft model or prompt lookup) proposes k
 * tokens, the target scores all of them in one forward pass with logits for every position, and
 * the rule in `SpeculativeSequence.verify` keeps a prefix of them plus one token of the target's
 * own, so the output has exactly the target's distribution (greedy: exactly its tokens). One
 * decoder serves many sequences (`begin` per sequence) and sums their statistics.
 */
export class SpeculativeDecoder {
  readonly mode: SpeculativeMode;
  readonly draft: EngineModel | null;
  /** The multi-token-prediction model (mode 'mtp'), or the EAGLE-3 draft (mode 'eagle3'). */
  readonly mtp: EngineModel | null;
  readonly adaptive: boolean;
  readonly kMin: number;
  readonly kMax: number;
  readonly initialK: number;
  readonly draftCost: number;
  readonly lookupMaxN: number;
  readonly lookupMinN: number;
  /** The k the most recent sequence step chose (adaptive) or the fixed k. */
  currentK: number;
  private ownsDraft = false;

  private drafted = 0;
  private accepted = 0;
  private passes = 0;
  private committed = 0;
  private verifyMs = 0;
  private draftMs = 0;
  // Pass time against tokens in the pass, for the single-token-pass estimate behind timeSaved.
  private fit = { n: 0, sx: 0, sy: 0, sxx: 0, sxy: 0, ones: 0, onesMs: 0 };
  /** @internal Tokens in the draft model's cache, per draft slot: a new sequence on a slot reuses the common prefix. */
  readonly draftCaches = new Map<number, number[]>();

  constructor(
    readonly target: EngineModel,
    opts: SpeculativeOptions,
  ) {
    const given = opts ? [opts.draft, opts.lookup, opts.mtp].filter(Boolean).length : 0;
    if (given === 0) throw new EngineError('KAIL_E_INVALID_ARG', 'speculative decoding needs a draft model, lookup: true or an MTP model');
    if (given > 1) throw new EngineError('KAIL_E_INVALID_ARG', 'give one of a draft model, lookup and an MTP model');
    const eagle3 = opts.draft?.eagle3 ? opts.draft : null;
    const assistant = opts.draft?.kvSource ? opts.draft : null;
    const dflash = opts.draft?.dflash ? opts.draft : null;
    this.mode = eagle3 ? 'eagle3' : assistant ? 'assistant' : dflash ? 'dflash' : opts.draft ? 'draft' : opts.mtp ? 'mtp' : 'lookup';
    // (EAGLE-3, Gemma 4 assistant and DFlash drafts draft from the target's hidden states as an MTP block does: they take that path.)
    this.draft = eagle3 || assistant || dflash ? null : (opts.draft ?? null);
    this.mtp = eagle3 ?? assistant ?? dflash ?? opts.mtp ?? null;
    if (eagle3) checkEagle3(target, eagle3);
    if (assistant) checkAssistant(target, assistant);
    if (dflash) checkDflash(target, dflash);
    const k = opts.k ?? 4;
    checkInt('speculative k', k, 1, MAX_K);
    this.kMin = opts.kMin ?? Math.min(1, k);
    this.kMax = opts.kMax ?? Math.max(12, k);
    checkInt('kMin', this.kMin, 1, k);
    checkInt('kMax', this.kMax, k, MAX_K);
    this.initialK = this.currentK = k;
    this.adaptive = opts.adaptive ?? true;
    const lk = typeof opts.lookup === 'object' ? opts.lookup : {};
    this.lookupMaxN = lk.maxN ?? 3;
    this.lookupMinN = lk.minN ?? 1;
    checkInt('lookup maxN', this.lookupMaxN, 1, 16);
    checkInt('lookup minN', this.lookupMinN, 1, this.lookupMaxN);
    if (this.draft) {
      if (this.draft !== target) checkVocabCompatible(target.tokenizer, this.draft.tokenizer, { target: target.path, draft: this.draft.path });
      if (this.draft.nVocab !== target.nVocab)
        throw new EngineError('KAIL_E_INVALID_ARG', `the draft model's output has ${this.draft.nVocab} logits, the target's ${target.nVocab}`);
    }
    if (this.mtp && !eagle3 && !assistant && !dflash) {
      if (this.mtp.path !== target.path) throw new EngineError('KAIL_E_INVALID_ARG', `the MTP block must come from the target's own file (${target.path}), not ${this.mtp.path}`);
      if (!this.mtp.runtime.inputWidth) throw new EngineError('KAIL_E_INVALID_ARG', 'the MTP model was not loaded as one (EngineModel.load(path, { mtp: true }))');
      if (target.hiddenWidth !== this.mtp.runtime.inputWidth)
        throw new EngineError(
          'KAIL_E_INVALID_ARG',
          `the target gives ${target.hiddenWidth} hidden floats per token, its MTP block reads ${this.mtp.runtime.inputWidth}` +
            (this.mtp.runtime.inputWidth > target.hiddenWidth ? ' (load the target with nextnHidden: true, the hidden rows its MTP block reads)' : ''),
        );
      if (this.mtp.nSeqMax < target.nSeqMax || this.mtp.nCtx < target.nCtx)
        throw new EngineError('KAIL_E_INVALID_ARG', `the MTP model needs the target's ${target.nSeqMax} sequence slot(s) and context ${target.nCtx}`);
    }
    const bpt = (m: EngineModel) => m.summary.bytesPerToken || 1;
    // (A DFlash draft makes its whole block in one pass: that pass spread over the block's tokens.)
    const perPass = dflash ? Math.max(1, dflash.dflash!.blockSize - 1) : 1;
    this.draftCost = opts.draftCost ?? (this.drafter ? bpt(this.drafter) / bpt(target) / perPass + 0.05 : 0.05);
    if (!(this.draftCost >= 0 && Number.isFinite(this.draftCost))) throw new EngineError('KAIL_E_INVALID_ARG', `draftCost must be a finite number ≥ 0, got ${opts.draftCost}`);
  }

  /**
   * The decoder a model configuration asks for (the proto's LoadModelRequest.draft_path,
   * lookup_decoding, speculative_k): loads the draft file with the target's context, sequence
   * slots and `load` options (default: in RAM, the target's thread count), checks its vocabulary,
   * and owns it (`close()` closes it). Null when neither a draft nor lookup is asked for.
   */
  static fromConfig(
    target: EngineModel,
    cfg: { draftPath?: string; lookup?: boolean; mtp?: boolean; k?: number; adaptive?: boolean },
    load: LoadModelOptions = {},
  ): SpeculativeDecoder | null {
    if ([cfg.draftPath, cfg.lookup, cfg.mtp].filter(Boolean).length > 1) throw new EngineError('KAIL_E_INVALID_ARG', 'give one of a draft model, lookup decoding and MTP drafting');
    const k = cfg.k || undefined;
    if (cfg.lookup) return new SpeculativeDecoder(target, { lookup: true, k, adaptive: cfg.adaptive });
    if (!cfg.draftPath && !cfg.mtp) return null;
    // An EAGLE-3 or DFlash draft reads the target's hidden states at its layers, which the target's program must give.
    const eagle3 = cfg.draftPath ? draftLayersOf(cfg.draftPath) : null;
    const what = cfg.draftPath && eagle3LayersOf(cfg.draftPath) ? 'an EAGLE-3' : 'a DFlash';
    // A Gemma 4 assistant draft reads the target's KV cache: it loads bound to the target.
    const assistant = !!cfg.draftPath && !eagle3 && isGemma4AssistantFile(cfg.draftPath);
    if (eagle3 && !sameLayers(target.extractLayers, eagle3))
      throw new EngineError('KAIL_E_INVALID_ARG', `${cfg.draftPath} is ${what} draft reading target layers [${eagle3.join(', ')}]: load the target with extractLayers [${eagle3.join(', ')}]`);
    // The MTP block is part of the target's file: it loads from there, mapped like the target's weights.
    const draft = cfg.mtp
      ? EngineModel.load(target.path, { threads: target.runtime.nThreads, kvType: load.kvType, kvTypeV: load.kvTypeV, lora: load.lora, nCtx: target.nCtx, nSeqMax: target.nSeqMax, nBatch: target.nBatch, mtp: true })
      : // The target's LoRA adapters are the target's (llama.cpp's --lora too): the draft has none.
        // (An EAGLE-3 or DFlash draft without token_embd / output of its own takes the target's.)
        EngineModel.load(cfg.draftPath!, {
          threads: target.runtime.nThreads,
          ...load,
          lora: undefined,
          nCtx: target.nCtx,
          nSeqMax: target.nSeqMax,
          ...(eagle3 ? { embeddingsFrom: target.path, ramBytes: undefined } : {}),
          ...(assistant ? { kvSource: target, nBatch: target.nBatch, ramBytes: undefined } : {}),
        });
    try {
      const d = new SpeculativeDecoder(target, cfg.mtp ? { mtp: draft, k, adaptive: cfg.adaptive } : { draft, k, adaptive: cfg.adaptive });
      d.ownsDraft = true;
      return d;
    } catch (e) {
      draft.close();
      throw e;
    }
  }

  /** The model that drafts (a draft model or the MTP block); null for lookup. */
  get drafter(): EngineModel | null {
    return this.draft ?? this.mtp;
  }

  /** Closes the draft model when `fromConfig` loaded it. */
  close(): void {
    if (this.ownsDraft) this.drafter?.close();
    this.ownsDraft = false;
  }

  /**
   * Starts a sequence: the target's KV cache of `seq` must hold the history but its last token
   * (see `SpeculativeSequence.step`). `draftSeq` is the draft model's slot (default `seq`; it must
   * differ from `seq` when the draft is the target itself).
   */
  begin(seq: number, sampling: SamplerParams = {}, draftSeq = seq): SpeculativeSequence {
    if (this.draft === this.target && draftSeq === seq) throw new EngineError('KAIL_E_INVALID_ARG', 'a target drafting for itself needs its own sequence slot for the draft (draftSeq ≠ seq)');
    const drafter = this.drafter;
    if (drafter && (draftSeq < 0 || draftSeq >= drafter.nSeqMax))
      throw new EngineError('KAIL_E_INVALID_ARG', `draft sequence slot ${draftSeq} is outside the draft model's ${drafter.nSeqMax} slot(s)`);
    return new SpeculativeSequence(this, seq, draftSeq, sampling);
  }

  stats(): SpeculativeStats {
    const verifyS = this.verifyMs / 1000;
    const draftS = this.draftMs / 1000;
    return {
      enabled: true,
      mode: this.mode,
      draftedTokens: this.drafted,
      acceptedTokens: this.accepted,
      targetPasses: this.passes,
      tokensPerPass: this.passes ? this.committed / this.passes : 0,
      acceptanceRate: this.drafted ? this.accepted / this.drafted : 0,
      currentK: this.currentK,
      timeSavedSeconds: (this.committed * this.singlePassMs()) / 1000 - verifyS - draftS,
      verifySeconds: verifyS,
      draftSeconds: draftS,
      committedTokens: this.committed,
    };
  }

  /**
   * Estimated time of a single-token target pass: the mean of the plain passes when there were
   * any, else the intercept+slope at 1 token of a least-squares line through (tokens, ms) of the
   * verification passes, else (one pass size only) their mean time, which assumes an extra
   * verified position is free (the memory-bound case).
   */
  private singlePassMs(): number {
    const f = this.fit;
    if (f.ones) return f.onesMs / f.ones;
    if (!f.n) return 0;
    const den = f.n * f.sxx - f.sx * f.sx;
    if (den > 1e-9) {
      const slope = (f.n * f.sxy - f.sx * f.sy) / den;
      const icpt = (f.sy - slope * f.sx) / f.n;
      const t1 = icpt + slope;
      if (t1 > 0) return t1;
    }
    return f.sy / f.n;
  }

  /** @internal Counts one target pass of `n` tokens that took `ms` and committed `committed`. */
  record(pass: { n: number; ms: number; drafted: number; accepted: number; committed: number; draftMs: number }): void {
    this.passes++;
    this.drafted += pass.drafted;
    this.accepted += pass.accepted;
    this.committed += pass.committed;
    this.verifyMs += pass.ms;
    this.draftMs += pass.draftMs;
    const f = this.fit;
    if (pass.n === 1) {
      f.ones++;
      f.onesMs += pass.ms;
    } else {
      f.n++;
      f.sx += pass.n;
      f.sy += pass.ms;
      f.sxx += pass.n * pass.n;
      f.sxy += pass.n * pass.ms;
    }
  }
}

/**
 * One sequence's speculation. Invariant between steps: the target's KV cache of `seq` holds
 * every history token but the last (the pending one), which the next verification pass feeds
 * first, so the pass yields logits for the pending position and each drafted one.
 */
export class SpeculativeSequence {
  private readonly targetSampler: Sampler;
  private readonly draftSampler: Sampler;
  private readonly rng: Mt19937;
  private readonly greedy: boolean;
  /** Acceptance rate estimate (moving average) for the adaptive k; null before the first measurement. */
  private rate: number | null = null;
  k: number;
  // MTP: the target's hidden rows for positions [hidBase, hidBase + hid.length) not yet fed to the
  // MTP block, and how many positions of this sequence its cache holds built from the target's own
  // hidden states (drafted positions, built from the block's own, are dropped after each proposal).
  private hid: Float32Array[] = [];
  private hidBase = 0;
  private mtpLen = 0;

  constructor(
    readonly decoder: SpeculativeDecoder,
    readonly seq: number,
    readonly draftSeq: number,
    sampling: SamplerParams,
  ) {
    // Both rows go through the same transforms (penalties, top-k/p, min-p, temperature).
    this.targetSampler = createSampler(sampling);
    if (this.targetSampler.stateful) throw new EngineError('KAIL_E_UNSUPPORTED', 'speculative decoding cannot verify drafts under XTC or Mirostat sampling (their draws change the sampler)');
    this.draftSampler = createSampler({ ...sampling, seed: this.targetSampler.params.seed });
    this.rng = new Mt19937(foldSeed(this.targetSampler.params.seed));
    this.greedy = isGreedy(this.targetSampler.params);
    this.k = decoder.currentK;
    if (decoder.mtp) decoder.mtp.truncate(draftSeq, 0);
    // Recurrent models (Qwen3.5, LFM2) take rejected drafts back from a checkpoint of their states.
    decoder.target.keepRollback(seq, true);
    decoder.draft?.keepRollback(draftSeq, true);
  }

  /** True when drafts come from the target's MTP block or an EAGLE-3 draft, which need the target's hidden rows (`recordHidden`). */
  get needsHidden(): boolean {
    return this.decoder.mode === 'mtp' || this.decoder.mode === 'eagle3' || this.decoder.mode === 'assistant' || this.decoder.mode === 'dflash';
  }

  /**
   * MTP: the target's hidden rows (`n` rows of `width` floats from `rows`, starting at row `from`)
   * for positions start..start+n-1 of this sequence, as its forward passes produce them (the
   * prefill, then each verification pass's accepted rows). Rows for a position recorded again
   * replace the old ones.
   */
  recordHidden(start: number, rows: Float32Array, n: number, from = 0): void {
    if (!this.needsHidden || n <= 0) return;
    const w = this.decoder.target.hiddenWidth;
    if (this.hid.length === 0) this.hidBase = start;
    const at = start - this.hidBase;
    if (at < 0 || at > this.hid.length)
      throw new EngineError('KAIL_E_INTERNAL', `MTP: hidden rows for position ${start} do not follow the ones held (${this.hidBase}..${this.hidBase + this.hid.length - 1})`);
    this.hid.length = at;
    for (let i = 0; i < n; i++) this.hid.push(rows.slice((from + i) * w, (from + i + 1) * w));
  }

  /**
   * @internal MTP catch-up for `history` (pending token last): rows for positions mtpLen..h-1,
   * each the token at p with the target's hidden state of p-1 (zeros at position 0). Consumes the
   * held hidden rows. EAGLE-3 (llama.cpp's draft-eagle3 process()): rows for positions
   * mtpLen..h-2, each the token at p+1 with the target's features of p (the row's first floats;
   * its g_prev part stays zero), so its cache holds one position fewer.
   */
  mtpFeed(history: readonly number[]): { start: number; tokens: number[]; embd: Float32Array } {
    const mtp = this.decoder.mtp!;
    const w = mtp.runtime.inputWidth;
    if (this.decoder.mode === 'assistant') return this.assistantFeed(history, w);
    const sh = this.decoder.mode === 'eagle3' ? 1 : 0;
    const h = history.length;
    const len = h - sh;
    const start = mtp.truncate(this.draftSeq, Math.min(this.mtpLen, mtp.runtime.seqLen(this.draftSeq)));
    const embd = new Float32Array(Math.max(0, len - start) * w);
    for (let p = start; p < len; p++) {
      const src = p - 1 + sh;
      if (src < 0) continue;
      const row = this.hid[src - this.hidBase];
      if (src < this.hidBase || !row)
        throw new EngineError('KAIL_E_INTERNAL', `MTP: no hidden state of the target for position ${src} (held: ${this.hidBase}..${this.hidBase + this.hid.length - 1})`);
      embd.set(row, (p - start) * w);
    }
    // The last target position is h-2; the next pass brings h-1 on.
    this.hid = [];
    this.hidBase = h - 1;
    this.mtpLen = Math.max(start, len);
    return { start, tokens: history.slice(start + sh, Math.max(start + sh, h)), embd };
  }

  /**
   * @internal A Gemma 4 assistant draft (no cache of its own) for `history` (pending token last; the
   * target holds h - 1 positions): one row, the pending token at position h - 1 with the target's
   * hidden state of h - 2; none for a history of one token (a plain step).
   */
  private assistantFeed(history: readonly number[], w: number): { start: number; tokens: number[]; embd: Float32Array } {
    const h = history.length;
    if (h < 2) return { start: h - 1, tokens: [], embd: new Float32Array(0) };
    const src = h - 2;
    const row = this.hid[src - this.hidBase];
    if (src < this.hidBase || !row)
      throw new EngineError('KAIL_E_INTERNAL', `assistant draft: no hidden state of the target for position ${src} (held: ${this.hidBase}..${this.hidBase + this.hid.length - 1})`);
    const embd = Float32Array.from(row.subarray(0, w));
    this.hid = [];
    this.hidBase = h - 1;
    return { start: h - 1, tokens: [history[h - 1]], embd };
  }

  /**
   * @internal A DFlash draft's catch-up for `history` (pending token last; the target holds h - 1
   * positions): the target's feature rows of positions mtpLen..h-2, to be injected into the draft's
   * cache at those positions (llama.cpp's draft-dflash process()). Consumes the held hidden rows.
   */
  dflashFeed(history: readonly number[]): { start: number; rows: Float32Array[] } {
    const m = this.decoder.mtp!;
    const h = history.length;
    const len = h - 1;
    const start = m.truncate(this.draftSeq, Math.min(this.mtpLen, m.runtime.seqLen(this.draftSeq)));
    const rows: Float32Array[] = [];
    for (let p = start; p < len; p++) {
      const row = this.hid[p - this.hidBase];
      if (p < this.hidBase || !row) throw new EngineError('KAIL_E_INTERNAL', `DFlash: no hidden state of the target for position ${p} (held: ${this.hidBase}..${this.hidBase + this.hid.length - 1})`);
      rows.push(row);
    }
    this.hid = [];
    this.hidBase = h - 1;
    this.mtpLen = Math.max(start, len);
    return { start, rows };
  }

  /** @internal After drafting: the MTP cache keeps only positions built from the target's hidden states (an assistant draft keeps none). */
  mtpRollback(): void {
    if (this.decoder.mode === 'assistant') return;
    this.decoder.mtp!.rollback(this.draftSeq, this.mtpLen);
  }

  /** The sampler params in use (seed filled in). */
  get sampling(): Readonly<ResolvedSamplerParams> {
    return this.targetSampler.params;
  }

  /**
   * Drafts up to min(k, maxDraft) tokens to follow `history` (prompt and generated so far, the
   * pending token last). Lookup may find nothing (an empty draft: the step is a plain one).
   */
  async propose(history: readonly number[], maxDraft: number): Promise<Draft> {
    const d = this.decoder;
    const k = this.draftLength(history, maxDraft);
    if (k <= 0) return { tokens: [], q: null };
    if (d.mode === 'lookup') return { tokens: lookupDraft(history, k, d.lookupMaxN, d.lookupMinN), q: null };
    if (d.mtp) return (await proposeMtp([{ seq: this, history, maxDraft }]))[0];
    const draft = d.draft!;
    const out: Draft = { tokens: [], q: this.greedy ? null : [] };
    const ctx = [...history];
    let logits = await draft.evaluate(this.draftSeq, this.syncDraftCache(history), 'last');
    const cache = this.draftCache();
    while (this.pick(logits, ctx, out, k)) {
      const x = out.tokens[out.tokens.length - 1];
      logits = await draft.evaluate(this.draftSeq, [x], 'last');
      cache.push(x);
    }
    return out;
  }

  /** @internal How many tokens to draft now (0: none). */
  draftLength(history: readonly number[], maxDraft: number): number {
    const d = this.decoder;
    const k = Math.min(this.k, maxDraft);
    const drafter = d.drafter;
    return drafter ? Math.min(k, drafter.nCtx - history.length) : k;
  }

  /** @internal The draft model's cache record for this slot (reset when the cache no longer matches it). */
  draftCache(): number[] {
    const d = this.decoder;
    let cache = d.draftCaches.get(this.draftSeq);
    if (!cache || d.draft!.runtime.seqLen(this.draftSeq) !== cache.length) d.draftCaches.set(this.draftSeq, (cache = []));
    return cache;
  }

  /**
   * @internal Truncates the draft's cache to its common prefix with `history` (at most all but the
   * last token) and returns the tokens to feed next, recorded as cached.
   */
  syncDraftCache(history: readonly number[]): number[] {
    const cache = this.draftCache();
    let c = 0;
    while (c < cache.length && c < history.length - 1 && cache[c] === history[c]) c++;
    c = this.decoder.draft!.truncate(this.draftSeq, c);
    cache.length = c;
    const feed = history.slice(c);
    cache.push(...feed);
    return feed;
  }

  /**
   * @internal Draws the next draft token from the draft's logits (greedy: its argmax; sampled: from
   * q, which is kept). True when drafting should go on (fewer than k tokens, no end-of-generation).
   */
  pick(logits: Float32Array, ctx: number[], out: Draft, k: number): boolean {
    let x: number;
    if (out.q) {
      const row = this.draftSampler.probabilities(logits, ctx);
      x = drawFrom(row, this.rng.nextDouble());
      out.q.push(row);
    } else {
      x = this.draftSampler.sample(logits, ctx).token;
    }
    out.tokens.push(x);
    ctx.push(x);
    // Past an end-of-generation token nothing would be used.
    return out.tokens.length < k && !(this.decoder.draft ?? this.decoder.target).tokenizer.isEog(x);
  }

  /**
   * The acceptance rule over the target's rows (k+1 rows of logits: after the pending token and
   * after each drafted one). Greedy: keep drafts while each equals the target's argmax, then add
   * the target's argmax. Sampled (Leviathan et al. / Chen et al.): keep draft x with probability
   * min(1, p(x)/q(x)); at the first rejection draw from max(0, p − q) renormalized; when all are
   * kept, draw the bonus token from the last row's p. p and q are the sampler's distributions
   * (same penalties, truncation, temperature) given the history up to that position.
   *
   * `constraint` (greedy only): the output's constraint, at the pending token; each position's
   * target token is the argmax among the tokens it allows (as plain constrained decoding picks it),
   * and the constraint advances past every committed token.
   */
  verify(history: readonly number[], draft: Draft, logits: Float32Array, constraint: OutputConstraint | null = null): VerifyResult {
    if (constraint && !this.greedy) throw new EngineError('KAIL_E_INTERNAL', 'verify: an output constraint with sampled speculation');
    const nv = this.decoder.target.nVocab;
    const k = draft.tokens.length;
    if (logits.length !== (k + 1) * nv) throw new EngineError('KAIL_E_INTERNAL', `verify: ${logits.length / nv} logit rows for ${k} drafted tokens`);
    const ctx = [...history];
    const out: number[] = [];
    for (let i = 0; i <= k; i++) {
      const row = logits.subarray(i * nv, (i + 1) * nv);
      if (this.greedy) {
        const sample = (r: Float32Array) => this.targetSampler.sample(r, ctx);
        const t = (constraint ? constraint.draw(row, sample) : sample(row)).token;
        out.push(t);
        if (i === k || t !== draft.tokens[i]) return { tokens: out, accepted: i };
        ctx.push(t);
        continue;
      }
      const p = this.targetSampler.probabilities(row, ctx);
      if (i === k) {
        out.push(drawFrom(p, this.rng.nextDouble()));
        return { tokens: out, accepted: k };
      }
      const x = draft.tokens[i];
      const qRow = draft.q?.[i];
      const qx = qRow ? qRow[x] : 1;
      if (p[x] >= qx || this.rng.nextDouble() * qx < p[x]) {
        out.push(x);
        ctx.push(x);
        continue;
      }
      // Rejected: the residual max(0, p − q).
      let sum = 0;
      for (let j = 0; j < nv; j++) {
        const r = p[j] - (qRow ? qRow[j] : j === x ? 1 : 0);
        p[j] = r > 0 ? r : 0;
        sum += p[j];
      }
      out.push(drawFrom(p, this.rng.nextDouble(), sum));
      return { tokens: out, accepted: i };
    }
    throw new EngineError('KAIL_E_INTERNAL', 'unreachable');
  }

  /** Updates the acceptance estimate and, when adaptive, k. */
  adapt(drafted: number, accepted: number): void {
    const d = this.decoder;
    if (drafted > 0) {
      // Per-token acceptance of this pass, as a rate a with a^drafted ≈ chance the run survives;
      // the plain ratio is close enough and stays deterministic.
      const a = accepted / drafted;
      this.rate = this.rate === null ? a : 0.7 * this.rate + 0.3 * a;
    }
    if (d.adaptive && this.rate !== null) this.k = chooseK(Math.min(this.rate, 0.999), d.draftCost, d.kMin, d.kMax);
    d.currentK = this.k;
  }

  /**
   * One speculative step for single-sequence generation: drafts, verifies in one target pass of
   * [pending, drafts…] with logits for every position, commits, and rolls the target's cache back
   * to the accepted length (the draft's cache is synced at the next proposal). Returns 1..k+1
   * tokens; `maxNew` bounds them (max tokens, context).
   */
  async step(history: readonly number[], maxNew: number): Promise<VerifyResult> {
    const target = this.decoder.target;
    const h = history.length;
    if (target.runtime.seqLen(this.seq) !== h - 1)
      throw new EngineError('KAIL_E_INTERNAL', `speculative step: the target cache holds ${target.runtime.seqLen(this.seq)} tokens, expected ${h - 1}`);
    const td = performance.now();
    const draft = await this.propose(history, Math.min(maxNew - 1, target.nCtx - h));
    const tv = performance.now();
    const feed = [history[h - 1], ...draft.tokens];
    let logits: Float32Array;
    let hidden: Float32Array | null = null;
    if (this.needsHidden) ({ logits, hidden } = await target.evaluateWithHidden(this.seq, feed, 'all'));
    else logits = await target.evaluate(this.seq, feed, 'all');
    const ms = performance.now() - tv;
    const res = this.verify(history, draft, logits);
    target.rollback(this.seq, h + res.accepted);
    // The pending token's row and the accepted drafts' rows are the target's hidden states at h-1..h-1+accepted.
    if (hidden) this.recordHidden(h - 1, hidden, res.accepted + 1);
    this.decoder.record({ n: draft.tokens.length + 1, ms, drafted: draft.tokens.length, accepted: res.accepted, committed: res.tokens.length, draftMs: tv - td });
    this.adapt(draft.tokens.length, res.accepted);
    return res;
  }
}

/** The proto's SpeculativeStats (kailstream.engine.v1) for telemetry; `enabled: false` when off. */
export function speculativeStatsToProto(s: SpeculativeStats | null): pb.SpeculativeStats {
  if (!s) return { enabled: false, mode: '', draftedTokens: 0, acceptedTokens: 0, targetPasses: 0, tokensPerPass: 0, currentK: 0, timeSavedSeconds: 0 };
  return {
    enabled: s.enabled,
    mode: s.mode,
    draftedTokens: s.draftedTokens,
    acceptedTokens: s.acceptedTokens,
    targetPasses: s.targetPasses,
    tokensPerPass: s.tokensPerPass,
    currentK: s.currentK,
    timeSavedSeconds: s.timeSavedSeconds,
  };
}

/**
 * Drafts for several sequences of one decoder at once (BatchEngine): with a draft model, one
 * draft forward pass per draft position serves every sequence (catch-up tokens first, then one
 * token each), instead of a pass per sequence and position. The same drafts as calling
 * `propose` for each (every sequence draws from its own random stream). Falls back to one
 * sequence at a time when the catch-up tokens exceed the draft's batch size.
 */
export async function proposeMany(items: { seq: SpeculativeSequence; history: readonly number[]; maxDraft: number }[]): Promise<Draft[]> {
  if (items.length === 0) return [];
  const d = items[0].seq.decoder;
  if (d.mtp) return proposeMtp(items);
  const draft = d.draft;
  const ks = items.map((it) => it.seq.draftLength(it.history, it.maxDraft));
  if (!draft || items.length === 1) return Promise.all(items.map((it) => it.seq.propose(it.history, it.maxDraft)));
  const live = items.map((_, i) => i).filter((i) => ks[i] > 0);
  const drafts: Draft[] = items.map((it) => ({ tokens: [], q: null }));
  const ctxs = items.map((it) => [...it.history]);
  // Catch-up: each live sequence's uncached history, last row of each with output.
  const feeds = new Map<number, number[]>();
  let n = 0;
  for (const i of live) {
    const f = items[i].seq.syncDraftCache(items[i].history);
    feeds.set(i, f);
    n += f.length;
  }
  if (n > draft.nBatch) {
    // The records claim tokens the draft has not evaluated; propose() sees the mismatch and resyncs.
    const out: Draft[] = [];
    for (let i = 0; i < items.length; i++) out.push(ks[i] > 0 ? await items[i].seq.propose(items[i].history, items[i].maxDraft) : drafts[i]);
    return out;
  }
  let active = live;
  let batch = { tokens: [] as number[], pos: [] as number[], seq: [] as number[], output: [] as number[] };
  for (const i of active) {
    const f = feeds.get(i)!;
    const start = items[i].history.length - f.length;
    f.forEach((t, j) => {
      batch.tokens.push(t);
      batch.pos.push(start + j);
      batch.seq.push(items[i].seq.draftSeq);
      batch.output.push(j === f.length - 1 ? 1 : 0);
    });
  }
  const nv = draft.nVocab;
  while (active.length) {
    const logits = await draft.forwardBatch({
      tokens: Int32Array.from(batch.tokens),
      pos: Int32Array.from(batch.pos),
      seq: Int32Array.from(batch.seq),
      output: Uint8Array.from(batch.output),
    });
    const next: number[] = [];
    batch = { tokens: [], pos: [], seq: [], output: [] };
    active.forEach((i, r) => {
      const s = items[i].seq;
      if (drafts[i].tokens.length === 0) drafts[i].q = isGreedy(s.sampling) ? null : [];
      if (!s.pick(logits.subarray(r * nv, (r + 1) * nv), ctxs[i], drafts[i], ks[i])) return;
      const x = drafts[i].tokens[drafts[i].tokens.length - 1];
      batch.tokens.push(x);
      batch.pos.push(ctxs[i].length - 1);
      batch.seq.push(s.draftSeq);
      batch.output.push(1);
      s.draftCache().push(x);
      next.push(i);
    });
    active = next;
  }
  return drafts;
}

/**
 * MTP drafting for several sequences of one decoder (as llama.cpp's draft-mtp does it): first the
 * catch-up rows (each position's token with the target's hidden state of the position before) in
 * passes of at most the MTP model's batch size, whose last row per sequence predicts the first
 * draft token; then one pass per further draft position, each row the last drafted token with the
 * block's own hidden state from the step before. The drafted positions leave the MTP cache after.
 */
export async function proposeMtp(items: { seq: SpeculativeSequence; history: readonly number[]; maxDraft: number }[]): Promise<Draft[]> {
  const dec = items[0].seq.decoder;
  if (dec.mode === 'dflash') return proposeDflash(items);
  const mtp = dec.mtp!;
  const nv = mtp.nVocab;
  const w = mtp.runtime.inputWidth;
  // EAGLE-3: a drafted row's input is [zero features | the step before's pre-norm row], it sits one
  // position before its token, and d2t maps a draft vocabulary's logits into the target's.
  const eagle3 = dec.mode === 'eagle3' ? mtp.eagle3 : null;
  const sh = eagle3 ? 1 : 0;
  const hw = mtp.hiddenWidth;
  const asInput = (hid: Float32Array): Float32Array => {
    if (!eagle3) return hid;
    const row = new Float32Array(w);
    row.set(hid, w - hw);
    return row;
  };
  const toTarget = inTargetVocab(eagle3?.d2t ?? null, dec.target.nVocab);
  const ks = items.map((it) => it.seq.draftLength(it.history, it.maxDraft));
  const live = items.map((_, i) => i).filter((i) => ks[i] > 0);
  const drafts: Draft[] = items.map((it, i) => ({ tokens: [], q: ks[i] > 0 && !isGreedy(it.seq.sampling) ? [] : null }));
  const ctxs = items.map((it) => [...it.history]);
  if (!live.length) return drafts;
  // Catch-up rows of every live sequence, cut into passes of at most nBatch rows.
  type Row = { i: number; token: number; pos: number; embd: Float32Array; last: boolean };
  const rows: Row[] = [];
  for (const i of live) {
    const f = items[i].seq.mtpFeed(items[i].history);
    f.tokens.forEach((token, j) => rows.push({ i, token, pos: f.start + j, embd: f.embd.subarray(j * w, (j + 1) * w), last: j === f.tokens.length - 1 }));
  }
  // (An EAGLE-3 sequence of one token has no row to draft from yet: its step is a plain one.)
  const fed = new Set(rows.map((r) => r.i));
  const lastLogits = new Map<number, Float32Array>();
  const lastHidden = new Map<number, Float32Array>();
  const run = async (batch: Row[]) => {
    const embd = new Float32Array(batch.length * w);
    batch.forEach((r, j) => embd.set(r.embd, j * w));
    const r = await mtp.forwardBatchWithHidden({
      tokens: Int32Array.from(batch.map((x) => x.token)),
      pos: Int32Array.from(batch.map((x) => x.pos)),
      seq: Int32Array.from(batch.map((x) => items[x.i].seq.draftSeq)),
      output: Uint8Array.from(batch.map((x) => (x.last ? 1 : 0))),
      embd,
    });
    let o = 0;
    batch.forEach((x, j) => {
      if (!x.last) return;
      lastLogits.set(x.i, toTarget(r.logits.subarray(o * nv, (o + 1) * nv)));
      lastHidden.set(x.i, asInput(r.hidden.slice(j * hw, (j + 1) * hw)));
      o++;
    });
  };
  try {
    for (let at = 0; at < rows.length; at += mtp.nBatch) await run(rows.slice(at, at + mtp.nBatch));
    let active = live.filter((i) => fed.has(i));
    for (;;) {
      const next: Row[] = [];
      for (const i of active) {
        const s = items[i].seq;
        if (!s.pick(lastLogits.get(i)!, ctxs[i], drafts[i], ks[i])) continue;
        const x = drafts[i].tokens[drafts[i].tokens.length - 1];
        // (An assistant draft's chained rows all sit at the target's length, h - 1.)
        next.push({ i, token: x, pos: dec.mode === 'assistant' ? items[i].history.length - 1 : ctxs[i].length - 1 - sh, embd: lastHidden.get(i)!, last: true });
      }
      if (!next.length) break;
      lastLogits.clear();
      await run(next);
      active = next.map((r) => r.i);
    }
  } finally {
    for (const i of live) items[i].seq.mtpRollback();
  }
  for (const d of drafts) if (d.q && d.tokens.length === 0) d.q = null;
  return drafts;
}

/**
 * A draft vocabulary's logits row into the target's vocabulary of nVocab: -inf outside d2t's ids,
 * as llama.cpp's graph writes them (the row itself without d2t).
 */
function inTargetVocab(d2t: Int32Array | null, nVocab: number): (l: Float32Array) => Float32Array {
  return (l) => {
    if (!d2t) return l;
    const o = new Float32Array(nVocab).fill(-Infinity);
    for (let j = 0; j < d2t.length; j++) o[d2t[j]] = l[j];
    return o;
  };
}

/**
 * DFlash drafting for several sequences of one decoder (llama.cpp's draft-dflash): each sequence's
 * catch-up rows (the target's features of the positions its draft cache lacks, injected into it)
 * and its noise block [pending token, mask x k] at positions h-1..h-1+k, in one pass when they fit
 * the draft's batch (else the catch-up rows first, in passes of at most nBatch); row j of a block
 * (1..k) gives the j-th drafted token. k is at most dflash.block_size - 1. The block leaves the
 * draft's cache after; the injected rows stay.
 */
async function proposeDflash(items: { seq: SpeculativeSequence; history: readonly number[]; maxDraft: number }[]): Promise<Draft[]> {
  const dec = items[0].seq.decoder;
  const m = dec.mtp!;
  const df = m.dflash!;
  const nv = m.nVocab;
  const toTarget = inTargetVocab(df.d2t, dec.target.nVocab);
  const w = m.runtime.inputWidth;
  const d = m.hparams.nEmbd;
  const ks = items.map((it) => Math.min(it.seq.draftLength(it.history, it.maxDraft), df.blockSize - 1, m.nBatch - 1));
  const live = items.map((_, i) => i).filter((i) => ks[i] > 0);
  const drafts: Draft[] = items.map((it, i) => ({ tokens: [], q: ks[i] > 0 && !isGreedy(it.seq.sampling) ? [] : null }));
  if (!live.length) return drafts;
  // feat: an injected row's features; null: a block row (dflashRow).
  type Row = { seq: number; token: number; pos: number; feat: Float32Array | null; out: boolean };
  const ctxRows: Row[] = [];
  const blocks: Row[][] = [];
  try {
    for (const i of live) {
      const s = items[i].seq;
      const f = s.dflashFeed(items[i].history);
      f.rows.forEach((feat, j) => ctxRows.push({ seq: s.draftSeq, token: df.maskToken, pos: f.start + j, feat, out: false }));
      const h = items[i].history.length;
      blocks.push(Array.from({ length: ks[i] + 1 }, (_, j) => ({ seq: s.draftSeq, token: j === 0 ? items[i].history[h - 1] : df.maskToken, pos: h - 1 + j, feat: null, out: j > 0 })));
    }
    const run = (rows: Row[]) => {
      const embd = new Float32Array(rows.length * w);
      rows.forEach((r, j) => dflashRow(embd, j, w, d, r.feat));
      return m.forwardBatch({
        tokens: Int32Array.from(rows.map((r) => r.token)),
        pos: Int32Array.from(rows.map((r) => r.pos)),
        seq: Int32Array.from(rows.map((r) => r.seq)),
        output: Uint8Array.from(rows.map((r) => (r.out ? 1 : 0))),
        embd,
      });
    };
    const nBlock = blocks.reduce((a, b) => a + b.length, 0);
    const passes: Row[][] = [];
    if (ctxRows.length + nBlock <= m.nBatch) passes.push([...ctxRows, ...blocks.flat()]);
    else {
      for (let at = 0; at < ctxRows.length; at += m.nBatch) passes.push(ctxRows.slice(at, at + m.nBatch));
      let cur: Row[] = [];
      for (const b of blocks) {
        if (cur.length + b.length > m.nBatch) {
          passes.push(cur);
          cur = [];
        }
        cur.push(...b);
      }
      if (cur.length) passes.push(cur);
    }
    const rows: Float32Array[] = [];
    for (const pass of passes) {
      const l = await run(pass);
      const n = pass.filter((r) => r.out).length;
      for (let j = 0; j < n; j++) rows.push(toTarget(l.subarray(j * nv, (j + 1) * nv)));
    }
    let o = 0;
    live.forEach((i, bi) => {
      const s = items[i].seq;
      const ctx = [...items[i].history];
      const k = blocks[bi].length - 1;
      for (let j = 0; j < k; j++) if (!s.pick(rows[o + j], ctx, drafts[i], ks[i])) break;
      o += k;
    });
  } finally {
    for (const i of live) items[i].seq.mtpRollback();
  }
  for (const d of drafts) if (d.q && d.tokens.length === 0) d.q = null;
  return drafts;
}

/** A DFlash draft's binding to the target: the layers its hidden rows hold, their width, the vocabulary, the slots. */
function checkDflash(target: EngineModel, draft: EngineModel): void {
  const e = draft.dflash!;
  const what = `the DFlash draft ${draft.path}`;
  checkTargetLayers(target, draft, what, e.targetLayers);
  const nIn = draft.runtime.inputWidth - 2 * draft.hparams.nEmbd;
  if (target.hiddenWidth !== nIn)
    throw new EngineError('KAIL_E_INVALID_ARG', `${what} reads ${nIn} feature floats per position (${e.targetLayers.length} target layers); the target gives ${target.hiddenWidth} (n_embd ${target.hparams.nEmbd})`);
  checkVocabCompatible(target.tokenizer, draft.tokenizer, { target: target.path, draft: draft.path });
  if (draft.hparams.nVocab !== target.nVocab || (!e.d2t && draft.nVocab !== target.nVocab))
    throw new EngineError('KAIL_E_INVALID_ARG', `${what} has ${draft.hparams.nVocab} tokens and ${draft.nVocab} logits, the target's vocabulary ${target.nVocab}`);
  if (draft.nSeqMax < target.nSeqMax || draft.nCtx < target.nCtx)
    throw new EngineError('KAIL_E_INVALID_ARG', `${what} needs the target's ${target.nSeqMax} sequence slot(s) and context ${target.nCtx}`);
}

/** A Gemma 4 assistant draft's binding: loaded over this target's cache, its hidden rows, the vocabulary, the slots. */
function checkAssistant(target: EngineModel, draft: EngineModel): void {
  const what = `the Gemma 4 assistant draft ${draft.path}`;
  if (draft.kvSource !== target) throw new EngineError('KAIL_E_INVALID_ARG', `${what} was loaded over the KV cache of ${draft.kvSource!.path}, not of this target ${target.path}`);
  if (target.hiddenWidth !== draft.runtime.inputWidth)
    throw new EngineError('KAIL_E_INVALID_ARG', `${what} reads target hidden states of ${draft.runtime.inputWidth} floats; the target gives ${target.hiddenWidth}`);
  checkVocabCompatible(target.tokenizer, draft.tokenizer, { target: target.path, draft: draft.path });
  if (draft.nVocab !== target.nVocab) throw new EngineError('KAIL_E_INVALID_ARG', `${what} has ${draft.nVocab} logits, the target's vocabulary ${target.nVocab}`);
  if (draft.nSeqMax < target.nSeqMax || draft.nCtx < target.nCtx)
    throw new EngineError('KAIL_E_INVALID_ARG', `${what} needs the target's ${target.nSeqMax} sequence slot(s) and context ${target.nCtx}`);
}

function sameLayers(a: readonly number[] | null, b: readonly number[]): boolean {
  return !!a && a.length === b.length && a.every((x, i) => x === b[i]);
}

/**
 * What a draft that reads the target's hidden states (EAGLE-3, DFlash) needs of it: the layers it
 * reads exist and the target extracts exactly those, and the token_embd / output it borrows are
 * this target's.
 */
function checkTargetLayers(target: EngineModel, draft: EngineModel, what: string, layers: readonly number[]): void {
  for (const il of layers)
    if (il >= target.hparams.nLayer) throw new EngineError('KAIL_E_INVALID_ARG', `${what} reads target layer ${il}; the target has layers 0..${target.hparams.nLayer - 1}`);
  if (draft.embeddingsFrom && draft.embeddingsFrom !== nodePath.resolve(target.path))
    throw new EngineError('KAIL_E_INVALID_ARG', `${what} takes token_embd / output from ${draft.embeddingsFrom}, not from the target ${target.path}`);
  if (!sameLayers(target.extractLayers, layers))
    throw new EngineError('KAIL_E_INVALID_ARG', `${what} reads target layers [${layers.join(', ')}]: load the target with extractLayers [${layers.join(', ')}] (it has ${target.extractLayers ? `[${target.extractLayers.join(', ')}]` : 'none'})`);
}

/** An EAGLE-3 draft's binding to the target: the layers its hidden rows hold, their width, the vocabulary. */
function checkEagle3(target: EngineModel, draft: EngineModel): void {
  const e = draft.eagle3!;
  const what = `the EAGLE-3 draft ${draft.path}`;
  if (target.hparams.nEmbd !== e.targetDim) throw new EngineError('KAIL_E_INVALID_ARG', `${what} reads target hidden states of ${e.targetDim} floats (eagle3.target_hidden_size); the target's n_embd is ${target.hparams.nEmbd}`);
  checkTargetLayers(target, draft, what, e.targetLayers);
  if (target.hiddenWidth !== 3 * e.targetDim || draft.runtime.inputWidth !== 3 * e.targetDim + draft.hparams.nEmbd)
    throw new EngineError('KAIL_E_INTERNAL', `EAGLE-3: the target gives ${target.hiddenWidth} hidden floats per token, the draft reads ${draft.runtime.inputWidth}`);
  checkVocabCompatible(target.tokenizer, draft.tokenizer, { target: target.path, draft: draft.path });
  if (draft.hparams.nVocab !== target.nVocab) throw new EngineError('KAIL_E_INVALID_ARG', `${what} embeds ${draft.hparams.nVocab} tokens, the target's vocabulary has ${target.nVocab}`);
  if (draft.nSeqMax < target.nSeqMax || draft.nCtx < target.nCtx)
    throw new EngineError('KAIL_E_INVALID_ARG', `${what} needs the target's ${target.nSeqMax} sequence slot(s) and context ${target.nCtx}`);
}
