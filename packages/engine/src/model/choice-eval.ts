// Multiple-choice evaluation, as llama-perplexity's --hellaswag and --winogrande run it: each task
// is a few candidate token sequences that share a start (the context); the shared start is
// computed once, in one sequence, copied into one sequence per candidate, and each candidate's own
// tokens are computed in its sequence. Tasks share forward passes (a sequence per candidate), so
// under a RAM budget an expert read once serves every task of the pass.
import { EngineError } from '../errors';
import type { EngineModel } from './model';

/** The logits of one task's candidates, for scoring. */
export interface ChoiceRows {
  /** Tokens every candidate starts with (at least 1, fewer than any candidate has). */
  prefix: number;
  /**
   * The logits predicting the token after position `pos` of candidate `c`: pos from prefix - 1
   * (the shared start's last token, the same row for every candidate) to the candidate's last.
   */
  row(c: number, pos: number): Float32Array;
}

export interface ChoiceEvalOptions {
  /** Tokens one pass may hold: tasks join a pass while their tokens fit (at least one task a pass). */
  tokensPerPass: number;
  /** Called for each task, in order, with its logits (valid during the call only). */
  onTask: (index: number, rows: ChoiceRows) => void;
}

/** Tokens at the start of every candidate, kept below the shortest so each candidate scores a token of its own. */
export function sharedStart(candidates: readonly (readonly number[])[]): number {
  const shortest = Math.min(...candidates.map((c) => c.length));
  let n = 0;
  while (n < shortest - 1 && candidates.every((c) => c[n] === candidates[0][n])) n++;
  return n;
}

interface Row {
  token: number;
  pos: number;
  seq: number;
  output: boolean;
}

/** Runs rows in passes of at most nBatch; the logits of the rows with output, in order. */
async function runRows(model: EngineModel, rows: readonly Row[]): Promise<Float32Array> {
  const nOut = rows.reduce((a, r) => a + (r.output ? 1 : 0), 0);
  const out = new Float32Array(nOut * model.nVocab);
  let written = 0;
  for (let i = 0; i < rows.length; i += model.nBatch) {
    const part = rows.slice(i, i + model.nBatch);
    const logits = await model.forwardBatch({
      tokens: Int32Array.from(part, (r) => r.token),
      pos: Int32Array.from(part, (r) => r.pos),
      seq: Int32Array.from(part, (r) => r.seq),
      output: Uint8Array.from(part, (r) => (r.output ? 1 : 0)),
    });
    out.set(logits, written);
    written += logits.length;
  }
  return out;
}

/**
 * Computes every task's candidates (token sequences, BOS in place) and hands each task's logits to
 * opts.onTask. A task needs one sequence per candidate: the model's nSeqMax bounds the tasks a pass
 * takes. Returns the seconds spent in forward passes and the passes' count.
 */
export async function evaluateChoiceTasks(model: EngineModel, tasks: readonly (readonly (readonly number[])[])[], opts: ChoiceEvalOptions): Promise<{ seconds: number; groups: number }> {
  const nv = model.nVocab;
  const prefixes = tasks.map((cands, i) => {
    if (cands.length < 2) throw new EngineError('KAIL_E_INVALID_ARG', `task ${i + 1}: ${cands.length} candidate(s); a task needs at least two`);
    if (cands.length > model.nSeqMax) throw new EngineError('KAIL_E_INVALID_ARG', `task ${i + 1}: ${cands.length} candidates need as many sequences; the model was loaded with ${model.nSeqMax} (-np)`);
    for (const c of cands) {
      if (c.length > model.nCtx) throw new EngineError('KAIL_E_INVALID_ARG', `task ${i + 1}: a candidate of ${c.length} tokens does not fit the context of ${model.nCtx} (-c)`);
      for (const t of c) if (!(Number.isInteger(t) && t >= 0 && t < nv)) throw new EngineError('KAIL_E_INVALID_ARG', `task ${i + 1}: token ${t} is not in the vocabulary`);
    }
    const p = sharedStart(cands);
    if (p === 0) throw new EngineError('KAIL_E_INVALID_ARG', `task ${i + 1}: its candidates share no first token (a vocabulary that adds no BOS, and an empty context?)`);
    return p;
  });
  const required = (i: number) => prefixes[i] + tasks[i].reduce((a, c) => a + c.length - prefixes[i], 0);
  let seconds = 0;
  let groups = 0;
  for (let i0 = 0; i0 < tasks.length; ) {
    // The tasks of this pass: while their sequences and tokens fit.
    let i1 = i0;
    let seqs = 0;
    let tokens = 0;
    while (i1 < tasks.length && (i1 === i0 || (seqs + tasks[i1].length <= model.nSeqMax && tokens + required(i1) <= opts.tokensPerPass))) {
      seqs += tasks[i1].length;
      tokens += required(i1);
      i1++;
    }
    const t0 = performance.now();
    // The shared starts, each in its task's first sequence; only the last row's logits.
    const base: number[] = [];
    const starts: Row[] = [];
    let s = 0;
    for (let i = i0; i < i1; i++) {
      base.push(s);
      model.truncate(s, 0);
      const c0 = tasks[i][0];
      for (let p = 0; p < prefixes[i]; p++) starts.push({ token: c0[p], pos: p, seq: s, output: p === prefixes[i] - 1 });
      s += tasks[i].length;
    }
    const startLogits = await runRows(model, starts);
    // Copied into each candidate's sequence; then every candidate's own tokens, all rows' logits.
    const own: Row[] = [];
    for (let i = i0; i < i1; i++) {
      const b = base[i - i0];
      tasks[i].forEach((cand, c) => {
        if (c > 0) {
          model.truncate(b + c, 0);
          model.copySequence(b, b + c);
        }
        for (let p = prefixes[i]; p < cand.length; p++) own.push({ token: cand[p], pos: p, seq: b + c, output: true });
      });
    }
    const ownLogits = await runRows(model, own);
    seconds += (performance.now() - t0) / 1000;
    groups++;
    let at = 0;
    for (let i = i0; i < i1; i++) {
      const k = i - i0;
      const prefix = prefixes[i];
      const first = startLogits.subarray(k * nv, (k + 1) * nv);
      const offsets = tasks[i].map((cand) => {
        const o = at;
        at += cand.length - prefix;
        return o;
      });
      opts.onTask(i, {
        prefix,
        row: (c, pos) => {
          const len = tasks[i][c].length;
          if (!(Number.isInteger(pos) && pos >= prefix - 1 && pos < len)) throw new EngineError('KAIL_E_INTERNAL', `task ${i + 1}: no logits for position ${pos} of candidate ${c}`);
          if (pos === prefix - 1) return first;
          const r = offsets[c] + pos - prefix;
          return ownLogits.subarray(r * nv, (r + 1) * nv);
        },
      });
    }
    for (let q = 0; q < s; q++) model.truncate(q, 0);
    i0 = i1;
  }
  return { seconds, groups };
}
