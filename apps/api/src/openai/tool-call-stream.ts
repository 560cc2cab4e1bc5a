import { randomUUID } from 'node:crypto';

import {
  BLOCKS, DS_SEP, KIMI_ARGS, MINIMAX_PAIR, MISTRAL, PYTHON_TAG, STARTS, WRAPPERS,
  blockCall, trimValueNewlines, llamaCall, mistralCalls, nextBlock, paramTypes, parseToolCalls, type ToolCall, type ToolDefs,
} from './tool-calls';

/**
 * Streaming side of tool calls: a choice's text goes out as it comes until a call marker, and each
 * call goes out as OpenAI streams them, while the model writes it: a first delta with the call's
 * index, id and name once the name is complete, then its arguments text piece by piece.
 *
 * The arguments streamed are the model's JSON with the whitespace between tokens dropped (for
 * formats that write JSON), or a JSON object built from key/value pairs (GLM, Qwen3-Coder XML, MiniMax),
 * string-typed values streamed as they are written and the others once they end. Every text this
 * module derives from a prefix of the output is a prefix of what it derives from the whole, so the
 * pieces concatenate to the final arguments. A call that has been announced stays a call even if
 * its block ends malformed or is cut off (as OpenAI's own streams do at max_tokens); a block that
 * closes malformed before any of it went out stays text, as in a whole answer.
 */

/** One entry of a chunk's `delta.tool_calls`. */
export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

/** A call as far as the text shows it. */
interface PartialCall {
  name: string;
  /** The model's own id (Kimi's header, Mistral's CALL_ID). */
  id?: string;
  /** The arguments text so far: it only grows as text arrives. */
  args: string;
}

/** 'wait': the text cannot tell yet whether or how it is a call. */
type Partial = PartialCall | null | 'wait';

interface Scan {
  calls: PartialCall[];
  /** The text around the calls (only meaningful at the end). */
  content: string;
  /** The last call's block has not closed (at the end: the output cut it off). */
  open?: boolean;
}

const isSpace = (c: string) => c === ' ' || c === '\n' || c === '\r' || c === '\t';

/**
 * A JSON value's text from the start of a growing text as far as it goes, without the whitespace
 * between tokens; a JSON string's content instead (arguments a model wrote as a string). Scalars
 * give ''. `read` continues from where the last call stopped when the text only grew, so a call's
 * arguments cost their length once however many pieces they arrive in.
 */
export class JsonPrefix {
  private raw = '';
  private j = 0;
  private mode: 'start' | 'string' | 'value' | 'other' = 'start';
  private depth = 0;
  private inStr = false;
  private esc = false;
  private done = false;
  private out = '';

  read(raw: string): string {
    if (!raw.startsWith(this.raw)) Object.assign(this, new JsonPrefix());
    this.raw = raw;
    if (this.mode === 'start') {
      while (this.j < raw.length && isSpace(raw[this.j])) this.j++;
      if (this.j >= raw.length) return '';
      const c = raw[this.j];
      this.mode = c === '"' ? 'string' : c === '{' || c === '[' ? 'value' : 'other';
      if (this.mode === 'string') this.j++;
    }
    if (this.mode === 'string') this.readString(raw);
    else if (this.mode === 'value') this.readValue(raw);
    return this.out;
  }

  private readString(raw: string): void {
    while (!this.done && this.j < raw.length) {
      const q = raw.indexOf('"', this.j), b = raw.indexOf('\\', this.j);
      const stop = Math.min(q < 0 ? raw.length : q, b < 0 ? raw.length : b);
      this.out += raw.slice(this.j, stop);
      this.j = stop;
      if (stop === raw.length) return;
      if (stop === q) {
        this.done = true;
        return;
      }
      const n = raw[stop + 1] === 'u' ? 6 : 2;
      if (stop + n > raw.length) return;
      try {
        this.out += JSON.parse(`"${raw.slice(stop, stop + n)}"`) as string;
      } catch {
        this.done = true;
        return;
      }
      this.j = stop + n;
    }
  }

  private readValue(raw: string): void {
    let seg = this.j;
    const flush = (to: number) => {
      if (to > seg) this.out += raw.slice(seg, to);
    };
    for (; !this.done && this.j < raw.length; this.j++) {
      const c = raw[this.j];
      if (this.inStr) {
        if (this.esc) this.esc = false;
        else if (c === '\\') this.esc = true;
        else if (c === '"') this.inStr = false;
        continue;
      }
      if (isSpace(c)) {
        flush(this.j);
        seg = this.j + 1;
        continue;
      }
      if (c === '"') this.inStr = true;
      else if (c === '{' || c === '[') this.depth++;
      else if ((c === '}' || c === ']') && --this.depth === 0) this.done = true;
    }
    flush(this.j);
  }
}

/** JsonPrefix on a text read once. */
export function jsonArgsPrefix(raw: string): string {
  return new JsonPrefix().read(raw);
}

/** Reads a call's JSON arguments; the stream keeps one reader per call between pushes. */
type ArgsReader = (raw: string) => string;

/**
 * What a stream keeps between scans of its held text, which only grows: each call's arguments
 * reader, and the whole-block reading of each closed block (by where the block starts).
 */
interface ScanMemo {
  readers: JsonPrefix[];
  closed: Map<number, ToolCall | null>;
}

/** `s` without an ending that could still grow into `marker` (so it is not written out as value). */
function withoutMarkerStart(s: string, marker: string): string {
  for (let keep = Math.min(marker.length - 1, s.length); keep > 0; keep--) if (marker.startsWith(s.slice(s.length - keep))) return s.slice(0, s.length - keep);
  return s;
}

/** JSON string body of s (no quotes); a trailing lone high surrogate waits for its pair. */
function jsonBody(s: string): string {
  const last = s.charCodeAt(s.length - 1);
  if (last >= 0xd800 && last <= 0xdbff) s = s.slice(0, -1);
  return JSON.stringify(s).slice(1, -1);
}

const NAME = /^[\w.-]+$/;

/**
 * A JSON call's head at the start of `text`: `{"name": "f", "<key>": ` with key one of `keys`.
 * The name (JSON-decoded) and where the arguments start; undefined when the head is not (yet) there,
 * null when the name does not decode.
 */
function callHead(text: string, keys: string): { name: string; args: number } | null | undefined {
  const h = new RegExp(`^\\s*\\{\\s*"name"\\s*:\\s*"((?:[^"\\\\]|\\\\.)*)"\\s*,\\s*"(?:${keys})"\\s*:`).exec(text);
  if (!h) return undefined;
  try {
    return { name: JSON.parse(`"${h[1]}"`) as string, args: h[0].length };
  } catch {
    return null;
  }
}

/**
 * Key/value arguments (GLM's <arg_key>/<arg_value>, the XML <parameter=k>…</parameter>) as a JSON
 * object text: complete pairs, then the open one (its key, and a string-typed value as written so
 * far), then '}' once the block is closed. Null when the text holds something else.
 */
function pairsPrefix(text: string, closed: boolean, kind: 'glm' | 'xml' | 'minimax', types: Record<string, { type?: unknown }>): string | null {
  const pair =
    kind === 'glm' ? /<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*?)<\/arg_value>\s*/y
    : kind === 'xml' ? /\s*<parameter=([^>]+)>([\s\S]*?)<\/parameter>\s*/y
    : new RegExp(MINIMAX_PAIR.source, 'y');
  const open = kind === 'glm' ? /<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*)$/y : kind === 'xml' ? /\s*<parameter=([^>]+)>([\s\S]*)$/y : /\s*<parameter name="([^"]+)">([\s\S]*)$/y;
  const end = kind === 'glm' ? '</arg_value>' : '</parameter>';
  const clean = (raw: string) => (kind === 'xml' ? trimValueNewlines(raw) : raw);
  const value = (key: string, raw: string) => {
    if (types[key]?.type === 'string') return JSON.stringify(raw);
    try {
      return JSON.stringify(JSON.parse(raw));
    } catch {
      return JSON.stringify(raw);
    }
  };
  const parts: string[] = [];
  let m: RegExpExecArray | null;
  let at = 0;
  while ((m = pair.exec(text))) {
    parts.push(`${JSON.stringify(m[1].trim())}:${value(m[1].trim(), clean(m[2]))}`);
    at = pair.lastIndex;
  }
  const rest = text.slice(at);
  if (closed) return rest.trim() ? null : `{${parts.join(',')}}`;
  open.lastIndex = at;
  const o = open.exec(text);
  let tail = '';
  if (o) {
    const key = o[1].trim();
    tail = `${JSON.stringify(key)}:`;
    if (types[key]?.type === 'string') {
      let raw = withoutMarkerStart(o[2], end);
      if (kind === 'xml') raw = trimValueNewlines(raw);
      tail += `"${jsonBody(raw)}`;
    }
  } else {
    // Only the start of a pair may follow.
    const start = kind === 'glm' ? '<arg_key>' : kind === 'xml' ? '<parameter=' : '<parameter name="';
    const r = rest.trimStart();
    if (r && !r.startsWith(start) && !start.startsWith(r)) return null;
  }
  return `{${[...parts, ...(tail ? [tail] : [])].join(',')}`;
}

/** A block's call from its body so far (`closed`: the closing marker has come). */
function partialBlock(open: string, body: string, closed: boolean, tools: ToolDefs, json: ArgsReader): Partial {
  const lead = body.trimStart();
  const need = (ok: boolean): Partial => (ok ? 'wait' : null);
  if (open === BLOCKS[1][0]) {
    // DeepSeek: "name<sep>{...}" (V3.1) or "function<sep>name\n```json\n{...}\n```" (V3/R1).
    const sep = body.indexOf(DS_SEP);
    if (sep < 0) return need(!closed);
    const left = body.slice(0, sep).trim();
    const right = body.slice(sep + DS_SEP.length);
    if (left === 'function') {
      const f = /^([\w.-]+)\s*\n```(?:json)?[ \t]*\n/.exec(right);
      return f ? { name: f[1], args: json(right.slice(f[0].length)) } : need(!closed);
    }
    return NAME.test(left) ? { name: left, args: json(right) } : null;
  }
  if (open === BLOCKS[2][0]) {
    // Kimi: "functions.name:0<|tool_call_argument_begin|>{...}"
    const sep = body.indexOf(KIMI_ARGS);
    if (sep < 0) return need(!closed);
    const header = body.slice(0, sep).trim();
    const h = /^(?:functions\.)?([\w.-]+?)(?::\d+)?$/.exec(header);
    return h ? { name: h[1], id: header, args: json(body.slice(sep + KIMI_ARGS.length)) } : null;
  }
  if (open === BLOCKS[4][0]) {
    // MiniMax-M2: 'name">' then <parameter name="k">v</parameter> pairs.
    const f = /^([^"<>]+)">/.exec(body);
    if (!f) return need(!closed && /^[^"<>]*"?$/.test(body));
    const pairs = closed ? body.slice(f[0].length) : withoutMarkerStart(body.slice(f[0].length), '</invoke>');
    const args = pairsPrefix(pairs, closed, 'minimax', paramTypes(tools, f[1]));
    return args === null ? null : { name: f[1], args };
  }
  if (lead.startsWith('{') || (!closed && lead === '')) {
    // Hermes: {"name": "f", "arguments": {...}}; other key orders wait for the whole block.
    const h = callHead(body, 'arguments');
    if (h === undefined) return need(!closed);
    return h?.name ? { name: h.name, args: json(body.slice(h.args)) } : null;
  }
  const fnOpen = lead.startsWith('<function=') || '<function='.startsWith(lead);
  if (open === BLOCKS[3][0] || fnOpen) {
    const f = /^\s*<function=([^>\s]+)>/.exec(body);
    if (!f) return need(!closed && fnOpen);
    let pairs = body.slice(f[0].length);
    if (closed) {
      const e = /<\/function>\s*$/.exec(pairs);
      if (!e) return null;
      pairs = pairs.slice(0, e.index);
    } else pairs = withoutMarkerStart(pairs.split('</function>')[0], '</function>');
    const args = pairsPrefix(pairs, closed, 'xml', paramTypes(tools, f[1]));
    return args === null ? null : { name: f[1], args };
  }
  // GLM: "name<arg_key>k</arg_key><arg_value>v</arg_value>…"
  const k = body.indexOf('<arg_key>');
  if (k < 0) {
    if (!closed) return 'wait';
    return NAME.test(body.trim()) ? { name: body.trim(), args: '{}' } : null;
  }
  const name = body.slice(0, k).trim();
  if (!NAME.test(name)) return null;
  const args = pairsPrefix(body.slice(k), closed, 'glm', paramTypes(tools, name));
  return args === null ? null : { name, args };
}

/** The whole-block parser's answer as a call, for blocks the partial one cannot follow. */
function fromWhole(c: ToolCall | null): Partial {
  return c ? { name: c.function.name, args: c.function.arguments, id: c.id } : null;
}

/**
 * The calls `held` (the text from the first call marker) shows so far. `final`: the output ended.
 * `announced` calls are kept as calls whatever their block turns out to be.
 */
function scan(held: string, tools: ToolDefs, final: boolean, announced: number, memo: ScanMemo): Scan {
  const calls: PartialCall[] = [];
  // The next call's arguments reader (the call will get index calls.length).
  const json: ArgsReader = (raw) => (memo.readers[calls.length] ??= new JsonPrefix()).read(raw);
  // Llama 3.x: the whole answer is one JSON object naming a declared tool.
  let body = held.trimStart();
  if (body.startsWith(PYTHON_TAG)) body = body.slice(PYTHON_TAG.length).trimStart();
  if (body.startsWith('{')) {
    const h = callHead(body, 'parameters|arguments');
    const whole = final && !!llamaCall(held, tools);
    if (h && tools?.some((t) => t.function.name === h.name) && (announced > 0 || !final || whole))
      return { calls: [{ name: h.name, args: json(body.slice(h.args)) }], content: '', open: final && !whole };
  }
  // Mistral: [TOOL_CALLS] to the end, a JSON list or name[ARGS]{...} calls.
  if (held.startsWith(MISTRAL)) {
    const parts = held.split(MISTRAL).slice(1);
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i].trimStart();
      if (part.startsWith('[') || (part === '' && !final)) {
        // A list streams as whole calls at the end.
        if (final) for (const c of mistralCalls(MISTRAL + parts.slice(i).join(MISTRAL)) ?? []) calls.push(fromWhole(c) as PartialCall);
        break;
      }
      const m = /^([\w.-]+)(?:\[CALL_ID\]([A-Za-z0-9]+))?\[ARGS\]/.exec(part);
      if (!m) break;
      calls.push({ name: m[1], ...(m[2] ? { id: m[2] } : {}), args: json(part.slice(m[0].length)) });
    }
    // Calls that run to the end close when their JSON does.
    const whole = final && !!mistralCalls(held);
    if (final && announced === 0 && calls.length > 0 && !whole) return { calls: [], content: held };
    return { calls, content: '', open: final && !whole };
  }
  let content = '';
  let at = 0;
  let open = false;
  for (;;) {
    const b = nextBlock(held, at);
    if (!b) break;
    const from = b.start + b.open.length;
    const end = held.indexOf(b.close, from);
    const closed = end >= 0;
    const text = held.slice(from, closed ? end : held.length);
    const kept = calls.length < announced;
    let p = partialBlock(b.open, text, closed, tools, json);
    if (closed) {
      let whole = memo.closed.get(b.start);
      if (whole === undefined) memo.closed.set(b.start, (whole = blockCall(b.open, text, tools)));
      // A closed block that is not a call stays text, unless it was announced; one the partial
      // reading cannot follow is taken whole.
      if (!whole && !kept) p = null;
      else if (whole && (p === null || p === 'wait')) p = fromWhole(whole);
    } else if (final && !kept) p = null;
    // An announced call stays one: what went out of it stands.
    if (kept && (p === null || p === 'wait')) p = { name: '', args: '' };
    if (p === 'wait') break;
    if (p === null) {
      if (!closed) break;
      content += held.slice(at, end + b.close.length);
      at = end + b.close.length;
      continue;
    }
    calls.push(p);
    content += held.slice(at, b.start);
    if (!closed) {
      at = held.length;
      open = true;
      break;
    }
    at = end + b.close.length;
  }
  if (final && announced === 0 && calls.length === 0) {
    // Nothing went out: the whole answer is read as parseToolCalls reads it (a call after other text).
    const whole = parseToolCalls(held, tools);
    return { calls: whole.calls.map((c) => fromWhole(c) as PartialCall), content: whole.content };
  }
  content += held.slice(at);
  for (const w of WRAPPERS) content = content.split(w).join('');
  return { calls, content: content.trim(), open };
}

/**
 * Streams a choice's text while holding back what may be a tool call: everything from the first
 * call marker, and an ending that could still become one. `deltas` gives the calls as they are
 * written; `finish` ends the output.
 */
export class ToolCallStream {
  private held = '';
  private holding = false;
  /** Text already given out as content. */
  private sent = '';
  /** Calls announced, with the arguments text given out so far. */
  private out: { id: string; name: string; args: string }[] = [];
  private memo: ScanMemo = { readers: [], closed: new Map() };

  constructor(private readonly tools?: ToolDefs) {}

  /** Adds generated text; returns the part that can go to the client as content now. */
  push(text: string): string {
    if (this.holding) {
      this.held += text;
      return '';
    }
    const all = this.held + text;
    // An answer that opens as a JSON object may be a Llama-style call: held to the end.
    if (this.tools?.length && this.sent === '') {
      if (/^\s*(\{|<\|python_tag\|>)/.test(all)) {
        this.holding = true;
        this.held = all;
        return '';
      }
      // Leading whitespace waits for what follows it.
      if (/^\s*$/.test(all)) {
        this.held = all;
        return '';
      }
    }
    let start = -1;
    for (const marker of STARTS) {
      const i = all.indexOf(marker);
      if (i >= 0 && (start < 0 || i < start)) start = i;
    }
    if (start >= 0) {
      this.holding = true;
      this.held = all.slice(start);
      this.sent += all.slice(0, start);
      return all.slice(0, start);
    }
    // Keep back the longest ending that is a beginning of a marker.
    let keep = Math.min(Math.max(...STARTS.map((m) => m.length)) - 1, all.length);
    while (keep > 0 && !STARTS.some((m) => m.startsWith(all.slice(all.length - keep)))) keep--;
    this.held = all.slice(all.length - keep);
    const out = all.slice(0, all.length - keep);
    this.sent += out;
    return out;
  }

  /** The tool-call deltas the text so far allows: new calls (index, id, name) and arguments text. */
  deltas(): ToolCallDelta[] {
    return this.holding ? this.diff(scan(this.held, this.tools, false, this.out.length, this.memo).calls) : [];
  }

  /**
   * The end of the output: the last deltas, every call, and the held text that was not one.
   * `cut`: the output ended inside a call that had gone out (its arguments may be unfinished).
   */
  finish(): { content: string; calls: ToolCall[]; deltas: ToolCallDelta[]; cut: boolean } {
    const held = this.held;
    this.held = '';
    if (!this.holding) return { content: held, calls: [], deltas: [], cut: false };
    const s = scan(held, this.tools, true, this.out.length, this.memo);
    const deltas = this.diff(s.calls);
    if (!this.out.length) return { content: held, calls: [], deltas: [], cut: false };
    const calls = this.out.map((c): ToolCall => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.args } }));
    return { content: s.content, calls, deltas, cut: !!s.open };
  }

  private diff(calls: PartialCall[]): ToolCallDelta[] {
    const deltas: ToolCallDelta[] = [];
    calls.forEach((p, index) => {
      const o = this.out[index];
      if (!o) {
        const id = p.id ?? `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`;
        this.out.push({ id, name: p.name, args: p.args });
        deltas.push({ index, id, type: 'function', function: { name: p.name, arguments: p.args } });
      } else if (p.args.length > o.args.length && p.args.startsWith(o.args)) {
        deltas.push({ index, function: { arguments: p.args.slice(o.args.length) } });
        o.args = p.args;
      }
    });
    return deltas;
  }
}
