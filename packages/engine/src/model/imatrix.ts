// Importance matrix of a model over a text, computed as llama.cpp's `llama-imatrix` computes it
// (tools/imatrix/imatrix.cpp, written again here): the tokens (BOS added when the vocabulary asks
// for it) are cut into chunks of n_ctx, each evaluated from an empty cache with its first token
// replaced by BOS, as llama-perplexity does; while they run, the native core adds each weight
// matrix's input rows to per-column sums of squares (model::imatrix_collect: per expert for
// routed experts, dense weights in passes of 16 rows or more). Kept, as llama-imatrix keeps them:
// the weights of the blocks (names blk.*), and output.weight when asked. The perplexity of each
// chunk's second half comes along, as llama-imatrix prints it.
//
// `kail quantize --imatrix` (tools/src/gguf/quantize.ts) reads the file this is written to.
import { EngineError } from '../errors';
import type { EngineModel } from './model';
import { chunksLogits, chunksPerPass, NllAccumulator, perplexityChunks } from './perplexity';

export interface ImatrixOptions {
  /** Tokens per chunk (llama-imatrix's -c, default 512). */
  nCtx: number;
  /** At most this many chunks (default: every whole chunk). */
  maxChunks?: number;
  /**
   * Skip the text's first chunks (llama-imatrix's --chunk / --from-chunk): its first
   * fromChunk x nCtx tokens are left out, and at least two chunks must remain.
   */
  fromChunk?: number;
  /**
   * Tokens per forward pass (default: the model's). When it holds several chunks (and the model
   * has the sequences), they share a pass, a sequence each, as llama-imatrix's n_seq = n_batch /
   * n_ctx: a streamed expert is read once for all of them. The statistics are the same bits.
   */
  nBatch?: number;
  /** Keep output.weight's statistics too (llama-imatrix --process-output). */
  processOutput?: boolean;
  /** Score each chunk's second half (llama-imatrix's default; --no-ppl turns it off). */
  computePpl?: boolean;
  /**
   * After each chunk: chunks done, of how many, the running perplexity (NaN without it), a
   * snapshot of the statistics so far (the kept weights, as the result gives them; collection
   * goes on undisturbed: llama-imatrix's periodic saves), and on the last chunk of a pass the
   * chunks that pass added (0 on the others: the snapshot then already holds the whole pass).
   */
  onChunk?: (chunk: number, nChunks: number, ppl: number, snapshot: () => ImatrixResult['entries'], step: number) => void;
}

export interface ImatrixResult {
  /** Per weight name: n_mat * ne0 sums of squares and n_mat counts (rows summed). */
  entries: Map<string, { sums: Float32Array; counts: number[] }>;
  chunks: number;
  nCtx: number;
  /** Perplexity over the chunks' second halves (NaN with computePpl false). */
  ppl: number;
  seconds: number;
}

/** The weights llama-imatrix keeps: the blocks' (blk.*), and output.weight when asked. */
function kept(got: Record<string, { sums: Float32Array; counts: Float64Array }>, processOutput?: boolean): ImatrixResult['entries'] {
  const out: ImatrixResult['entries'] = new Map();
  for (const [name, e] of Object.entries(got)) {
    if (!(name.startsWith('blk.') || (processOutput && name === 'output.weight'))) continue;
    out.set(name, { sums: e.sums, counts: Array.from(e.counts) });
  }
  return out;
}

/** llama-imatrix's collection over `tokens` (already tokenized, BOS included as the vocabulary adds it). */
export async function computeImatrix(model: EngineModel, tokens: readonly number[], opts: ImatrixOptions): Promise<ImatrixResult> {
  const { nCtx } = opts;
  if (nCtx > model.nCtx) throw new EngineError('KAIL_E_INVALID_ARG', `imatrix: chunks of ${nCtx} tokens do not fit the model's context of ${model.nCtx}`);
  const v = model.tokenizer.vocab;
  const skip = opts.fromChunk ?? 0;
  if (!Number.isInteger(skip) || skip < 0) throw new EngineError('KAIL_E_INVALID_ARG', `imatrix: the first chunk must be a non-negative integer, got ${skip}`);
  if (skip > 0 && (skip + 2) * nCtx >= tokens.length)
    throw new EngineError('KAIL_E_INVALID_ARG', `imatrix: the text's ${tokens.length} tokens leave too few after removing ${skip} chunks of ${nCtx} (at least two must remain)`);
  const chunks = perplexityChunks(skip ? tokens.slice(skip * nCtx) : tokens, nCtx, v.addBos ? v.special.bos : null, opts.maxChunks);
  const computePpl = opts.computePpl ?? true;
  const first = Math.floor(nCtx / 2);
  const acc = new NllAccumulator();
  const entries = new Map<string, { sums: Float32Array; counts: number[] }>();
  const t0 = performance.now();
  const seq = 0;
  const perPass = chunksPerPass(model, nCtx, opts.nBatch);
  model.collectImatrix(true);
  try {
    for (let i = 0; i < chunks.length; i += perPass) {
      const group = chunks.slice(i, i + perPass);
      // (Every row's logits, as llama-imatrix asks for them: output.weight sees the whole chunk.)
      let all: Float32Array[];
      if (group.length > 1) all = await chunksLogits(model, group, true);
      else {
        model.truncate(seq, 0);
        all = [await model.evaluate(seq, group[0], 'all', Math.min(opts.nBatch ?? model.nBatch, model.nBatch))];
      }
      group.forEach((c, g) => {
        if (computePpl) acc.addRows(all[g].subarray(first * model.nVocab), model.nVocab, c.slice(first + 1));
        opts.onChunk?.(i + g + 1, chunks.length, computePpl ? acc.ppl : NaN, () => kept(model.takeImatrix(false), opts.processOutput), g === group.length - 1 ? group.length : 0);
      });
    }
  } finally {
    for (let s = 0; s < perPass; s++) model.truncate(s, 0);
    const got = model.takeImatrix();
    model.collectImatrix(false);
    for (const [name, e] of kept(got, opts.processOutput)) entries.set(name, e);
  }
  return { entries, chunks: chunks.length, nCtx, ppl: computePpl ? acc.ppl : NaN, seconds: (performance.now() - t0) / 1000 };
}
