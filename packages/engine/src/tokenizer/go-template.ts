// Go's text/template, the language of Ollama's Modelfile TEMPLATE: a lexer, parser and executor
// following Go's text/template and text/template/parse (Go 1.22+: range over an int, break and
// continue, short-circuit and/or, `else with`) and fmt's printing of values, with Go values
// modelled in JS (see `GoStruct`, `GoInt`, `withGoMethods`). Written from Go's documented
// semantics; error messages follow Go's wording.

import { TokenizerError } from './errors';

/** A template that does not parse, or fails while executing. Messages follow Go's. */
export class GoTemplateError extends TokenizerError {
  constructor(message: string) {
    super('KAIL_E_INVALID_ARG', message);
    this.name = 'GoTemplateError';
  }
}

// ---- values -------------------------------------------------------------------------------------

/**
 * A Go int. JS numbers are Go float64s (what encoding/json decodes numbers into); ints come from
 * template literals, `len`, range indices and struct fields declared int. Both print alike with %v;
 * they differ for printf verbs and comparisons (`eq 1 1.0` is an error in Go).
 */
export class GoInt {
  constructor(readonly value: number) {}
}

/** Methods a Go value may have: fmt prints it through `string`, encoding/json marshals `json()`'s result. */
export interface GoMethods {
  /** The Go type name used in messages (default: from the value's shape). */
  typeName?: string;
  /** The value's String() method. */
  string?(): string;
  /** The value's MarshalJSON, as the JS value to marshal in its place. */
  json?(): unknown;
}

const METHODS = Symbol('goMethods');

/** `value` (an array or plain object: a Go slice or map) with Go methods attached. */
export function withGoMethods<T extends object>(value: T, methods: GoMethods): T {
  Object.defineProperty(value, METHODS, { value: methods, enumerable: false });
  return value;
}

/** A field of a Go struct type: its Go name, its JSON name and whether the tag has omitempty. */
export interface GoField {
  name: string;
  json: string;
  omitempty?: boolean;
}

/** A Go struct type: name (as Go prints it, e.g. `api.Message`), fields in declaration order, methods. */
export class GoStructType {
  constructor(
    readonly name: string,
    readonly fields: readonly GoField[],
    readonly methods: { string?(v: GoStruct): string; json?(v: GoStruct): unknown } = {},
  ) {}
}

/** A value of a Go struct type; fields not in `values` hold nil. */
export class GoStruct {
  constructor(
    readonly type: GoStructType,
    readonly values: Readonly<Record<string, unknown>>,
  ) {}
}

function methodsOf(v: unknown): GoMethods | undefined {
  if (v instanceof GoStruct) {
    const m = v.type.methods;
    return { typeName: v.type.name, string: m.string && (() => m.string!(v)), json: m.json && (() => m.json!(v)) };
  }
  if (v !== null && typeof v === 'object') return (v as { [METHODS]?: GoMethods })[METHODS];
  return undefined;
}

const isMap = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof GoStruct) && !(v instanceof GoInt);

/** The Go type name of a value, as fmt's %T and the template's messages show it. */
function typeName(v: unknown): string {
  const m = methodsOf(v);
  if (m?.typeName) return m.typeName;
  if (v === null || v === undefined) return '<nil>';
  if (typeof v === 'string') return 'string';
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'number') return 'float64';
  if (v instanceof GoInt) return 'int';
  if (Array.isArray(v)) return '[]interface {}';
  if (typeof v === 'function') return 'func';
  return 'map[string]interface {}';
}

/** Go's comparison of strings: by UTF-8 bytes, which is code point order. */
function compareStrings(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0)! - y[i].codePointAt(0)!;
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

const sortedKeys = (m: Record<string, unknown>) => Object.keys(m).sort(compareStrings);
const utf8Length = (s: string) => Buffer.byteLength(s, 'utf8');

/** Go's isTrue: false, 0, nil and empty strings, slices and maps are false; structs are true. */
function isTrue(v: unknown): boolean {
  if (v === null || v === undefined) return false;
  if (typeof v === 'string') return v.length > 0;
  if (typeof v === 'boolean') return v;
  if (typeof v === 'number') return v !== 0;
  if (v instanceof GoInt) return v.value !== 0;
  if (v instanceof GoStruct) return true;
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === 'object') return Object.keys(v).length > 0;
  return true;
}

// ---- fmt ----------------------------------------------------------------------------------------

/** The decimal digits of a positive finite float64 and the decimal point's place (value = 0.digits × 10^dp). */
interface Decimal {
  d: string;
  dp: number;
}

/** The exact decimal value of |x|. */
function exactDecimal(x: number): Decimal {
  x = Math.abs(x);
  if (x === 0) return { d: '', dp: 0 };
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  const expBits = Number((bits >> 52n) & 0x7ffn);
  let mant = bits & 0xfffffffffffffn;
  let exp: number;
  if (expBits === 0) exp = -1074;
  else {
    mant |= 1n << 52n;
    exp = expBits - 1075;
  }
  let d: string;
  let dp: number;
  if (exp >= 0) {
    d = (mant << BigInt(exp)).toString();
    dp = d.length;
  } else {
    d = (mant * 5n ** BigInt(-exp)).toString();
    dp = d.length + exp;
  }
  return trimZeros({ d, dp });
}

function trimZeros(x: Decimal): Decimal {
  const d = x.d.replace(/0+$/, '');
  return d === '' ? { d: '', dp: 0 } : { d, dp: x.dp };
}

/** The shortest digits that read back as |x| (what strconv's precision -1 prints). */
function shortestDecimal(x: number): Decimal {
  x = Math.abs(x);
  if (x === 0) return { d: '', dp: 0 };
  const [m, e] = x.toExponential().split('e');
  return trimZeros({ d: m.replace('.', ''), dp: Number(e) + 1 });
}

/** `x` rounded to `nd` digits, half to even on the exact value (Go's decimal.Round). */
function roundDecimal(x: Decimal, nd: number): Decimal {
  if (nd < 0) return { d: '', dp: 0 };
  if (nd >= x.d.length) return x;
  const c = x.d.charCodeAt(nd) - 48;
  let up = c > 5;
  if (c === 5) up = nd + 1 < x.d.length || (nd > 0 && (x.d.charCodeAt(nd - 1) - 48) % 2 === 1);
  if (!up) return trimZeros({ d: x.d.slice(0, nd), dp: x.dp });
  const digits = x.d.slice(0, nd).split('');
  let i = nd - 1;
  while (i >= 0 && digits[i] === '9') digits[i--] = '0';
  if (i < 0) return { d: '1', dp: x.dp + 1 };
  digits[i] = String.fromCharCode(digits[i].charCodeAt(0) + 1);
  return trimZeros({ d: digits.join(''), dp: x.dp });
}

const digitAt = (x: Decimal, i: number) => (i >= 0 && i < x.d.length ? x.d[i] : '0');

function fmtE(x: Decimal, prec: number, e: string): string {
  let s = digitAt(x, 0);
  if (prec > 0) {
    s += '.';
    for (let i = 1; i <= prec; i++) s += digitAt(x, i);
  }
  const exp = x.d === '' ? 0 : x.dp - 1;
  const a = Math.abs(exp);
  return s + e + (exp < 0 ? '-' : '+') + (a < 10 ? '0' : '') + a;
}

function fmtF(x: Decimal, prec: number): string {
  let s = '';
  if (x.dp > 0) for (let i = 0; i < x.dp; i++) s += digitAt(x, i);
  else s = '0';
  if (prec > 0) {
    s += '.';
    for (let i = 0; i < prec; i++) s += digitAt(x, x.dp + i);
  }
  return s;
}

/** strconv.FormatFloat(|x|, verb, prec, 64) for finite x, without the sign. */
function formatFloatAbs(x: number, verb: string, prec: number): string {
  const shortest = prec < 0;
  let dec: Decimal;
  if (shortest) dec = shortestDecimal(x);
  else {
    const exact = exactDecimal(x);
    if (verb === 'e' || verb === 'E') dec = roundDecimal(exact, prec + 1);
    else if (verb === 'f' || verb === 'F') dec = roundDecimal(exact, exact.dp + prec);
    else dec = roundDecimal(exact, prec === 0 ? 1 : prec);
  }
  switch (verb) {
    case 'e':
    case 'E':
      return fmtE(dec, shortest ? Math.max(dec.d.length - 1, 0) : prec, verb);
    case 'f':
    case 'F':
      return fmtF(dec, shortest ? Math.max(dec.d.length - dec.dp, 0) : prec);
  }
  // 'g', 'G'
  let p = shortest ? dec.d.length : prec === 0 ? 1 : prec;
  let eprec = p;
  if (eprec > dec.d.length && dec.d.length >= dec.dp) eprec = dec.d.length;
  if (shortest) eprec = 6;
  const exp = dec.dp - 1;
  if (exp < -4 || exp >= eprec) {
    if (p > dec.d.length) p = dec.d.length;
    return fmtE(dec, Math.max(p - 1, 0), verb === 'G' ? 'E' : 'e');
  }
  if (p > dec.dp) p = dec.d.length;
  return fmtF(dec, Math.max(p - dec.dp, 0));
}

/** A float64 as Go's %v prints it (strconv 'g', -1): shortest digits, in exponent form when the exponent is below -4 or from 6 on (1e+06). */
export function formatGoFloat(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? '+Inf' : '-Inf';
  return (x < 0 || Object.is(x, -0) ? '-' : '') + formatFloatAbs(x, 'g', -1);
}

/** A printf directive's flags, width and precision. */
interface Spec {
  minus: boolean;
  plus: boolean;
  sharp: boolean;
  space: boolean;
  zero: boolean;
  width?: number;
  prec?: number;
  /** %+v: struct field names. */
  plusV: boolean;
}

const plainSpec = (): Spec => ({ minus: false, plus: false, sharp: false, space: false, zero: false, plusV: false });

function pad(s: string, spec: Spec, zeroOk = true): string {
  const n = spec.width === undefined ? 0 : spec.width - [...s].length;
  if (n <= 0) return s;
  if (spec.minus) return s + ' '.repeat(n);
  return (spec.zero && zeroOk ? '0' : ' ').repeat(n) + s;
}

const isPrintable = (c: string) => c === ' ' || /^[\p{L}\p{M}\p{N}\p{P}\p{S}]$/u.test(c);

/** strconv.Quote (ASCII-only with `ascii`, as %+q). */
function quoteString(s: string, ascii: boolean, q = '"'): string {
  let out = q;
  for (const c of s) {
    const cp = c.codePointAt(0)!;
    if (c === q || c === '\\') out += '\\' + c;
    else if (cp >= 0xd800 && cp <= 0xdfff) out += '\\ufffd';
    else if (isPrintable(c) && (!ascii || cp < 0x80)) out += c;
    else if (c === '\x07') out += '\\a';
    else if (c === '\b') out += '\\b';
    else if (c === '\f') out += '\\f';
    else if (c === '\n') out += '\\n';
    else if (c === '\r') out += '\\r';
    else if (c === '\t') out += '\\t';
    else if (c === '\v') out += '\\v';
    else if (cp < 0x20 || cp === 0x7f) out += '\\x' + cp.toString(16).padStart(2, '0');
    else if (cp < 0x10000) out += '\\u' + cp.toString(16).padStart(4, '0');
    else out += '\\U' + cp.toString(16).padStart(8, '0');
  }
  return out + q;
}

function hexString(s: string, spec: Spec, upper: boolean): string {
  const bytes = Buffer.from(s, 'utf8');
  const digits = upper ? '0123456789ABCDEF' : '0123456789abcdef';
  let out = '';
  bytes.forEach((b, i) => {
    if (spec.space && i > 0) out += ' ';
    if (spec.sharp && (spec.space || i === 0)) out += upper ? '0X' : '0x';
    out += digits[b >> 4] + digits[b & 15];
  });
  return out;
}

function fmtInteger(n: number, verb: string, spec: Spec): string {
  if (verb === 'c') return pad(String.fromCodePoint(n), spec);
  if (verb === 'q') return pad(quoteString(String.fromCodePoint(n), spec.plus, "'"), spec);
  if (verb === 'U') {
    let s = 'U+' + n.toString(16).toUpperCase().padStart(4, '0');
    if (spec.sharp && isPrintable(String.fromCodePoint(n))) s += ` '${String.fromCodePoint(n)}'`;
    return pad(s, spec);
  }
  const base = verb === 'x' || verb === 'X' ? 16 : verb === 'o' || verb === 'O' ? 8 : verb === 'b' ? 2 : 10;
  let digits = Math.abs(n).toString(base);
  if (verb === 'X') digits = digits.toUpperCase();
  let prec = spec.prec;
  const sign = n < 0 ? '-' : spec.plus ? '+' : spec.space ? ' ' : '';
  if (prec === undefined && spec.zero && !spec.minus && spec.width !== undefined) prec = spec.width - sign.length;
  if (prec !== undefined) {
    if (prec === 0 && n === 0) digits = '';
    else if (digits.length < prec) digits = digits.padStart(prec, '0');
  }
  let prefix = '';
  if (spec.sharp) {
    if (verb === 'x') prefix = '0x';
    else if (verb === 'X') prefix = '0X';
    else if (verb === 'o' && !digits.startsWith('0')) prefix = '0';
    else if (verb === 'b') prefix = '0b';
  }
  if (verb === 'O') prefix = '0o';
  return pad(sign + prefix + digits, spec, false);
}

function fmtFloat(x: number, verb: string, spec: Spec): string {
  if (verb === 'v') verb = 'g';
  const prec = spec.prec ?? (verb === 'g' || verb === 'G' ? -1 : 6);
  const neg = x < 0 || Object.is(x, -0);
  let num: string;
  if (Number.isNaN(x)) num = 'NaN';
  else if (!Number.isFinite(x)) num = 'Inf';
  else num = formatFloatAbs(x, verb, prec);
  const sign = neg ? '-' : spec.plus ? '+' : spec.space ? ' ' : num === 'Inf' ? '+' : '';
  if (num === 'NaN' || num === 'Inf') return pad(sign + num, spec, false);
  if (spec.zero && !spec.minus && spec.width !== undefined && sign !== '') {
    return sign + pad(num, { ...spec, width: spec.width - 1 });
  }
  return pad(sign + num, spec);
}

const badVerb = (verb: string, v: unknown) =>
  v === null || v === undefined ? `%!${verb}(<nil>)` : `%!${verb}(${typeName(v)}=${fmtValue(v, 'v', plainSpec(), 0)})`;

/** fmt's formatting of one operand with one verb (Stringers, then by kind; slices and maps element-wise). */
function fmtValue(v: unknown, verb: string, spec: Spec, depth: number): string {
  if (v === null || v === undefined) return verb === 'v' ? pad('<nil>', spec) : badVerb(verb, v);
  const m = methodsOf(v);
  if (m?.string && 'vsxXq'.includes(verb)) return fmtString(m.string(), verb, spec);
  if (typeof v === 'string') return 'vsxXq'.includes(verb) ? fmtString(v, verb, spec) : badVerb(verb, v);
  if (typeof v === 'boolean') return verb === 'v' || verb === 't' ? pad(String(v), spec) : badVerb(verb, v);
  if (v instanceof GoInt) return 'bcdoOqxXUv'.includes(verb) ? fmtInteger(v.value, verb === 'v' ? 'd' : verb, spec) : badVerb(verb, v);
  if (typeof v === 'number') return 'eEfFgGv'.includes(verb) ? fmtFloat(v, verb, spec) : badVerb(verb, v);
  if (depth > 100) return '<...>';
  if (Array.isArray(v)) return '[' + v.map((e) => fmtValue(e, verb, spec, depth + 1)).join(' ') + ']';
  if (v instanceof GoStruct) {
    const parts = v.type.fields.map((f) => (spec.plusV ? f.name + ':' : '') + fmtValue(v.values[f.name] ?? null, verb, spec, depth + 1));
    // a pointer to a struct prints with & at the top (fmt prints nested pointers as addresses)
    return (depth === 0 && v.type.name.startsWith('*') ? '&' : '') + '{' + parts.join(' ') + '}';
  }
  if (typeof v === 'object') {
    const o = v as Record<string, unknown>;
    const parts = sortedKeys(o).map((k) => fmtValue(k, verb, spec, depth + 1) + ':' + fmtValue(o[k] ?? null, verb, spec, depth + 1));
    return 'map[' + parts.join(' ') + ']';
  }
  return badVerb(verb, v);
}

function fmtString(s: string, verb: string, spec: Spec): string {
  if (verb === 'q') return pad(spec.sharp && !/[`\x00-\x08\x0a-\x1f\x7f\ufffd]/.test(s) ? '`' + s + '`' : quoteString(s, spec.plus), spec);
  if (verb === 'x' || verb === 'X') {
    if (spec.prec !== undefined) s = Buffer.from(s, 'utf8').subarray(0, spec.prec).toString('utf8');
    return pad(hexString(s, spec, verb === 'X'), spec);
  }
  if (spec.prec !== undefined) s = [...s].slice(0, spec.prec).join('');
  return pad(s, spec);
}

/** fmt.Sprint: operands with %v, a space between two operands when neither is a string. */
export function goSprint(args: readonly unknown[]): string {
  let out = '';
  args.forEach((a, i) => {
    if (i > 0 && typeof a !== 'string' && typeof args[i - 1] !== 'string') out += ' ';
    out += fmtValue(a, 'v', plainSpec(), 0);
  });
  return out;
}

/** fmt.Sprintln: operands with %v, always space-separated, then a newline. */
const goSprintln = (args: readonly unknown[]) => args.map((a) => fmtValue(a, 'v', plainSpec(), 0)).join(' ') + '\n';

/** fmt.Sprintf with the verbs b c d e E f F g G o O q s t U v x X %, flags `-+# 0`, width, precision and `*`. */
export function goSprintf(format: string, args: readonly unknown[]): string {
  let out = '';
  let argi = 0;
  let i = 0;
  // (Go's tooLarge: widths and precisions beyond a million are refused, never padded to.)
  const tooLarge = (n: number) => n > 1e6 || n < -1e6;
  const intArg = (): number | undefined => {
    const a = args[argi++];
    return a instanceof GoInt && !tooLarge(a.value) ? a.value : undefined;
  };
  // Go's parsenum: a literal number, or none; one growing past a million swallows the rest of the format.
  const literal = (): number | undefined => {
    let n: number | undefined;
    for (; i < format.length && format[i] >= '0' && format[i] <= '9'; i++) {
      if (n !== undefined && tooLarge(n)) {
        i = format.length;
        return undefined;
      }
      n = (n ?? 0) * 10 + (format.charCodeAt(i) - 48);
    }
    return n;
  };
  while (i < format.length) {
    const c = format[i];
    if (c !== '%') {
      out += c;
      i++;
      continue;
    }
    i++;
    const spec = plainSpec();
    for (; i < format.length; i++) {
      const f = format[i];
      if (f === '-') (spec.minus = true), (spec.zero = false);
      else if (f === '+') spec.plus = true;
      else if (f === '#') spec.sharp = true;
      else if (f === ' ') spec.space = true;
      else if (f === '0') spec.zero = !spec.minus;
      else break;
    }
    if (format[i] === '*') {
      i++;
      const w = intArg();
      if (w === undefined) out += '%!(BADWIDTH)';
      else if (w < 0) (spec.minus = true), (spec.zero = false), (spec.width = -w);
      else spec.width = w;
    } else {
      const w = literal();
      if (w !== undefined) spec.width = w;
    }
    if (format[i] === '.') {
      i++;
      if (format[i] === '*') {
        i++;
        const p = intArg();
        if (p === undefined || p < 0) out += '%!(BADPREC)';
        else spec.prec = p;
      } else spec.prec = literal() ?? 0;
    }
    if (i >= format.length) {
      out += '%!(NOVERB)';
      break;
    }
    const verb = String.fromCodePoint(format.codePointAt(i)!);
    i += verb.length;
    if (verb === '%') {
      out += '%';
      continue;
    }
    if (argi >= args.length) {
      out += `%!${verb}(MISSING)`;
      continue;
    }
    const a = args[argi++];
    if (verb === 'v' && spec.plus) (spec.plusV = true), (spec.plus = false);
    if (verb === 'T') out += pad(a === null || a === undefined ? '<nil>' : typeName(a), spec);
    else if (!'bcdeEfFgGoOqstUvxX'.includes(verb)) out += badVerb(verb, a);
    else out += fmtValue(a, verb, spec, 0);
  }
  if (argi < args.length) {
    const extra = args.slice(argi).map((a) => (a === null || a === undefined ? '<nil>' : `${typeName(a)}=${fmtValue(a, 'v', plainSpec(), 0)}`));
    out += `%!(EXTRA ${extra.join(', ')})`;
  }
  return out;
}

// ---- encoding/json ------------------------------------------------------------------------------

function jsonString(s: string): string {
  let out = '"';
  for (const c of s) {
    const cp = c.codePointAt(0)!;
    if (c === '"') out += '\\"';
    else if (c === '\\') out += '\\\\';
    else if (c === '\n') out += '\\n';
    else if (c === '\r') out += '\\r';
    else if (c === '\t') out += '\\t';
    else if (c === '\b') out += '\\b';
    else if (c === '\f') out += '\\f';
    else if (cp < 0x20 || c === '<' || c === '>' || c === '&' || cp === 0x2028 || cp === 0x2029) out += '\\u' + cp.toString(16).padStart(4, '0');
    else if (cp >= 0xd800 && cp <= 0xdfff) out += '\\ufffd';
    else out += c;
  }
  return out + '"';
}

function isEmptyValue(v: unknown): boolean {
  if (v === null || v === undefined || v === false || v === 0 || v === '') return true;
  if (v instanceof GoInt) return v.value === 0;
  if (Array.isArray(v)) return v.length === 0;
  if (isMap(v)) return Object.keys(v).length === 0;
  return false;
}

/** encoding/json.Marshal: compact, HTML-safe, struct fields in order (omitempty), map keys sorted. */
export function goJsonMarshal(v: unknown, depth = 0): string {
  if (depth > 1000) throw new GoTemplateError('json: unsupported value: encountered a cycle');
  const m = methodsOf(v);
  if (m?.json) return goJsonMarshal(m.json(), depth + 1);
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'string') return jsonString(v);
  if (typeof v === 'boolean') return String(v);
  if (v instanceof GoInt) return String(v.value);
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new GoTemplateError(`json: unsupported value: ${formatGoFloat(v)}`);
    return Object.is(v, -0) ? '-0' : String(v);
  }
  if (Array.isArray(v)) return '[' + v.map((e) => goJsonMarshal(e, depth + 1)).join(',') + ']';
  if (v instanceof GoStruct) {
    const parts: string[] = [];
    for (const f of v.type.fields) {
      const val = v.values[f.name] ?? null;
      if (f.omitempty && isEmptyValue(val)) continue;
      parts.push(jsonString(f.json) + ':' + goJsonMarshal(val, depth + 1));
    }
    return '{' + parts.join(',') + '}';
  }
  if (typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return '{' + sortedKeys(o).map((k) => jsonString(k) + ':' + goJsonMarshal(o[k] ?? null, depth + 1)).join(',') + '}';
  }
  throw new GoTemplateError(`json: unsupported type: ${typeof v}`);
}

// ---- lexer --------------------------------------------------------------------------------------

type ItemType =
  | 'text'
  | 'leftDelim'
  | 'rightDelim'
  | 'space'
  | 'field'
  | 'variable'
  | 'identifier'
  | 'keyword'
  | 'bool'
  | 'nil'
  | 'dot'
  | 'number'
  | 'charConstant'
  | 'string'
  | 'rawString'
  | 'char'
  | 'pipe'
  | 'declare'
  | 'assign'
  | 'leftParen'
  | 'rightParen'
  | 'eof'
  | 'error';

interface Item {
  type: ItemType;
  val: string;
  pos: number;
  line: number;
}

const KEYWORDS = new Set(['block', 'break', 'continue', 'define', 'else', 'end', 'if', 'range', 'template', 'with']);
const isSpaceChar = (c: string | undefined) => c === ' ' || c === '\t' || c === '\r' || c === '\n';
const isAlnum = (c: string | undefined) => c !== undefined && /^[\p{L}\p{Nd}_]$/u.test(c);
const hasLeftTrim = (s: string, i: number) => s[i] === '-' && isSpaceChar(s[i + 1]);
const hasRightTrim = (s: string, i: number) => isSpaceChar(s[i]) && s[i + 1] === '-';

/** Go's lexer: the whole source as items (ending with eof or one error item). */
function lex(src: string): Item[] {
  const items: Item[] = [];
  let pos = 0;
  let line = 1;
  const emit = (type: ItemType, start: number, end: number, startLine: number) =>
    items.push({ type, val: src.slice(start, end), pos: start, line: startLine });
  const count = (a: number, b: number) => {
    for (let k = a; k < b; k++) if (src[k] === '\n') line++;
  };
  // Moves pos past a "…" or '…' body (escapes skipped) to its closing quote; false at a line's end or the text's.
  const quoted = (quote: string): boolean => {
    for (;;) {
      const ch = src[pos++];
      if (ch === '\\' && src[pos] !== undefined && src[pos] !== '\n') pos++;
      else if (ch === undefined || ch === '\n') return false;
      else if (ch === quote) return true;
    }
  };
  const fail = (msg: string) => {
    items.push({ type: 'error', val: msg, pos, line });
    return items;
  };
  const atRightDelim = (i: number): [boolean, boolean] => {
    if (hasRightTrim(src, i) && src.startsWith('}}', i + 2)) return [true, true];
    return [src.startsWith('}}', i), false];
  };
  /** Past the right delimiter at `i` (trim marker included) and, when trimming, the whitespace after it. */
  const closeAction = (i: number, trim: boolean) => {
    let j = i + (trim ? 2 : 0) + 2;
    if (trim) while (isSpaceChar(src[j])) j++;
    return j;
  };

  for (;;) {
    // text
    const x = src.indexOf('{{', pos);
    const end = x < 0 ? src.length : x;
    let textEnd = end;
    if (x >= 0 && hasLeftTrim(src, x + 2)) while (textEnd > pos && isSpaceChar(src[textEnd - 1])) textEnd--;
    if (textEnd > pos) emit('text', pos, textEnd, line);
    count(pos, end);
    pos = end;
    if (x < 0) {
      items.push({ type: 'eof', val: '', pos, line });
      return items;
    }
    // left delimiter
    const trimLeft = hasLeftTrim(src, pos + 2);
    const afterMarker = pos + 2 + (trimLeft ? 2 : 0);
    if (src.startsWith('/*', afterMarker)) {
      const close = src.indexOf('*/', afterMarker + 2);
      if (close < 0) return fail('unclosed comment');
      count(pos, close + 2);
      pos = close + 2;
      const [delim, trim] = atRightDelim(pos);
      if (!delim) return fail('comment ends before closing delimiter');
      const next = closeAction(pos, trim);
      count(pos, next);
      pos = next;
      continue;
    }
    emit('leftDelim', pos, pos + 2, line);
    count(pos, afterMarker);
    pos = afterMarker;
    let parenDepth = 0;
    // inside the action
    for (;;) {
      const [delim, trim] = atRightDelim(pos);
      if (delim) {
        if (parenDepth !== 0) return fail('unclosed left paren');
        const start = pos + (trim ? 2 : 0);
        emit('rightDelim', start, start + 2, line);
        const next = closeAction(pos, trim);
        count(pos, next);
        pos = next;
        break;
      }
      const start = pos;
      const startLine = line;
      const c = src[pos];
      if (c === undefined) return fail('unclosed action');
      if (isSpaceChar(c)) {
        let j = pos;
        while (isSpaceChar(src[j])) j++;
        // a space before a trim-marked right delimiter belongs to the delimiter
        let k = j;
        if (src[j] === '-' && src.startsWith('}}', j + 1)) k = j - 1;
        if (k > pos) emit('space', pos, k, line);
        count(pos, k);
        pos = k;
        continue;
      }
      pos++;
      switch (c) {
        case '=':
          emit('assign', start, pos, line);
          continue;
        case ':':
          if (src[pos] !== '=') return fail('expected :=');
          pos++;
          emit('declare', start, pos, line);
          continue;
        case '|':
          emit('pipe', start, pos, line);
          continue;
        case '"':
          if (!quoted('"')) return fail('unterminated quoted string');
          emit('string', start, pos, line);
          continue;
        case '`': {
          const close = src.indexOf('`', pos);
          if (close < 0) return fail('unterminated raw quoted string');
          pos = close + 1;
          emit('rawString', start, pos, startLine);
          count(start, pos);
          continue;
        }
        case "'":
          if (!quoted("'")) return fail('unterminated character constant');
          emit('charConstant', start, pos, line);
          continue;
        case '(':
          emit('leftParen', start, pos, line);
          parenDepth++;
          continue;
        case ')':
          emit('rightParen', start, pos, line);
          if (--parenDepth < 0) return fail('unexpected right paren');
          continue;
      }
      if (c === '$' || (c === '.' && !/[0-9]/.test(src[pos] ?? ''))) {
        // field or variable
        while (isAlnum(src[pos])) pos++;
        if (!atTerminator(pos)) return fail(`bad character ${charName(src[pos])}`);
        const val = src.slice(start, pos);
        emit(c === '$' ? 'variable' : val === '.' ? 'dot' : 'field', start, pos, line);
        continue;
      }
      if (c === '+' || c === '-' || c === '.' || (c >= '0' && c <= '9')) {
        const m = /^[+-]?(0[xX][0-9a-fA-F_]*(\.[0-9a-fA-F_]*)?([pP][+-]?[0-9_]+)?|0[oObB][0-7_]+|[0-9_]*(\.[0-9_]*)?([eE][+-]?[0-9_]+)?)i?/.exec(src.slice(start));
        const n = m ? m[0] : '';
        pos = start + n.length;
        if (n === '' || /^[+-]?$/.test(n) || isAlnum(src[pos])) {
          while (isAlnum(src[pos]) || src[pos] === '.') pos++;
          return fail(`bad number syntax: ${JSON.stringify(src.slice(start, pos))}`);
        }
        emit('number', start, pos, line);
        continue;
      }
      if (isAlnum(c)) {
        while (isAlnum(src[pos])) pos++;
        if (!atTerminator(pos)) return fail(`bad character ${charName(src[pos])}`);
        const word = src.slice(start, pos);
        const type: ItemType = KEYWORDS.has(word) ? 'keyword' : word === 'true' || word === 'false' ? 'bool' : word === 'nil' ? 'nil' : 'identifier';
        emit(type, start, pos, line);
        continue;
      }
      if (c.charCodeAt(0) < 0x7f && c.charCodeAt(0) >= 0x20) {
        emit('char', start, pos, line);
        continue;
      }
      return fail(`unrecognized character in action: ${charName(c)}`);
    }
  }

  function atTerminator(i: number): boolean {
    const c = src[i];
    if (c === undefined || isSpaceChar(c) || '.,|:)('.includes(c)) return true;
    return src.startsWith('}}', i);
  }
}

/** Go's %#U of a character, as its lexer errors print it. */
function charName(c: string | undefined): string {
  if (c === undefined) return 'U+FFFFFFFF';
  const cp = c.codePointAt(0)!;
  const hex = 'U+' + cp.toString(16).toUpperCase().padStart(4, '0');
  return isPrintable(c) ? `${hex} '${c}'` : hex;
}

// ---- parse tree ---------------------------------------------------------------------------------

/** An operand: a field chain, variable, literal, function name, chain on a term, or parenthesized pipeline. */
export type ArgNode =
  | { kind: 'field'; pos: number; idents: string[] }
  | { kind: 'variable'; pos: number; idents: string[] }
  | { kind: 'dot'; pos: number }
  | { kind: 'nil'; pos: number }
  | { kind: 'bool'; pos: number; value: boolean }
  | { kind: 'number'; pos: number; text: string; value: number; isFloat: boolean }
  | { kind: 'string'; pos: number; text: string; value: string }
  | { kind: 'identifier'; pos: number; name: string }
  | { kind: 'chain'; pos: number; node: ArgNode; fields: string[] }
  | PipeNode;

export interface CommandNode {
  kind: 'command';
  pos: number;
  args: ArgNode[];
}

export interface PipeNode {
  kind: 'pipe';
  pos: number;
  isAssign: boolean;
  decl: string[];
  cmds: CommandNode[];
}

export interface ListNode {
  kind: 'list';
  pos: number;
  nodes: TemplateNode[];
}

/** An if, with or range: its pipeline, its list and the list after `else`. */
export interface BranchNode {
  kind: 'if' | 'with' | 'range';
  pos: number;
  pipe: PipeNode;
  list: ListNode;
  elseList?: ListNode;
}

/** A node of a template's tree (Go's parse.Node kinds that a list can hold). */
export type TemplateNode =
  | ListNode
  | BranchNode
  | { kind: 'text'; pos: number; text: string }
  | { kind: 'action'; pos: number; pipe: PipeNode }
  | { kind: 'template'; pos: number; name: string; pipe?: PipeNode }
  | { kind: 'break' | 'continue'; pos: number };

/** Go's String() of a node, as execution errors quote it. */
function nodeString(n: ArgNode | CommandNode | TemplateNode): string {
  switch (n.kind) {
    case 'field':
      return '.' + n.idents.join('.');
    case 'variable':
      return n.idents.join('.');
    case 'dot':
      return '.';
    case 'nil':
      return 'nil';
    case 'bool':
      return String(n.value);
    case 'number':
    case 'string':
      return n.text;
    case 'identifier':
      return n.name;
    case 'chain':
      return (n.node.kind === 'pipe' ? '(' + nodeString(n.node) + ')' : nodeString(n.node)) + '.' + n.fields.join('.');
    case 'pipe':
      return (n.decl.length ? n.decl.join(', ') + (n.isAssign ? ' = ' : ' := ') : '') + n.cmds.map(nodeString).join(' | ');
    case 'command':
      return n.args.map((a) => (a.kind === 'pipe' ? '(' + nodeString(a) + ')' : nodeString(a))).join(' ');
    case 'action':
      return '{{' + nodeString(n.pipe) + '}}';
    case 'text':
      return n.text;
    case 'list':
      return n.nodes.map(nodeString).join('');
    case 'template':
      return `{{template ${JSON.stringify(n.name)}${n.pipe ? ' ' + nodeString(n.pipe) : ''}}}`;
    case 'if':
    case 'with':
    case 'range':
      return `{{${n.kind} ${nodeString(n.pipe)}}}${nodeString(n.list)}${n.elseList ? '{{else}}' + nodeString(n.elseList) : ''}{{end}}`;
    default:
      return `{{${n.kind}}}`;
  }
}

/** The functions Go's text/template defines, plus Ollama's `json`. */
const FUNCTIONS = new Set([
  'and', 'call', 'html', 'index', 'slice', 'js', 'len', 'not', 'or', 'print', 'printf', 'println', 'urlquery',
  'eq', 'ge', 'gt', 'le', 'lt', 'ne', 'json',
]);

/** Go's strconv.Unquote for "…" strings: Go escapes, \x and octal as UTF-8 bytes. */
function unquote(text: string): string {
  const body = text.slice(1, -1);
  const bytes: number[] = [];
  const pushStr = (s: string) => bytes.push(...Buffer.from(s, 'utf8'));
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (c !== '\\') {
      const cp = body.codePointAt(i)!;
      pushStr(String.fromCodePoint(cp));
      if (cp > 0xffff) i++;
      continue;
    }
    const e = body[++i];
    const simple: Record<string, string> = { a: '\x07', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v', '\\': '\\', '"': '"' };
    if (e in simple) pushStr(simple[e]);
    else if (e === 'x' || e === 'u' || e === 'U') {
      const n = e === 'x' ? 2 : e === 'u' ? 4 : 8;
      const h = body.slice(i + 1, i + 1 + n);
      if (!new RegExp(`^[0-9a-fA-F]{${n}}$`).test(h)) throw new Error('invalid syntax');
      const v = parseInt(h, 16);
      if (e === 'x') bytes.push(v);
      else if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) throw new Error('invalid syntax');
      else pushStr(String.fromCodePoint(v));
      i += n;
    } else if (e >= '0' && e <= '7') {
      const o = body.slice(i, i + 3);
      if (!/^[0-7]{3}$/.test(o) || parseInt(o, 8) > 255) throw new Error('invalid syntax');
      bytes.push(parseInt(o, 8));
      i += 2;
    } else throw new Error('invalid syntax');
  }
  return Buffer.from(bytes).toString('utf8');
}

/** A parsed number literal: its value and whether Go evaluates it as a float64 (else an int). */
function parseNumber(text: string): { value: number; isFloat: boolean } {
  if (text.endsWith('i')) throw new Error(`complex numbers are not supported: ${JSON.stringify(text)}`);
  const clean = text.replace(/_/g, '');
  const neg = clean.startsWith('-');
  const body = clean.replace(/^[+-]/, '');
  let v: number;
  if (/^0[xX][0-9a-fA-F]+$/.test(body)) v = parseInt(body.slice(2), 16);
  else if (/^0[bB][01]+$/.test(body)) v = parseInt(body.slice(2), 2);
  else if (/^0[oO]?[0-7]+$/.test(body)) v = parseInt(body.replace(/^0[oO]?/, ''), 8);
  else if (/^[0-9]+$/.test(body)) {
    if (/^0[0-9]/.test(body)) throw new Error(`integer overflow: ${JSON.stringify(text)}`);
    v = Number(body);
  } else if (/^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$/.test(body)) {
    return { value: neg ? -Number(body) : Number(body), isFloat: true };
  } else throw new Error(`illegal number syntax: ${JSON.stringify(text)}`);
  if (!Number.isSafeInteger(v)) throw new Error(`integer overflow: ${JSON.stringify(text)}`);
  return { value: neg ? -v : v, isFloat: false };
}

/** Go's item String() for "unexpected …" messages. */
function itemString(it: Item): string {
  if (it.type === 'eof') return 'EOF';
  if (it.type === 'error') return it.val;
  if (it.type === 'keyword') return `<${it.val}>`;
  if (it.val.length > 10) return JSON.stringify(it.val.slice(0, 10)) + '...';
  return JSON.stringify(it.val);
}

class EndOrElse {
  constructor(
    readonly kind: 'end' | 'else',
    readonly pos: number,
  ) {}
}

class Parser {
  private i = 0;
  private vars: string[] = ['$'];
  private rangeDepth = 0;
  private actionLine = 0;
  readonly defs = new Map<string, ListNode>();

  constructor(private readonly items: Item[]) {}

  private next(): Item {
    return this.items[Math.min(this.i++, this.items.length - 1)];
  }
  private backup(n = 1) {
    this.i -= n;
  }
  private peek(): Item {
    return this.items[Math.min(this.i, this.items.length - 1)];
  }
  private nextNonSpace(): Item {
    let t = this.next();
    while (t.type === 'space') t = this.next();
    return t;
  }
  private peekNonSpace(): Item {
    const t = this.nextNonSpace();
    this.backup();
    return t;
  }
  private current(): Item {
    return this.items[Math.max(0, Math.min(this.i - 1, this.items.length - 1))];
  }

  errorf(msg: string, line = this.current().line): never {
    throw new GoTemplateError(`template: :${line}: ${msg}`);
  }
  private unexpected(it: Item, context: string): never {
    if (it.type === 'error') {
      const extra = this.actionLine !== 0 && this.actionLine !== it.line ? ` in action started at :${this.actionLine}` : '';
      this.errorf(it.val + extra, it.line);
    }
    this.errorf(`unexpected ${itemString(it)} in ${context}`, it.line);
  }
  private expect(type: ItemType, context: string): Item {
    const t = this.nextNonSpace();
    if (t.type !== type) this.unexpected(t, context);
    return t;
  }

  parse(): ListNode {
    const root: ListNode = { kind: 'list', pos: this.peek().pos, nodes: [] };
    while (this.peek().type !== 'eof') {
      if (this.peek().type === 'leftDelim') {
        const start = this.i;
        this.next();
        const kw = this.nextNonSpace();
        if (kw.type === 'keyword' && kw.val === 'define') {
          this.parseDefinition();
          continue;
        }
        this.i = start;
      }
      const n = this.textOrAction();
      if (n instanceof EndOrElse) this.errorf(`unexpected {{${n.kind}}}`);
      root.nodes.push(n);
    }
    return root;
  }

  private parseDefinition() {
    const saved = this.vars;
    this.vars = ['$'];
    const name = this.parseTemplateName(this.nextNonSpace(), 'define clause');
    this.expect('rightDelim', 'define clause');
    const [list, end] = this.itemList();
    if (end.kind !== 'end') this.errorf(`unexpected {{${end.kind}}} in define clause`);
    this.addDefinition(name, list);
    this.vars = saved;
  }

  private addDefinition(name: string, list: ListNode) {
    const old = this.defs.get(name);
    const empty = (l: ListNode) => l.nodes.every((n) => n.kind === 'text' && n.text.trim() === '');
    if (old && !empty(old) && !empty(list)) this.errorf(`template: multiple definition of template ${JSON.stringify(name)}`);
    if (!old || !empty(list)) this.defs.set(name, list);
  }

  private itemList(): [ListNode, EndOrElse] {
    const list: ListNode = { kind: 'list', pos: this.peekNonSpace().pos, nodes: [] };
    while (this.peekNonSpace().type !== 'eof') {
      const n = this.textOrAction();
      if (n instanceof EndOrElse) return [list, n];
      list.nodes.push(n);
    }
    this.next();
    this.errorf('unexpected EOF');
  }

  private textOrAction(): TemplateNode | EndOrElse {
    const t = this.nextNonSpace();
    if (t.type === 'text') return { kind: 'text', pos: t.pos, text: t.val };
    if (t.type === 'leftDelim') {
      this.actionLine = t.line;
      try {
        return this.action();
      } finally {
        this.actionLine = 0;
      }
    }
    this.unexpected(t, 'input');
  }

  private action(): TemplateNode | EndOrElse {
    const t = this.nextNonSpace();
    if (t.type === 'keyword') {
      switch (t.val) {
        case 'block':
          return this.blockControl();
        case 'break':
        case 'continue': {
          this.expect('rightDelim', `{{${t.val}}}`);
          if (this.rangeDepth === 0) this.errorf(`{{${t.val}}} outside {{range}}`);
          return { kind: t.val, pos: t.pos };
        }
        case 'else': {
          const p = this.peekNonSpace();
          if (p.type === 'keyword' && (p.val === 'if' || p.val === 'with')) return new EndOrElse('else', p.pos);
          this.expect('rightDelim', 'else');
          return new EndOrElse('else', t.pos);
        }
        case 'end':
          this.expect('rightDelim', 'end');
          return new EndOrElse('end', t.pos);
        case 'if':
        case 'range':
        case 'with':
          return this.control(t.val);
        case 'template':
          return this.templateControl();
        case 'define':
          this.errorf('unexpected <define> in command');
      }
    }
    this.backup();
    const pos = this.peekNonSpace().pos;
    return { kind: 'action', pos, pipe: this.pipeline('command', 'rightDelim') };
  }

  private control(kind: 'if' | 'range' | 'with'): TemplateNode {
    const mark = this.vars.length;
    const pipe = this.pipeline(kind, 'rightDelim');
    if (kind === 'range') this.rangeDepth++;
    const [list, next] = this.itemList();
    if (kind === 'range') this.rangeDepth--;
    let elseList: ListNode | undefined;
    if (next.kind === 'else') {
      const p = this.peekNonSpace();
      if ((kind === 'if' || kind === 'with') && p.type === 'keyword' && p.val === kind) {
        this.nextNonSpace();
        elseList = { kind: 'list', pos: next.pos, nodes: [this.control(kind)] };
      } else {
        let end: EndOrElse;
        [elseList, end] = this.itemList();
        if (end.kind !== 'end') this.errorf(`expected end; found {{${end.kind}}}`);
      }
    }
    this.vars.length = mark;
    return { kind, pos: pipe.pos, pipe, list, elseList };
  }

  private parseTemplateName(t: Item, context: string): string {
    if (t.type !== 'string' && t.type !== 'rawString') this.unexpected(t, context);
    try {
      return t.type === 'rawString' ? t.val.slice(1, -1) : unquote(t.val);
    } catch (e) {
      this.errorf((e as Error).message);
    }
  }

  private templateControl(): TemplateNode {
    const t = this.nextNonSpace();
    const name = this.parseTemplateName(t, 'template clause');
    let pipe: PipeNode | undefined;
    if (this.nextNonSpace().type !== 'rightDelim') {
      this.backup();
      pipe = this.pipeline('template clause', 'rightDelim');
    }
    return { kind: 'template', pos: t.pos, name, pipe };
  }

  private blockControl(): TemplateNode {
    const t = this.nextNonSpace();
    const name = this.parseTemplateName(t, 'block clause');
    let pipe: PipeNode | undefined;
    if (this.nextNonSpace().type !== 'rightDelim') {
      this.backup();
      pipe = this.pipeline('block clause', 'rightDelim');
    }
    const saved = this.vars;
    this.vars = ['$'];
    const [list, end] = this.itemList();
    if (end.kind !== 'end') this.errorf(`unexpected {{${end.kind}}} in block clause`);
    this.vars = saved;
    this.addDefinition(name, list);
    return { kind: 'template', pos: t.pos, name, pipe };
  }

  private pipeline(context: string, end: 'rightDelim' | 'rightParen'): PipeNode {
    const pipe: PipeNode = { kind: 'pipe', pos: this.peekNonSpace().pos, isAssign: false, decl: [], cmds: [] };
    const v = this.peekNonSpace();
    if (v.type === 'variable') {
      const start = this.i;
      this.nextNonSpace();
      const next = this.peekNonSpace();
      if (next.type === 'assign' || next.type === 'declare') {
        pipe.isAssign = next.type === 'assign';
        this.nextNonSpace();
        pipe.decl.push(v.val);
        this.vars.push(v.val);
      } else if (next.type === 'char' && next.val === ',') {
        this.nextNonSpace();
        pipe.decl.push(v.val);
        this.vars.push(v.val);
        if (context !== 'range') this.errorf(`too many declarations in ${context}`);
        const v2 = this.nextNonSpace();
        if (v2.type !== 'variable') this.errorf('range can only initialize variables');
        const op = this.nextNonSpace();
        if (op.type !== 'assign' && op.type !== 'declare') this.unexpected(op, context);
        pipe.isAssign = op.type === 'assign';
        pipe.decl.push(v2.val);
        this.vars.push(v2.val);
      } else this.i = start;
    }
    for (;;) {
      const t = this.nextNonSpace();
      if (t.type === end) {
        this.checkPipeline(pipe, context);
        return pipe;
      }
      switch (t.type) {
        case 'bool':
        case 'charConstant':
        case 'dot':
        case 'field':
        case 'identifier':
        case 'number':
        case 'nil':
        case 'rawString':
        case 'string':
        case 'variable':
        case 'leftParen':
          this.backup();
          pipe.cmds.push(this.command());
          break;
        default:
          this.unexpected(t, context);
      }
    }
  }

  private checkPipeline(pipe: PipeNode, context: string) {
    if (pipe.cmds.length === 0) this.errorf(`missing value for ${context}`);
    pipe.cmds.slice(1).forEach((c, i) => {
      const k = c.args[0].kind;
      if (k === 'bool' || k === 'dot' || k === 'nil' || k === 'number' || k === 'string') {
        this.errorf(`non executable command in pipeline stage ${i + 2}`);
      }
    });
  }

  private command(): CommandNode {
    const cmd: CommandNode = { kind: 'command', pos: this.peekNonSpace().pos, args: [] };
    for (;;) {
      this.peekNonSpace();
      const operand = this.operand();
      if (operand) cmd.args.push(operand);
      const t = this.next();
      if (t.type === 'space') continue;
      if (t.type === 'rightDelim' || t.type === 'rightParen') this.backup();
      else if (t.type !== 'pipe') this.unexpected(t, 'operand');
      break;
    }
    if (cmd.args.length === 0) this.errorf('empty command');
    return cmd;
  }

  private operand(): ArgNode | undefined {
    const node = this.term();
    if (!node) return undefined;
    if (this.peek().type !== 'field') return node;
    const fields: string[] = [];
    const pos = this.peek().pos;
    while (this.peek().type === 'field') fields.push(this.next().val.slice(1));
    switch (node.kind) {
      case 'field':
        return { kind: 'field', pos: node.pos, idents: [...node.idents, ...fields] };
      case 'variable':
        return { kind: 'variable', pos: node.pos, idents: [...node.idents, ...fields] };
      case 'bool':
      case 'string':
      case 'number':
      case 'nil':
      case 'dot':
        this.errorf(`unexpected . after term ${JSON.stringify(nodeString(node))}`);
    }
    return { kind: 'chain', pos, node, fields };
  }

  private term(): ArgNode | undefined {
    const t = this.nextNonSpace();
    switch (t.type) {
      case 'identifier':
        if (!FUNCTIONS.has(t.val)) this.errorf(`function ${JSON.stringify(t.val)} not defined`);
        return { kind: 'identifier', pos: t.pos, name: t.val };
      case 'dot':
        return { kind: 'dot', pos: t.pos };
      case 'nil':
        return { kind: 'nil', pos: t.pos };
      case 'variable':
        if (!this.vars.includes(t.val)) this.errorf(`undefined variable ${JSON.stringify(t.val)}`);
        return { kind: 'variable', pos: t.pos, idents: [t.val] };
      case 'field':
        return { kind: 'field', pos: t.pos, idents: [t.val.slice(1)] };
      case 'bool':
        return { kind: 'bool', pos: t.pos, value: t.val === 'true' };
      case 'charConstant': {
        const m = /^'(\\.[^']*|[^\\'][\uDC00-\uDFFF]?)'$/su.exec(t.val);
        if (!m) this.errorf(`malformed character constant: ${t.val}`);
        let s: string;
        try {
          s = m[1].startsWith('\\') ? (m[1] === "\\'" ? "'" : unquote('"' + m[1] + '"')) : m[1];
        } catch (e) {
          this.errorf((e as Error).message);
        }
        if ([...s].length !== 1) this.errorf(`malformed character constant: ${t.val}`);
        return { kind: 'number', pos: t.pos, text: t.val, value: s.codePointAt(0)!, isFloat: false };
      }
      case 'number': {
        let n: { value: number; isFloat: boolean };
        try {
          n = parseNumber(t.val);
        } catch (e) {
          this.errorf((e as Error).message);
        }
        return { kind: 'number', pos: t.pos, text: t.val, ...n };
      }
      case 'leftParen':
        return this.pipeline('parenthesized pipeline', 'rightParen');
      case 'string':
      case 'rawString':
        try {
          return { kind: 'string', pos: t.pos, text: t.val, value: t.type === 'rawString' ? t.val.slice(1, -1) : unquote(t.val) };
        } catch (e) {
          this.errorf((e as Error).message);
        }
    }
    this.backup();
    return undefined;
  }
}

// ---- execution ----------------------------------------------------------------------------------

/** Limits for templates from user files, rendered synchronously: one range's iterations, output characters, */
const MAX_RANGE = 1 << 20;
const MAX_OUTPUT = 16 * 1024 * 1024;
/** nested `template` calls (Go allows 100000), and nodes walked plus range iterations in one execution. */
const MAX_DEPTH = 100;
const MAX_STEPS = 1 << 22;

class BreakSignal {}
class ContinueSignal {}

interface Variable {
  name: string;
  value: unknown;
}

/** A missing argument (Go's missingVal): the final value of a pipeline's first command. */
const MISSING = Symbol('missing');

class State {
  out: string[] = [];
  size = 0;
  steps = 0;
  depth = 0;
  vars: Variable[] = [];
  node: ArgNode | CommandNode | TemplateNode | undefined;
  name = '';

  constructor(
    private readonly src: string,
    private readonly defs: ReadonlyMap<string, ListNode>,
  ) {}

  errorf(msg: string): never {
    if (!this.node) throw new GoTemplateError(`template: ${this.name}: ${msg}`);
    const before = this.src.slice(0, this.node.pos);
    const nl = before.lastIndexOf('\n');
    const line = 1 + (before.match(/\n/g)?.length ?? 0);
    const col = Buffer.byteLength(nl < 0 ? before : before.slice(nl + 1), 'utf8');
    throw new GoTemplateError(`template: :${line}:${col}: executing ${JSON.stringify(this.name)} at <${nodeString(this.node)}>: ${msg}`);
  }

  write(s: string) {
    this.size += s.length;
    if (this.size > MAX_OUTPUT) this.errorf(`output exceeds ${MAX_OUTPUT} characters`);
    this.out.push(s);
  }

  setVar(name: string, value: unknown) {
    for (let i = this.vars.length - 1; i >= 0; i--) {
      if (this.vars[i].name === name) {
        this.vars[i].value = value;
        return;
      }
    }
    this.errorf(`undefined variable: ${name}`);
  }

  varValue(name: string): unknown {
    for (let i = this.vars.length - 1; i >= 0; i--) if (this.vars[i].name === name) return this.vars[i].value;
    this.errorf(`undefined variable: ${name}`);
  }

  walk(dot: unknown, node: TemplateNode) {
    this.node = node;
    if (++this.steps > MAX_STEPS) this.errorf(`execution exceeds ${MAX_STEPS} steps`);
    switch (node.kind) {
      case 'list':
        for (const n of node.nodes) this.walk(dot, n);
        return;
      case 'text':
        this.write(node.text);
        return;
      case 'action': {
        // variables an action declares live until the end of the enclosing control structure
        const val = this.evalPipeline(dot, node.pipe);
        if (node.pipe.decl.length === 0) {
          this.node = node;
          this.write(val === undefined ? '<no value>' : fmtValue(val, 'v', plainSpec(), 0));
        }
        return;
      }
      case 'if':
      case 'with': {
        const mark = this.vars.length;
        const val = this.evalPipeline(dot, node.pipe);
        if (isTrue(val)) this.walk(node.kind === 'with' ? val : dot, node.list);
        else if (node.elseList) this.walk(dot, node.elseList);
        this.vars.length = mark;
        return;
      }
      case 'range':
        this.walkRange(dot, node);
        return;
      case 'template': {
        const tmpl = this.defs.get(node.name);
        if (!tmpl) this.errorf(`template ${JSON.stringify(node.name)} not defined`);
        if (this.depth >= MAX_DEPTH) this.errorf(`exceeded maximum template depth (${MAX_DEPTH})`);
        const newDot = node.pipe ? this.evalPipeline(dot, node.pipe) : undefined;
        const saved = { vars: this.vars, name: this.name };
        this.vars = [{ name: '$', value: newDot }];
        this.name = node.name;
        this.depth++;
        try {
          this.walk(newDot, tmpl);
        } finally {
          this.depth--;
          this.vars = saved.vars;
          this.name = saved.name;
        }
        return;
      }
      case 'break':
        throw new BreakSignal();
      case 'continue':
        throw new ContinueSignal();
    }
  }

  private walkRange(dot: unknown, r: BranchNode) {
    const outer = this.vars.length;
    const val = this.evalPipeline(dot, r.pipe);
    const mark = this.vars.length;
    const decl = r.pipe.decl;
    const one = (index: unknown, elem: unknown): boolean => {
      if (++this.steps > MAX_STEPS) this.errorf(`execution exceeds ${MAX_STEPS} steps`);
      if (decl.length > 0) {
        if (r.pipe.isAssign) this.setVar(decl[0], decl.length > 1 ? index : elem);
        else this.vars[mark - 1].value = elem;
      }
      if (decl.length > 1) {
        if (r.pipe.isAssign) this.setVar(decl[1], elem);
        else this.vars[mark - 2].value = index;
      }
      try {
        this.walk(elem, r.list);
      } catch (e) {
        if (e instanceof BreakSignal) return false;
        if (!(e instanceof ContinueSignal)) throw e;
      } finally {
        this.vars.length = mark;
      }
      return true;
    };
    let ran = false;
    if (Array.isArray(val)) {
      for (let i = 0; i < val.length; i++) if (!one(new GoInt(i), val[i] ?? null)) break;
      ran = val.length > 0;
    } else if (val instanceof GoInt) {
      this.node = r;
      if (decl.length > 1) this.errorf(`can't use ${val.value} to iterate over more than one variable`);
      if (val.value > MAX_RANGE) this.errorf(`range over ${val.value} exceeds the limit of ${MAX_RANGE} iterations`);
      for (let i = 0; i < val.value && one(new GoInt(i), new GoInt(i)); i++);
      ran = val.value > 0;
    } else if (isMap(val)) {
      const keys = sortedKeys(val);
      for (const k of keys) if (!one(k, val[k] ?? null)) break;
      ran = keys.length > 0;
    } else if (val !== undefined && val !== null) {
      this.node = r;
      this.errorf(`range can't iterate over ${fmtValue(val, 'v', plainSpec(), 0)}`);
    }
    this.vars.length = outer;
    if (!ran && r.elseList) this.walk(dot, r.elseList);
  }

  /** A pipeline's value; nil interfaces come out as `undefined` (Go's invalid value). */
  evalPipeline(dot: unknown, pipe: PipeNode): unknown {
    let value: unknown = MISSING;
    for (const cmd of pipe.cmds) value = this.evalCommand(dot, cmd, value);
    if (value === null) value = undefined;
    for (const name of pipe.decl) {
      if (pipe.isAssign) this.setVar(name, value);
      else this.vars.push({ name, value });
    }
    return value;
  }

  private notAFunction(args: ArgNode[], final: unknown) {
    if (args.length > 1 || final !== MISSING) this.errorf(`can't give argument to non-function ${nodeString(args[0])}`);
  }

  private evalCommand(dot: unknown, cmd: CommandNode, final: unknown): unknown {
    const first = cmd.args[0];
    switch (first.kind) {
      case 'field':
        this.node = first;
        return this.evalFieldChain(dot, dot, first.idents, cmd.args, final);
      case 'chain': {
        this.node = first;
        if (first.node.kind === 'nil') this.errorf(`indirection through explicit nil in ${nodeString(first)}`);
        const recv = this.evalArg(dot, first.node);
        this.node = first;
        return this.evalFieldChain(dot, recv, first.fields, cmd.args, final);
      }
      case 'identifier':
        return this.evalFunction(dot, first.name, cmd, final);
      case 'pipe':
        this.node = first;
        this.notAFunction(cmd.args, final);
        return this.evalPipeline(dot, first);
      case 'variable': {
        this.node = first;
        const value = this.varValue(first.idents[0]);
        if (first.idents.length === 1) {
          this.notAFunction(cmd.args, final);
          return value;
        }
        return this.evalFieldChain(dot, value, first.idents.slice(1), cmd.args, final);
      }
    }
    this.node = first;
    this.notAFunction(cmd.args, final);
    switch (first.kind) {
      case 'bool':
        return first.value;
      case 'dot':
        return dot;
      case 'nil':
        return this.errorf('nil is not a command');
      case 'number':
        return first.isFloat ? first.value : new GoInt(first.value);
      case 'string':
        return first.value;
    }
  }

  private evalFieldChain(dot: unknown, receiver: unknown, idents: string[], args: ArgNode[], final: unknown): unknown {
    for (let i = 0; i < idents.length - 1; i++) receiver = this.evalField(idents[i], receiver, false);
    return this.evalField(idents[idents.length - 1], receiver, args.length > 1 || final !== MISSING);
  }

  /** Go's evalField: `undefined` is an invalid value, `null` a nil interface. */
  private evalField(name: string, receiver: unknown, hasArgs: boolean): unknown {
    if (receiver === undefined) return undefined;
    if (receiver === null) this.errorf(`nil pointer evaluating interface {}.${name}`);
    const m = methodsOf(receiver);
    if (name === 'String' && m?.string) {
      if (hasArgs) this.errorf(`wrong number of args for String: want 0 got 1`);
      return m.string();
    }
    if (receiver instanceof GoStruct) {
      if (receiver.type.fields.some((f) => f.name === name)) {
        if (hasArgs) this.errorf(`${name} has arguments but cannot be invoked as function`);
        return receiver.values[name] ?? null;
      }
    } else if (isMap(receiver)) {
      if (hasArgs) this.errorf(`${name} is not a method but has arguments`);
      return Object.prototype.hasOwnProperty.call(receiver, name) ? receiver[name] ?? null : null;
    }
    this.errorf(`can't evaluate field ${name} in type ${typeName(receiver)}`);
  }

  /** An argument's value: fields, variables, literals and sub-pipelines. */
  private evalArg(dot: unknown, n: ArgNode): unknown {
    this.node = n;
    switch (n.kind) {
      case 'dot':
        return dot;
      case 'nil':
        return null;
      case 'field':
        return this.evalFieldChain(dot, dot, n.idents, [n], MISSING);
      case 'variable': {
        const v = this.varValue(n.idents[0]);
        return n.idents.length === 1 ? v : this.evalFieldChain(dot, v, n.idents.slice(1), [n], MISSING);
      }
      case 'pipe':
        return this.evalPipeline(dot, n);
      case 'identifier':
        return this.evalFunction(dot, n.name, { kind: 'command', pos: n.pos, args: [n] }, MISSING);
      case 'chain': {
        if (n.node.kind === 'nil') this.errorf(`indirection through explicit nil in ${nodeString(n)}`);
        const recv = this.evalArg(dot, n.node);
        this.node = n;
        return this.evalFieldChain(dot, recv, n.fields, [n], MISSING);
      }
      case 'bool':
        return n.value;
      case 'number':
        return n.isFloat ? n.value : new GoInt(n.value);
      case 'string':
        return n.value;
    }
  }

  private evalFunction(dot: unknown, name: string, cmd: CommandNode, final: unknown): unknown {
    const argNodes = cmd.args.slice(1);
    const count = argNodes.length + (final !== MISSING ? 1 : 0);
    const wantAtLeast = (n: number) => {
      if (count < n) {
        this.node = cmd;
        this.errorf(`wrong number of args for ${name}: want at least ${n} got ${count}`);
      }
    };
    const want = (n: number) => {
      if (count !== n) {
        this.node = cmd;
        this.errorf(`wrong number of args for ${name}: want ${n} got ${count}`);
      }
    };
    if (name === 'and' || name === 'or') {
      wantAtLeast(1);
      let v: unknown;
      for (const a of argNodes) {
        v = this.evalArg(dot, a);
        if (isTrue(v) === (name === 'or')) return v;
      }
      return final !== MISSING ? final : v;
    }
    const args = argNodes.map((a) => this.evalArg(dot, a));
    if (final !== MISSING) args.push(final);
    this.node = cmd;
    const fail = (msg: string): never => this.errorf(`error calling ${name}: ${msg}`);
    switch (name) {
      case 'not':
        want(1);
        return !isTrue(args[0]);
      case 'len': {
        want(1);
        const v = args[0];
        if (v === null || v === undefined) fail('len of nil pointer');
        if (typeof v === 'string') return new GoInt(utf8Length(v));
        if (Array.isArray(v)) return new GoInt(v.length);
        if (isMap(v)) return new GoInt(Object.keys(v).length);
        return fail(`len of type ${typeName(v)}`);
      }
      case 'index':
        wantAtLeast(1);
        return this.index(args[0], args.slice(1), fail);
      case 'slice':
        wantAtLeast(1);
        return this.slice(args[0], args.slice(1), fail);
      case 'eq': {
        wantAtLeast(1);
        if (args.length < 2) fail('missing argument for comparison');
        for (const b of args.slice(1)) if (this.equal(args[0], b, fail)) return true;
        return false;
      }
      case 'ne':
        want(2);
        return !this.equal(args[0], args[1], fail);
      case 'lt':
      case 'le':
      case 'gt':
      case 'ge': {
        want(2);
        const lt = this.less(args[0], args[1], fail);
        const le = lt || this.equal(args[0], args[1], fail);
        return name === 'lt' ? lt : name === 'le' ? le : name === 'gt' ? !le : !lt;
      }
      case 'print':
        return goSprint(args);
      case 'println':
        return goSprintln(args);
      case 'printf': {
        wantAtLeast(1);
        const f = args[0];
        if (typeof f !== 'string') {
          this.node = cmd.args[1] ?? cmd;
          if (f === null || f === undefined) this.errorf('invalid value; expected string');
          this.errorf(`wrong type for value; expected string; got ${typeName(f)}`);
        }
        return goSprintf(f, args.slice(1));
      }
      case 'html':
        return evalArgsString(args).replace(/[<>&'"\0]/g, (c) => HTML_ESCAPES[c]);
      case 'js':
        return jsEscape(evalArgsString(args));
      case 'urlquery':
        return urlQueryEscape(evalArgsString(args));
      case 'json':
        want(1);
        try {
          return goJsonMarshal(args[0]);
        } catch {
          return '';
        }
      case 'call':
        return fail('call is not supported');
    }
    return fail('unknown function');
  }

  private index(item: unknown, indexes: unknown[], fail: (m: string) => never): unknown {
    if (item === null || item === undefined) fail('index of untyped nil');
    for (const ix of indexes) {
      if (item === null || item === undefined) fail('index of nil pointer');
      if (typeof item === 'string' || Array.isArray(item)) {
        const bytes = typeof item === 'string' ? Buffer.from(item, 'utf8') : undefined;
        const len = bytes ? bytes.length : (item as unknown[]).length;
        const x = this.indexArg(ix, len, fail);
        if (x === len) fail(`index out of range: ${x}`);
        item = bytes ? new GoInt(bytes[x]) : (item as unknown[])[x] ?? null;
      } else if (isMap(item)) {
        if (ix !== null && ix !== undefined && typeof ix !== 'string') fail(`value has type ${typeName(ix)}; should be string`);
        item = typeof ix === 'string' && Object.prototype.hasOwnProperty.call(item, ix) ? item[ix] ?? null : null;
      } else fail(`can't index item of type ${typeName(item)}`);
    }
    return item;
  }

  private indexArg(ix: unknown, cap: number, fail: (m: string) => never): number {
    if (ix === null || ix === undefined) fail('cannot index slice/array with nil');
    if (!(ix instanceof GoInt)) fail(`cannot index slice/array with type ${typeName(ix)}`);
    if (ix.value < 0 || ix.value > cap) fail(`index out of range: ${ix.value}`);
    return ix.value;
  }

  private slice(item: unknown, indexes: unknown[], fail: (m: string) => never): unknown {
    if (item === null || item === undefined) fail('slice of untyped nil');
    if (indexes.length > 3) fail(`too many slice indexes: ${indexes.length}`);
    let len: number;
    let bytes: Buffer | undefined;
    if (typeof item === 'string') {
      if (indexes.length === 3) fail('cannot 3-index slice a string');
      bytes = Buffer.from(item, 'utf8');
      len = bytes.length;
    } else if (Array.isArray(item)) len = item.length;
    else return fail(`can't slice item of type ${typeName(item)}`);
    const idx = [0, len, len];
    indexes.forEach((ix, i) => (idx[i] = this.indexArg(ix, len, fail)));
    if (idx[0] > idx[1]) fail(`invalid slice index: ${idx[0]} > ${idx[1]}`);
    if (indexes.length === 3 && idx[1] > idx[2]) fail(`invalid slice index: ${idx[1]} > ${idx[2]}`);
    return bytes ? bytes.subarray(idx[0], idx[1]).toString('utf8') : (item as unknown[]).slice(idx[0], idx[1]);
  }

  private equal(a: unknown, b: unknown, fail: (m: string) => never): boolean {
    const ka = basicKind(a);
    const kb = basicKind(b);
    if (ka !== kb) {
      if (ka !== 'invalid' && kb !== 'invalid') fail('incompatible types for comparison');
      return false;
    }
    switch (ka) {
      case 'invalid':
        return true;
      case 'int':
        return (a as GoInt).value === (b as GoInt).value;
      case 'bool':
      case 'float':
      case 'string':
        return a === b;
    }
    if (Array.isArray(a) || isMap(a) || Array.isArray(b) || isMap(b)) fail(`non-comparable type ${fmtValue(a, 'v', plainSpec(), 0)}: ${typeName(a)}`);
    return a === b;
  }

  private less(a: unknown, b: unknown, fail: (m: string) => never): boolean {
    const ka = basicKind(a);
    const kb = basicKind(b);
    if (ka === 'other' || ka === 'invalid' || kb === 'other' || kb === 'invalid') fail('invalid type for comparison');
    if (ka !== kb) fail('incompatible types for comparison');
    switch (ka) {
      case 'int':
        return (a as GoInt).value < (b as GoInt).value;
      case 'float':
        return (a as number) < (b as number);
      case 'string':
        return compareStrings(a as string, b as string) < 0;
    }
    return fail('invalid type for comparison');
  }
}

function basicKind(v: unknown): 'invalid' | 'bool' | 'int' | 'float' | 'string' | 'other' {
  if (v === null || v === undefined) return 'invalid';
  if (typeof v === 'boolean') return 'bool';
  if (v instanceof GoInt) return 'int';
  if (typeof v === 'number') return 'float';
  if (typeof v === 'string') return 'string';
  return 'other';
}

/** text/template's evalArgs: a lone string as is, anything else through fmt.Sprint. */
const evalArgsString = (args: unknown[]) => (args.length === 1 && typeof args[0] === 'string' ? args[0] : goSprint(args));

const HTML_ESCAPES: Record<string, string> = { '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&#39;', '"': '&#34;', '\0': '\uFFFD' };

/** text/template's JSEscapeString. */
function jsEscape(s: string): string {
  let out = '';
  for (const c of s) {
    const cp = c.codePointAt(0)!;
    const special: Record<string, string> = { '\\': '\\\\', "'": "\\'", '"': '\\"', '<': '\\u003C', '>': '\\u003E', '&': '\\u0026', '=': '\\u003D' };
    if (c in special) out += special[c];
    else if (cp < 0x20) out += '\\u00' + cp.toString(16).toUpperCase().padStart(2, '0');
    else if (cp < 0x80 || isPrintable(c)) out += c;
    else out += '\\u' + cp.toString(16).toUpperCase().padStart(4, '0');
  }
  return out;
}

/** net/url's QueryEscape. */
function urlQueryEscape(s: string): string {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(b);
    if (/[A-Za-z0-9\-_.~]/.test(c)) out += c;
    else if (c === ' ') out += '+';
    else out += '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

// ---- template -----------------------------------------------------------------------------------

/** The identifiers of fields and variables in a node, as Ollama's template.Identifiers collects them. */
function identifiers(n: TemplateNode | ArgNode | undefined, out: string[]) {
  if (!n) return;
  switch (n.kind) {
    case 'list':
      n.nodes.forEach((c) => identifiers(c, out));
      return;
    case 'template':
    case 'action':
      identifiers(n.pipe, out);
      return;
    case 'if':
    case 'with':
    case 'range':
      identifiers(n.pipe, out);
      identifiers(n.list, out);
      identifiers(n.elseList, out);
      return;
    case 'pipe':
      n.cmds.forEach((c) => c.args.forEach((a) => identifiers(a, out)));
      return;
    case 'field':
    case 'variable':
      out.push(...n.idents);
  }
}

/** A node the deletion walk of `GoTemplate.withoutNodes` visits. */
export type WalkedNode = TemplateNode | PipeNode | ArgNode;

/** A parsed Go text/template (named ""), with its `define`d and `block` templates. */
export class GoTemplate {
  private readonly root: ListNode;
  private readonly defs: Map<string, ListNode>;

  /** Throws GoTemplateError when `source` does not parse. */
  constructor(readonly source: string) {
    const parser = new Parser(lex(source));
    this.root = parser.parse();
    this.defs = parser.defs;
    this.defs.set('', this.root);
  }

  /** A template of this one's source and definitions with another root list. */
  private withRoot(root: ListNode): GoTemplate {
    const t = Object.create(GoTemplate.prototype) as GoTemplate;
    return Object.assign(t, { source: this.source, root, defs: new Map([...this.defs, ['', root]]) });
  }

  /** The template executed with `data` as dot and `$`. */
  execute(data: unknown): string {
    const state = new State(this.source, this.defs);
    state.vars = [{ name: '$', value: data }];
    try {
      state.walk(data, this.root);
    } catch (e) {
      if (e instanceof GoTemplateError) throw e;
      if (e instanceof RangeError) throw new GoTemplateError(`template: : ${e.message}`);
      throw e;
    }
    return state.out.join('');
  }

  /** Ollama's Vars(): every field and variable identifier of the tree, lower-cased, sorted, unique. */
  vars(): string[] {
    const out: string[] = [];
    for (const list of new Set([this.root, ...this.defs.values()])) identifiers(list, out);
    return [...new Set(out.map((s) => s.toLowerCase()))].sort(compareStrings);
  }

  /** A copy with `{{ .name }}` appended to the root list. */
  withAppendedField(name: string): GoTemplate {
    const root = structuredClone(this.root);
    const pos = this.source.length;
    const field: ArgNode = { kind: 'field', pos, idents: [name] };
    root.nodes.push({ kind: 'action', pos, pipe: { kind: 'pipe', pos, isAssign: false, decl: [], cmds: [{ kind: 'command', pos, args: [field] }] } });
    return this.withRoot(root);
  }

  /**
   * A copy of the root list with the nodes `drop` picks deleted, walked as Ollama's deleteNode:
   * lists' children, if/with/range's lists (not their pipelines), actions' pipelines and commands'
   * arguments; an action whose pipeline loses a command's every argument goes too.
   */
  withoutNodes(drop: (n: WalkedNode) => boolean): GoTemplate {
    const walk = (n: WalkedNode): WalkedNode | undefined => {
      if (drop(n)) return undefined;
      switch (n.kind) {
        case 'list':
          n.nodes = n.nodes.map((c) => walk(c) as TemplateNode | undefined).filter((c): c is TemplateNode => c !== undefined);
          return n;
        case 'if':
        case 'with':
        case 'range':
          n.list = (walk(n.list) as ListNode | undefined) ?? { kind: 'list', pos: n.list.pos, nodes: [] };
          if (n.elseList) n.elseList = walk(n.elseList) as ListNode | undefined;
          return n;
        case 'action': {
          const pipe = walk(n.pipe) as PipeNode | undefined;
          if (!pipe) return undefined;
          n.pipe = pipe;
          return n;
        }
        case 'pipe':
          for (const c of n.cmds) {
            c.args = c.args.map(walk).filter((a): a is ArgNode => a !== undefined) as ArgNode[];
            if (c.args.length === 0) return undefined;
          }
          return n.cmds.length === 0 ? undefined : n;
      }
      return n;
    };
    const root = (walk(structuredClone(this.root)) as ListNode | undefined) ?? { kind: 'list', pos: 0, nodes: [] };
    return this.withRoot(root);
  }
}
