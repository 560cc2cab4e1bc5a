// Code point properties as llama.cpp's unicode.cpp sees them, and the UTF-8 / GPT-2 byte helpers
// the tokenizers share. The tables come from llama.cpp (unicode-data.ts), not from the JS engine,
// so that \p{L}, \p{N}, \s… mean the same code points here as in llama.cpp.

import { FLAG_RANGES, LOWERCASE, NFD_RANGES, WHITESPACE } from './unicode-data';

export const CPT_UNDEFINED = 0x0001;
export const CPT_NUMBER = 0x0002; // \p{N}
export const CPT_LETTER = 0x0004; // \p{L}
export const CPT_SEPARATOR = 0x0008; // \p{Z}
export const CPT_ACCENT_MARK = 0x0010; // \p{M}
export const CPT_PUNCTUATION = 0x0020; // \p{P}
export const CPT_SYMBOL = 0x0040; // \p{S}
export const CPT_CONTROL = 0x0080; // \p{C}
export const CPT_CATEGORIES = 0x00ff;
export const CPT_WHITESPACE = 0x0100; // \s

const MAX_CODEPOINTS = 0x110000;

function decode36(s: string): number[] {
  return s.split(',').map((x) => parseInt(x, 36));
}

let flagsTable: Uint16Array | undefined;

function buildFlagsTable(): Uint16Array {
  const t = new Uint16Array(MAX_CODEPOINTS).fill(CPT_UNDEFINED);
  const enc = decode36(FLAG_RANGES);
  let start = 0;
  for (let i = 0; i < enc.length; i += 2) {
    start += enc[i];
    const end = i + 2 < enc.length ? start + enc[i + 2] : MAX_CODEPOINTS;
    t.fill(enc[i + 1], start, Math.min(end, MAX_CODEPOINTS));
  }
  for (const c of WHITESPACE) t[c] |= CPT_WHITESPACE;
  return t;
}

/** llama.cpp's `unicode_cpt_flags_from_cpt`: category bits plus CPT_WHITESPACE. */
export function cptFlags(cpt: number): number {
  if (cpt >= MAX_CODEPOINTS) return CPT_UNDEFINED;
  return (flagsTable ??= buildFlagsTable())[cpt];
}

/** The whole table, for hot loops that index it directly. */
export function cptFlagsTable(): Uint16Array {
  return (flagsTable ??= buildFlagsTable());
}

let lowerMap: Map<number, number> | undefined;

/** Simple (one code point) lowercase mapping, as llama.cpp's `unicode_tolower`. */
export function cptToLower(cpt: number): number {
  if (!lowerMap) {
    lowerMap = new Map();
    const enc = decode36(LOWERCASE);
    let from = 0;
    for (let i = 0; i < enc.length; i += 2) {
      from += enc[i];
      lowerMap.set(from, from + enc[i + 1]);
    }
  }
  return lowerMap.get(cpt) ?? cpt;
}

let nfdStarts: Uint32Array | undefined;
let nfdLasts: Uint32Array | undefined;
let nfdTo: Uint32Array | undefined;

/** llama.cpp's `unicode_cpts_normalize_nfd`: each code point to the first code point of its NFD form. */
export function cptNfdFirst(cpt: number): number {
  if (!nfdStarts || !nfdLasts || !nfdTo) {
    const enc = decode36(NFD_RANGES);
    const n = enc.length / 3;
    nfdStarts = new Uint32Array(n);
    nfdLasts = new Uint32Array(n);
    nfdTo = new Uint32Array(n);
    let first = 0;
    for (let i = 0; i < n; i++) {
      first += enc[3 * i];
      nfdStarts[i] = first;
      nfdLasts[i] = first + enc[3 * i + 1];
      nfdTo[i] = enc[3 * i + 2];
    }
  }
  // last range whose start <= cpt
  let lo = 0;
  let hi = nfdStarts.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (nfdStarts[mid] <= cpt) lo = mid;
    else hi = mid - 1;
  }
  return nfdStarts[lo] <= cpt && cpt <= nfdLasts[lo] ? nfdTo[lo] : cpt;
}

/** Han ranges of llama.cpp's `unicode_cpt_is_han` (used by the Kimi-K2 pre-tokenizer). */
export function cptIsHan(cpt: number): boolean {
  return (
    (cpt >= 0x4e00 && cpt <= 0x9fff) ||
    (cpt >= 0x3400 && cpt <= 0x4dbf) ||
    (cpt >= 0x20000 && cpt <= 0x2a6df) ||
    (cpt >= 0x2a700 && cpt <= 0x2b73f) ||
    (cpt >= 0x2b740 && cpt <= 0x2b81f) ||
    (cpt >= 0x2b820 && cpt <= 0x2ceaf) ||
    (cpt >= 0x2ceb0 && cpt <= 0x2ebef) ||
    (cpt >= 0xf900 && cpt <= 0xfaff) ||
    (cpt >= 0x2f800 && cpt <= 0x2fa1f)
  );
}

/**
 * Code points of a JS string. Lone surrogates become U+FFFD, which is what llama.cpp produces for the
 * invalid UTF-8 a lone surrogate encodes to.
 */
export function codepoints(s: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = i + 1 < s.length ? s.charCodeAt(i + 1) : 0;
      if (d >= 0xdc00 && d <= 0xdfff) {
        out.push(((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000);
        i++;
        continue;
      }
      out.push(0xfffd);
    } else if (c >= 0xdc00 && c <= 0xdfff) {
      out.push(0xfffd);
    } else {
      out.push(c);
    }
  }
  return out;
}

/** Replaces lone surrogates with U+FFFD, so the string has a UTF-8 form. */
export function wellFormed(s: string): string {
  return /[\ud800-\udfff]/.test(s) ? String.fromCodePoint(...codepoints(s)) : s;
}

const encoder = new TextEncoder();

export function utf8Encode(s: string): Uint8Array {
  return encoder.encode(s);
}

/** Byte length of the UTF-8 form of `s` (lone surrogates count as U+FFFD, 3 bytes). */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 4;
        i++;
      } else n += 3;
    } else n += 3;
  }
  return n;
}

// GPT-2's reversible byte <-> printable code point mapping (bytes_to_unicode in the original encoder.py).
const BYTE_TO_CPT = new Uint16Array(256);
const CPT_TO_BYTE = new Map<number, number>();
{
  const direct = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    BYTE_TO_CPT[b] = direct(b) ? b : 256 + n++;
    CPT_TO_BYTE.set(BYTE_TO_CPT[b], b);
  }
}

/** The printable character GPT-2's byte-level BPE uses for byte `b`. */
export const BYTE_TO_CHAR: readonly string[] = Array.from(BYTE_TO_CPT, (c) => String.fromCharCode(c));

/** The byte a GPT-2 byte-level character stands for, or undefined when `cpt` is not one of them. */
export function charToByte(cpt: number): number | undefined {
  return CPT_TO_BYTE.get(cpt);
}

/** GPT-2 byte-level encoding of a string: its UTF-8 bytes, each as its printable character. */
export function byteEncode(s: string): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      out += BYTE_TO_CHAR[c];
      continue;
    }
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        c = ((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000;
        i++;
      } else c = 0xfffd;
    } else if (c >= 0xd800 && c <= 0xdfff) {
      c = 0xfffd;
    }
    if (c < 0x800) {
      out += BYTE_TO_CHAR[0xc0 | (c >> 6)] + BYTE_TO_CHAR[0x80 | (c & 0x3f)];
    } else if (c < 0x10000) {
      out += BYTE_TO_CHAR[0xe0 | (c >> 12)] + BYTE_TO_CHAR[0x80 | ((c >> 6) & 0x3f)] + BYTE_TO_CHAR[0x80 | (c & 0x3f)];
    } else {
      out +=
        BYTE_TO_CHAR[0xf0 | (c >> 18)] +
        BYTE_TO_CHAR[0x80 | ((c >> 12) & 0x3f)] +
        BYTE_TO_CHAR[0x80 | ((c >> 6) & 0x3f)] +
        BYTE_TO_CHAR[0x80 | (c & 0x3f)];
    }
  }
  return out;
}
