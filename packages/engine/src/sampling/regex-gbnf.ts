import { EngineError } from '../errors';

/**
 * A regular expression (vLLM's `guided_regex`: the whole output must match it) as a GBNF grammar
 * (`gbnf.ts`), the way llama.cpp's json-schema-to-grammar turns a schema's `pattern` into rules.
 * With `search` (JSON Schema's `pattern`), a match anywhere in the text is enough unless the
 * pattern is anchored with '^' and '$'.
 *
 * The syntax is the common core of Python's `re` (what vLLM's backends read) and JavaScript's:
 * literals and escapes (`\n`, `\t`, `\xHH`, `\uHHHH`, `\.`…), classes (`[a-z_]`, `[^"\\]`, with
 * `\d`, `\w`, `\s` inside), `.` (any character but a newline), `\d \w \s` and their negations
 * (ASCII: `\w` is `[0-9A-Za-z_]`), groups `( )`, `(?: )`, `(?P<name> )`, `(?<name> )`,
 * alternation, and the quantifiers `* + ? {m} {m,} {m,n}` (lazy forms match the same texts). A
 * leading `^` and a trailing `$` are implied and may be written. Backreferences, lookaround,
 * inline flags, anchors elsewhere, `\b` and possessive quantifiers cannot be expressed as a
 * grammar and are refused by name.
 */
export function regexToGbnf(pattern: string, options: { search?: boolean } = {}): string {
  if (typeof pattern !== 'string' || pattern.length === 0) throw bad('the regular expression is empty', 0);
  const chars = Array.from(pattern);
  const r = new RegexParser(chars);
  const body = r.parse();
  if (!options.search) return `root ::= ${body}\n`;
  // JSON Schema's pattern: a match anywhere, unless anchored ('^' first, '$' last).
  const start = chars[0] === '^';
  const end = chars.length > 1 && chars[chars.length - 1] === '$' && chars[chars.length - 2] !== '\\';
  return `root ::= ${start ? '' : 'any* '}(${body})${end ? '' : ' any*'}\nany ::= .\n`;
}

function bad(msg: string, at: number): EngineError {
  return new EngineError('KAIL_E_INVALID_ARG', `regex: ${msg} (at character ${at + 1})`);
}

const hex = (c: number, n: number) => c.toString(16).padStart(n, '0');

/** One code point as GBNF writes it inside a string literal or a class. */
function esc(c: number, inClass: boolean): string {
  if (c === 0x5c) return '\\\\';
  if (c === 0x22 && !inClass) return '\\"';
  if (inClass && (c === 0x5d || c === 0x5b || c === 0x2d || c === 0x5e)) return `\\${String.fromCharCode(c)}`;
  if (c === 0x0a) return '\\n';
  if (c === 0x0d) return '\\r';
  if (c === 0x09) return '\\t';
  if (c < 0x20 || c === 0x7f) return `\\x${hex(c, 2)}`;
  return String.fromCodePoint(c);
}

/** A piece of the grammar written so far, and whether it can match the empty text. */
type Part = { t: string; e: boolean };

/** Class items: single code points or ranges. */
type Range = [number, number];
const DIGIT: Range[] = [[0x30, 0x39]];
const WORD: Range[] = [[0x30, 0x39], [0x41, 0x5a], [0x5f, 0x5f], [0x61, 0x7a]];
const SPACE: Range[] = [[0x09, 0x0d], [0x20, 0x20]];

function classText(ranges: Range[], negated: boolean): string {
  const body = ranges.map(([a, b]) => (a === b ? esc(a, true) : `${esc(a, true)}-${esc(b, true)}`)).join('');
  return `[${negated ? '^' : ''}${body}]`;
}

class RegexParser {
  private i = 0;
  constructor(private readonly s: string[]) {}

  private peek(k = 0): string | undefined {
    return this.s[this.i + k];
  }

  parse(): string {
    if (this.peek() === '^') this.i++;
    const e = this.alternation(true);
    if (this.i < this.s.length) throw bad(`unexpected '${this.peek()}'`, this.i);
    return e.t;
  }

  // Each part comes back as its GBNF text `t` and whether it can match the empty text (`e`).
  private alternation(top: boolean): Part {
    const alts = [this.sequence(top)];
    while (this.peek() === '|') {
      this.i++;
      alts.push(this.sequence(top));
    }
    return alts.length === 1 ? alts[0] : { t: `(${alts.map((a) => a.t).join(' | ')})`, e: alts.some((a) => a.e) };
  }

  private sequence(top: boolean): Part {
    const items: Part[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined || c === '|' || c === ')') break;
      if (c === '$') {
        // Only at the end (of the whole pattern, or of a top-level alternative).
        this.i++;
        const n = this.peek();
        if (!top || (n !== undefined && n !== '|')) throw bad("'$' can only end the expression (the whole output must match)", this.i - 1);
        break;
      }
      if (c === '^') throw bad("'^' can only start the expression (the whole output must match)", this.i);
      const start = this.i;
      const atom = this.atom();
      items.push(this.quantified(atom, start));
    }
    return items.length ? { t: items.map((x) => x.t).join(' '), e: items.every((x) => x.e) } : { t: '""', e: true };
  }

  private quantified(atom: Part, start: number): Part {
    const c = this.peek();
    let q = '';
    let lo = 1;
    let unbounded = false;
    if (c === '*' || c === '+' || c === '?') {
      this.i++;
      q = c;
      lo = c === '+' ? 1 : 0;
      unbounded = c !== '?';
    } else if (c === '{') {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(this.s.slice(this.i).join(''));
      if (!m) return atom; // a literal '{', as Python reads one that starts no quantifier
      this.i += m[0].length;
      lo = Number(m[1]);
      const hi = m[2] === undefined ? lo : m[3] === '' ? Infinity : Number(m[3]);
      unbounded = hi === Infinity;
      if (hi < lo) throw bad(`{${lo},${hi}} has its maximum below its minimum`, start);
      q = hi === Infinity ? `{${lo},}` : lo === hi ? `{${lo}}` : `{${lo},${hi}}`;
    } else return atom;
    if (this.peek() === '?') this.i++; // lazy: the same texts
    else if (this.peek() === '+') throw bad('possessive quantifiers cannot be held by a grammar', this.i);
    const n = this.peek();
    if (n === '*' || n === '+' || n === '?' || (n === '{' && /^\{\d/.test(this.s.slice(this.i).join('')))) throw bad('a quantifier follows a quantifier', this.i);
    // GBNF (as llama.cpp's) cannot repeat without bound what may match nothing: it would be left-recursive.
    if (unbounded && atom.e)
      throw bad(`${this.s.slice(start, this.i).join('')} repeats without bound a part that can match the empty text, which a grammar cannot hold: make the repeated part non-empty (e.g. (a*)* as a*)`, start);
    return { t: `${atom.t}${q}`, e: atom.e || lo === 0 };
  }

  private atom(): Part {
    const at = this.i;
    const c = this.s[this.i++];
    switch (c) {
      case '(': {
        if (this.peek() === '?') {
          const rest = this.s.slice(this.i, this.i + 3).join('');
          if (rest.startsWith('?:')) this.i += 2;
          else if (rest.startsWith('?P<') || (rest.startsWith('?<') && rest[2] !== '=' && rest[2] !== '!')) {
            const close = this.s.indexOf('>', this.i);
            if (close < 0) throw bad('unterminated group name', at);
            this.i = close + 1;
          } else throw bad(`'(${rest.slice(0, 2)}' (lookaround, flags or a backreference) cannot be held by a grammar`, at);
        }
        const inner = this.alternation(false);
        if (this.peek() !== ')') throw bad("missing ')'", at);
        this.i++;
        return { t: `(${inner.t})`, e: inner.e };
      }
      case '[':
        return { t: this.charClass(at), e: false };
      case '.':
        return { t: '[^\\n]', e: false };
      case '\\':
        return { t: this.escape(at, false) as string, e: false };
      case '*':
      case '+':
      case '?':
        throw bad(`'${c}' has nothing to repeat`, at);
      case ')':
        throw bad("unbalanced ')'", at);
      default:
        return { t: `"${esc(c.codePointAt(0)!, false)}"`, e: false };
    }
  }

  /** An escape after '\\': outside a class, GBNF text; inside, the ranges it stands for. */
  private escape(at: number, inClass: boolean): string | Range[] {
    const c = this.s[this.i++];
    if (c === undefined) throw bad('the expression ends with a backslash', at);
    const set = (r: Range[], neg: boolean): string | Range[] => {
      if (inClass) {
        if (neg) throw bad(`\\${c} inside a class cannot be held by a grammar`, at);
        return r;
      }
      return classText(r, neg);
    };
    const one = (cp: number): string | Range[] => (inClass ? [[cp, cp]] : `"${esc(cp, false)}"`);
    switch (c) {
      case 'd':
        return set(DIGIT, false);
      case 'D':
        return set(DIGIT, true);
      case 'w':
        return set(WORD, false);
      case 'W':
        return set(WORD, true);
      case 's':
        return set(SPACE, false);
      case 'S':
        return set(SPACE, true);
      case 'n':
        return one(0x0a);
      case 'r':
        return one(0x0d);
      case 't':
        return one(0x09);
      case 'f':
        return one(0x0c);
      case 'v':
        return one(0x0b);
      case '0':
        return one(0);
      case 'x':
      case 'u': {
        const n = c === 'x' ? 2 : 4;
        const h = this.s.slice(this.i, this.i + n).join('');
        if (!new RegExp(`^[0-9a-fA-F]{${n}}$`).test(h)) throw bad(`\\${c} needs ${n} hex digits`, at);
        this.i += n;
        return one(parseInt(h, 16));
      }
      case 'b':
        if (inClass) return one(0x08);
        throw bad('\\b (a word boundary) cannot be held by a grammar', at);
      case 'B':
      case 'A':
      case 'Z':
      case 'z':
        throw bad(`\\${c} (an anchor) cannot be held by a grammar`, at);
      default:
        if (/[1-9]/.test(c)) throw bad(`\\${c} (a backreference) cannot be held by a grammar`, at);
        if (/[A-Za-z]/.test(c)) throw bad(`unknown escape \\${c}`, at);
        return one(c.codePointAt(0)!);
    }
  }

  private charClass(at: number): string {
    let neg = false;
    if (this.peek() === '^') {
      neg = true;
      this.i++;
    }
    const ranges: Range[] = [];
    let first = true;
    for (;;) {
      const c = this.peek();
      if (c === undefined) throw bad("missing ']'", at);
      if (c === ']' && !first) {
        this.i++;
        break;
      }
      first = false;
      const lo = this.classAtom(at);
      if (this.peek() === '-' && this.peek(1) !== undefined && this.peek(1) !== ']' && lo.length === 1 && lo[0][0] === lo[0][1]) {
        this.i++;
        const hi = this.classAtom(at);
        if (hi.length !== 1 || hi[0][0] !== hi[0][1]) throw bad('a range ends with a class escape', this.i);
        if (hi[0][0] < lo[0][0]) throw bad('a range goes backwards', this.i);
        ranges.push([lo[0][0], hi[0][0]]);
      } else ranges.push(...lo);
    }
    return classText(ranges, neg);
  }

  private classAtom(at: number): Range[] {
    const c = this.s[this.i++];
    if (c === '\\') return this.escape(at, true) as Range[];
    if (c === '[' && this.peek() === ':') throw bad('POSIX classes ([:alpha:]) are not supported', this.i - 1);
    const cp = c.codePointAt(0)!;
    return [[cp, cp]];
  }
}
