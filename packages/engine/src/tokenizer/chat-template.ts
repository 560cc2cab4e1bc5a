// Chat templates: the model's Jinja template (`tokenizer.chat_template`) rendered with
// @huggingface/jinja, with the variables llama.cpp's jinja path passes (messages, tools,
// add_generation_prompt, bos_token, eos_token, enable_thinking).

import fs from 'node:fs';
import { createHash } from 'node:crypto';
import type { Template as JinjaTemplate } from '@huggingface/jinja' with { 'resolution-mode': 'import' };

// The package is an ES module with a CommonJS build under its "require" export; this package is
// CommonJS, so it is loaded with require and typed from the ESM declarations.
const { Template, Environment, Interpreter } = require('@huggingface/jinja') as {
  Template: typeof JinjaTemplate;
  Environment: new () => { set(name: string, v: unknown): unknown };
  Interpreter: new () => { evaluate(node: unknown, env: unknown): unknown };
};

import { TokenizerError } from './errors';
import { OllamaTemplate } from './ollama-template';
import type { Tokenizer } from './tokenizer';

/** A runtime value of @huggingface/jinja, as far as the patches below touch one. */
interface JinjaValue {
  type: string;
  value: unknown;
  builtins: Map<string, unknown>;
}
type ValueClass<T = unknown> = new (value: T) => JinjaValue & { value: T };
/** An AST node, as far as the patches below touch one. */
interface JinjaNode {
  type: string;
  [key: string]: unknown;
}
type Evaluate<N = JinjaNode> = (this: JinjaInterpreter, node: N, env: unknown) => JinjaValue;
interface JinjaInterpreter {
  evaluate: Evaluate;
  evaluateBinaryExpression: Evaluate<JinjaNode & { operator: { value: string }; left: JinjaNode; right: JinjaNode }>;
  evaluateMemberExpression: Evaluate<JinjaNode & { object: JinjaNode; property: JinjaNode; computed: boolean }>;
  evaluateArguments(args: unknown, env: unknown): [JinjaValue[], Map<string, JinjaValue>];
  applyFilter(operand: JinjaValue, filter: JinjaNode, env: unknown): JinjaValue;
}

// The package's value classes, which it does not export: reached through values its Environment
// makes (a tuple through its interpreter).
const runtimeEnv = new Environment();
let runtimeVars = 0;
const classOf = <T>(v: T) => (runtimeEnv.set(`v${runtimeVars++}`, v) as { constructor: ValueClass<T> }).constructor;
const StringValue = classOf('');
const IntegerValue = classOf(1);
const FloatValue = classOf(0.5);
const BooleanValue = classOf(true);
const NullValue = classOf(null);
const UndefinedValue = classOf(undefined);
const FunctionValue = classOf<unknown>(() => undefined);
const ArrayValue = classOf<JinjaValue[]>([]);
const ObjectValue = classOf<Map<unknown, JinjaValue>>({} as Map<unknown, JinjaValue>);
const TupleValue = (new Interpreter().evaluate({ type: 'TupleLiteral', value: [] }, runtimeEnv) as { constructor: ValueClass }).constructor;

/**
 * Python's list.append and list.pop, which templates call (Kimi-K2's, to collect tool call ids)
 * and @huggingface/jinja 0.5 lacks ("Cannot call something that is not a function"): added to the
 * builtins of its array values. `length` is kept in step (the package caches it per array).
 */
function addListMethods(): void {
  const proto = ArrayValue.prototype;
  const desc = Object.getOwnPropertyDescriptor(proto, 'builtins');
  if (!desc?.get) return; // another version of the package: leave it alone
  const original = desc.get;
  Object.defineProperty(proto, 'builtins', {
    configurable: true,
    get(this: JinjaValue) {
      const map = original.call(this) as Map<string, unknown>;
      if (!map.has('append')) {
        const items = this.value as unknown[];
        const sync = () => map.set('length', new IntegerValue(items.length));
        map.set('append', new FunctionValue((args: unknown[]) => {
          if (args.length !== 1) throw new Error('append() takes exactly one argument');
          items.push(args[0]);
          sync();
          return new NullValue(null);
        }));
        map.set('pop', new FunctionValue((args: { value: unknown }[]) => {
          if (items.length === 0) throw new Error('pop from empty list');
          let i = args.length ? Number(args[0].value) : items.length - 1;
          if (i < 0) i += items.length;
          if (!Number.isInteger(i) || i < 0 || i >= items.length) throw new Error('pop index out of range');
          const [v] = items.splice(i, 1);
          sync();
          return v;
        }));
      }
      return map;
    },
  });
}
addListMethods();

const isNumber = (v: JinjaValue) => v instanceof IntegerValue || v instanceof FloatValue;
const isNothing = (v: JinjaValue) => v instanceof NullValue || v instanceof UndefinedValue;

/** A dict key as a template value: numbers stay numbers (Seed-OSS's template keys a dict by int). */
function keyValue(k: unknown): JinjaValue {
  if (typeof k !== 'number') return new StringValue(String(k));
  return Number.isInteger(k) ? new IntegerValue(k) : new FloatValue(k);
}

/**
 * Python's repr() as llama.cpp's Jinja (and minja before it) writes it: 'single-quoted' strings
 * with JSON escapes (JSON's double quotes when the string holds a '), True/False/None, [lists],
 * (tuples,) and {dicts}. Templates print tools and arguments with `|string` and expect this.
 */
function pyRepr(v: JinjaValue): string {
  if (v instanceof StringValue) {
    const json = JSON.stringify(v.value);
    if (v.value.includes("'")) return json;
    return `'${json.slice(1, -1).replace(/\\(.)/g, (m: string, c: string) => (c === '"' ? '"' : m))}'`;
  }
  if (v instanceof BooleanValue) return v.value ? 'True' : 'False';
  if (isNothing(v)) return 'None';
  if (v instanceof ArrayValue) {
    const items = v.value.map(pyRepr);
    return v instanceof TupleValue ? `(${items.join(', ')}${items.length === 1 ? ',' : ''})` : `[${items.join(', ')}]`;
  }
  if (v instanceof ObjectValue) return `{${[...v.value].map(([k, x]) => `${pyRepr(keyValue(k))}: ${pyRepr(x)}`).join(', ')}}`;
  return String(v); // numbers (FloatValue writes 1.0 as Python does), namespaces, functions
}

/** Python's str(): a string as it is, an undefined value as '' (Jinja's Undefined), the rest as repr(). */
const pyStr = (v: JinjaValue) => (v instanceof StringValue ? v.value : v instanceof UndefinedValue ? '' : pyRepr(v));

/** Python's ordering for sorts, min and max: numbers with numbers, strings with strings (casefolded unless caseSensitive). */
function pyCompare(a: JinjaValue, b: JinjaValue, caseSensitive: boolean): number {
  const num = (v: JinjaValue) => (v instanceof BooleanValue ? Number(v.value) : isNumber(v) ? (v.value as number) : undefined);
  let x: number | string | undefined = num(a);
  let y: number | string | undefined = num(b);
  if (x === undefined || y === undefined) {
    if (!(a instanceof StringValue && b instanceof StringValue)) throw new Error(`Cannot compare ${a.type} with ${b.type}`);
    [x, y] = caseSensitive ? [a.value, b.value] : [a.value.toLowerCase(), b.value.toLowerCase()];
  }
  return x < y ? -1 : x > y ? 1 : 0;
}

/** Positional and keyword arguments of a builtin call (the package passes keywords as a last KeywordArgumentsValue). */
function splitArgs(args: JinjaValue[]): [JinjaValue[], Map<string, JinjaValue>] {
  const last = args.at(-1);
  if (last?.type === 'KeywordArgumentsValue') return [args.slice(0, -1), last.value as Map<string, JinjaValue>];
  return [args, new Map()];
}

/** Python's str.format with {}, {0} and {name} fields (no format specs), {{ and }}; !r and !s conversions. */
function pyFormat(format: string, args: JinjaValue[]): string {
  const [positional, named] = splitArgs(args);
  let next = 0;
  return format.replace(/\{\{|\}\}|\{([^{}]*)\}/g, (m: string, field: string | undefined) => {
    if (field === undefined) return m[0];
    const [, name, conversion, spec] = /^([^!:]*)(?:!([rs]))?(?::(.*))?$/.exec(field) ?? [];
    if (name === undefined) throw new Error(`format(): bad field {${field}}`);
    if (spec) throw new Error(`format(): format spec '${spec}' is not supported`);
    const v = name === '' ? positional[next++] : /^\d+$/.test(name) ? positional[Number(name)] : named.get(name);
    if (v === undefined) throw new Error(`format(): no argument for {${field}}`);
    return conversion === 'r' ? pyRepr(v) : pyStr(v);
  });
}

/** Python's str.strip/lstrip/rstrip with their optional characters argument (the package ignores it). */
function pyStrip(s: string, chars: JinjaValue | undefined, start: boolean, end: boolean): string {
  if (chars === undefined || chars instanceof NullValue) return start && end ? s.trim() : start ? s.trimStart() : s.trimEnd();
  if (!(chars instanceof StringValue)) throw new Error('strip arg must be None or str');
  const set = new Set(chars.value);
  let i = 0;
  let j = s.length;
  while (start && i < j && set.has(s[i])) i++;
  while (end && j > i && set.has(s[j - 1])) j--;
  return s.slice(i, j);
}

/** What Python's Jinja gives for filters on an undefined value (str() of Undefined is '', it iterates as nothing). */
const UNDEFINED_FILTERS: Record<string, () => JinjaValue> = {};
for (const f of ['capitalize', 'lower', 'upper', 'title', 'trim', 'string', 'join', 'replace', 'indent', 'truncate', 'safe'])
  UNDEFINED_FILTERS[f] = () => new StringValue('');
for (const f of ['length', 'count', 'wordcount', 'sum']) UNDEFINED_FILTERS[f] = () => new IntegerValue(0);
for (const f of ['list', 'items', 'map', 'select', 'reject', 'selectattr', 'rejectattr', 'sort', 'reverse', 'unique', 'dictsort'])
  UNDEFINED_FILTERS[f] = () => new ArrayValue([]);
for (const f of ['first', 'last', 'min', 'max']) UNDEFINED_FILTERS[f] = () => new UndefinedValue(undefined);

/** A copy of `v` whose dict keys are all strings, as Python's json.dumps writes them ({1: x} -> {"1": x}); `v` itself when they are. */
function stringKeys(v: JinjaValue): JinjaValue {
  if (v instanceof ArrayValue) {
    const items = v.value.map(stringKeys);
    return items.every((x, i) => x === v.value[i]) ? v : new ArrayValue(items);
  }
  if (!(v instanceof ObjectValue)) return v;
  let changed = false;
  const out = new Map<unknown, JinjaValue>();
  for (const [k, x] of v.value) {
    const y = stringKeys(x);
    if (typeof k !== 'string' || y !== x) changed = true;
    out.set(String(k), y);
  }
  return changed ? new ObjectValue(out) : v;
}

const HELD = '__kail_held_value';
/** An AST node standing for an already evaluated value, to hand evaluated operands to the package's own code. */
const held = (value: JinjaValue): JinjaNode => ({ type: HELD, value });

/**
 * Python-Jinja semantics that @huggingface/jinja 0.5 lacks and real templates use, patched into its
 * interpreter and value classes (llama.cpp's Jinja engine is the reference where Python and it differ):
 * - printing a list, dict or bool (`{{ }}`, `|string`, `~`, `+` with a string) writes Python's repr
 *   (Apriel's and Functionary's `tool|string`), not JSON;
 * - none or undefined beside a string in `+`/`~` is '' (llama.cpp's workaround; firefunction adds an
 *   undefined `functions`), and filters on an undefined value act as Python's (`x.description|trim`);
 * - dicts keyed by numbers (Seed-OSS), tuples unpacked in loops (Functionary's `for a, b in [(x, y)]`),
 *   `|min`/`|max` (MiniCPM5), str.format (Hunyuan), str.rsplit/find/count, strip with characters.
 */
function addPythonSemantics(): void {
  const proto = Interpreter.prototype as unknown as JinjaInterpreter;
  if (typeof proto.applyFilter !== 'function' || typeof proto.evaluateBinaryExpression !== 'function') return;

  for (const C of [ArrayValue, ObjectValue, BooleanValue]) C.prototype.toString = function (this: JinjaValue) {
    return pyRepr(this);
  };

  const { evaluate, evaluateBinaryExpression, evaluateMemberExpression, applyFilter } = proto;
  proto.evaluate = function (node, env) {
    switch (node?.type) {
      case HELD:
        return node.value as JinjaValue;
      case 'ObjectLiteral': {
        const map = new Map<unknown, JinjaValue>();
        for (const [k, v] of node.value as [JinjaNode, JinjaNode][]) {
          const key = this.evaluate(k, env);
          if (!(key instanceof StringValue || isNumber(key))) throw new Error(`Object keys must be strings or numbers: got ${key.type}`);
          map.set(key.value, this.evaluate(v, env));
        }
        return new ObjectValue(map);
      }
      case 'TupleLiteral': {
        // the package unpacks (and serializes) only values typed as arrays; it stays a TupleValue for repr
        const tuple = evaluate.call(this, node, env);
        tuple.type = 'ArrayValue';
        return tuple;
      }
    }
    return evaluate.call(this, node, env);
  };

  proto.evaluateBinaryExpression = function (node, env) {
    const op = node.operator.value;
    if (op === 'and' || op === 'or') return evaluateBinaryExpression.call(this, node, env);
    const left = this.evaluate(node.left, env);
    const right = this.evaluate(node.right, env);
    if (op === '+' || op === '~') {
      if ((isNothing(left) && right instanceof StringValue) || (left instanceof StringValue && isNothing(right)))
        return new StringValue(isNothing(left) ? (right.value as string) : (left.value as string));
      if (op === '~' || left instanceof StringValue || right instanceof StringValue) return new StringValue(pyStr(left) + pyStr(right));
    }
    if ((op === 'in' || op === 'not in') && right instanceof ObjectValue && isNumber(left))
      return new BooleanValue(right.value.has(left.value) === (op === 'in'));
    return evaluateBinaryExpression.call(this, { ...node, left: held(left), right: held(right) }, env);
  };

  proto.evaluateMemberExpression = function (node, env) {
    if (!node.computed || node.property.type === 'SliceExpression') return evaluateMemberExpression.call(this, node, env);
    const object = this.evaluate(node.object, env);
    const property = this.evaluate(node.property, env);
    if (object instanceof ObjectValue && isNumber(property)) return object.value.get(property.value) ?? new UndefinedValue(undefined);
    return evaluateMemberExpression.call(this, { ...node, object: held(object), property: held(property) }, env);
  };

  proto.applyFilter = function (operand, filter, env) {
    const call = filter.type === 'CallExpression' ? (filter as JinjaNode & { callee: JinjaNode; args: unknown }) : undefined;
    const name = call ? (call.callee.type === 'Identifier' ? call.callee.value : undefined) : filter.value;
    if (typeof name !== 'string') return applyFilter.call(this, operand, filter, env);
    if (operand instanceof UndefinedValue && (Object.hasOwn(UNDEFINED_FILTERS, name) || (name === 'default' && !call)))
      return name === 'default' ? new StringValue('') : UNDEFINED_FILTERS[name]();
    const args = () => (call ? this.evaluateArguments(call.args, env) : [[], new Map<string, JinjaValue>()] as const);
    switch (name) {
      case 'string':
        return operand instanceof StringValue ? operand : new StringValue(pyStr(operand));
      case 'tojson':
        return applyFilter.call(this, stringKeys(operand), filter, env);
      case 'items':
        if (operand instanceof ObjectValue && !call) return (operand as unknown as { items(): JinjaValue }).items();
        break;
      case 'min':
      case 'max':
        if (operand instanceof ArrayValue) {
          const [pos, kw] = args();
          const caseSensitive = (pos[0] ?? kw.get('case_sensitive'))?.value === true;
          const attribute = pos[1] ?? kw.get('attribute');
          const key = (x: JinjaValue): JinjaValue => {
            if (!(attribute instanceof StringValue)) return x;
            let v = x;
            for (const part of attribute.value.split('.')) v = (v instanceof ObjectValue ? v.value.get(part) : undefined) ?? new UndefinedValue(undefined);
            return v;
          };
          let best: JinjaValue | undefined;
          for (const x of operand.value) {
            const c = best === undefined ? 0 : pyCompare(key(x), key(best), caseSensitive);
            if (best === undefined || (name === 'min' ? c < 0 : c > 0)) best = x;
          }
          return best ?? new UndefinedValue(undefined);
        }
        break;
    }
    return applyFilter.call(this, operand, filter, env);
  };

  // dicts: keys that are numbers come back as numbers; get() takes them; dictsort sorts them as numbers
  const objectProto = ObjectValue.prototype as unknown as { items(): JinjaValue; keys(): JinjaValue };
  objectProto.items = function (this: JinjaValue & { value: Map<unknown, JinjaValue> }) {
    return new ArrayValue([...this.value].map(([k, v]) => new ArrayValue([keyValue(k), v])));
  };
  objectProto.keys = function (this: JinjaValue & { value: Map<unknown, JinjaValue> }) {
    return new ArrayValue([...this.value.keys()].map(keyValue));
  };
  extendBuiltins(ObjectValue, 'dictsort', (self) => ({
    get(args: JinjaValue[]) {
      const [key, fallback] = args;
      if (!(key instanceof StringValue || isNumber(key))) throw new Error(`Object key must be a string or number: got ${key?.type}`);
      return self.value.get(key.value) ?? fallback ?? new NullValue(null);
    },
    dictsort(args: JinjaValue[]) {
      const [pos, kw] = splitArgs(args);
      const caseSensitive = (pos[0] ?? kw.get('case_sensitive'))?.value === true;
      const by = (pos[1] ?? kw.get('by'))?.value ?? 'key';
      const reverse = (pos[2] ?? kw.get('reverse'))?.value === true;
      if (by !== 'key' && by !== 'value') throw new Error("by must be either 'key' or 'value'");
      const i = by === 'key' ? 0 : 1;
      const items = [...self.value].map(([k, v]) => [keyValue(k), v]);
      items.sort((a, b) => pyCompare(a[i], b[i], caseSensitive) * (reverse ? -1 : 1));
      return new ArrayValue(items.map((p) => new ArrayValue(p)));
    },
  }));

  extendBuiltins(StringValue, 'format', (self) => ({
    format: (args: JinjaValue[]) => new StringValue(pyFormat(self.value, args)),
    strip: (args: JinjaValue[]) => new StringValue(pyStrip(self.value, args[0], true, true)),
    lstrip: (args: JinjaValue[]) => new StringValue(pyStrip(self.value, args[0], true, false)),
    rstrip: (args: JinjaValue[]) => new StringValue(pyStrip(self.value, args[0], false, true)),
    rsplit(args: JinjaValue[]) {
      const [pos, kw] = splitArgs(args);
      const sep = pos[0] ?? kw.get('sep');
      const max = Number((pos[1] ?? kw.get('maxsplit'))?.value ?? -1);
      if (sep instanceof StringValue) {
        if (sep.value === '') throw new Error('empty separator');
        const parts = self.value.split(sep.value);
        const keep = max >= 0 && parts.length > max + 1 ? parts.length - max : 1;
        return new ArrayValue([parts.slice(0, keep).join(sep.value), ...parts.slice(keep)].map((p) => new StringValue(p)));
      }
      if (sep !== undefined && !(sep instanceof NullValue)) throw new Error('rsplit() separator must be a string or None');
      // on whitespace: the leftmost part keeps its leading whitespace when maxsplit cuts
      const words = [...self.value.matchAll(/\S+/g)];
      if (max < 0 || max >= words.length) return new ArrayValue(words.map((w) => new StringValue(w[0])));
      const keep = words.length - max;
      const head = self.value.slice(0, words[keep - 1].index + words[keep - 1][0].length);
      return new ArrayValue([head, ...words.slice(keep).map((w) => w[0])].map((p) => new StringValue(p)));
    },
    find: (args: JinjaValue[]) => new IntegerValue(self.value.indexOf(pyStr(args[0]), (args[1]?.value as number | undefined) ?? 0)),
    count(args: JinjaValue[]) {
      const sub = pyStr(args[0]);
      return new IntegerValue(sub === '' ? self.value.length + 1 : self.value.split(sub).length - 1);
    },
  }));
}

/** Adds (or replaces) methods in the cached builtins of a value class, once per value; `marker` tells a patched map. */
function extendBuiltins<V>(C: ValueClass<V>, marker: string, methods: (self: JinjaValue & { value: V }) => Record<string, (args: JinjaValue[]) => JinjaValue>): void {
  const desc = Object.getOwnPropertyDescriptor(C.prototype, 'builtins');
  if (!desc?.get) return;
  const original = desc.get;
  Object.defineProperty(C.prototype, 'builtins', {
    configurable: true,
    get(this: JinjaValue & { value: V }) {
      const map = original.call(this) as Map<string, unknown>;
      if (!(map.get(marker) as { kail?: boolean } | undefined)?.kail) {
        for (const [name, fn] of Object.entries(methods(this))) map.set(name, Object.assign(new FunctionValue(fn), { kail: true }));
      }
      return map;
    },
  });
}
addPythonSemantics();

/** One chat message; fields other than role and content (tool_calls, name, …) reach the template as they are. */
export interface ChatMessage {
  role: string;
  content?: string | null | readonly unknown[];
  [key: string]: unknown;
}

export interface ChatTemplateRenderOptions {
  /** End with the opening of an assistant turn, for generation. Default: true. */
  addGenerationPrompt?: boolean;
  /** Tool definitions (OpenAI function format), passed as `tools` when given. */
  tools?: readonly unknown[];
  /** Passed as `enable_thinking`, as llama.cpp does (Qwen3 and others read it). Default: true. */
  enableThinking?: boolean;
  /** More template variables; they override the ones above. */
  variables?: Record<string, unknown>;
}

export interface ChatTemplateTokens {
  /** Text of the BOS token, the template's `bos_token`. Default: ''. */
  bosToken?: string;
  /** Text of the EOS token, the template's `eos_token`. Default: ''. */
  eosToken?: string;
  /**
   * The tokenizer adds BOS itself (`tokenizer.ggml.add_bos_token`): a BOS the template writes first
   * is removed, so it is not there twice. Default: false.
   */
  addBos?: boolean;
  /** Likewise for a trailing EOS. Default: false. */
  addEos?: boolean;
}

/**
 * The template used when a model has none (or names "chatml"): ChatML, as llama.cpp's
 * CHATML_TEMPLATE_SRC. Renders `<|im_start|>{role}\n{content}<|im_end|>\n` per message and
 * `<|im_start|>assistant\n` as the generation prompt.
 */
export const CHATML_TEMPLATE =
  "{%- for message in messages -%}\n" +
  "  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n" +
  '{%- endfor -%}\n' +
  '{%- if add_generation_prompt -%}\n' +
  "  {{- '<|im_start|>assistant\\n' -}}\n" +
  '{%- endif -%}';

/** What a template does with its input, found by trial renders (llama.cpp's jinja caps). */
export interface ChatTemplateCaps {
  /** Renders the content of a leading system message. */
  systemRole: boolean;
  /** Renders string message content. */
  stringContent: boolean;
  /** Renders content given as parts ([{type: 'text', text}]). */
  typedContent: boolean;
  /** Shows the `tools` it is given to the model. */
  tools: boolean;
  /**
   * Fails on a chat without `tools` (loops over it unguarded: Python's Jinja loops over an undefined
   * value as over nothing, this one throws), so `tools` is passed as [] when there are none.
   */
  needsTools: boolean;
  /**
   * Fails on a tool-calling turn whose content is null (Qwen3's, Granite's), so '' is passed
   * instead (llama.cpp's requires_non_null_content); others (DeepSeek R1's) need the null.
   */
  nonNullContent: boolean;
  /**
   * Rejects tool call ids that are not 9 alphanumeric characters (Mistral's templates raise on
   * OpenAI's `call_…` ids), so ids are passed as such ids, derived from the id (see shortToolCallId).
   */
  shortToolCallIds: boolean;
  /**
   * Prints a call's arguments as they are instead of reading or serializing them (DeepSeek-R1's
   * distills): they are passed as the JSON text OpenAI sends, not as the object other templates
   * need (llama.cpp's supports_object_arguments, the other way round).
   */
  stringArguments: boolean;
}

// Digits only, so they survive the case changes and trimming templates apply to content.
const MARKER = '80417395526184';
const MARKER_2 = '36290158473621';

// llama.cpp patches two known templates so they render (common_chat_templates_init): gpt-oss's
// check that rejects its own channel markup, and Mistral's rejection of tool-call turns without content.
const TEMPLATE_PATCHES: [when: string[], from: string, to: string][] = [
  [
    ['<|channel|>', 'in message.content or'],
    '{%- if "<|channel|>analysis<|message|>" in message.content or "<|channel|>final<|message|>" in message.content %}',
    '{%- if false %}',
  ],
  [
    ['[TOOL_CALLS]', "if (message['content'] is none or"],
    "{%- if (message['content'] is none or message['content'] == '' or message['content']|length == 0) and (message['tool_calls'] is not defined or message['tool_calls'] is none or message['tool_calls']|length == 0) %}",
    '{%- if false %}',
  ],
];

/** Most items a template's range() may make: the template comes from the model file and renders synchronously. */
export const TEMPLATE_RANGE_LIMIT = 1 << 20;

/**
 * Jinja's range(), refusing more than TEMPLATE_RANGE_LIMIT items: a model file's template with
 * `range(100000000)` would otherwise hold the event loop (and build a 10^8-element array) on every
 * chat request. Real templates range over messages or tool lists.
 */
function boundedRange(start: number, stop?: number, step = 1): number[] {
  if (stop === undefined) [start, stop] = [0, start];
  if (step === 0) throw new Error('range() step must not be zero');
  const n = Math.max(0, Math.ceil((stop - start) / step));
  if (!(n <= TEMPLATE_RANGE_LIMIT)) throw new Error(`range() of ${n} items is over the chat template limit of ${TEMPLATE_RANGE_LIMIT}`);
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(start + i * step);
  return out;
}

const BOUNDED_RANGE = '__kail_bounded_range';

/**
 * Points the template's range() calls at boundedRange (passed to render under BOUNDED_RANGE): the
 * library's own range global cannot be replaced, so the parsed template's calls are renamed.
 */
function callRangeBounded(node: unknown, seen = new Set<object>()): void {
  if (typeof node !== 'object' || node === null || seen.has(node)) return;
  seen.add(node);
  const n = node as { type?: unknown; callee?: { type?: unknown; value?: unknown } };
  if (n.type === 'CallExpression' && n.callee?.type === 'Identifier' && n.callee.value === 'range') n.callee.value = BOUNDED_RANGE;
  for (const v of Object.values(node)) callRangeBounded(v, seen);
}

/** The language of a chat template's source. */
export type ChatTemplateFormat = 'jinja' | 'go';

// Where render() hands an Ollama template its Think and IsThinkSet (not a template variable).
const GO_THINK = '__kail_go_think';

/**
 * A chat template, rendered the way llama.cpp's Jinja path renders it: the variables it passes,
 * its message workarounds (see `caps`), and its removal of a BOS/EOS the tokenizer adds anyway.
 * With format 'go' the source is an Ollama template (a Modelfile's TEMPLATE, in Go's
 * text/template), rendered as Ollama renders it (see OllamaTemplate), with the same workarounds.
 */
export class ChatTemplate {
  /** The template as given (CHATML_TEMPLATE when none was). */
  readonly source: string;
  readonly format: ChatTemplateFormat;
  private readonly template: JinjaTemplate | OllamaTemplate;
  private readonly tokens: Required<ChatTemplateTokens>;
  private capsCache: ChatTemplateCaps | undefined;

  /**
   * Parses a chat template: Jinja, where an empty source or "chatml" means CHATML_TEMPLATE, or
   * with format 'go' an Ollama template (KAIL_E_INVALID_ARG when it does not parse: it comes
   * from a request or a Modelfile, not the model file).
   */
  constructor(source: string | undefined, tokens: ChatTemplateTokens = {}, format: ChatTemplateFormat = 'jinja') {
    this.format = format;
    this.tokens = { bosToken: '', eosToken: '', addBos: false, addEos: false, ...tokens };
    if (format === 'go') {
      this.source = source ?? '';
      try {
        this.template = new OllamaTemplate(this.source);
      } catch (e) {
        throw new TokenizerError('KAIL_E_INVALID_ARG', `cannot parse the Ollama template: ${(e as Error).message}`);
      }
      return;
    }
    this.source = source === undefined || source === '' || source === 'chatml' ? CHATML_TEMPLATE : source;
    let src = this.source;
    for (const [when, from, to] of TEMPLATE_PATCHES) {
      if (when.every((w) => src.includes(w))) src = src.split(from).join(to);
    }
    try {
      this.template = new Template(src);
    } catch (e) {
      throw new TokenizerError('KAIL_E_BAD_MODEL', `cannot parse chat template: ${(e as Error).message}`);
    }
    callRangeBounded((this.template as unknown as { parsed: unknown }).parsed);
  }

  /**
   * The model's template (`tokenizer.chat_template`, or `tokenizer.chat_template.<name>` for a named
   * one such as "tool_use"), with its BOS/EOS texts. Falls back to ChatML when the model has none.
   * With format 'go', the override is an Ollama template, rendered with the model's BOS/EOS rules.
   */
  static fromTokenizer(tokenizer: Tokenizer, options: { name?: string; override?: string; format?: ChatTemplateFormat } = {}): ChatTemplate {
    const v = tokenizer.vocab;
    let source = options.override;
    if (options.format !== 'go') {
      if (source === undefined) source = options.name ? v.namedChatTemplates.get(options.name) : v.chatTemplate;
      if ((source === undefined || source === '' || source === 'chatml') && !options.name) {
        source = v.namedChatTemplates.get('tool_use') ?? source;
      }
    }
    const text = (id: number | null) =>
      id === null ? '' : new TextDecoder().decode(tokenizer.tokenToPiece(id, { special: true }));
    const tokens = { bosToken: text(v.special.bos), eosToken: text(v.special.eos), addBos: v.addBos, addEos: v.addEos };
    return new ChatTemplate(source, tokens, options.format);
  }

  /** True when rendering with the ChatML fallback. */
  get usesDefault(): boolean {
    return this.format === 'jinja' && this.source === CHATML_TEMPLATE;
  }

  /**
   * Renders the conversation to the prompt text. Tokenize the result with `parseSpecial: true` so
   * the template's special-token text becomes those tokens, and `addSpecial: true` for BOS/EOS.
   */
  render(messages: readonly ChatMessage[], options: ChatTemplateRenderOptions = {}): string {
    const vars: Record<string, unknown> = {
      messages: this.normalize(messages),
      bos_token: this.tokens.bosToken,
      eos_token: this.tokens.eosToken,
      enable_thinking: options.enableThinking ?? true,
      add_generation_prompt: options.addGenerationPrompt ?? true,
    };
    if (options.tools !== undefined && options.tools.length > 0) vars.tools = options.tools;
    else if (this.caps.needsTools) vars.tools = [];
    Object.assign(vars, options.variables);
    if (this.format === 'go') {
      // Ollama's Think, ThinkLevel and IsThinkSet: a request's think is enable_thinking, or a reasoning effort (its level).
      const v = options.variables ?? {};
      const isThinkSet = 'enable_thinking' in v || typeof v.reasoning_effort === 'string';
      vars[GO_THINK] = { think: 'enable_thinking' in v ? v.enable_thinking === true : isThinkSet, thinkLevel: typeof v.reasoning_effort === 'string' ? v.reasoning_effort : '', isThinkSet };
    }

    let out: string;
    try {
      out = this.run(vars);
    } catch (e) {
      throw new TokenizerError('KAIL_E_INVALID_ARG', `chat template failed: ${(e as Error).message}`);
    }
    const { bosToken, eosToken, addBos, addEos } = this.tokens;
    // llama.cpp strips these because tokenizing with add_special adds them again
    if (addBos && bosToken !== '' && out.startsWith(bosToken)) out = out.slice(bosToken.length);
    if (addEos && eosToken !== '' && out.endsWith(eosToken)) out = out.slice(0, out.length - eosToken.length);
    return out;
  }

  /** The template rendered with `vars` (and the bounded range() its calls were pointed at). */
  private run(vars: Record<string, unknown>): string {
    if (this.template instanceof OllamaTemplate) {
      const think = vars[GO_THINK] as { think: boolean; thinkLevel: string; isThinkSet: boolean } | undefined;
      return this.template.render({ messages: vars.messages as ChatMessage[], tools: vars.tools as unknown[] | undefined, think: think?.think ?? false, thinkLevel: think?.thinkLevel ?? '', isThinkSet: think?.isThinkSet ?? false });
    }
    return this.template.render({ ...vars, [BOUNDED_RANGE]: boundedRange });
  }

  /** What the template renders, tried once with marker messages. */
  get caps(): ChatTemplateCaps {
    if (!this.capsCache) {
      let rendered = false;
      // `tools` an empty list unless said (null: left out): some tool-use templates loop over it unguarded
      const render = (messages: ChatMessage[], tools: unknown[] | null = []) => {
        try {
          const out = this.run({ messages, ...(tools ? { tools } : {}), bos_token: '', eos_token: '', add_generation_prompt: true });
          rendered = true;
          return out;
        } catch {
          return undefined;
        }
      };
      const shows = (messages: ChatMessage[]) => (render(messages) ?? '').includes(MARKER);
      // Parts are handled when their text shows but not the whole part (an array dumped as a string
      // would show its other keys too).
      const typed = render([{ role: 'user', content: [{ type: 'text', text: MARKER, id: MARKER_2 }] }]) ?? '';
      const user: ChatMessage = { role: 'user', content: 'User message' };
      const marker = `tool_${MARKER}`;
      // a tool call and its result inside the chat, as llama.cpp's caps trial (templates treat the last turn apart)
      const call = (content: null | string, id = 'call00001', args: Record<string, unknown> = { a: 1 }): ChatMessage[] => [
        user,
        { role: 'assistant', content, tool_calls: [{ id, type: 'function', function: { name: 'f', arguments: args } }] },
        { role: 'tool', content: 'Tool result', tool_call_id: id, name: 'f' },
        { role: 'assistant', content: 'Answer' },
        user,
      ];
      // also with the tool-calling turn last: a template that rejects the tool role (Gemma 2's) still tells
      const nullFails = (chat: (content: null | string) => ChatMessage[]) => render(chat(null)) === undefined && render(chat('')) !== undefined;
      const nonNullContent = nullFails(call) || nullFails((c) => call(c).slice(0, 2));
      const content = nonNullContent ? '' : null;
      // an object printed as it is comes out as Python's repr of a dict
      const printed = render(call(content, 'call00001', { [`arg_${MARKER}`]: MARKER_2 })) ?? '';
      this.capsCache = {
        systemRole: shows([{ role: 'system', content: MARKER }, user]),
        stringContent: shows([{ role: 'user', content: MARKER }]),
        typedContent: typed.includes(MARKER) && !typed.includes(MARKER_2),
        tools: (render([user], [{ type: 'function', function: { name: marker, description: 'd', parameters: { type: 'object', properties: {} } } }]) ?? '').includes(marker),
        needsTools: render([user], null) === undefined && render([user]) !== undefined,
        nonNullContent,
        shortToolCallIds: render(call(content, 'call_4f1c9a0b7e2d4c6a8b3e5f70')) === undefined && render(call(content)) !== undefined,
        stringArguments: printed.includes(`{'arg_${MARKER}': '${MARKER_2}'}`),
      };
      // a template that renders nothing here tells nothing: keep llama.cpp's defaults
      if (!rendered) this.capsCache = { systemRole: true, stringContent: true, typedContent: false, tools: false, needsTools: false, nonNullContent: false, shortToolCallIds: false, stringArguments: false };
    }
    return this.capsCache;
  }

  /**
   * llama.cpp's message workarounds: "developer" becomes "system" (except for gpt-oss templates,
   * which instead read an assistant turn's reasoning from `thinking`: reasoning_content is copied
   * there, and a turn with tool calls loses its content, as common_chat_params_init_gpt_oss);
   * a system message the template would drop or reject is merged into the next message; content
   * parts become text for templates that only take strings, and the reverse. Tool call ids become
   * 9-character ones for templates that demand them.
   */
  private normalize(messages: readonly ChatMessage[]): ChatMessage[] {
    let out = messages.map((m) => ({ ...m }));
    if (this.format === 'go' || !this.source.includes('<|channel|>')) {
      for (const m of out) if (m.role === 'developer') m.role = 'system';
    } else {
      for (const m of out) {
        if (typeof m.reasoning_content !== 'string') continue;
        m.thinking = m.reasoning_content;
        if (Array.isArray(m.tool_calls) && m.tool_calls.length) delete m.content;
      }
    }
    const caps = this.caps;
    if (!caps.systemRole && out.length > 0 && out[0].role === 'system') {
      if (out.length > 1) out[1].content = `${textOf(out[0].content)}\n${textOf(out[1].content)}`;
      out = out.slice(1);
    }
    if (caps.nonNullContent) for (const m of out) if (m.content === null) m.content = '';
    if (caps.stringArguments) {
      for (const m of out) {
        if (!Array.isArray(m.tool_calls)) continue;
        m.tool_calls = m.tool_calls.map((c: unknown) => {
          const call = c as { function?: { arguments?: unknown } } | null;
          const args = call?.function?.arguments;
          return args !== null && typeof args === 'object' ? { ...call, function: { ...call!.function, arguments: JSON.stringify(args) } } : c;
        });
      }
    }
    if (caps.shortToolCallIds) {
      for (const m of out) {
        if (Array.isArray(m.tool_calls)) {
          m.tool_calls = m.tool_calls.map((c: unknown) => {
            const call = c as { id?: unknown } | null;
            return call && typeof call.id === 'string' ? { ...call, id: shortToolCallId(call.id) } : c;
          });
        }
        if (typeof m.tool_call_id === 'string') m.tool_call_id = shortToolCallId(m.tool_call_id);
      }
    }
    const onlyString = caps.stringContent && !caps.typedContent;
    const onlyTyped = !caps.stringContent && caps.typedContent;
    for (const m of out) {
      if (onlyString && Array.isArray(m.content)) m.content = textOf(m.content);
      else if (onlyTyped && typeof m.content === 'string') m.content = [{ type: 'text', text: m.content }];
    }
    return out;
  }
}

const ID_CHARS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/**
 * A tool call id as the 9 alphanumeric characters Mistral's templates demand: such an id as it is,
 * another one derived from its hash, so a call and its result (tool_call_id) still match and a
 * conversation renders the same on every request (the prompt cache). llama.cpp passes ids as they
 * are and these templates fail on OpenAI-style ids there; vLLM cuts them to their last 9 characters.
 */
function shortToolCallId(id: string): string {
  if (/^[A-Za-z0-9]{9}$/.test(id)) return id;
  const hash = createHash('sha256').update(id).digest();
  let out = '';
  for (let i = 0; i < 9; i++) out += ID_CHARS[hash[i] % ID_CHARS.length];
  return out;
}

/** Content as text: parts joined with newlines (llama.cpp's concat_content_parts, text parts only). */
function textOf(content: ChatMessage['content']): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const texts: string[] = [];
  for (const part of content) {
    const p = part as { type?: unknown; text?: unknown };
    if (p && p.type === 'text' && typeof p.text === 'string') texts.push(p.text);
  }
  return texts.join('\n');
}

/**
 * llama.cpp's --chat-template TEXT (Jinja source, or 'chatml') and --chat-template-file FILE: the
 * template to render chats with in place of the model's, checked to parse; undefined for neither.
 * Both, a file that cannot be read or a template that does not parse is an error naming the flag.
 */
export function readChatTemplateFlags(text: string | undefined, file: string | undefined): string | undefined {
  if (text !== undefined && file !== undefined) throw new TokenizerError('KAIL_E_INVALID_ARG', 'give --chat-template or --chat-template-file, not both');
  let source = text;
  if (file !== undefined)
    try {
      source = fs.readFileSync(file, 'utf8');
    } catch (e) {
      throw new TokenizerError('KAIL_E_INVALID_ARG', `--chat-template-file: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
  if (source === undefined) return undefined;
  if (!source.trim()) throw new TokenizerError('KAIL_E_INVALID_ARG', `${file !== undefined ? `--chat-template-file ${file}` : '--chat-template'}: the template is empty`);
  try {
    new ChatTemplate(source);
  } catch (e) {
    throw new TokenizerError('KAIL_E_INVALID_ARG', `${file !== undefined ? `--chat-template-file ${file}` : '--chat-template'}: ${(e as Error).message}`);
  }
  return source;
}

/** Template variables a request's messages, tools and the model set: never chat_template_kwargs'. */
export const RESERVED_TEMPLATE_VARS: ReadonlySet<string> = new Set(['messages', 'tools', 'add_generation_prompt', 'bos_token', 'eos_token']);

/**
 * llama-server's --chat-template-kwargs JSON (e.g. '{"enable_thinking": false}'): extra variables
 * every chat is rendered with, under a request's own chat_template_kwargs. Not a JSON object, or
 * one that sets a variable the request sets, is an error naming the flag.
 */
export function parseChatTemplateKwargsFlag(json: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch {
    throw new TokenizerError('KAIL_E_INVALID_ARG', `--chat-template-kwargs takes a JSON object, got '${json}'`);
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new TokenizerError('KAIL_E_INVALID_ARG', `--chat-template-kwargs takes a JSON object, got '${json}'`);
  for (const k of Object.keys(v)) if (RESERVED_TEMPLATE_VARS.has(k)) throw new TokenizerError('KAIL_E_INVALID_ARG', `--chat-template-kwargs cannot set '${k}' (each request sets it)`);
  return v as Record<string, unknown>;
}
