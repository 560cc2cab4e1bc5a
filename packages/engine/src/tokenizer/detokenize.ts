// Token → bytes, as llama.cpp's `token_to_piece` and `detokenize`: byte tokens (<0xXX>) become their
// byte, byte-level BPE text goes back through GPT-2's byte mapping, SentencePiece's U+2581 becomes a
// space, and control tokens render only when asked. Pieces are bytes, not strings, because one
// character can be split over several tokens; StreamDecoder turns a stream of them into text.

import { unescapeRwkv } from './rwkv';
import { charToByte, utf8Encode } from './unicode';
import { TokenAttr } from './vocab';
import type { Vocab } from './vocab';

const ESCAPED_SPACE = /\u2581/g;
const EMPTY = new Uint8Array(0);

/** The bytes of a token with control and unknown tokens included (llama.cpp's piece cache). */
export function tokenPieceBytes(vocab: Vocab, id: number): Uint8Array {
  const text = vocab.tokenText(id);
  if (vocab.type === 'rwkv') return unescapeRwkv(text);
  const attr = vocab.tokenAttr(id);
  // PLaMo 2 (llama.cpp's token_to_piece): a byte token is its byte, every other token its text as stored.
  if (vocab.type === 'plamo2') return attr & TokenAttr.BYTE ? Uint8Array.of(vocab.tokenToByte(id)) : utf8Encode(text);
  if (attr & (TokenAttr.UNKNOWN | TokenAttr.CONTROL | TokenAttr.USER_DEFINED)) return utf8Encode(text);
  if (attr & TokenAttr.NORMAL) {
    if (vocab.type !== 'bpe' || vocab.escapeWhitespaces) return utf8Encode(text.replace(ESCAPED_SPACE, ' '));
    return decodeByteLevel(text);
  }
  if (attr & TokenAttr.BYTE) return Uint8Array.of(vocab.tokenToByte(id));
  // unused and undefined tokens render as nothing
  return EMPTY;
}

/** GPT-2 byte-level text back to bytes (llama.cpp's llama_decode_text, with its [UNK_BYTE_…] marker). */
function decodeByteLevel(text: string): Uint8Array {
  const out: number[] = [];
  for (const ch of text) {
    const b = charToByte(ch.codePointAt(0)!);
    if (b !== undefined) {
      out.push(b);
      continue;
    }
    const utf8 = utf8Encode(ch);
    const marker = '[UNK_BYTE_0x' + Array.from(utf8, (x) => x.toString(16).padStart(2, '0')).join('') + text + ']';
    out.push(...utf8Encode(marker));
  }
  return Uint8Array.from(out);
}

/**
 * llama.cpp's clean_up_tokenization_spaces: drop the space before ? ! . , , collapse " ' " to "'",
 * and drop the space before 's 'm 're 've. Works on bytes, as llama.cpp does.
 */
export function cleanSpaces(text: Uint8Array): Uint8Array {
  const t = Array.from(text);
  const SP = 0x20;
  const AP = 0x27;
  // first pass: " ?", " !", " .", " ,"
  let total = t.length;
  let n = total ? 1 : 0;
  for (let i = 1; i < total; i++) {
    const x = t[i];
    if (t[i - 1] === SP && (x === 0x3f || x === 0x21 || x === 0x2e || x === 0x2c)) n--;
    t[n++] = x;
  }
  // second pass: a single apostrophe between spaces
  total = n;
  n = total ? 1 : 0;
  for (let i = 1; i < total; i++) {
    const x = t[i];
    if (x === AP && i + 1 < total && t[i - 1] === SP && t[i + 1] === SP) {
      n--;
      t[++i] = 0;
    }
    t[n++] = x;
  }
  // third pass: " 's", " 'm", " 're", " 've" (" 't", " 'd", " 'll" keep their space)
  total = n;
  n = total ? 1 : 0;
  for (let i = 1; i < total; i++) {
    const x = t[i];
    if (t[i - 1] === SP && x === AP && i + 1 < total) {
      const x1 = t[i + 1];
      if (x1 === 0x73 || x1 === 0x6d) n--;
      else if (i + 2 < total) {
        const x2 = t[i + 2];
        if ((x1 === 0x72 && x2 === 0x65) || (x1 === 0x76 && x2 === 0x65)) n--;
      }
    }
    t[n++] = x;
  }
  return Uint8Array.from(t.slice(0, n));
}

/**
 * Turns token pieces (bytes) into text as they arrive, emitting only complete UTF-8 characters: a
 * character split over several tokens comes out with the token that completes it. Invalid bytes
 * come out as U+FFFD.
 */
export class Utf8StreamDecoder {
  private decoder = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

  /** The complete characters these bytes finish; incomplete trailing bytes wait for the next call. */
  push(bytes: Uint8Array): string {
    return this.decoder.decode(bytes, { stream: true });
  }

  /** Whatever is left, with an incomplete trailing character as U+FFFD; the decoder starts afresh. */
  flush(): string {
    const rest = this.decoder.decode();
    this.decoder = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
    return rest;
  }
}
