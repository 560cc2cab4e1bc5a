// SentencePiece BPE (tokenizer.ggml.model "llama"), ported from llama.cpp's llm_tokenizer_spm_session:
// start from single characters, repeatedly merge the adjacent pair whose merged text is the
// highest-scoring token, and spell what never became a token as byte tokens.

import { Heap } from './heap';
import { utf8Encode } from './unicode';
import type { Vocab } from './vocab';

interface Bigram {
  left: number;
  right: number;
  score: number;
  size: number;
}

// higher score first; on equal scores the leftmost pair
const before = (a: Bigram, b: Bigram) => a.score > b.score || (a.score === b.score && a.left < b.left);

/** Tokenizes one fragment (already space-prefixed and with spaces escaped to U+2581). */
export function spmTokenize(vocab: Vocab, text: string, output: number[]): void {
  // symbols are code points, as UTF-16 [start, start + n) ranges of `text`
  const start: number[] = [];
  const size: number[] = [];
  const prev: number[] = [];
  const next: number[] = [];
  for (let i = 0; i < text.length; ) {
    const c = text.charCodeAt(i);
    const n = c >= 0xd800 && c <= 0xdbff && i + 1 < text.length ? 2 : 1;
    const idx = start.length;
    start.push(i);
    size.push(n);
    prev.push(idx - 1);
    i += n;
    next.push(i === text.length ? -1 : idx + 1);
  }
  if (start.length === 0) return;

  const queue = new Heap<Bigram>(before);
  const revMerge = new Map<string, [number, number]>();
  const tryAdd = (left: number, right: number) => {
    if (left === -1 || right === -1) return;
    const s = text.slice(start[left], start[left] + size[left] + size[right]);
    const id = vocab.textToToken(s);
    if (id === null) return;
    queue.push({ left, right, score: vocab.tokenScore(id), size: s.length });
    revMerge.set(s, [left, right]);
  };

  for (let i = 1; i < start.length; i++) tryAdd(i - 1, i);

  while (queue.size > 0) {
    const b = queue.pop()!;
    // skip pairs that a merge has already changed
    if (size[b.left] === 0 || size[b.right] === 0 || size[b.left] + size[b.right] !== b.size) continue;
    size[b.left] += size[b.right];
    size[b.right] = 0;
    next[b.left] = next[b.right];
    if (next[b.right] >= 0) prev[next[b.right]] = b.left;
    tryAdd(prev[b.left], b.left);
    tryAdd(b.left, next[b.left]);
  }

  const resegment = (sym: number) => {
    const s = text.slice(start[sym], start[sym] + size[sym]);
    const id = vocab.textToToken(s);
    if (id !== null) {
      output.push(id);
      return;
    }
    const p = revMerge.get(s);
    if (p === undefined) {
      // byte fallback
      for (const b of utf8Encode(s)) output.push(vocab.byteToToken(b));
      return;
    }
    resegment(p[0]);
    resegment(p[1]);
  };
  for (let i = 0; i !== -1; i = next[i]) resegment(i);
}
