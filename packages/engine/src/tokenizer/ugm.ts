// Unigram (tokenizer.ggml.model "t5"), ported from llama.cpp's llm_tokenizer_ugm(_session):
// SentencePiece normalization through the model's precompiled charsmap (an XOR-compressed double
// array), then the Viterbi search for the highest-scoring segmentation. llama.cpp works on bytes:
// the normalized text can hold broken UTF-8 (a user-defined token's text is kept as far as the input
// follows it, which may end inside a character), and its search steps over such bytes as UTF-8 lead
// bytes say; here the search runs over a string of the same steps (see searchString).

import { TokenizerError } from './errors';
import { utf8Encode } from './unicode';
import { TokenAttr } from './vocab';
import type { Vocab } from './vocab';

const UNKNOWN_PENALTY = 10;
const ESCAPED_SPACE = utf8Encode('\u2581');
/** U+FFFD, which llama.cpp's normalize_prefix puts for a byte that starts no valid UTF-8 character. */
const REPLACEMENT = utf8Encode('\ufffd');
/** Stands for a step of broken UTF-8 in the search string: a lone low surrogate, in no token's text. */
const BROKEN = '\udfff';
const strictDecoder = new TextDecoder('utf-8', { fatal: true });

/** llama.cpp's unicode_len_utf8: the step a (lead) byte starts, 1 for continuation bytes. */
function utf8Step(b: number): number {
  return b < 0xc0 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
}

/**
 * How many bytes the UTF-8 character at `at` takes, or 0 where llama.cpp's unicode_cpt_from_utf8
 * throws (a continuation or 0xF8.. byte first, a missing or wrong continuation byte).
 */
function utf8CharLength(input: Uint8Array, at: number): number {
  const b = input[at];
  if (b < 0x80) return 1;
  if (b < 0xc0 || b >= 0xf8) return 0;
  const len = utf8Step(b);
  if (at + len > input.length) return 0;
  for (let i = 1; i < len; i++) if ((input[at + i] & 0xc0) !== 0x80) return 0;
  return len;
}

/**
 * The normalized bytes as the search sees them: llama.cpp steps over them by their lead bytes
 * (unicode_len_utf8, cut at the end) and matches tokens from step starts only; a step that is a
 * valid character is that character, any other one BROKEN, which no token matches (a token's text
 * is valid UTF-8, so none starts, ends or passes inside such a step) and which becomes the unknown
 * token, as there.
 */
function searchString(bytes: Uint8Array): string {
  try {
    return strictDecoder.decode(bytes);
  } catch {
    // broken UTF-8 somewhere: step by step
  }
  let out = '';
  for (let at = 0; at < bytes.length; ) {
    const step = Math.min(utf8Step(bytes[at]), bytes.length - at);
    try {
      out += strictDecoder.decode(bytes.subarray(at, at + step));
    } catch {
      out += BROKEN;
    }
    at += step;
  }
  return out;
}

interface ByteTrie {
  children: Map<number, ByteTrie>;
}

/** What a vocabulary's unigram tokenizer needs, built once per vocabulary. */
class UgmModel {
  readonly unknownScore: number;
  /** Longest token text in UTF-16 units, bounding the candidate search. */
  readonly maxLen: number;
  private readonly xcda: Uint32Array;
  private readonly replacements: Uint8Array;
  private readonly userDefined: ByteTrie = { children: new Map() };

  constructor(private readonly vocab: Vocab) {
    let min = Infinity;
    let maxLen = 0;
    for (let id = 0; id < vocab.nTokens; id++) {
      const attr = vocab.tokenAttr(id);
      if (attr & TokenAttr.NORMAL) min = Math.min(min, vocab.tokenScore(id));
      if (attr & (TokenAttr.NORMAL | TokenAttr.USER_DEFINED | TokenAttr.UNUSED)) {
        maxLen = Math.max(maxLen, vocab.tokenText(id).length);
      }
      if (attr & TokenAttr.USER_DEFINED) {
        let node = this.userDefined;
        for (const b of utf8Encode(vocab.tokenText(id))) {
          let next = node.children.get(b);
          if (!next) node.children.set(b, (next = { children: new Map() }));
          node = next;
        }
      }
    }
    // float arithmetic, as llama.cpp's `float unknown_token_score`
    this.unknownScore = Math.fround((min === Infinity ? Math.fround(3.4028234663852886e38) : min) - UNKNOWN_PENALTY);
    this.maxLen = maxLen;

    const map = vocab.precompiledCharsmap;
    if (map && map.length > 0) {
      if (map.length < 4) throw new TokenizerError('KAIL_E_BAD_MODEL', 'precompiled_charsmap too small for xcda_blob_size header');
      const blob = new DataView(map.buffer, map.byteOffset, map.byteLength).getUint32(0, true);
      if (blob + 4 >= map.length) throw new TokenizerError('KAIL_E_BAD_MODEL', 'Index out of array bounds in precompiled charsmap');
      this.xcda = new Uint32Array(blob >>> 2);
      const dv = new DataView(map.buffer, map.byteOffset + 4, blob);
      for (let i = 0; i < this.xcda.length; i++) this.xcda[i] = dv.getUint32(4 * i, true);
      this.replacements = map.subarray(4 + blob);
    } else {
      this.xcda = new Uint32Array(0);
      this.replacements = new Uint8Array(0);
    }
  }

  private node(i: number): number {
    if (i >= this.xcda.length) throw new TokenizerError('KAIL_E_BAD_MODEL', 'Index out of array bounds in XCDA array');
    return this.xcda[i];
  }
  private base(i: number): number {
    const p = this.node(i);
    return ((p >>> 10) << ((p & (1 << 9)) >>> 6)) >>> 0;
  }
  private lcheck(i: number): number {
    return (this.node(i) & ((1 << 31) | 0xff)) >>> 0;
  }
  private leaf(i: number): boolean {
    return ((this.node(i) >>> 8) & 1) === 1;
  }
  private value(i: number): number {
    return this.node(i) & 0x7fffffff;
  }

  /** normalize_prefix: the bytes the input at `at` normalizes to, and how many input bytes that takes. */
  private normalizePrefix(input: Uint8Array, at: number): { bytes: Uint8Array; consumed: number } {
    // A user-defined token's text stays as it is. llama.cpp takes the longest path through the
    // trie of their texts, whether or not it ends at a token.
    let node = this.userDefined;
    let n = 0;
    for (let p = at; p < input.length; p++) {
      const next = node.children.get(input[p]);
      if (!next) break;
      node = next;
      n++;
    }
    if (n > 0) return { bytes: input.subarray(at, at + n), consumed: n };

    let longestLen = 0;
    let longestOff = 0;
    if (this.xcda.length > 0) {
      let index = this.base(0);
      for (let p = at; p < input.length; p++) {
        const c = input[p];
        if (c === 0) break;
        index ^= c;
        if (this.lcheck(index) !== c) break;
        const isLeaf = this.leaf(index);
        index ^= this.base(index);
        if (isLeaf) {
          longestLen = p - at + 1;
          longestOff = this.value(index);
        }
      }
    }
    if (longestLen > 0) {
      if (longestOff >= this.replacements.length) throw new TokenizerError('KAIL_E_BAD_MODEL', 'Index out of array bounds in precompiled charsmap');
      let end = longestOff;
      while (end < this.replacements.length && this.replacements[end] !== 0) end++;
      if (end === this.replacements.length) throw new TokenizerError('KAIL_E_BAD_MODEL', 'Unterminated string in precompiled charsmap');
      return { bytes: this.replacements.subarray(longestOff, end), consumed: longestLen };
    }
    // one UTF-8 character as it is; a byte that starts none (after a user-defined token's text
    // that ended inside a character) becomes U+FFFD
    const len = utf8CharLength(input, at);
    return len > 0 ? { bytes: input.subarray(at, at + len), consumed: len } : { bytes: REPLACEMENT, consumed: 1 };
  }

  /** llama.cpp's normalize(): charsmap, then spaces (escaped, merged, prefixed as configured); the search string of its bytes. */
  normalize(text: string): string {
    const v = this.vocab;
    const input = utf8Encode(text);
    const space = v.escapeWhitespaces ? ESCAPED_SPACE : Uint8Array.of(0x20);
    const prependSpace = v.addSpacePrefix; // treat_whitespace_as_suffix is never set for these models
    const mergeSpaces = v.removeExtraWhitespaces;
    const out: number[] = [];
    let spacePrepended = false;
    let inWord = false;
    for (let at = 0; at < input.length; ) {
      const r = this.normalizePrefix(input, at);
      for (const c of r.bytes) {
        if (c !== 0x20) {
          if (!inWord) {
            inWord = true;
            if ((prependSpace && !spacePrepended) || mergeSpaces) {
              out.push(...space);
              spacePrepended = true;
            }
          }
          out.push(c);
        } else {
          inWord = false;
          if (!mergeSpaces) out.push(...space);
        }
      }
      at += r.consumed;
    }
    return searchString(Uint8Array.from(out));
  }
}

const models = new WeakMap<Vocab, UgmModel>();

/** Tokenizes one fragment of raw text (special tokens already split off). */
export function ugmTokenize(vocab: Vocab, text: string, output: number[]): void {
  let model = models.get(vocab);
  if (!model) models.set(vocab, (model = new UgmModel(vocab)));
  const s = model.normalize(text);
  const n = s.length;
  if (n === 0) return;
  const unk = vocab.special.unk;
  if (unk === null) throw new TokenizerError('KAIL_E_BAD_MODEL', 'unigram vocabulary has no unknown token');

  // best segmentation of each prefix: last token, where it starts, total score
  const tokenAt = new Int32Array(n + 1).fill(unk);
  const startAt = new Int32Array(n + 1);
  const score = new Float64Array(n + 1).fill(-Number.MAX_VALUE);
  score[0] = 0;

  for (let at = 0; at < n; ) {
    const c = s.charCodeAt(at);
    const cpLen = c >= 0xd800 && c <= 0xdbff && at + 1 < n ? 2 : 1;
    let singleFound = false;
    const base = score[at];
    const limit = Math.min(n, at + model.maxLen);
    for (let end = at + 1; end <= limit; end++) {
      const id = vocab.textToToken(s.slice(at, end));
      if (id === null) continue;
      const attr = vocab.tokenAttr(id);
      if (!(attr & (TokenAttr.NORMAL | TokenAttr.USER_DEFINED | TokenAttr.UNUSED))) continue;
      if (end - at === cpLen) singleFound = true;
      // user-defined tokens score 0, which makes them win over the (negative) log probabilities
      const challenger = base + (attr & TokenAttr.USER_DEFINED ? 0 : vocab.tokenScore(id));
      if (challenger > score[end]) {
        tokenAt[end] = id;
        startAt[end] = at;
        score[end] = challenger;
      }
    }
    if (!singleFound) {
      const end = at + cpLen;
      const challenger = base + model.unknownScore;
      if (challenger > score[end]) {
        tokenAt[end] = unk;
        startAt[end] = at;
        score[end] = challenger;
      }
    }
    at += cpLen;
  }

  // back from the end; runs of unknown tokens become one
  const ids: number[] = [];
  let prevUnknown = false;
  for (let pos = n; ; pos = startAt[pos]) {
    const isUnknown = tokenAt[pos] === unk;
    if (!(prevUnknown && isUnknown)) ids.push(tokenAt[pos]);
    if (startAt[pos] === 0) break;
    prevUnknown = isUnknown;
  }
  for (let i = ids.length - 1; i >= 0; i--) output.push(ids[i]);
}
