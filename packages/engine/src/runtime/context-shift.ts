import type { Vocab } from '../tokenizer/vocab';

/** llama-server's context shift settings of a request (n_keep, n_discard). */
export interface ContextShift {
  /** Prompt tokens kept at the start; -1 keeps the whole prompt. A BOS the tokenizer adds is kept besides. */
  keep: number;
  /** Cached positions dropped after them per shift; 0 (the default) drops half of the rest. */
  discard?: number;
}

/**
 * Which cached positions a shift drops when a sequence of `len` positions fills a context of
 * `nCtx` (llama-server's pre_decode): `keep` stays (at most nCtx - 4), then `discard` go, never all
 * of the rest. discard 0: nothing can go, the generation ends.
 */
export function contextShiftSpan(vocab: Vocab, prompt: readonly number[], len: number, nCtx: number, cs: ContextShift): { keep: number; discard: number } {
  let keep = cs.keep < 0 ? prompt.length : cs.keep;
  if (vocab.addBos && vocab.special.bos !== null && prompt[0] === vocab.special.bos) keep += 1;
  keep = Math.max(0, Math.min(nCtx - 4, keep, len));
  const left = len - keep;
  return { keep, discard: Math.max(0, Math.min(cs.discard || Math.floor(left / 2), left - 1)) };
}
