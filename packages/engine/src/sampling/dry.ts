// DRY ("don't repeat yourself"): penalises the token that would extend a repeat of an earlier
// stretch of the history, by multiplier * base^(repeat length - allowed length). A port of
// llama.cpp's dry sampler (src/llama-sampler.cpp, after Koboldcpp's), quirks included: the
// repeat search runs over the last `lastN` history tokens with the Z-algorithm, a sequence
// breaker seen in that window caps every repeat at its distance from the end, and a token that is
// itself a one-token breaker is never penalised.

const f32 = Math.fround; // local alias: global lookups are slow under jest's vm context

/** The most tokens a breaker's tail keeps (llama.cpp's MAX_SEQ_LEN). */
const MAX_TAIL = 20;
/** Breaker strings are cut to this many bytes (llama.cpp's MAX_CHAR_LEN). */
const MAX_BREAKER_BYTES = 40;
/** log(FLT_MAX): the exponent is clamped so base^exponent stays finite. */
const FLOAT_MAX_LOG = f32(88.7228391);

/** llama.cpp's default breakers: a newline, a colon, a double quote, an asterisk. */
export const DEFAULT_DRY_BREAKERS: readonly string[] = ['\n', ':', '"', '*'];

export interface DryParams {
  dryMultiplier: number;
  dryBase: number;
  dryAllowedLength: number;
  /** -1 = the whole history, 0 = off. */
  dryPenaltyLastN: number;
  /** Breaker token sequences, head token first (see `dryBreakerSequences`). */
  dryBreakers: readonly (readonly number[])[];
}

/** Whether these settings can change a logit (llama.cpp's "dry_enabled"). */
export function dryActive(p: DryParams): boolean {
  return p.dryMultiplier !== 0 && p.dryBase >= 1 && p.dryPenaltyLastN !== 0;
}

/** What a tokenizer must offer to turn breaker strings into token sequences. */
export interface BreakerTokenizer {
  readonly nTokens: number;
  detokenizeBytes(ids: readonly number[], options: { special: boolean }): Uint8Array;
  tokenize(text: string, options: { addSpecial: boolean; parseSpecial: boolean }): number[];
}

/**
 * The token sequences that can spell each breaker string (llama.cpp's
 * get_overlapping_token_sequences): every token whose text contains the breaker is a breaker on
 * its own; a token whose text ends with a prefix of the breaker is the head of a sequence whose
 * tail is the tokenization of the rest (at most 20 tokens). Strings are cut to 40 UTF-8 bytes;
 * empty ones are skipped. One pass over the vocabulary per string: cache the result per model.
 *
 * Differs from llama.cpp where a token's text ends inside a multi-byte character of the breaker:
 * the rest, not valid UTF-8 on its own, is tokenized with U+FFFD for the cut character.
 */
export function dryBreakerSequences(tok: BreakerTokenizer, breakers: readonly string[]): number[][] {
  const enc = new TextEncoder();
  const dec = new TextDecoder('utf-8');
  const words: Uint8Array[] = [];
  for (let id = 0; id < tok.nTokens; id++) words.push(tok.detokenizeBytes([id], { special: true }));
  const out: number[][] = [];
  const seen = new Map<number, Set<string>>();
  const add = (head: number, tail: number[]) => {
    const key = tail.join(',');
    let s = seen.get(head);
    if (!s) seen.set(head, (s = new Set()));
    if (s.has(key)) return;
    s.add(key);
    out.push([head, ...tail]);
  };
  for (const text of breakers) {
    let str = enc.encode(text);
    if (str.length === 0) continue;
    if (str.length > MAX_BREAKER_BYTES) str = str.subarray(0, MAX_BREAKER_BYTES);
    for (let id = 0; id < words.length; id++) {
      const word = words[id];
      if (indexOf(word, str, 0) >= 0) {
        add(id, []);
        continue;
      }
      // Each place the breaker's first byte occurs: does the word end with a prefix of the breaker?
      for (let pos = word.indexOf(str[0]); pos >= 0; pos = word.indexOf(str[0], pos + 1)) {
        let i = 1;
        let match = true;
        for (; i < str.length && i + pos < word.length; i++) {
          if (word[pos + i] !== str[i]) {
            match = false;
            break;
          }
        }
        if (!match) continue;
        const tail = tok.tokenize(dec.decode(str.subarray(i)), { addSpecial: false, parseSpecial: false });
        add(id, tail.slice(0, MAX_TAIL));
      }
    }
  }
  return out;
}

function indexOf(hay: Uint8Array, needle: Uint8Array, from: number): number {
  outer: for (let i = from; i + needle.length <= hay.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

/** Breaker sequences indexed by head token: the tails, each without its head. */
export type BreakerIndex = ReadonlyMap<number, readonly (readonly number[])[]>;

export function indexBreakers(seqs: readonly (readonly number[])[]): BreakerIndex {
  const m = new Map<number, (readonly number[])[]>();
  for (const s of seqs) {
    if (s.length === 0) continue;
    const tails = m.get(s[0]) ?? [];
    tails.push(s.slice(1));
    m.set(s[0], tails);
  }
  return m;
}

/**
 * Subtracts the DRY penalty from `logits` (indexed by token id, modified in place) for the tokens
 * that would extend a repeat in `history`. Ids outside `logits` are ignored.
 */
export function applyDry(logits: Float32Array, history: ArrayLike<number>, p: DryParams, breakers: BreakerIndex): void {
  if (!dryActive(p)) return;
  const len = history.length;
  const n = p.dryPenaltyLastN < 0 ? len : Math.min(len, p.dryPenaltyLastN);
  const allowed = p.dryAllowedLength;
  if (n <= allowed) return;
  // rat(i): the i-th token from the end of the window.
  const rat = (i: number) => history[len - 1 - i];

  // Step 1: the nearest breaker sequence limits how long a repeat can be.
  let repLimit = n;
  for (let i = 0; i < n; i++) {
    const tails = breakers.get(rat(i));
    if (!tails) continue;
    let longest = -1;
    for (const tail of tails) {
      const seqLen = tail.length;
      if (seqLen > longest && seqLen <= i) {
        let match = true;
        for (let o = 0; o < seqLen; o++) {
          if (tail[o] !== rat(i - o - 1)) {
            match = false;
            break;
          }
        }
        if (match) longest = seqLen;
      }
    }
    if (longest >= 0) {
      repLimit = i - longest;
      break;
    }
  }
  if (repLimit < allowed) return;

  // Step 2: for each position, how long a suffix of the window also ends there (Z-algorithm,
  // backwards), capped at repLimit.
  const count = new Int32Array(n);
  const last = n - 1;
  let lt = 0;
  let rt = 0;
  for (let k = 1; k < n; k++) {
    if (k > rt) {
      let m = 0;
      while (m + k < n && rat(m) === rat(m + k)) m++;
      count[last - k] = Math.min(m, repLimit);
      if (m > 0) {
        lt = k;
        rt = k + m - 1;
      }
    } else {
      const pair = k - lt;
      const rightLen = rt - k + 1;
      if (count[last - pair] < rightLen) {
        count[last - k] = Math.min(count[last - pair], repLimit);
      } else {
        let i = rt + 1;
        while (i < n && rat(i) === rat(i - k)) i++;
        count[last - k] = Math.min(i - k, repLimit);
        lt = k;
        rt = i - 1;
      }
    }
  }

  // Step 3: the token after each repeat would extend it; keep the longest repeat per token.
  const maxRepeat = new Map<number, number>();
  for (let i = 0; i < n - 1; i++) {
    const r = count[i];
    if (r >= allowed) {
      const token = rat(n - 2 - i);
      const had = maxRepeat.get(token);
      if (had === undefined || had < r) maxRepeat.set(token, r);
    }
  }

  // Step 4: the penalties, in double as llama.cpp's std::pow(float, int), rounded once into the logit.
  const mult = f32(p.dryMultiplier);
  const base = f32(p.dryBase);
  const maxExp = base > 1.000001 ? Math.trunc(f32(FLOAT_MAX_LOG / f32(Math.log(base)))) : 0;
  for (const [token, r] of maxRepeat) {
    if (!Number.isInteger(token) || token < 0 || token >= logits.length) continue;
    if (breakers.get(token)?.some((t) => t.length === 0)) continue;
    let e = r - allowed;
    if (maxExp > 0 && e > maxExp) e = maxExp;
    logits[token] = f32(logits[token] - mult * Math.pow(base, e));
  }
}
