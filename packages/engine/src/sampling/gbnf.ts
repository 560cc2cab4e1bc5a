import { EngineError } from '../errors';
import type { ByteRecognizer } from './json-constraint';

/**
 * GBNF grammars (llama.cpp's `grammar` / `--grammar-file` format, `grammars/README.md` in its
 * source): the parser, and a recognizer of the grammar's texts that `OutputConstraint` drives.
 *
 * The semantics are llama.cpp's (`src/llama-grammar.cpp`), so a grammar allows the same tokens
 * here as there: rules compile to the same element lists (repetitions rewritten into the same
 * helper rules), the recognizer keeps the same set of pushdown stacks, and a token is fed as its
 * text decoded to code points (a token may end inside a UTF-8 character, then the next must finish
 * it), or matched by id where the grammar names a token (`<[id]>`, `<text>`, `!<...>`). End of
 * generation is allowed once some stack is empty. One difference: a token is judged by all of its
 * bytes, which must be UTF-8, where llama.cpp's decoder stops at a NUL byte and reads some invalid
 * bytes as other characters (`decode`).
 *
 * Errors name the problem and where it is (line and column); what llama.cpp refuses (undefined
 * rules, left recursion, repetitions past 2000, no `root`) is refused here too.
 */

/** Element types (llama.cpp's `llama_gretype`). */
export const enum G {
  End = 0,
  Alt = 1,
  RuleRef = 2,
  Char = 3,
  CharNot = 4,
  CharRngUpper = 5,
  CharAlt = 6,
  CharAny = 7,
  Token = 8,
  TokenNot = 9,
}

/** llama.cpp's MAX_REPETITION_THRESHOLD. */
const MAX_REPETITION = 2000;
/** Element positions must fit the stack table's key (below). */
const MAX_ELEMENTS = 1 << 22;

/** A parsed grammar: every rule's elements, one after another. */
export interface GbnfGrammar {
  readonly types: Uint8Array;
  readonly values: Uint32Array;
  /** Where each rule's elements start. */
  readonly ruleStart: Int32Array;
  /** Rule names by id (helper rules are `name_N`, as llama.cpp names them). */
  readonly names: readonly string[];
  readonly root: number;
}

export interface GbnfOptions {
  /** Tokenizes `<text>` (special tokens parsed); the text must be exactly one token. */
  tokenize?: (text: string) => number[];
  /** Token ids must be below this. */
  nVocab?: number;
  /** The start rule (default `root`). */
  root?: string;
}

const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isWordChar = (c: number) => (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || c === 0x2d || isDigit(c);
const CH = (s: string) => s.codePointAt(0)!;

class Parser {
  readonly symbolIds = new Map<string, number>();
  /** Each rule: interleaved (type, value) pairs, ending with End. */
  readonly rules: number[][] = [];
  private readonly cps: number[];

  constructor(
    private readonly src: string,
    private readonly opts: GbnfOptions,
  ) {
    this.cps = Array.from(src, (c) => c.codePointAt(0)!);
  }

  /** The code point at i (0 past the end, as the C string's terminator). */
  private at(i: number): number {
    return i < this.cps.length ? this.cps[i] : 0;
  }

  fail(msg: string, i: number): never {
    let line = 1;
    let col = 1;
    for (let k = 0; k < i && k < this.cps.length; k++) {
      if (this.cps[k] === 0x0a) {
        line++;
        col = 1;
      } else col++;
    }
    const rest = String.fromCodePoint(...this.cps.slice(i, i + 24)).split('\n')[0];
    throw new EngineError('KAIL_E_INVALID_ARG', `grammar: ${msg} at line ${line}, column ${col}${rest ? ` ('${rest}')` : ' (end of input)'}`);
  }

  symbolId(name: string): number {
    let id = this.symbolIds.get(name);
    if (id === undefined) this.symbolIds.set(name, (id = this.symbolIds.size));
    return id;
  }

  generateSymbolId(base: string): number {
    const id = this.symbolIds.size;
    this.symbolIds.set(`${base}_${id}`, id);
    return id;
  }

  addRule(id: number, rule: number[]): void {
    while (this.rules.length <= id) this.rules.push([]);
    this.rules[id] = rule;
  }

  space(i: number, newlineOk: boolean): number {
    for (;;) {
      const c = this.at(i);
      if (c === 0x23) {
        while (i < this.cps.length && this.cps[i] !== 0x0d && this.cps[i] !== 0x0a) i++;
      } else if (c === 0x20 || c === 0x09 || (newlineOk && (c === 0x0d || c === 0x0a))) i++;
      else return i;
    }
  }

  name(i: number): number {
    const s = i;
    while (isWordChar(this.at(i))) i++;
    if (i === s) this.fail('expecting a rule name', s);
    return i;
  }

  int(i: number): number {
    const s = i;
    while (isDigit(this.at(i))) i++;
    if (i === s) this.fail('expecting an integer', s);
    return i;
  }

  text(a: number, b: number): string {
    return String.fromCodePoint(...this.cps.slice(a, b));
  }

  hex(i: number, n: number): [number, number] {
    let v = 0;
    for (let k = 0; k < n; k++) {
      const c = this.at(i + k);
      const d = isDigit(c) ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x61 + 10 : c >= 0x41 && c <= 0x46 ? c - 0x41 + 10 : -1;
      if (d < 0) this.fail(`expecting ${n} hex digits`, i);
      v = v * 16 + d;
    }
    if (v > 0x10ffff) this.fail(`\\U${this.text(i, i + n)} is past the last Unicode code point`, i);
    return [v, i + n];
  }

  /** One character of a literal or a class: an escape or a code point. */
  char(i: number): [number, number] {
    const c = this.at(i);
    if (c === 0x5c) {
      const e = this.at(i + 1);
      switch (e) {
        case CH('x'):
          return this.hex(i + 2, 2);
        case CH('u'):
          return this.hex(i + 2, 4);
        case CH('U'):
          return this.hex(i + 2, 8);
        case CH('t'):
          return [0x09, i + 2];
        case CH('r'):
          return [0x0d, i + 2];
        case CH('n'):
          return [0x0a, i + 2];
        case 0x5c:
        case 0x22:
        case 0x5b:
        case 0x5d:
        case 0x2d:
          return [e, i + 2];
        default:
          this.fail('unknown escape', i);
      }
    }
    if (i < this.cps.length) return [c, i + 1];
    this.fail('unexpected end of input', i);
  }

  /** `<[id]>` or `<text>` at i (the '<'). */
  token(i: number): [number, number] {
    const s = i;
    i++;
    let id: number;
    if (this.at(i) === 0x5b) {
      const e = this.int(i + 1);
      id = Number(this.text(i + 1, e));
      if (this.at(e) !== 0x5d) this.fail("expecting ']'", e);
      if (this.at(e + 1) !== 0x3e) this.fail("expecting '>'", e + 1);
      i = e + 2;
    } else {
      while (i < this.cps.length && this.cps[i] !== 0x3e) i++;
      if (this.at(i) !== 0x3e) this.fail("expecting '>'", i);
      i++;
      const text = this.text(s, i);
      if (!this.opts.tokenize) this.fail(`no vocabulary to look up the token ${text}`, s);
      const ids = this.opts.tokenize(text);
      if (ids.length !== 1) this.fail(`${text} is not one token of the vocabulary (it tokenizes to ${ids.length})`, s);
      id = ids[0];
    }
    if (this.opts.nVocab !== undefined && id >= this.opts.nVocab) this.fail(`token id ${id} is outside the vocabulary (0..${this.opts.nVocab - 1})`, s);
    return [id, i];
  }

  alternates(i: number, ruleName: string, ruleId: number, nested: boolean): number {
    const rule: number[] = [];
    i = this.sequence(i, ruleName, rule, nested);
    while (this.at(i) === 0x7c) {
      rule.push(G.Alt, 0);
      i = this.space(i + 1, true);
      i = this.sequence(i, ruleName, rule, nested);
    }
    rule.push(G.End, 0);
    this.addRule(ruleId, rule);
    return i;
  }

  sequence(i: number, ruleName: string, rule: number[], nested: boolean): number {
    let lastSymStart = rule.length;
    let nPrevRules = 1;

    // S{m,n} -> S (m times) then n-m nested optional helpers; S{m,} -> S (m times) then S' ::= S S' | (llama.cpp's rewrite)
    const repeat = (min: number, max: number, at: number) => {
      const noMax = max === Infinity;
      if (lastSymStart === rule.length) this.fail('expecting an item before */+/?/{', at);
      if (max < min) this.fail(`repetition {${min},${max}} has its maximum below its minimum`, at);
      const prev = rule.slice(lastSymStart);
      const total = !noMax && max > 0 ? max : min > 0 ? min : 1;
      if (nPrevRules * total > MAX_REPETITION)
        this.fail(`repetitions multiplied by the rules they repeat exceed ${MAX_REPETITION}: reduce the repetitions or the rule's complexity`, at);
      if (min === 0) rule.length = lastSymStart;
      else for (let k = 1; k < min; k++) rule.push(...prev);
      let lastRec = 0;
      const nOpt = noMax ? 1 : max - min;
      for (let k = 0; k < nOpt; k++) {
        const rec = prev.slice();
        const recId = this.generateSymbolId(ruleName);
        if (k > 0 || noMax) rec.push(G.RuleRef, noMax ? recId : lastRec);
        rec.push(G.Alt, 0, G.End, 0);
        this.addRule(recId, rec);
        lastRec = recId;
      }
      if (nOpt > 0) rule.push(G.RuleRef, lastRec);
      nPrevRules *= total;
    };

    while (i < this.cps.length) {
      const c = this.cps[i];
      if (c === 0x22) {
        // "literal"
        i++;
        lastSymStart = rule.length;
        nPrevRules = 1;
        while (this.at(i) !== 0x22) {
          if (i >= this.cps.length) this.fail('unexpected end of input in a string literal', i);
          const [ch, e] = this.char(i);
          rule.push(G.Char, ch);
          i = e;
        }
        i = this.space(i + 1, nested);
      } else if (c === 0x5b) {
        // [class]
        i++;
        let start: number = G.Char;
        if (this.at(i) === 0x5e) {
          i++;
          start = G.CharNot;
        }
        lastSymStart = rule.length;
        nPrevRules = 1;
        while (this.at(i) !== 0x5d) {
          if (i >= this.cps.length) this.fail('unexpected end of input in a character class', i);
          const [ch, e] = this.char(i);
          i = e;
          rule.push(lastSymStart < rule.length ? G.CharAlt : start, ch);
          if (this.at(i) === 0x2d && this.at(i + 1) !== 0x5d) {
            if (i + 1 >= this.cps.length) this.fail('unexpected end of input in a character class', i + 1);
            const [hi, e2] = this.char(i + 1);
            i = e2;
            rule.push(G.CharRngUpper, hi);
          }
        }
        i = this.space(i + 1, nested);
      } else if (c === 0x3c || c === 0x21) {
        // <token>, !<token>
        let type: number = G.Token;
        if (c === 0x21) {
          type = G.TokenNot;
          i++;
          if (this.at(i) !== 0x3c) this.fail("expecting '<' after '!'", i);
        }
        const [id, e] = this.token(i);
        lastSymStart = rule.length;
        nPrevRules = 1;
        rule.push(type, id);
        i = this.space(e, nested);
      } else if (isWordChar(c)) {
        const e = this.name(i);
        const ref = this.symbolId(this.text(i, e));
        i = this.space(e, nested);
        lastSymStart = rule.length;
        nPrevRules = 1;
        rule.push(G.RuleRef, ref);
      } else if (c === 0x28) {
        // ( group )
        i = this.space(i + 1, true);
        const before = this.symbolIds.size;
        const sub = this.generateSymbolId(ruleName);
        i = this.alternates(i, ruleName, sub, true);
        nPrevRules = Math.max(1, this.symbolIds.size - before);
        lastSymStart = rule.length;
        rule.push(G.RuleRef, sub);
        if (this.at(i) !== 0x29) this.fail("expecting ')'", i);
        i = this.space(i + 1, nested);
      } else if (c === 0x2e) {
        lastSymStart = rule.length;
        nPrevRules = 1;
        rule.push(G.CharAny, 0);
        i = this.space(i + 1, nested);
      } else if (c === 0x2a || c === 0x2b || c === 0x3f) {
        const at = i;
        i = this.space(i + 1, nested);
        if (c === 0x2a) repeat(0, Infinity, at);
        else if (c === 0x2b) repeat(1, Infinity, at);
        else repeat(0, 1, at);
      } else if (c === 0x7b) {
        const at = i;
        i = this.space(i + 1, nested);
        const e = this.int(i);
        const min = Number(this.text(i, e));
        i = this.space(e, nested);
        let max = Infinity;
        if (this.at(i) === 0x7d) {
          max = min;
          i = this.space(i + 1, nested);
        } else if (this.at(i) === 0x2c) {
          i = this.space(i + 1, nested);
          if (isDigit(this.at(i))) {
            const e2 = this.int(i);
            max = Number(this.text(i, e2));
            i = this.space(e2, nested);
          }
          if (this.at(i) !== 0x7d) this.fail("expecting '}'", i);
          i = this.space(i + 1, nested);
        } else this.fail("expecting ',' or '}'", i);
        if (min > MAX_REPETITION) this.fail(`{${min}...} repeats more than ${MAX_REPETITION} times`, at);
        if (max !== Infinity && max > MAX_REPETITION) max = Infinity;
        repeat(min, max, at);
      } else break;
    }
    return i;
  }

  rule(i: number): number {
    const e = this.name(i);
    const name = this.text(i, e);
    let p = this.space(e, false);
    const id = this.symbolId(name);
    if (!(this.at(p) === 0x3a && this.at(p + 1) === 0x3a && this.at(p + 2) === 0x3d)) this.fail(`expecting '::=' after the rule name '${name}'`, p);
    p = this.space(p + 3, true);
    p = this.alternates(p, name, id, false);
    if (this.at(p) === 0x0d) p += this.at(p + 1) === 0x0a ? 2 : 1;
    else if (this.at(p) === 0x0a) p++;
    else if (p < this.cps.length) this.fail('expecting a newline or the end', p);
    return this.space(p, true);
  }

  parse(): void {
    let i = this.space(0, true);
    while (i < this.cps.length) i = this.rule(i);
    const names: string[] = [];
    for (const [n, id] of this.symbolIds) names[id] = n;
    for (let r = 0; r < this.rules.length || r < this.symbolIds.size; r++)
      if (!this.rules[r]?.length) throw new EngineError('KAIL_E_INVALID_ARG', `grammar: rule '${names[r]}' is used but never defined`);
  }
}

/** True when the element at k ends an alternate (End or Alt). */
const endsAlt = (types: Uint8Array, k: number) => types[k] === G.End || types[k] === G.Alt;

/** A rule that can reach itself before matching anything (the first found), else -1. */
function leftRecursion(g: GbnfGrammar): number {
  const n = g.ruleStart.length;
  const visited = new Uint8Array(n);
  const inProgress = new Uint8Array(n);
  const mayBeEmpty = new Uint8Array(n);
  const { types, values } = g;
  let again = -1;
  const visit = (r: number): boolean => {
    if (inProgress[r]) {
      again = r;
      return true;
    }
    inProgress[r] = 1;
    const end = r + 1 < n ? g.ruleStart[r + 1] : types.length;
    let atStart = true;
    for (let k = g.ruleStart[r]; k < end; k++) {
      if (endsAlt(types, k)) {
        if (atStart) {
          mayBeEmpty[r] = 1;
          break;
        }
        atStart = true;
      } else atStart = false;
    }
    let recurse = true;
    for (let k = g.ruleStart[r]; k < end; k++) {
      if (types[k] === G.RuleRef && recurse) {
        if (visit(values[k])) return true;
        if (!mayBeEmpty[values[k]]) recurse = false;
      } else if (endsAlt(types, k)) recurse = true;
      else recurse = false;
    }
    inProgress[r] = 0;
    visited[r] = 1;
    return false;
  };
  for (let r = 0; r < n; r++) if (!visited[r] && visit(r)) return again;
  return -1;
}

/** Parses a GBNF grammar. Throws KAIL_E_INVALID_ARG naming what is wrong and where. */
export function parseGbnf(src: string, opts: GbnfOptions = {}): GbnfGrammar {
  if (typeof src !== 'string' || !src.trim()) throw new EngineError('KAIL_E_INVALID_ARG', 'grammar: the grammar is empty');
  const p = new Parser(src, opts);
  p.parse();
  const rootName = opts.root ?? 'root';
  const root = p.symbolIds.get(rootName);
  if (root === undefined) throw new EngineError('KAIL_E_INVALID_ARG', `grammar: there is no '${rootName}' rule (the output must match it)`);
  let total = 0;
  for (const r of p.rules) total += r.length / 2;
  if (total >= MAX_ELEMENTS) throw new EngineError('KAIL_E_INVALID_ARG', `grammar: ${total} elements after expanding repetitions, more than ${MAX_ELEMENTS - 1}`);
  const types = new Uint8Array(total);
  const values = new Uint32Array(total);
  const ruleStart = new Int32Array(p.rules.length);
  let k = 0;
  p.rules.forEach((r, id) => {
    ruleStart[id] = k;
    for (let j = 0; j < r.length; j += 2, k++) {
      types[k] = r[j];
      values[k] = r[j + 1];
    }
  });
  const names: string[] = [];
  for (const [n, id] of p.symbolIds) names[id] = n;
  const g: GbnfGrammar = { types, values, ruleStart, names, root };
  const lr = leftRecursion(g);
  if (lr >= 0) throw new EngineError('KAIL_E_INVALID_ARG', `grammar: rule '${names[lr]}' is left-recursive (it can reach itself before matching any character), which llama.cpp's grammars do not support`);
  return g;
}

/**
 * Interned pushdown stacks: a stack is an id (0 = empty), a node being (top element, the stack
 * below). Equal stacks have equal ids, so a set of stacks is a set of numbers. One table serves a
 * request's recognizers; it only grows by the stacks the generation reaches.
 */
export class GbnfStacks {
  readonly top: number[] = [-1];
  readonly below: number[] = [-1];
  private readonly index = new Map<number, number>();
  /** The stacks after (stack, code point), as found: a mask tries most tokens on the same few stacks. */
  readonly steps = new Map<number, readonly number[]>();

  push(below: number, pos: number): number {
    const key = below * MAX_ELEMENTS + pos;
    let id = this.index.get(key);
    if (id === undefined) {
      id = this.top.length;
      this.top.push(pos);
      this.below.push(below);
      this.index.set(key, id);
    }
    return id;
  }
}

const EMPTY = 0;

/** How many continuation bytes a UTF-8 lead byte takes (0: not the lead byte of a valid character). */
const utf8More = (b: number) => (b < 0xc2 || b > 0xf4 ? 0 : b < 0xe0 ? 1 : b < 0xf0 ? 2 : 3);
/** The range of the byte after a lead byte (no overlong forms, surrogates or code points past U+10FFFF). */
const utf8Lo = (b: number) => (b === 0xe0 ? 0xa0 : b === 0xf0 ? 0x90 : 0x80);
const utf8Hi = (b: number) => (b === 0xed ? 0x9f : b === 0xf4 ? 0x8f : 0xbf);

/**
 * The set of stacks of a grammar after some text, fed tokens (their bytes, or their ids where the
 * grammar names tokens). State is immutable arrays and two numbers, so `assign` is cheap.
 */
export class GbnfRecognizer implements ByteRecognizer {
  stacks: readonly number[];
  /** An unfinished UTF-8 character: its bits so far, the bytes it still needs, and the next one's range. */
  partialValue = 0;
  partialRemain = 0;
  nextLo = 0x80;
  nextHi = 0xbf;
  private readonly types: Uint8Array;
  private readonly values: Uint32Array;

  constructor(
    readonly grammar: GbnfGrammar,
    /** Where this recognizer's stack ids live (`assign` takes the other's). */
    private table: GbnfStacks = new GbnfStacks(),
  ) {
    this.types = grammar.types;
    this.values = grammar.values;
    const out: number[] = [];
    // Each alternate of the root rule starts a stack.
    let k = grammar.ruleStart[grammar.root];
    for (;;) {
      this.advance(endsAlt(this.types, k) ? EMPTY : table.push(EMPTY, k), out);
      while (!endsAlt(this.types, k)) k++;
      if (this.types[k] === G.Alt) k++;
      else break;
    }
    this.stacks = out;
  }

  /** Some stack is empty: the text so far is a whole text of the grammar (end of generation may follow). */
  get done(): boolean {
    return this.stacks.includes(EMPTY);
  }

  /** Every stack is empty: the grammar takes nothing more. */
  finished(): boolean {
    return this.stacks.length > 0 && this.stacks.every((s) => s === EMPTY);
  }

  /** Some stack waits for a token named by id: a mask must try tokens whatever their bytes. */
  wantsTokens(): boolean {
    return !this.readsText();
  }

  private readsText(): boolean {
    for (const s of this.stacks) if (s !== EMPTY && this.types[this.table.top[s]] >= G.Token) return false;
    return true;
  }

  stateKey(): string {
    const ids = this.stacks.length > 1 ? [...this.stacks].sort((a, b) => a - b) : this.stacks;
    return `${ids.join(',')}|${this.partialRemain ? `${this.partialValue},${this.partialRemain},${this.nextLo},${this.nextHi}` : ''}`;
  }

  assign(o: GbnfRecognizer): void {
    this.table = o.table;
    this.stacks = o.stacks;
    this.partialValue = o.partialValue;
    this.partialRemain = o.partialRemain;
    this.nextLo = o.nextLo;
    this.nextHi = o.nextHi;
  }

  readonly prefixClosed = true;

  copy(): this {
    const r = new GbnfRecognizer(this.grammar, this.table);
    r.assign(this);
    return r as this;
  }

  feed(bytes: Uint8Array): boolean {
    return this.feedToken(-1, bytes);
  }

  /**
   * Advances past a token: stacks waiting for a token match it by id, the others read its text.
   * False when no stack survives, or the text ends inside a character no stack can take.
   */
  feedToken(token: number, bytes: Uint8Array): boolean {
    if (bytes.length === 0) return false;
    // One byte (a mask's trie walk) when no stack waits for a token: without feedToken's arrays.
    if (bytes.length === 1 && this.readsText()) return this.feedByte(bytes[0]);
    const cps = this.decode(bytes);
    if (cps === null) return false;
    const { types, values, table } = this;
    const out: number[] = [];
    // As llama.cpp judges a token: a stack waiting for a token takes it by id when its text has a
    // whole character (or ends none unfinished); a stack reading text takes it when some character
    // can follow an unfinished end.
    let byId = false;
    let byText = false;
    for (const s of this.stacks) {
      if (s === EMPTY) continue;
      const pos = table.top[s];
      const t = types[pos];
      if (t === G.Token || t === G.TokenNot) {
        if (token >= 0 && (t === G.Token) === (values[pos] === token)) {
          this.advance(endsAlt(types, pos + 1) ? table.below[s] : table.push(table.below[s], pos + 1), out);
          byId = true;
        }
        continue;
      }
      let cur: readonly number[] = [s];
      for (let i = 0; i < cps.length && cur.length; i++) {
        if (cur.length === 1) {
          cur = this.step(cur[0], cps[i]);
          continue;
        }
        const next: number[] = [];
        for (const c of cur) for (const d of this.step(c, cps[i])) if (!next.includes(d)) next.push(d);
        cur = next;
      }
      for (const c of cur) {
        if (!out.includes(c)) out.push(c);
        byText ||= this.partialRemain === 0 || (c !== EMPTY && this.matchPartial(table.top[c]));
      }
    }
    this.stacks = out;
    return out.length > 0 && ((byId && (cps.length > 0 || this.partialRemain === 0)) || byText);
  }

  /** feedToken for one byte when every stack reads text: the same state and answer. */
  private feedByte(b: number): boolean {
    let n = this.partialRemain;
    if (n > 0) {
      if (b < this.nextLo || b > this.nextHi) return false;
      this.partialValue = (this.partialValue << 6) | (b & 0x3f);
      this.nextLo = 0x80;
      this.nextHi = 0xbf;
      this.partialRemain = --n;
      if (n === 0) return this.feedCodePoint(this.partialValue);
    } else {
      if (b < 0x80) return this.feedCodePoint(b);
      n = this.partialRemain = utf8More(b);
      if (n === 0) return false;
      this.partialValue = b & (0x3f >> n);
      this.nextLo = utf8Lo(b);
      this.nextHi = utf8Hi(b);
    }
    // Inside a character: every stack reading text stays; the answer is whether one can take some completion.
    if (this.stacks.includes(EMPTY)) this.stacks = this.stacks.filter((s) => s !== EMPTY);
    for (const s of this.stacks) if (this.matchPartial(this.table.top[s])) return true;
    return false;
  }

  /** Advances past one code point (a recognizer of characters, not tokens: JSON strings' patterns). */
  feedCodePoint(c: number): boolean {
    if (this.stacks.length === 1 && this.stacks[0] !== EMPTY) {
      // (The step's array is shared and never changed: stacks are replaced, not edited.)
      this.stacks = this.step(this.stacks[0], c);
      return this.stacks.length > 0;
    }
    const out: number[] = [];
    for (const s of this.stacks) {
      if (s === EMPTY) continue;
      for (const d of this.step(s, c)) if (!out.includes(d)) out.push(d);
    }
    this.stacks = out;
    return out.length > 0;
  }

  /** Whether some code point in lo..hi may come next (a character whose first bytes are known). */
  acceptsSomeIn(lo: number, hi: number): boolean {
    const { types, values } = this;
    for (const s of this.stacks) {
      if (s === EMPTY) continue;
      let pos = this.table.top[s];
      const t = types[pos];
      if (t === G.Token || t === G.TokenNot) continue;
      if (t === G.CharAny) return true;
      // The class's ranges.
      const ranges: [number, number][] = [];
      do {
        if (types[pos + 1] === G.CharRngUpper) {
          ranges.push([values[pos], values[pos + 1]]);
          pos += 2;
        } else {
          ranges.push([values[pos], values[pos]]);
          pos += 1;
        }
      } while (types[pos] === G.CharAlt);
      if (t === G.Char) {
        if (ranges.some(([a, b]) => a <= hi && lo <= b)) return true;
        continue;
      }
      // Negated: some code point of lo..hi outside every range.
      let x = lo;
      for (;;) {
        const r = ranges.find(([a, b]) => a <= x && x <= b);
        if (!r) return true;
        x = r[1] + 1;
        if (x > hi) break;
      }
    }
    return false;
  }

  /**
   * The code points of a token's bytes after the unfinished character before them (a token may
   * end inside a character); null when the bytes are not UTF-8. Stricter than llama.cpp's
   * decode_utf8, which reads a token's text as a C string (a NUL byte ends it: ",\0x" reads as ",")
   * and does not check the bytes after a lead byte ("C0 F5" reads as '5'): here every byte counts,
   * and overlong forms, surrogates, code points past U+10FFFF and a missing continuation byte are
   * refused, so the output is always a text of the grammar.
   */
  private decode(bytes: Uint8Array): number[] | null {
    const cps: number[] = [];
    let value = this.partialValue;
    let n = this.partialRemain;
    let lo = this.nextLo;
    let hi = this.nextHi;
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i];
      if (n > 0) {
        if (b < lo || b > hi) return null;
        value = (value << 6) | (b & 0x3f);
        lo = 0x80;
        hi = 0xbf;
        if (--n === 0) cps.push(value);
        continue;
      }
      if (b < 0x80) {
        cps.push(b);
        continue;
      }
      n = utf8More(b);
      if (n === 0) return null;
      value = b & (0x3f >> n);
      lo = utf8Lo(b);
      hi = utf8Hi(b);
    }
    this.partialValue = value;
    this.partialRemain = n;
    this.nextLo = lo;
    this.nextHi = hi;
    return cps;
  }

  /** Whether code point c satisfies the character element at pos, and the element after it. */
  private matchChar(pos: number, c: number): [boolean, number] {
    const { types, values } = this;
    const positive = types[pos] === G.Char || types[pos] === G.CharAny;
    let found = false;
    do {
      if (types[pos + 1] === G.CharRngUpper) {
        found ||= values[pos] <= c && c <= values[pos + 1];
        pos += 2;
      } else if (types[pos] === G.CharAny) {
        found = true;
        pos += 1;
      } else {
        found ||= values[pos] === c;
        pos += 1;
      }
    } while (types[pos] === G.CharAlt);
    return [found === positive, pos];
  }

  /** Whether some completion of the unfinished character could satisfy the character element at pos. */
  private matchPartial(pos: number): boolean {
    const { types, values } = this;
    const t = types[pos];
    if (t === G.Token || t === G.TokenNot) return false;
    const positive = t === G.Char || t === G.CharAny;
    const n = this.partialRemain;
    const v = this.partialValue;
    if (n < 0 || (n === 1 && v < 2)) return false;
    let low = v * 2 ** (n * 6);
    const high = low + 2 ** (n * 6) - 1;
    if (low === 0) {
      if (n === 2) low = 1 << 11;
      else if (n === 3) low = 1 << 16;
    }
    do {
      if (types[pos + 1] === G.CharRngUpper) {
        if (values[pos] <= high && low <= values[pos + 1]) return positive;
        pos += 2;
      } else if (types[pos] === G.CharAny) return true;
      else {
        if (low <= values[pos] && values[pos] <= high) return positive;
        pos += 1;
      }
    } while (types[pos] === G.CharAlt);
    return !positive;
  }

  /** The stacks after stack s reads code point c (remembered in the table; forgotten past a million). */
  private step(s: number, c: number): readonly number[] {
    const steps = this.table.steps;
    const key = s * 0x200000 + c;
    let r = steps.get(key);
    if (r === undefined) {
      const out: number[] = [];
      this.acceptChar(s, c, out);
      if (steps.size >= 1 << 20) steps.clear();
      steps.set(key, (r = out));
    }
    return r;
  }

  /** The stacks after stack s reads code point c, added to out. */
  private acceptChar(s: number, c: number, out: number[]): void {
    if (s === EMPTY) return;
    const pos = this.table.top[s];
    const t = this.types[pos];
    if (t === G.Token || t === G.TokenNot) return;
    const [ok, after] = this.matchChar(pos, c);
    if (!ok) return;
    const below = this.table.below[s];
    this.advance(endsAlt(this.types, after) ? below : this.table.push(below, after), out);
  }

  /** Expands rule references on top of stack s until every stack has a terminal on top (or is empty); adds those to out. */
  private advance(s: number, out: number[]): void {
    const { types, values, table } = this;
    const todo = [s];
    const seen = new Set<number>();
    while (todo.length) {
      const cur = todo.pop()!;
      if (seen.has(cur)) continue;
      seen.add(cur);
      if (cur === EMPTY) {
        if (!out.includes(cur)) out.push(cur);
        continue;
      }
      const pos = table.top[cur];
      if (types[pos] !== G.RuleRef) {
        if (!out.includes(cur)) out.push(cur);
        continue;
      }
      const below = table.below[cur];
      const base = endsAlt(types, pos + 1) ? below : table.push(below, pos + 1);
      let sub = this.grammar.ruleStart[values[pos]];
      for (;;) {
        todo.push(endsAlt(types, sub) ? base : table.push(base, sub));
        while (!endsAlt(types, sub)) sub++;
        if (types[sub] === G.Alt) sub++;
        else break;
      }
    }
  }
}
