// WordPiece (tokenizer.ggml.model "bert"), ported from llama.cpp's llm_tokenizer_wpm_session:
// BERT-style normalization and splitting, then greedy longest-match per word with a "▁" word prefix.

import {
  CPT_ACCENT_MARK,
  CPT_CONTROL,
  CPT_PUNCTUATION,
  CPT_SYMBOL,
  CPT_WHITESPACE,
  codepoints,
  cptFlags,
  cptNfdFirst,
  cptToLower,
} from './unicode';
import type { Vocab } from './vocab';

function isChineseChar(c: number): boolean {
  return (
    (c >= 0x04e00 && c <= 0x09fff) ||
    (c >= 0x03400 && c <= 0x04dbf) ||
    (c >= 0x20000 && c <= 0x2a6df) ||
    (c >= 0x2a700 && c <= 0x2b73f) ||
    (c >= 0x2b740 && c <= 0x2b81f) ||
    (c >= 0x2b920 && c <= 0x2ceaf) || // 0x2B820 in Unicode; 0x2B920 in HF's Rust code, which llama.cpp follows
    (c >= 0x0f900 && c <= 0x0faff) ||
    (c >= 0x2f800 && c <= 0x2fa1f)
  );
}

function preprocess(vocab: Vocab, text: string): string[] {
  let cpts = codepoints(text);
  if (vocab.stripAccents) cpts = cpts.map(cptNfdFirst);
  const words: string[] = [''];
  for (const cpt of cpts) {
    const flags = cptFlags(cpt);
    if (flags & CPT_WHITESPACE) {
      if (words[words.length - 1] !== '') words.push('');
      continue;
    }
    if (cpt === 0 || cpt === 0xfffd || flags & CPT_CONTROL) continue;
    if (vocab.stripAccents && flags & CPT_ACCENT_MARK) continue;
    const s = String.fromCodePoint(vocab.lowercase ? cptToLower(cpt) : cpt);
    if (flags & CPT_PUNCTUATION || (cpt < 0x7f && flags & CPT_SYMBOL) || isChineseChar(cpt)) {
      if (words[words.length - 1] !== '') words.push('');
      words[words.length - 1] = s;
      words.push('');
    } else {
      words[words.length - 1] += s;
    }
  }
  if (words[words.length - 1] === '') words.pop();
  return words;
}

/** Tokenizes one fragment of raw text (special tokens already split off). */
export function wpmTokenize(vocab: Vocab, text: string, output: number[]): void {
  const unk = vocab.special.unk;
  for (const word of preprocess(vocab, text)) {
    if (word === '') continue;
    const w = '\u2581' + word;
    const n = w.length;
    const before = output.length;
    // greedy longest match; maxTokenLen is in UTF-8 bytes, at least the UTF-16 length of any token
    for (let i = 0; i < n; i++) {
      let match = false;
      for (let j = Math.min(n, i + vocab.maxTokenLen + 1); j > i; j--) {
        const id = vocab.textToToken(w.slice(i, j));
        if (id !== null) {
          output.push(id);
          match = true;
          i = j - 1;
          break;
        }
      }
      if (!match) {
        output.length = before;
        break;
      }
    }
    if (output.length === before) {
      if (unk === null) throw new Error('WordPiece vocabulary has no unknown token');
      output.push(unk);
    }
  }
}
