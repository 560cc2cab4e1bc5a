// PLaMo 2 vocabularies (tokenizer.ggml.model "plamo2"; PLaMo 2 and PLaMo 3), ported from llama.cpp's
// llm_tokenizer_plamo2: a unigram Viterbi search over the code points, scores in units of 1e-4,
// through a table that walks every token text and each of its suffixes (an Aho-Corasick-like trie
// over reversed texts); a code point no token covers falls back to its UTF-8 bytes' <0xXX> tokens.

import { TokenizerError } from './errors';
import { codepoints, utf8Encode } from './unicode';
import type { Vocab } from './vocab';

const INVALID_SCORE = -20000000;
const UNKNOWN_SCORE = -10000000;

interface Plamo2Table {
  /** Rows of [piece length, token id or -1, score, piece id], flattened. */
  rows: Int32Array;
  nRows: number;
  /** (first code point << 32 | rest's suffix id) -> the suffix's first row. */
  toSuffixId: Map<number, number>;
  /** Byte -> its <0xXX> token. */
  bytes: Int32Array;
}

const tables = new WeakMap<Vocab, Plamo2Table>();

/** std::string's < on the reversed UTF-8 bytes (unsigned). */
function compareReversed(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 1; i <= n; i++) {
    const d = a[a.length - i] - b[b.length - i];
    if (d !== 0) return d;
  }
  return a.length - b.length;
}

/** static_cast<int32_t>(std::round(score * 1e4)): half away from zero; out of range as x86 gives it. */
function scoreUnits(score: number): number {
  if (!Number.isFinite(score)) return INVALID_SCORE;
  const v = score * 1e4;
  const r = Math.sign(v) * Math.round(Math.abs(v));
  return r >= -2147483648 && r <= 2147483647 ? r : -2147483648;
}

/**
 * The byte tokens of a plamo2 vocabulary, as llama.cpp's build checks them: every byte needs a
 * BYTE token "<0xXX>" (an id of 0 counts as missing, as there). Throws KAIL_E_BAD_MODEL otherwise.
 */
export function plamo2ByteTokens(vocab: Vocab): Int32Array {
  const bytes = new Int32Array(256);
  for (let id = 0; id < vocab.nTokens; id++) {
    if (!vocab.isByte(id)) continue;
    const t = vocab.tokenText(id);
    if (t.length === 6 && t.startsWith('<0x') && t.endsWith('>') && /^[0-9a-fA-F]{2}$/.test(t.slice(3, 5))) bytes[parseInt(t.slice(3, 5), 16)] = id;
  }
  for (let b = 0; b < 256; b++)
    if (bytes[b] === 0) throw new TokenizerError('KAIL_E_BAD_MODEL', `plamo2 vocabulary: no byte token <0x${b.toString(16).toUpperCase().padStart(2, '0')}> (every byte needs one, as llama.cpp's PLaMo 2 tokenizer requires)`);
  return bytes;
}

function buildTable(vocab: Vocab): Plamo2Table {
  const bytes = plamo2ByteTokens(vocab);
  // Every non-byte token's text with its score, and each of its proper suffixes (NaN: not a token).
  const suffixToScore = new Map<string, number>();
  const tokenToId = new Map<string, number>();
  for (let id = 0; id < vocab.nTokens; id++) {
    const text = vocab.tokenText(id);
    tokenToId.set(text, id);
    if (vocab.isByte(id)) continue;
    suffixToScore.set(text, vocab.tokenScore(id));
    const cps = codepoints(text);
    for (let i = 1; i < cps.length; i++) {
      const suffix = String.fromCodePoint(...cps.slice(i));
      if (!suffixToScore.has(suffix)) suffixToScore.set(suffix, NaN);
    }
  }
  const suffixes = [...suffixToScore.keys(), ''].map((s) => ({ s, cps: codepoints(s), utf8: utf8Encode(s) }));
  suffixes.sort((a, b) => compareReversed(a.utf8, b.utf8));

  const suffixToId = new Map<string, number>();
  const toSuffixId = new Map<number, number>();
  let nPieces = 0;
  const prefix = (cps: number[], len: number) => String.fromCodePoint(...cps.slice(0, len));
  for (const { s, cps } of suffixes) {
    suffixToId.set(s, nPieces);
    if (s === '') {
      nPieces++;
      continue;
    }
    const rest = String.fromCodePoint(...cps.slice(1));
    toSuffixId.set(cps[0] * 4294967296 + (suffixToId.get(rest) ?? 0), nPieces);
    let rows = 1; // the sentinel
    for (let len = cps.length; len > 0; len--) if (suffixToScore.has(prefix(cps, len))) rows++;
    nPieces += rows;
  }
  const rows = new Int32Array(4 * nPieces);
  let r = 0;
  for (const { cps } of suffixes) {
    for (let len = cps.length; len > 0; len--) {
      const piece = prefix(cps, len);
      const score = suffixToScore.get(piece);
      if (score === undefined) continue;
      rows[4 * r] = len;
      rows[4 * r + 1] = tokenToId.get(piece) ?? -1;
      rows[4 * r + 2] = scoreUnits(score);
      rows[4 * r + 3] = suffixToId.get(piece)!;
      r++;
    }
    rows[4 * r] = 1;
    rows[4 * r + 1] = -1;
    rows[4 * r + 2] = UNKNOWN_SCORE;
    rows[4 * r + 3] = 0;
    r++;
  }
  return { rows, nRows: nPieces, toSuffixId, bytes };
}

/** Tokenizes `text` (one fragment between special tokens) into `output`, as llm_tokenizer_plamo2::encode. */
export function plamo2Tokenize(vocab: Vocab, text: string, output: number[]): void {
  let t = tables.get(vocab);
  if (!t) {
    t = buildTable(vocab);
    tables.set(vocab, t);
  }
  const { rows, nRows, toSuffixId, bytes } = t;
  const data = codepoints(text);
  if (data.length > 0 && data[0] === 0xfeff) data.shift();
  const n = data.length;
  if (n === 0) return;
  // (Scores are sums of 32-bit integers: exact in doubles far past any text length.)
  const scores = new Float64Array(n + 1).fill(2 ** 60);
  scores[n] = 0;
  const pathLen = new Int32Array(n + 1);
  const pathId = new Int32Array(n + 1);
  let suffixId = 0;
  for (let i = n - 1; i >= 0; i--) {
    const c = data[i];
    for (let p = suffixId; p < nRows; p++) {
      suffixId = toSuffixId.get(c * 4294967296 + rows[4 * p + 3]) ?? 0;
      if (suffixId > 0 || rows[4 * p + 2] === UNKNOWN_SCORE) break;
    }
    for (let p = suffixId; p < nRows; p++) {
      const score = rows[4 * p + 2];
      if (score > INVALID_SCORE) {
        const len = rows[4 * p];
        const s = scores[i + len] - score;
        if (s < scores[i]) {
          scores[i] = s;
          pathLen[i] = len;
          pathId[i] = rows[4 * p + 1];
        }
      }
      if (score === UNKNOWN_SCORE) break;
    }
  }
  for (let pos = 0; pos < n; ) {
    if (pathId[pos] >= 0) output.push(pathId[pos]);
    else for (const b of utf8Encode(String.fromCodePoint(data[pos]))) output.push(bytes[b]);
    if (pathLen[pos] <= 0) throw new TokenizerError('KAIL_E_BAD_MODEL', `plamo2 vocabulary: no tokenization path at code point ${pos}`);
    pos += pathLen[pos];
  }
}
