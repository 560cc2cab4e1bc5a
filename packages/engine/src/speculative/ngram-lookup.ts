/** Prompt-lookup drafting: n-gram sizes to try, longest first. */
export interface LookupOptions {
  /** Longest suffix n-gram searched for; an integer in [1, 16]. Default 3. */
  maxN?: number;
  /** Shortest; an integer in [1, maxN]. Default 1. */
  minN?: number;
}

/**
 * Drafts without a model (prompt lookup decoding): finds the most recent earlier occurrence of the
 * context's last n tokens (n from maxN down to minN) and proposes the up to k tokens that followed
 * it. Text that repeats its prompt (code edits, quotes, summaries, loops of a random-weight model)
 * gets long accepted runs for the cost of a scan.
 */
export function lookupDraft(history: readonly number[], k: number, maxN = 3, minN = 1): number[] {
  const h = history.length;
  if (k <= 0) return [];
  for (let n = Math.min(maxN, h - 1); n >= minN; n--) {
    // Candidate starts of an earlier copy of the suffix h-n..h-1, most recent first.
    for (let s = h - n - 1; s >= 0; s--) {
      let j = 0;
      while (j < n && history[s + j] === history[h - n + j]) j++;
      if (j < n) continue;
      const from = s + n;
      return history.slice(from, Math.min(from + k, h)) as number[];
    }
  }
  return [];
}
