// Byte-level BPE (tokenizer.ggml.model "gpt2" and kin), ported from llama.cpp's
// llm_tokenizer_bpe_session: split with the pre-tokenizer's regexes, then per word apply merges in
// rank order with a priority queue over a linked list of symbols, as llama.cpp does.

import { Heap } from './heap';
import { regexSplit } from './regex-split';
import { cptFlags, cptToLower, CPT_WHITESPACE, utf8Encode } from './unicode';
import type { Vocab } from './vocab';

interface Bigram {
  left: number;
  right: number;
  rank: number;
  size: number;
}

// lower rank first; on equal ranks the leftmost pair
const before = (a: Bigram, b: Bigram) => a.rank < b.rank || (a.rank === b.rank && a.left < b.left);

const HEX = '0123456789ABCDEF';

/** Tokenizes one fragment of raw text (special tokens already split off). */
export function bpeTokenize(vocab: Vocab, text: string, output: number[]): void {
  if (vocab.model === 'whitespace') {
    whitespaceTokenize(vocab, text, output);
    return;
  }
  if (vocab.model === 'hybriddna') {
    hybridDnaTokenize(vocab, text, output);
    return;
  }
  bpeTokenizeWords(vocab, text, output);
}

// A word's tokens depend only on the word and the vocabulary, so they are cached per vocabulary
// (llama.cpp does not cache; the results are the same). Cleared when it grows past the limit.
const WORD_CACHE_LIMIT = 1 << 16;
const wordCaches = new WeakMap<Vocab, Map<string, number[]>>();

function bpeTokenizeWords(vocab: Vocab, text: string, output: number[]): void {
  let cache = wordCaches.get(vocab);
  if (!cache) wordCaches.set(vocab, (cache = new Map()));
  for (const word of regexSplit(text, vocab.regexes, vocab.byteEncode)) {
    let ids = cache.get(word);
    if (!ids) {
      ids = [];
      bpeWord(vocab, word, ids);
      if (cache.size >= WORD_CACHE_LIMIT) cache.clear();
      cache.set(word, ids);
    }
    for (const id of ids) output.push(id);
  }
}

function bpeWord(vocab: Vocab, word: string, output: number[]): void {
  const gemma4 = vocab.preType === 'gemma4';
  // symbols as UTF-16 [start, start + size) ranges of the word
  const start: number[] = [];
  const size: number[] = [];
  const prev: number[] = [];
  const next: number[] = [];
  let offset = 0;
  if (
    (vocab.ignoreMerges && vocab.textToToken(word) !== null) ||
    (gemma4 && /^\n*$/.test(word) && vocab.textToToken(word) !== null)
  ) {
    start.push(0);
    size.push(word.length);
    prev.push(-1);
    next.push(-1);
    offset = word.length;
  }
  while (offset < word.length) {
    const c = word.charCodeAt(offset);
    const n = c >= 0xd800 && c <= 0xdbff && offset + 1 < word.length ? 2 : 1;
    const idx = start.length;
    start.push(offset);
    size.push(n);
    prev.push(idx - 1);
    offset += n;
    next.push(offset === word.length ? -1 : idx + 1);
  }

  const queue = new Heap<Bigram>(before);
  const tryAdd = (left: number, right: number) => {
    if (left === -1 || right === -1) return;
    const l = word.slice(start[left], start[left] + size[left]);
    const r = word.slice(start[right], start[right] + size[right]);
    const rank = vocab.bpeRank(l, r);
    if (rank < 0) return;
    queue.push({ left, right, rank, size: size[left] + size[right] });
  };
  for (let i = 1; i < start.length; i++) tryAdd(i - 1, i);

  while (queue.size > 0) {
    const b = queue.pop()!;
    // Outdated when either side has been merged since. Symbols only grow and stay contiguous, so
    // comparing lengths is the same as llama.cpp's comparison of the texts.
    if (size[b.left] === 0 || size[b.right] === 0 || size[b.left] + size[b.right] !== b.size) continue;
    size[b.left] += size[b.right];
    size[b.right] = 0;
    next[b.left] = next[b.right];
    if (next[b.right] >= 0) prev[next[b.right]] = b.left;
    tryAdd(prev[b.left], b.left);
    tryAdd(b.left, next[b.left]);
  }

  for (let i = 0; i < start.length; i++) {
    if (size[i] === 0) continue;
    const s = word.slice(start[i], start[i] + size[i]);
    const id = vocab.textToToken(s);
    if (id !== null) {
      output.push(id);
      continue;
    }
    // No token for the piece: llama.cpp looks each of its UTF-8 bytes up as a one-byte token text
    // (only ASCII can match in a byte-encoded vocabulary), or as <0xXX> without byte encoding.
    for (const byte of utf8Encode(s)) {
      const t = vocab.byteEncode
        ? byte < 0x80
          ? vocab.textToToken(String.fromCharCode(byte))
          : null
        : vocab.textToToken(`<0x${HEX[byte >> 4]}${HEX[byte & 15]}>`);
      if (t !== null) output.push(t);
    }
  }
}

// Whitespace pre-tokenizer vocabularies (jina-embeddings-v2-base-zh): whitespace only separates
// segments, each tokenized on its own (optionally lowercased).
function whitespaceTokenize(vocab: Vocab, text: string, output: number[]): void {
  let segment = '';
  const flush = () => {
    if (segment !== '') {
      bpeTokenizeWords(vocab, segment, output);
      segment = '';
    }
  };
  for (const ch of text) {
    const cpt = ch.codePointAt(0)!;
    if (cptFlags(cpt) & CPT_WHITESPACE) flush();
    else segment += vocab.lowercase ? String.fromCodePoint(cptToLower(cpt)) : ch;
  }
  flush();
}

const DNA_KMER_MARKER = '\ue000';
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

// Hybrid DNA vocabularies: text inside <dna>…</dna> becomes 6-mer tokens, the rest is plain BPE.
function hybridDnaTokenize(vocab: Vocab, text: string, output: number[]): void {
  const open = '<dna>';
  const close = '</dna>';
  const beginId = vocab.textToToken(open);
  const endId = vocab.textToToken(close);
  const oovId = vocab.textToToken('<oov>');
  if (beginId === null || endId === null || oovId === null) {
    bpeTokenizeWords(vocab, text, output);
    return;
  }
  const k = 6;
  // k-mers are slices of k bytes of the UTF-8 text, as in llama.cpp: a slice that ends inside a
  // character is <oov> (no token has that text); a short tail is padded with A
  const kmers = (seq: string) => {
    const bytes = utf8Encode(seq);
    for (let i = 0; i < bytes.length; i += k) {
      let piece: string;
      try {
        piece = strictUtf8.decode(bytes.subarray(i, i + k));
      } catch {
        output.push(oovId);
        continue;
      }
      if (i + k > bytes.length) piece += 'A'.repeat(i + k - bytes.length);
      output.push(vocab.textToToken(piece + DNA_KMER_MARKER) ?? oovId);
    }
  };
  let pos = 0;
  while (pos < text.length) {
    const s = text.indexOf(open, pos);
    if (s < 0) {
      bpeTokenizeWords(vocab, text.slice(pos), output);
      break;
    }
    if (s > pos) bpeTokenizeWords(vocab, text.slice(pos, s), output);
    output.push(beginId);
    const contentStart = s + open.length;
    const e = text.indexOf(close, contentStart);
    kmers(text.slice(contentStart, e < 0 ? text.length : e).replace(/[a-z]/g, (c) => c.toUpperCase()));
    if (e < 0) break;
    output.push(endId);
    pos = e + close.length;
  }
}
