import { EngineError } from '../errors';

/**
 * Constrained decoding to one JSON object (OpenAI's `response_format: {type: "json_object"}`,
 * llama.cpp's json grammar): a byte-level recognizer of RFC 8259 text, fed the bytes of each
 * generated token, that tells which tokens may come next.
 *
 * What it accepts: at most MAX_LEADING_WS whitespace bytes, one object (any JSON values inside, nested at most
 * MAX_DEPTH deep), then only an end-of-generation token. Strings must be valid UTF-8 with no raw
 * control characters; numbers follow the JSON grammar (no leading zeros, no bare `.5`); runs of
 * whitespace are at most MAX_WS bytes, so a model cannot pad forever between tokens.
 *
 * Sampling (see `ConstrainedSampling` in the batch engine) draws from the unconstrained row first
 * and masks the row only when that token does not fit, as llama.cpp's grammar sampler does: the
 * result is a draw from the masked distribution, and usually costs one token check.
 */

export const MAX_DEPTH = 64;
export const MAX_WS = 64;
/** Whitespace before the object: room for a tokenizer's word-boundary space or a newline, no more. */
export const MAX_LEADING_WS = 2;

// Recognizer modes.
const enum M {
  /** Before the top-level value: whitespace or '{'. */
  Start,
  /** A value must come (after ':' or ','); whitespace allowed. */
  Value,
  /** After '[': a value or ']'. */
  ArrayFirst,
  /** After '{': a key or '}'. */
  ObjectFirst,
  /** After ',' in an object: a key. */
  Key,
  /** After a key: ':'. */
  Colon,
  /** After a value inside a container: ',' or the closing bracket. */
  After,
  /** Inside a string (aux: 1 when it is a key). */
  Str,
  /** After a backslash in a string. */
  Esc,
  /** Inside \uXXXX (aux2: hex digits still expected). */
  Hex,
  /** Number: after '-'. */
  Minus,
  /** Number: after a leading '0'. */
  Zero,
  /** Number: integer digits. */
  Int,
  /** Number: after '.'. */
  Dot,
  /** Number: fraction digits. */
  Frac,
  /** Number: after 'e'/'E'. */
  Exp,
  /** Number: after the exponent's sign. */
  ExpSign,
  /** Number: exponent digits. */
  ExpDigits,
  /** Inside true/false/null (aux: which, aux2: bytes matched). */
  Lit,
  /** The top-level object is closed. */
  Done,
}

const LITERALS = ['true', 'false', 'null'].map((s) => Uint8Array.from(Buffer.from(s)));
const OBJ = 1;
const ARR = 2;

const isWs = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
const isDigit = (b: number) => b >= 0x30 && b <= 0x39;
const isHex = (b: number) => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

/** The recognizer's whole state; `copy` and `assign` make trying a token cheap. */
export class JsonRecognizer {
  mode: M = M.Start;
  aux = 0;
  aux2 = 0;
  /** UTF-8 continuation bytes still expected inside a string, and the allowed range of the next one. */
  utfLeft = 0;
  utfLo = 0x80;
  utfHi = 0xbf;
  ws = 0;
  depth = 0;
  readonly stack = new Uint8Array(MAX_DEPTH);

  /** True once the top-level object is closed (only end of generation may follow). */
  get done(): boolean {
    return this.mode === M.Done;
  }

  copy(): JsonRecognizer {
    const r = new JsonRecognizer();
    r.assign(this);
    return r;
  }

  assign(o: JsonRecognizer): void {
    this.mode = o.mode;
    this.aux = o.aux;
    this.aux2 = o.aux2;
    this.utfLeft = o.utfLeft;
    this.utfLo = o.utfLo;
    this.utfHi = o.utfHi;
    this.ws = o.ws;
    this.depth = o.depth;
    this.stack.set(o.stack.subarray(0, o.depth));
  }

  /** Feeds bytes; false (state then undefined) when they cannot continue a JSON object. */
  feed(bytes: Uint8Array): boolean {
    for (let i = 0; i < bytes.length; i++) if (!this.byte(bytes[i])) return false;
    return true;
  }

  private whitespace(b: number): boolean {
    if (!isWs(b)) return false;
    this.ws++;
    return true;
  }

  private open(kind: number, mode: M): boolean {
    if (this.depth >= MAX_DEPTH) return false;
    this.stack[this.depth++] = kind;
    this.mode = mode;
    return true;
  }

  private close(kind: number): boolean {
    if (this.depth === 0 || this.stack[this.depth - 1] !== kind) return false;
    this.depth--;
    this.mode = this.depth === 0 ? M.Done : M.After;
    return true;
  }

  /** The start of a value (after whitespace). */
  private value(b: number): boolean {
    switch (b) {
      case 0x7b: // {
        return this.open(OBJ, M.ObjectFirst);
      case 0x5b: // [
        return this.open(ARR, M.ArrayFirst);
      case 0x22: // "
        this.mode = M.Str;
        this.aux = 0;
        return true;
      case 0x2d: // -
        this.mode = M.Minus;
        return true;
      case 0x30:
        this.mode = M.Zero;
        return true;
      case 0x74: // t
      case 0x66: // f
      case 0x6e: // n
        this.mode = M.Lit;
        this.aux = b === 0x74 ? 0 : b === 0x66 ? 1 : 2;
        this.aux2 = 1;
        return true;
      default:
        if (b > 0x30 && b <= 0x39) {
          this.mode = M.Int;
          return true;
        }
        return false;
    }
  }

  /** After a complete value inside a container. */
  private after(b: number): boolean {
    if (b === 0x2c) {
      this.mode = this.stack[this.depth - 1] === OBJ ? M.Key : M.Value;
      return true;
    }
    if (b === 0x7d) return this.close(OBJ);
    if (b === 0x5d) return this.close(ARR);
    return false;
  }

  /** A number ended at byte b: b must be what may follow a value. */
  private endNumber(b: number): boolean {
    this.mode = M.After;
    return this.whitespace(b) || this.after(b);
  }

  byte(b: number): boolean {
    if (this.mode !== M.Str && this.mode !== M.Esc && this.mode !== M.Hex) {
      if (!isWs(b)) this.ws = 0;
      else if (this.ws >= MAX_WS) return false;
    }
    switch (this.mode) {
      case M.Start:
        if (isWs(b)) return this.ws < MAX_LEADING_WS && this.whitespace(b);
        return b === 0x7b && this.open(OBJ, M.ObjectFirst);
      case M.Value:
        return this.whitespace(b) || this.value(b);
      case M.ArrayFirst:
        if (this.whitespace(b)) return true;
        if (b === 0x5d) return this.close(ARR);
        return this.value(b);
      case M.ObjectFirst:
        if (this.whitespace(b)) return true;
        if (b === 0x7d) return this.close(OBJ);
        if (b !== 0x22) return false;
        this.mode = M.Str;
        this.aux = 1;
        return true;
      case M.Key:
        if (this.whitespace(b)) return true;
        if (b !== 0x22) return false;
        this.mode = M.Str;
        this.aux = 1;
        return true;
      case M.Colon:
        if (this.whitespace(b)) return true;
        if (b !== 0x3a) return false;
        this.mode = M.Value;
        return true;
      case M.After:
        return this.whitespace(b) || this.after(b);
      case M.Str:
        return this.stringByte(b);
      case M.Esc:
        if (b === 0x75) {
          this.mode = M.Hex;
          this.aux2 = 4;
          return true;
        }
        if (b === 0x22 || b === 0x5c || b === 0x2f || b === 0x62 || b === 0x66 || b === 0x6e || b === 0x72 || b === 0x74) {
          this.mode = M.Str;
          return true;
        }
        return false;
      case M.Hex:
        if (!isHex(b)) return false;
        if (--this.aux2 === 0) this.mode = M.Str;
        return true;
      case M.Minus:
        if (b === 0x30) this.mode = M.Zero;
        else if (b > 0x30 && b <= 0x39) this.mode = M.Int;
        else return false;
        return true;
      case M.Zero:
        if (b === 0x2e) this.mode = M.Dot;
        else if (b === 0x65 || b === 0x45) this.mode = M.Exp;
        else return this.endNumber(b);
        return true;
      case M.Int:
        if (isDigit(b)) return true;
        if (b === 0x2e) this.mode = M.Dot;
        else if (b === 0x65 || b === 0x45) this.mode = M.Exp;
        else return this.endNumber(b);
        return true;
      case M.Dot:
        if (!isDigit(b)) return false;
        this.mode = M.Frac;
        return true;
      case M.Frac:
        if (isDigit(b)) return true;
        if (b === 0x65 || b === 0x45) {
          this.mode = M.Exp;
          return true;
        }
        return this.endNumber(b);
      case M.Exp:
        if (b === 0x2b || b === 0x2d) this.mode = M.ExpSign;
        else if (isDigit(b)) this.mode = M.ExpDigits;
        else return false;
        return true;
      case M.ExpSign:
        if (!isDigit(b)) return false;
        this.mode = M.ExpDigits;
        return true;
      case M.ExpDigits:
        return isDigit(b) || this.endNumber(b);
      case M.Lit: {
        const lit = LITERALS[this.aux];
        if (b !== lit[this.aux2]) return false;
        if (++this.aux2 === lit.length) this.mode = M.After;
        return true;
      }
      case M.Done:
        return false;
    }
  }

  private stringByte(b: number): boolean {
    if (this.utfLeft > 0) {
      if (b < this.utfLo || b > this.utfHi) return false;
      this.utfLeft--;
      this.utfLo = 0x80;
      this.utfHi = 0xbf;
      return true;
    }
    if (b === 0x22) {
      this.mode = this.aux === 1 ? M.Colon : M.After;
      return true;
    }
    if (b === 0x5c) {
      this.mode = M.Esc;
      return true;
    }
    if (b < 0x20) return false;
    if (b < 0x80) return true;
    // UTF-8 lead bytes, with the ranges of the first continuation byte that rule out overlong
    // forms and surrogates (RFC 3629).
    if (b >= 0xc2 && b <= 0xdf) return this.expect(1, 0x80, 0xbf);
    if (b === 0xe0) return this.expect(2, 0xa0, 0xbf);
    if ((b >= 0xe1 && b <= 0xec) || b === 0xee || b === 0xef) return this.expect(2, 0x80, 0xbf);
    if (b === 0xed) return this.expect(2, 0x80, 0x9f);
    if (b === 0xf0) return this.expect(3, 0x90, 0xbf);
    if (b >= 0xf1 && b <= 0xf3) return this.expect(3, 0x80, 0xbf);
    if (b === 0xf4) return this.expect(3, 0x80, 0x8f);
    return false;
  }

  private expect(n: number, lo: number, hi: number): boolean {
    this.utfLeft = n;
    this.utfLo = lo;
    this.utfHi = hi;
    return true;
  }
}

/** Which tokens may follow, for one sequence: the recognizer plus the vocabulary's bytes. */
export class JsonConstraint {
  private readonly state = new JsonRecognizer();
  private readonly trial = new JsonRecognizer();

  /**
   * `pieces[id]`: the bytes token `id` adds to the output (empty for control tokens, which are never
   * allowed); `eog`: the end-of-generation tokens, allowed only once the object is complete.
   */
  constructor(
    private readonly pieces: readonly Uint8Array[],
    private readonly eog: ReadonlySet<number>,
  ) {}

  get done(): boolean {
    return this.state.done;
  }

  allows(token: number): boolean {
    if (this.eog.has(token)) return this.state.done;
    const piece = this.pieces[token];
    if (!piece || piece.length === 0) return false;
    this.trial.assign(this.state);
    return this.trial.feed(piece);
  }

  /** Sets every token that may not follow to -Infinity, in place. Returns how many remain. */
  mask(logits: Float32Array): number {
    let kept = 0;
    for (let t = 0; t < logits.length; t++) {
      if (this.allows(t)) kept++;
      else logits[t] = -Infinity;
    }
    return kept;
  }

  /** Advances past a sampled token (which `allows` must have accepted). */
  accept(token: number): void {
    if (this.eog.has(token)) return;
    if (!this.state.feed(this.pieces[token] ?? new Uint8Array(0)))
      throw new EngineError('KAIL_E_INTERNAL', `token ${token} does not continue the JSON output (the constraint let it through)`);
  }
}
