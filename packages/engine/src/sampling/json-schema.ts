import { EngineError } from '../errors';
import { parseGbnf, type GbnfGrammar } from './gbnf';
import { regexToGbnf } from './regex-gbnf';

/**
 * A JSON Schema compiled into the grammar `JsonRecognizer` runs (OpenAI's
 * `response_format: {type: "json_schema"}`; `{type: "object"}` alone is `json_object`).
 *
 * Supported: `type` (one or a list), `properties`/`required` (keys come in the schema's order,
 * optional ones may be left out, no other keys are generated, as llama.cpp's json-schema-to-grammar
 * and OpenAI's strict mode do), `additionalProperties` as the value schema of an object without
 * `properties`, `items`/`minItems`/`maxItems`, tuples (`prefixItems` then `items`, or drafts 4-7's
 * `items` array then `additionalItems`), `minLength`/`maxLength`, `enum`/`const` (any JSON values, written compactly),
 * `anyOf`/`oneOf` whose alternatives start differently (string or null, object or array...),
 * `allOf` of one schema, `nullable`, local `$ref` (`#/$defs/...`, recursion included), a string's
 * `pattern` (a regular expression, `regex-gbnf.ts`: a match anywhere unless anchored, on the
 * string's characters with escapes decoded), a number's or integer's `minimum`/`maximum`/
 * `exclusiveMinimum`/`exclusiveMaximum`/`multipleOf` (a bounded number is written without an
 * exponent), a string's
 * `format` when it is date, time, date-time, uuid, email, ipv4 or hostname (as those patterns,
 * unless a `pattern` is given). Keywords
 * that constrain values in ways not enforced here (`uniqueItems`, `not`...) are refused
 * with an error naming them, never ignored. Annotations (`title`, `description`, `default`, and
 * other `format`s, which JSON Schema makes annotations unless a validator opts in) are ignored.
 */

export type SchemaNode =
  | { kind: 'object'; props: { key: string; value: number; required: boolean }[]; free: boolean; values: number; keyTables: number[]; requiredFrom: boolean[] }
  /** `prefix`: the first elements' own nodes (prefixItems); `items` for the rest. */
  | { kind: 'array'; items: number; min: number; max: number; prefix?: number[] }
  /** Length bounds count characters (code points; an escape is one); `pattern`: JSON Schema's, as a grammar of characters. */
  | { kind: 'string'; min: number; max: number; pattern?: GbnfGrammar }
  /** `bounds`: minimum/maximum (exclusive ones open); a bounded number has no exponent. */
  | { kind: 'number'; integer: boolean; bounds?: NumberBounds }
  | { kind: 'literals'; table: number }
  | { kind: 'union'; first: Int32Array; alts: number[] };

/** A number's range: lo..hi, each end open (exclusive) or not; infinite ends for none. */
export interface NumberBounds {
  lo: number;
  hi: number;
  loOpen: boolean;
  hiOpen: boolean;
  /** multipleOf: the value is a whole number of these (0: any). */
  step: number;
}

/** Byte strings sorted bytewise, each with a payload (a property index for key tables). */
export interface LiteralTable {
  values: Uint8Array[];
  payload: Int32Array;
}

export interface JsonGrammar {
  nodes: SchemaNode[];
  tables: LiteralTable[];
  root: number;
}

/** Node ids every grammar has. */
export const ANY = 0;
const ANY_OBJECT = 1;
const ANY_ARRAY = 2;
const TRUE_FALSE_NULL = 3;
const STRING = 4;
const NUMBER = 5;

/** A string's UTF-8 bytes. */
export const enc = (s: string) => Uint8Array.from(Buffer.from(s, 'utf8'));
const DIGITS = '0123456789';

const REFUSED = [
  'patternProperties', 'propertyNames', 'minProperties', 'maxProperties', 'uniqueItems', 'contains', 'minContains', 'maxContains',
  'if', 'then', 'else', 'not', 'dependentRequired', 'dependentSchemas', 'unevaluatedProperties', 'unevaluatedItems',
  'contentEncoding', 'contentMediaType', '$dynamicRef',
];

const TIME = '([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])';
const DATE = '[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])';
const OCTET = '(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])';
const LABEL = '[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?';

/**
 * The `format`s held, as patterns (OpenAI's structured outputs hold them; llama.cpp's
 * json-schema-to-grammar holds date, time, date-time and uuid): RFC 3339's full-date, full-time
 * (with Z or an offset) and date-time. Other formats stay annotations.
 */
const FORMATS: Record<string, string> = {
  date: `^${DATE}$`,
  time: `^${TIME}$`,
  'date-time': `^${DATE}T${TIME}$`,
  uuid: '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$',
  email: `^[A-Za-z0-9._%+-]+@${LABEL}(\\.${LABEL})+$`,
  ipv4: `^(${OCTET}\\.){3}${OCTET}$`,
  hostname: `^${LABEL}(\\.${LABEL})*$`,
};

/** The smallest multiple of `step` at or above `lo` (above, when `open`), with a tolerance for decimal steps. */
export function firstMultiple(lo: number, open: boolean, step: number): number {
  const eps = 1e-9 * Math.max(1, Math.abs(lo));
  const k = Math.ceil(lo / step - 1e-9);
  const m = k * step;
  return open && Math.abs(m - lo) <= eps ? (k + 1) * step : m;
}

/** Whether v is a whole number of `step`s (within decimal rounding). */
export function isMultiple(v: number, step: number): boolean {
  if (Number.isInteger(step) && Number.isInteger(v)) return v % step === 0;
  const q = v / step;
  return Math.abs(q - Math.round(q)) <= 1e-6;
}

/** Bytewise order (a prefix first). */
export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

class Compiler {
  readonly nodes: (SchemaNode | { kind: 'pending'; schema: unknown })[] = [];
  readonly tables: LiteralTable[] = [];
  private readonly refs = new Map<string, number>();

  constructor(
    private readonly rootSchema: unknown,
    /** Widen instead of refusing: keywords not enforced are ignored, ambiguous alternatives allow any value. */
    private readonly widen = false,
  ) {
    const first = new Int32Array(256).fill(-1);
    this.nodes.push({ kind: 'union', first, alts: [] }); // ANY
    this.nodes.push(this.objectNode([], ANY, true)); // ANY_OBJECT
    this.nodes.push({ kind: 'array', items: ANY, min: 0, max: Infinity }); // ANY_ARRAY
    this.nodes.push({ kind: 'literals', table: this.table(['false', 'null', 'true'].map(enc)) }); // TRUE_FALSE_NULL
    this.nodes.push({ kind: 'string', min: 0, max: Infinity }); // STRING
    this.nodes.push({ kind: 'number', integer: false }); // NUMBER
    first[0x7b] = ANY_OBJECT;
    first[0x5b] = ANY_ARRAY;
    first[0x22] = STRING;
    for (const c of '-' + DIGITS) first[c.charCodeAt(0)] = NUMBER;
    for (const c of 'tfn') first[c.charCodeAt(0)] = TRUE_FALSE_NULL;
  }

  private add(n: SchemaNode): number {
    this.nodes.push(n);
    return this.nodes.length - 1;
  }

  private table(values: Uint8Array[], payload?: number[]): number {
    const order = values.map((_, i) => i).sort((a, b) => compareBytes(values[a], values[b]));
    this.tables.push({ values: order.map((i) => values[i]), payload: Int32Array.from(order, (i) => payload?.[i] ?? i) });
    return this.tables.length - 1;
  }

  private objectNode(props: { key: string; value: number; required: boolean }[], values: number, free: boolean): SchemaNode {
    const keyTables: number[] = [];
    const requiredFrom: boolean[] = [];
    for (let pos = 0; pos <= props.length; pos++) {
      // The keys that may come next: every later one up to and including the next required one.
      const idx: number[] = [];
      for (let j = pos; j < props.length; j++) {
        idx.push(j);
        if (props[j].required) break;
      }
      keyTables.push(this.table(idx.map((j) => enc(JSON.stringify(props[j].key))), idx));
      requiredFrom.push(props.slice(pos).some((p) => p.required));
    }
    return { kind: 'object', props, free, values, keyTables, requiredFrom };
  }

  private fail(path: string, msg: string): never {
    throw new EngineError('KAIL_E_INVALID_ARG', `json_schema at ${path || '/'}: ${msg}`);
  }

  compile(s: unknown, path: string): number {
    if (s === true) return ANY;
    if (s === false) this.fail(path, 'the schema false admits no value');
    if (s === null || typeof s !== 'object' || Array.isArray(s)) this.fail(path, `a schema must be an object or a boolean, got ${JSON.stringify(s)}`);
    const o = s as Record<string, unknown>;
    if (!this.widen) for (const k of REFUSED) if (k in o) this.fail(path, `'${k}' is not supported (the output could not be held to it)`);
    if (o.nullable === true) {
      const { nullable: _, ...rest } = o;
      return this.union([this.compile(rest, path), this.literals([null], path)], path);
    }
    if (typeof o.$ref === 'string') return this.ref(o.$ref, path);
    if ('$ref' in o) this.fail(`${path}/$ref`, 'must be a string');
    if ('const' in o) return this.literals([o.const], path);
    if ('enum' in o) {
      if (!Array.isArray(o.enum) || o.enum.length === 0) this.fail(`${path}/enum`, 'must be a non-empty array');
      return this.literals(o.enum as unknown[], path);
    }
    for (const k of ['anyOf', 'oneOf'] as const) {
      if (k in o) {
        const alts = o[k];
        if (!Array.isArray(alts) || alts.length === 0) this.fail(`${path}/${k}`, 'must be a non-empty array');
        const { [k]: _, ...rest } = o;
        const base = Object.keys(rest).some((x) => ['type', 'properties', 'items', 'required'].includes(x)) ? rest : null;
        if (base && this.widen) return ANY;
        if (base) this.fail(path, `'${k}' next to 'type', 'properties' or 'items' is not supported; put them inside each alternative`);
        return this.union(alts.map((a, i) => this.compile(a, `${path}/${k}/${i}`)), path);
      }
    }
    if ('allOf' in o) {
      const all = o.allOf;
      if (Array.isArray(all) && all.length > 1 && this.widen) return ANY;
      if (!Array.isArray(all) || all.length !== 1) this.fail(`${path}/allOf`, 'only an allOf of exactly one schema is supported');
      return this.compile(all[0], `${path}/allOf/0`);
    }
    let types: unknown = o.type;
    if (types === undefined) {
      if ('properties' in o || 'additionalProperties' in o || 'required' in o) types = 'object';
      else if ('items' in o || 'prefixItems' in o || 'minItems' in o || 'maxItems' in o) types = 'array';
      else return ANY;
    }
    if (Array.isArray(types)) {
      if (types.length === 0) this.fail(`${path}/type`, 'must not be empty');
      return this.union(types.map((t) => this.typed(t, o, path)), path);
    }
    return this.typed(types, o, path);
  }

  private typed(t: unknown, o: Record<string, unknown>, path: string): number {
    switch (t) {
      case 'string': {
        if (o.minLength === undefined && o.maxLength === undefined && o.pattern === undefined && !(typeof o.format === 'string' && o.format in FORMATS)) return STRING;
        const min = this.count(o.minLength, 0, `${path}/minLength`);
        const max = o.maxLength === undefined ? Infinity : this.count(o.maxLength, 0, `${path}/maxLength`);
        if (max < min) this.fail(path, `maxLength ${max} is below minLength ${min}`);
        const format = o.pattern === undefined && typeof o.format === 'string' ? FORMATS[o.format] : undefined;
        return this.add({ kind: 'string', min, max, pattern: this.pattern(o.pattern ?? format, `${path}/${o.pattern === undefined ? 'format' : 'pattern'}`) });
      }
      case 'number':
      case 'integer': {
        const integer = t === 'integer';
        const bounds = this.bounds(o, integer, path);
        return !integer && !bounds ? NUMBER : this.add({ kind: 'number', integer, bounds });
      }
      case 'boolean':
        return this.literals([false, true], path);
      case 'null':
        return this.literals([null], path);
      case 'array': {
        // Tuples: prefixItems then items (draft 2020-12), or an items array then additionalItems (drafts 4-7).
        const tuple = Array.isArray(o.items) ? { list: o.items as unknown[], key: 'items', rest: o.additionalItems, restKey: 'additionalItems' } : o.prefixItems !== undefined ? { list: o.prefixItems, key: 'prefixItems', rest: o.items, restKey: 'items' } : null;
        let prefix: number[] | undefined;
        if (tuple) {
          if (!Array.isArray(tuple.list) || tuple.list.length === 0) this.fail(`${path}/${tuple.key}`, 'must be a non-empty array of schemas');
          prefix = tuple.list.map((x, i) => this.compile(x, `${path}/${tuple.key}/${i}`));
        } else if (o.items === false) this.fail(`${path}/items`, 'items false without prefixItems admits only the empty array: use maxItems 0');
        const rest = tuple ? tuple.rest : o.items;
        // After the tuple's elements, false allows no more.
        const items = rest === undefined || rest === false ? ANY : this.compile(rest, `${path}/${tuple ? tuple.restKey : 'items'}`);
        const min = this.count(o.minItems, 0, `${path}/minItems`);
        const max = o.maxItems === undefined ? Infinity : this.count(o.maxItems, 0, `${path}/maxItems`);
        if (max < min) this.fail(path, `maxItems ${max} is below minItems ${min}`);
        const cap = tuple && rest === false ? Math.min(max, prefix!.length) : max;
        if (cap < min) this.fail(path, `minItems ${min} is more than the ${cap} elements items: false leaves`);
        return this.add({ kind: 'array', items, min, max: cap, prefix });
      }
      case 'object': {
        const props = o.properties ?? {};
        if (props === null || typeof props !== 'object' || Array.isArray(props)) this.fail(`${path}/properties`, 'must be an object');
        const required = o.required ?? [];
        if (!Array.isArray(required) || required.some((r) => typeof r !== 'string')) this.fail(`${path}/required`, 'must be an array of property names');
        const names = Object.keys(props as object);
        for (const r of required as string[]) if (!names.includes(r)) names.push(r);
        if (names.length === 0) {
          const ap = o.additionalProperties;
          if (ap === false) return this.add(this.objectNode([], ANY, false));
          const values = ap === undefined || ap === true ? ANY : this.compile(ap, `${path}/additionalProperties`);
          return values === ANY ? ANY_OBJECT : this.add(this.objectNode([], values, true));
        }
        const list = names.map((key) => ({
          key,
          value: key in (props as object) ? this.compile((props as Record<string, unknown>)[key], `${path}/properties/${key}`) : ANY,
          required: (required as string[]).includes(key),
        }));
        return this.add(this.objectNode(list, ANY, false));
      }
      default:
        this.fail(`${path}/type`, `unknown type ${JSON.stringify(t)}`);
    }
  }

  /** A string's `pattern` (a match anywhere, unless anchored) as a grammar; with `widen`, a pattern no grammar can hold is ignored. */
  private pattern(p: unknown, path: string): GbnfGrammar | undefined {
    if (p === undefined) return undefined;
    if (typeof p !== 'string') return this.fail(path, 'must be a string (a regular expression)');
    try {
      return parseGbnf(regexToGbnf(p, { search: true }));
    } catch (e) {
      if (this.widen) return undefined;
      return this.fail(path, (e as Error).message);
    }
  }

  /**
   * minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers, or draft 4's booleans that
   * make minimum / maximum exclusive). An integer's become closed integer bounds. Undefined when
   * there are none.
   */
  private bounds(o: Record<string, unknown>, integer: boolean, path: string): NumberBounds | undefined {
    const num = (k: string) => {
      const v = o[k];
      if (v === undefined || typeof v === 'boolean') return undefined;
      if (typeof v !== 'number' || !Number.isFinite(v)) return this.fail(`${path}/${k}`, `must be a number, got ${JSON.stringify(v)}`);
      return v;
    };
    const min = num('minimum');
    const max = num('maximum');
    const xmin = num('exclusiveMinimum');
    const xmax = num('exclusiveMaximum');
    const step = o.multipleOf;
    if (step !== undefined && (typeof step !== 'number' || !Number.isFinite(step) || step <= 0)) return this.fail(`${path}/multipleOf`, `must be a number above 0, got ${JSON.stringify(step)}`);
    if (min === undefined && max === undefined && xmin === undefined && xmax === undefined && step === undefined) return undefined;
    const b: NumberBounds = { lo: -Infinity, hi: Infinity, loOpen: false, hiOpen: false, step: step ?? 0 };
    const lower = (v: number, open: boolean) => {
      if (v > b.lo || (v === b.lo && open)) Object.assign(b, { lo: v, loOpen: open });
    };
    const upper = (v: number, open: boolean) => {
      if (v < b.hi || (v === b.hi && open)) Object.assign(b, { hi: v, hiOpen: open });
    };
    if (min !== undefined) lower(min, o.exclusiveMinimum === true);
    if (max !== undefined) upper(max, o.exclusiveMaximum === true);
    if (xmin !== undefined) lower(xmin, true);
    if (xmax !== undefined) upper(xmax, true);
    if (integer) {
      b.lo = b.loOpen ? Math.floor(b.lo) + 1 : Math.ceil(b.lo);
      b.hi = b.hiOpen ? Math.ceil(b.hi) - 1 : Math.floor(b.hi);
      b.loOpen = b.hiOpen = false;
    }
    if (b.lo > b.hi || (b.lo === b.hi && (b.loOpen || b.hiOpen))) this.fail(path, `no ${integer ? 'integer' : 'number'} is within its minimum and maximum`);
    if (b.step && Number.isFinite(b.lo) && Number.isFinite(b.hi) && firstMultiple(b.lo, b.loOpen, b.step) > b.hi + 1e-9 * Math.max(1, Math.abs(b.hi)))
      this.fail(path, `no multiple of ${b.step} is within its minimum and maximum`);
    return b;
  }

  private count(v: unknown, min: number, path: string): number {
    if (typeof v === 'number' && Number.isInteger(v) && v >= min) return v;
    if (v === undefined) return min;
    return this.fail(path, `must be an integer ≥ ${min}, got ${JSON.stringify(v)}`);
  }

  private literals(values: unknown[], path: string): number {
    const texts = values.map((v) => JSON.stringify(v));
    if (texts.some((t) => t === undefined)) this.fail(path, 'enum and const values must be JSON values');
    if (new Set(texts).size !== texts.length) this.fail(path, 'enum values must be distinct');
    return this.add({ kind: 'literals', table: this.table(texts.map(enc)) });
  }

  private ref(ref: string, path: string): number {
    const known = this.refs.get(ref);
    if (known !== undefined) return known;
    if (!ref.startsWith('#') && this.widen) return ANY;
    if (!ref.startsWith('#')) this.fail(path, `only local references (#/...) are supported, got ${JSON.stringify(ref)}`);
    let target: unknown = this.rootSchema;
    for (const raw of ref.slice(1).split('/').filter((p) => p.length > 0)) {
      const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
      if (target === null || typeof target !== 'object' || !(key in (target as object))) this.fail(path, `the reference ${JSON.stringify(ref)} leads nowhere`);
      target = (target as Record<string, unknown>)[key];
    }
    // A placeholder first, so a schema that refers to itself (a tree, a list) compiles.
    const id = this.nodes.length;
    this.nodes.push({ kind: 'pending', schema: target });
    this.refs.set(ref, id);
    const inner = this.compile(target, ref);
    this.nodes[id] = this.nodes[inner];
    return id;
  }

  /** The bytes a value of node n may start with. */
  private firstBytes(n: number, seen = new Set<unknown>()): Set<number> {
    const node = this.nodes[n];
    const out = new Set<number>();
    const chars = (s: string) => {
      for (const c of s) out.add(c.charCodeAt(0));
    };
    switch (node.kind) {
      case 'object':
        chars('{');
        break;
      case 'array':
        chars('[');
        break;
      case 'string':
        chars('"');
        break;
      case 'number':
        chars('-' + DIGITS);
        break;
      case 'literals':
        for (const v of this.tables[node.table].values) out.add(v[0]);
        break;
      case 'union':
        node.first.forEach((x, b) => x >= 0 && out.add(b));
        break;
      case 'pending':
        return this.schemaFirstBytes(node.schema, seen);
    }
    return out;
  }

  /** firstBytes of a schema still being compiled (a reference to itself inside a union). */
  private schemaFirstBytes(s: unknown, seen: Set<unknown>): Set<number> {
    const all = this.firstBytes(ANY);
    if (s === null || typeof s !== 'object' || seen.has(s)) return seen.has(s) ? new Set() : all;
    seen.add(s);
    const o = s as Record<string, unknown>;
    if (typeof o.$ref === 'string') {
      const id = this.refs.get(o.$ref);
      return id === undefined ? all : this.firstBytes(id, seen);
    }
    if ('const' in o) return new Set([JSON.stringify(o.const).charCodeAt(0)]);
    if (Array.isArray(o.enum)) return new Set(o.enum.map((v) => JSON.stringify(v).charCodeAt(0)));
    const alts = (o.anyOf ?? o.oneOf) as unknown[] | undefined;
    if (Array.isArray(alts)) return new Set(alts.flatMap((a) => [...this.schemaFirstBytes(a, seen)]));
    const types = Array.isArray(o.type) ? o.type : o.type !== undefined ? [o.type] : 'properties' in o ? ['object'] : 'items' in o ? ['array'] : null;
    if (!types) return all;
    const starts: Record<string, string> = { object: '{', array: '[', string: '"', number: '-' + DIGITS, integer: '-' + DIGITS, boolean: 'tf', null: 'n' };
    return new Set(types.flatMap((t) => [...(starts[t as string] ?? '')].map((c) => c.charCodeAt(0))));
  }

  private union(alternatives: number[], path: string): number {
    // Nested unions flatten (a nullable inside an anyOf with null).
    const alts = alternatives.flatMap((a) => {
      const n = this.nodes[a];
      return n.kind === 'union' && a !== ANY ? n.alts : [a];
    });
    if (alts.includes(ANY)) return ANY;
    if (alts.length === 1) return alts[0];
    // Literal alternatives (enum, const, boolean, null) merge into one table.
    const lits = alts.filter((a) => this.nodes[a].kind === 'literals');
    const rest = alts.filter((a) => this.nodes[a].kind !== 'literals');
    if (lits.length > 1) {
      const values = lits.flatMap((a) => this.tables[(this.nodes[a] as { table: number }).table].values.map((v) => JSON.parse(Buffer.from(v).toString('utf8'))));
      const uniq = [...new Map(values.map((v) => [JSON.stringify(v), v])).values()];
      rest.push(this.literals(uniq, path));
    } else rest.push(...lits);
    if (rest.length === 1) return rest[0];
    const first = new Int32Array(256).fill(-1);
    for (const a of rest) {
      for (const b of this.firstBytes(a)) {
        if (first[b] >= 0 && first[b] !== a) {
          if (this.widen) return ANY;
          this.fail(path, `alternatives that can both start with ${JSON.stringify(String.fromCharCode(b))} are not supported (only ones of different JSON types, e.g. a string or null)`);
        }
        first[b] = a;
      }
    }
    return this.add({ kind: 'union', first, alts: rest });
  }
}

let anyObject: JsonGrammar | undefined;

/** The grammar of one JSON object with any keys and values (`json_object`); built once (grammars are not changed by use). */
export function anyObjectGrammar(): JsonGrammar {
  if (!anyObject) {
    const c = new Compiler({});
    anyObject = { nodes: c.nodes as SchemaNode[], tables: c.tables, root: ANY_OBJECT };
  }
  return anyObject;
}

/** Compiles a schema of any JSON value (a tool parameter's), widened as compileJsonSchema's `widen`. */
export function compileJsonValueSchema(schema: unknown): JsonGrammar {
  const c = new Compiler(schema, true);
  const root = c.compile(schema, '');
  return { nodes: c.nodes as SchemaNode[], tables: c.tables, root };
}

/**
 * Compiles a schema whose values are objects (OpenAI requires an object at the top; `anyValue`
 * lifts that). With `widen`
 * (a tool's parameters, where the schema describes the function rather than a promise to the
 * caller) keywords not enforced here are ignored and ambiguous alternatives allow any value: the
 * output is held to a looser grammar instead of the request being refused.
 */
export function compileJsonSchema(schema: unknown, options: { widen?: boolean; anyValue?: boolean } = {}): JsonGrammar {
  const c = new Compiler(schema, options.widen ?? false);
  const root = c.compile(schema, '');
  const node = c.nodes[root];
  // (anyValue: any JSON value at the top, as llama-cli's --json-schema takes it.)
  if (options.anyValue) return { nodes: c.nodes as SchemaNode[], tables: c.tables, root };
  if (node.kind !== 'object' && root !== ANY) throw new EngineError('KAIL_E_INVALID_ARG', 'json_schema: the top-level schema must describe an object');
  return { nodes: c.nodes as SchemaNode[], tables: c.tables, root: root === ANY ? ANY_OBJECT : root };
}
