// The regex pre-tokenizer, ported from llama.cpp's `unicode_regex_split` (src/unicode.cpp).
//
// llama.cpp runs each expression of a pre-tokenizer in turn over the pieces the previous one made.
// Known expressions take hand-written paths (GPT-2, Llama-3, Qwen2, Qwen3.5, Kimi-K2, AFMoE digits,
// newline runs), whose results are not always what a regex engine would give, so they are ported as
// they are. Everything else goes through std::regex, which knows no \p{..}: llama.cpp "collapses"
// the text, replacing every code point >= 128 with one byte standing for its category, and rewrites
// \p{L} to [<letter byte>A-Za-z] and so on. That is reproduced here with JS regexes on the same
// collapsed text, so quirks carry over (\p{Lu} is any letter, \s is ASCII space or a collapsed
// Unicode space, a letter with a mark is two category bytes).

import {
  CPT_ACCENT_MARK,
  CPT_CATEGORIES,
  CPT_LETTER,
  CPT_NUMBER,
  CPT_PUNCTUATION,
  CPT_SYMBOL,
  CPT_WHITESPACE,
  byteEncode,
  codepoints,
  cptFlagsTable,
  wellFormed,
  cptIsHan,
  cptToLower,
} from './unicode';

type Offsets = number[];
type Custom = (cpts: readonly number[], offsets: Offsets) => Offsets;

const OUT_OF_RANGE = 0xffffffff;
const CR = 0x0d;
const LF = 0x0a;
const APOS = 0x27;
const SPACE = 0x20;

/** Shared cursor helpers for one segment [ini, end) of the code points, as in the C++ lambdas. */
class Segment {
  prevEnd: number;
  constructor(
    private readonly cpts: readonly number[],
    private readonly flagsTable: Uint16Array,
    readonly ini: number,
    readonly end: number,
    private readonly out: Offsets,
  ) {
    this.prevEnd = ini;
  }
  cpt(pos: number): number {
    return pos >= this.ini && pos < this.end ? this.cpts[pos] : OUT_OF_RANGE;
  }
  flags(pos: number): number {
    if (pos < this.ini || pos >= this.end) return 0;
    const c = this.cpts[pos];
    return c < this.flagsTable.length ? this.flagsTable[c] : 1;
  }
  add(end: number): number {
    const len = end - this.prevEnd;
    if (len > 0) this.out.push(len);
    this.prevEnd = end;
    return len;
  }
}

function forSegments(cpts: readonly number[], offsets: Offsets, body: (s: Segment) => void): Offsets {
  const out: Offsets = [];
  const table = cptFlagsTable();
  let start = 0;
  for (const offset of offsets) {
    const seg = new Segment(cpts, table, start, start + offset, out);
    start += offset;
    body(seg);
  }
  return out;
}

/** (?i:'s|'t|'re|'ve|'m|'ll|'d) at pos: its length, or 0. `icase` lowercases like llama.cpp. */
function contraction(s: Segment, pos: number, icase: boolean): number {
  if (s.cpt(pos) !== APOS || pos + 1 >= s.end) return 0;
  const lower = (c: number) => (icase ? cptToLower(c) : c);
  const n1 = lower(s.cpt(pos + 1));
  if (n1 === 0x73 || n1 === 0x74 || n1 === 0x6d || n1 === 0x64) return 2; // s t m d
  if (pos + 2 < s.end) {
    const n2 = lower(s.cpt(pos + 2));
    if ((n1 === 0x72 && n2 === 0x65) || (n1 === 0x76 && n2 === 0x65) || (n1 === 0x6c && n2 === 0x6c)) return 3; // re ve ll
  }
  return 0;
}

/** The whitespace tail shared by the Llama-3 family: \s*[\r\n]+|\s+(?!\S)|\s+ then a lone char. */
function whitespaceTail(s: Segment, pos: number, withNewlines: boolean): number {
  let n = 0;
  let lastRn = 0;
  while (s.flags(pos + n) & CPT_WHITESPACE) {
    const c = s.cpt(pos + n);
    if (c === CR || c === LF) lastRn = pos + n + 1;
    n++;
  }
  if (withNewlines && lastRn > 0) {
    s.add(lastRn);
    return lastRn;
  }
  if (n > 1 && s.cpt(pos + n) !== OUT_OF_RANGE) {
    pos += n - 1;
    s.add(pos);
    return pos;
  }
  if (n > 0) {
    pos += n;
    s.add(pos);
    return pos;
  }
  s.add(++pos);
  return pos;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
const splitGpt2: Custom = (cpts, offsets) =>
  forSegments(cpts, offsets, (s) => {
    for (let pos = s.ini; pos < s.end; ) {
      const cpt = s.cpt(pos);
      const flags = s.flags(pos);
      const c = contraction(s, pos, false);
      if (c) {
        pos += s.add(pos + c);
        continue;
      }
      let flags2 = cpt === SPACE ? s.flags(pos + 1) : flags;
      if (flags2 & CPT_LETTER) {
        pos += cpt === SPACE ? 1 : 0;
        while (flags2 & CPT_LETTER) flags2 = s.flags(++pos);
        s.add(pos);
        continue;
      }
      if (flags2 & CPT_NUMBER) {
        pos += cpt === SPACE ? 1 : 0;
        while (flags2 & CPT_NUMBER) flags2 = s.flags(++pos);
        s.add(pos);
        continue;
      }
      if (!(flags2 & (CPT_WHITESPACE | CPT_LETTER | CPT_NUMBER)) && flags2) {
        pos += cpt === SPACE ? 1 : 0;
        while (!(flags2 & (CPT_WHITESPACE | CPT_LETTER | CPT_NUMBER)) && flags2) flags2 = s.flags(++pos);
        s.add(pos);
        continue;
      }
      pos = whitespaceTail(s, pos, false);
    }
  });

/**
 * The Llama-3 shape: (?i:contractions)|[^\r\n\p{L}\p{N}]?<letters>+|\p{N}{1,digits}| ?[^\s<letters>\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with <letters> = \p{L} (Llama-3, Qwen2) or [\p{L}\p{M}] (Qwen3.5).
 */
function llama3Like(maxDigits: number, letterMask: number): Custom {
  return (cpts, offsets) =>
    forSegments(cpts, offsets, (s) => {
      for (let pos = s.ini; pos < s.end; ) {
        const cpt = s.cpt(pos);
        const flags = s.flags(pos);
        const c = contraction(s, pos, true);
        if (c) {
          pos += s.add(pos + c);
          continue;
        }
        if (!(cpt === CR || cpt === LF || flags & CPT_NUMBER)) {
          if (flags & letterMask || s.flags(pos + 1) & letterMask) {
            pos++;
            while (s.flags(pos) & letterMask) pos++;
            s.add(pos);
            continue;
          }
        }
        if (flags & CPT_NUMBER) {
          if (maxDigits === 1) {
            s.add(++pos);
            continue;
          }
          let ini = pos;
          while (s.flags(pos) & CPT_NUMBER) {
            if (++pos - ini >= maxDigits) {
              s.add(pos);
              ini = pos;
            }
          }
          s.add(pos);
          continue;
        }
        const stop = CPT_WHITESPACE | letterMask | CPT_NUMBER;
        let flags2 = cpt === SPACE ? s.flags(pos + 1) : flags;
        // llama.cpp tests `flags` (not flags2) for "in range" here; kept as is.
        if (!(flags2 & stop) && flags) {
          pos += cpt === SPACE ? 1 : 0;
          while (!(flags2 & stop) && flags2) flags2 = s.flags(++pos);
          let cpt2 = s.cpt(pos);
          while (cpt2 === CR || cpt2 === LF) cpt2 = s.cpt(++pos);
          s.add(pos);
          continue;
        }
        pos = whitespaceTail(s, pos, true);
      }
    });
}

const splitLlama3 = llama3Like(3, CPT_LETTER);
const splitQwen2 = llama3Like(1, CPT_LETTER);
const splitQwen35 = llama3Like(1, CPT_LETTER | CPT_ACCENT_MARK);

// Kimi-K2: [\p{Han}]+ | letter words without Han, with optional contractions | \p{N}{1,3} | ...
const splitKimiK2: Custom = (cpts, offsets) =>
  forSegments(cpts, offsets, (s) => {
    const isLetterNotHan = (p: number) => !!(s.flags(p) & CPT_LETTER) && !cptIsHan(s.cpt(p));
    for (let pos = s.ini; pos < s.end; ) {
      const cpt = s.cpt(pos);
      const flags = s.flags(pos);
      if (cptIsHan(cpt)) {
        while (cptIsHan(s.cpt(pos))) pos++;
        s.add(pos);
        continue;
      }
      const leading = !(cpt === CR || cpt === LF || flags & CPT_LETTER || flags & CPT_NUMBER);
      const isLetterPattern = ((flags & CPT_LETTER) !== 0 && !cptIsHan(cpt)) || (leading && isLetterNotHan(pos + 1));
      if (isLetterPattern) {
        let hasLeading = false;
        if (leading) {
          hasLeading = true;
          pos++;
        }
        let hasLetters = false;
        while (isLetterNotHan(pos)) {
          hasLetters = true;
          pos++;
        }
        if (hasLetters || (!hasLeading && isLetterNotHan(pos))) {
          if (!hasLetters) pos++;
          while (isLetterNotHan(pos)) pos++;
          if (s.cpt(pos) === APOS && pos + 1 < s.end) {
            const n1 = cptToLower(s.cpt(pos + 1));
            if (n1 === 0x73 || n1 === 0x74 || n1 === 0x6d || n1 === 0x64) {
              pos += 2;
            } else if (pos + 2 < s.end) {
              const n2 = cptToLower(s.cpt(pos + 2));
              if ((n1 === 0x72 && n2 === 0x65) || (n1 === 0x76 && n2 === 0x65) || (n1 === 0x6c && n2 === 0x6c)) pos += 3;
            }
          }
          s.add(pos);
          continue;
        } else if (hasLeading) {
          pos--;
        }
      }
      if (flags & CPT_NUMBER) {
        let ini = pos;
        while (s.flags(pos) & CPT_NUMBER) {
          if (++pos - ini >= 3) {
            s.add(pos);
            ini = pos;
          }
        }
        s.add(pos);
        continue;
      }
      let flags2 = cpt === SPACE ? s.flags(pos + 1) : flags;
      const stop = CPT_WHITESPACE | CPT_LETTER | CPT_NUMBER;
      if (!(flags2 & stop) && flags2) {
        pos += cpt === SPACE ? 1 : 0;
        while (!(flags2 & stop) && flags2) flags2 = s.flags(++pos);
        let cpt2 = s.cpt(pos);
        while (cpt2 === CR || cpt2 === LF) cpt2 = s.cpt(++pos);
        s.add(pos);
        continue;
      }
      pos = whitespaceTail(s, pos, true);
    }
  });

// AFMoE / Tiny Aya digits: a digit run splits into a leading 1-2 digits and groups of 3. Non-digit
// text is not split off; it stays glued to the following digits, as in llama.cpp.
const splitAfmoeDigits: Custom = (cpts, offsets) =>
  forSegments(cpts, offsets, (s) => {
    for (let pos = s.ini; pos < s.end; ) {
      if (s.flags(pos) & CPT_NUMBER) {
        const digitStart = pos;
        let count = 0;
        while (s.flags(pos) & CPT_NUMBER && pos < s.end) {
          count++;
          pos++;
        }
        const rem = count % 3;
        let current = digitStart;
        if (rem > 0) {
          s.add(current + rem);
          current += rem;
        }
        while (current < digitStart + count) {
          s.add(current + 3);
          current += 3;
        }
        continue;
      }
      pos++;
    }
    if (s.prevEnd < s.end) s.add(s.end);
  });

// [^\n]+|[\n]+
const splitNewlines: Custom = (cpts, offsets) => {
  const out: Offsets = [];
  let start = 0;
  for (const offset of offsets) {
    const end = start + offset;
    let pos = start;
    while (pos < end) {
      const nl = cpts[pos] === LF;
      const runStart = pos;
      while (pos < end && (cpts[pos] === LF) === nl) pos++;
      out.push(pos - runStart);
    }
    start = end;
  }
  return out;
};

const CUSTOM = new Map<string, Custom>([
  ["'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", splitGpt2],
  ["(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", splitLlama3],
  ["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", splitLlama3],
  ["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", splitQwen2],
  ["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", splitQwen35],
  ['\\p{Han}+', splitKimiK2],
  ['\\p{AFMoE_digits}', splitAfmoeDigits],
  ['[^\\n]+|[\\n]+', splitNewlines],
  ['\\d{1,3}(?=(?:\\d{3})*\\b)', splitAfmoeDigits],
]);

// ---- the std::regex fallback ----

// \p{..} names llama.cpp understands; the case classes all mean "letter" there.
const UCAT_ENUM: Record<string, number> = {
  '\\p{N}': CPT_NUMBER,
  '\\p{L}': CPT_LETTER,
  '\\p{P}': CPT_PUNCTUATION,
  '\\p{M}': CPT_ACCENT_MARK,
  '\\p{S}': CPT_SYMBOL,
  '\\p{Lu}': CPT_LETTER,
  '\\p{Ll}': CPT_LETTER,
  '\\p{Lt}': CPT_LETTER,
  '\\p{Lm}': CPT_LETTER,
  '\\p{Lo}': CPT_LETTER,
};
const UCAT_KEYS = Object.keys(UCAT_ENUM);

// The byte each category collapses to, and the ASCII members a rewritten \p{..} keeps.
const UCAT_CPT = new Map<number, number>([
  [CPT_NUMBER, 0xd1],
  [CPT_LETTER, 0xd2],
  [CPT_PUNCTUATION, 0xd3],
  [CPT_ACCENT_MARK, 0xd4],
  [CPT_SYMBOL, 0xd5],
]);
const UCAT_ASCII = new Map<number, string>([
  [CPT_NUMBER, '0-9'],
  [CPT_LETTER, 'A-Za-z'],
  [CPT_PUNCTUATION, '!-#%-*,-/:-;?-@\\[-\\]_\\{\\}'],
  [CPT_ACCENT_MARK, ''],
  [CPT_SYMBOL, '\\$\\+<->^`\\|\\~'],
]);
const COLLAPSED_SPACE = 0x0b; // vertical tab: ASCII \s that stands for every non-ASCII space
const COLLAPSED_OTHER = 0xd0;

function collapseText(cpts: readonly number[]): string {
  const table = cptFlagsTable();
  const units = new Uint16Array(cpts.length);
  for (let i = 0; i < cpts.length; i++) {
    const c = cpts[i];
    if (c < 128) {
      units[i] = c;
      continue;
    }
    const flags = c < table.length ? table[c] : 1;
    if (flags & CPT_WHITESPACE) units[i] = COLLAPSED_SPACE;
    else units[i] = UCAT_CPT.get(flags & CPT_CATEGORIES) ?? COLLAPSED_OTHER;
  }
  return fromUnits(units);
}

function fromUnits(units: Uint16Array): string {
  let s = '';
  for (let i = 0; i < units.length; i += 8192) s += String.fromCharCode(...units.subarray(i, i + 8192));
  return s;
}

/** llama.cpp's rewrite of a regex with \p{..} into one over the collapsed text (same bracket tracking). */
function collapseRegex(expr: string): string {
  let out = '';
  let inside = false;
  for (let i = 0; i < expr.length; i++) {
    const ch = expr[i];
    if (ch === '[' && (i === 0 || expr[i - 1] !== '\\')) {
      out += '[';
      inside = true;
      continue;
    }
    if (inside && ch === ']' && expr[i - 1] !== '\\') {
      out += ']';
      inside = false;
      continue;
    }
    if (ch === '\\' && i + 3 < expr.length && expr[i + 1] === 'p' && expr[i + 2] === '{') {
      const close = expr.indexOf('}', i + 3);
      if (close !== -1 && close <= i + 10) {
        const cat = UCAT_ENUM[expr.slice(i, close + 1)];
        if (cat !== undefined) {
          if (!inside) out += '[';
          out += String.fromCharCode(UCAT_CPT.get(cat)!) + UCAT_ASCII.get(cat)!;
          if (!inside) out += ']';
          i = close;
          continue;
        }
      }
    }
    out += ch;
  }
  return out;
}

const ASCII_SPACE = '\\t\\n\\v\\f\\r ';

/**
 * For regexes run on real code points (no \p{..}): std::wregex's \s in the C locale is ASCII only
 * (llama.cpp maps other spaces to \v first), while JS's \s also takes U+FEFF and friends. Spell it out.
 */
function asciiSpaceRegex(expr: string): string {
  let out = '';
  let inside = false;
  for (let i = 0; i < expr.length; i++) {
    const ch = expr[i];
    if (ch === '\\' && i + 1 < expr.length) {
      const next = expr[i + 1];
      if (next === 's') out += inside ? ASCII_SPACE : `[${ASCII_SPACE}]`;
      else if (next === 'S') {
        if (inside) throw new Error(`unsupported \\S inside a character class in pre-tokenizer regex ${expr}`);
        out += `[^${ASCII_SPACE}]`;
      } else out += ch + next;
      i++;
      continue;
    }
    if (ch === '[' && !inside) inside = true;
    else if (ch === ']' && inside) inside = false;
    out += ch;
  }
  return out;
}

interface CompiledRegex {
  re: RegExp;
  collapsed: boolean;
}
const compiled = new Map<string, CompiledRegex>();

function compile(expr: string): CompiledRegex {
  let c = compiled.get(expr);
  if (c) return c;
  const collapsed = UCAT_KEYS.some((k) => expr.includes(k));
  try {
    if (collapsed) {
      for (const ch of expr) {
        if (ch.codePointAt(0)! >= 128) throw new Error('Regex includes both unicode categories and non-ASCII characters - not supported');
      }
      c = { re: new RegExp(collapseRegex(expr), 'g'), collapsed };
    } else {
      c = { re: new RegExp(asciiSpaceRegex(expr), 'gu'), collapsed };
    }
  } catch (e) {
    throw new Error(`failed to compile pre-tokenizer regex ${JSON.stringify(expr)}: ${(e as Error).message}`);
  }
  compiled.set(expr, c);
  return c;
}

/**
 * std::regex_iterator over each segment, as llama.cpp's `unicode_regex_split_stl`: matches and the
 * gaps between them both become pieces; an empty match yields a zero-length piece.
 * `unitOf[i]` is the UTF-16 index of code point i in `text`, `cptOf` the reverse (null: one unit each).
 */
function splitStl(text: string, re: RegExp, offsets: Offsets, unitOf: Int32Array | null, cptOf: Int32Array | null): Offsets {
  const out: Offsets = [];
  let start = 0;
  for (const offset of offsets) {
    const u0 = unitOf ? unitOf[start] : start;
    const u1 = unitOf ? unitOf[start + offset] : start + offset;
    const seg = text.slice(u0, u1);
    const toCpt = (u: number) => (cptOf ? cptOf[u0 + u] - start : u);
    let startIdx = 0;
    re.lastIndex = 0;
    let m: RegExpExecArray | null;
    while ((m = re.exec(seg)) !== null) {
      const pos = toCpt(m.index);
      const end = toCpt(m.index + m[0].length);
      if (pos > startIdx) out.push(pos - startIdx);
      out.push(end - pos);
      startIdx = end;
      if (m[0].length === 0) {
        // std::regex_iterator moves one character on after an empty match
        const next = m.index + (re.unicode && seg.charCodeAt(m.index) >= 0xd800 && seg.charCodeAt(m.index) <= 0xdbff ? 2 : 1);
        if (next > seg.length) break;
        re.lastIndex = next;
      }
    }
    if (startIdx < offset) out.push(offset - startIdx);
    start += offset;
  }
  return out;
}

/**
 * Splits `text` into pre-tokenizer pieces with llama.cpp's expressions, applied in order. With
 * `byteEncode` the pieces come back in GPT-2's byte-level alphabet, ready for the BPE merges.
 */
export function regexSplit(text: string, exprs: readonly string[], byteEncode_ = true): string[] {
  const cpts = codepoints(text);
  let offsets: Offsets = [cpts.length];
  let collapsedText: string | undefined;
  let wide: { text: string; unitOf: Int32Array; cptOf: Int32Array } | undefined;

  for (const expr of exprs) {
    const custom = CUSTOM.get(expr);
    if (custom) {
      const tmp = custom(cpts, offsets);
      if (tmp.length > 0) {
        offsets = tmp;
        continue;
      }
    }
    const { re, collapsed } = compile(expr);
    if (collapsed) {
      collapsedText ??= collapseText(cpts);
      offsets = splitStl(collapsedText, re, offsets, null, null);
    } else {
      wide ??= wideText(cpts);
      offsets = splitStl(wide.text, re, offsets, wide.unitOf, wide.cptOf);
    }
  }

  // cut the (well-formed) text at the code point offsets
  const src = wellFormed(text);
  const words: string[] = [];
  let unit = 0;
  let cpt = 0;
  for (const offset of offsets) {
    let end = unit;
    if (src.length === cpts.length) end += offset;
    else for (let k = 0; k < offset; k++) end += cpts[cpt + k] > 0xffff ? 2 : 1;
    words.push(src.slice(unit, end));
    unit = end;
    cpt += offset;
  }
  return byteEncode_ ? words.map(byteEncode) : words;
}

/** The code points as a JS string with non-ASCII spaces as \v (llama.cpp's std::wregex input). */
function wideText(cpts: readonly number[]): { text: string; unitOf: Int32Array; cptOf: Int32Array } {
  const table = cptFlagsTable();
  const unitOf = new Int32Array(cpts.length + 1);
  let units = 0;
  for (let i = 0; i < cpts.length; i++) {
    unitOf[i] = units;
    units += cpts[i] > 0xffff ? 2 : 1;
  }
  unitOf[cpts.length] = units;
  const cptOf = new Int32Array(units + 1);
  const buf = new Uint16Array(units);
  for (let i = 0; i < cpts.length; i++) {
    let c = cpts[i];
    const u = unitOf[i];
    cptOf[u] = i;
    if (c > 0x7f && c < table.length && table[c] & CPT_WHITESPACE) c = COLLAPSED_SPACE;
    if (c > 0xffff) {
      buf[u] = 0xd800 + ((c - 0x10000) >> 10);
      buf[u + 1] = 0xdc00 + ((c - 0x10000) & 0x3ff);
      cptOf[u + 1] = i;
    } else {
      buf[u] = c;
    }
  }
  cptOf[units] = cpts.length;
  return { text: fromUnits(buf), unitOf, cptOf };
}
