import { randomUUID } from 'node:crypto';

/**
 * Tool calls in model output, in the formats of the model families KailStream serves:
 *
 * - Hermes (Qwen2.5, Qwen3 and its MoE, QwQ, Hermes): `<tool_call>{"name": "f", "arguments": {...}}</tool_call>`
 * - GLM-4.5/4.6 (MoE): `<tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>`, a
 *   value a JSON text unless the tool's schema says the parameter is a string
 * - DeepSeek V3.1: `<｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`, and V3/R1's
 *   `<｜tool▁call▁begin｜>function<｜tool▁sep｜>f` + a fenced JSON block, inside `<｜tool▁calls▁begin｜>…end｜>`
 *
 * - Qwen3-Coder (and its MoE), Qwen3.5, Nemotron 3, StepFun 3.5: `<tool_call><function=f><parameter=k>v</parameter>…</function></tool_call>`,
 *   and Seed-OSS's the same in `<seed:tool_call>`; values typed as GLM's (one newline around each dropped)
 * - Kimi K2 (a DeepSeek-V3-architecture MoE): `<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}<|tool_call_end|>`
 *   inside `<|tool_calls_section_begin|>…end|>`; the header is the call's id (the template writes
 *   ids back as headers), as llama.cpp's parser keeps it
 * - Mistral (Mixtral 8x22B, Nemo, Small, Ministral, Devstral): from `[TOOL_CALLS]` to the end,
 *   either a JSON list `[{"name": "f", "arguments": {...}, "id": "…"}]` or calls
 *   `[TOOL_CALLS]f[ARGS]{...}` (with `[CALL_ID]id` before `[ARGS]` in Small 3.2's); ids are kept
 * - Llama 3.1-3.3: the whole answer one JSON object `{"name": "f", "parameters": {...}}` (after an
 *   optional `<|python_tag|>`), taken as a call only when it names one of the request's tools
 * - MiniMax-M2: `<invoke name="f"><parameter name="k">v</parameter>…</invoke>` calls inside
 *   `<minimax:tool_call>…</minimax:tool_call>`, values typed as GLM's
 * - `<tool_calls>` lists (MiniMax-M1, Apriel, Hunyuan-A13B): a JSON list of `{"name": "f",
 *   "arguments": {...}}` objects, or one such object per line, inside `<tool_calls>…</tool_calls>`;
 *   streamed as whole calls once the output ends
 * - Granite 3.x: `<|tool_call|>` and a JSON list of such objects to the end of the answer (as
 *   llama.cpp's Granite parser), streamed as whole calls once the output ends
 *
 * A block that does not parse, or that the output cuts off, stays in the text, as llama-server
 * leaves it. Formats not listed (Functionary's bare `<function=f>{...}</function>`) arrive as text.
 */

/** Call blocks: opening and closing marker. */
export const BLOCKS: [open: string, close: string][] = [
  ['<tool_call>', '</tool_call>'],
  ['<｜tool▁call▁begin｜>', '<｜tool▁call▁end｜>'],
  ['<|tool_call_begin|>', '<|tool_call_end|>'],
  ['<seed:tool_call>', '</seed:tool_call>'],
  ['<invoke name="', '</invoke>'],
];
/** Wrappers around DeepSeek's, Kimi's and MiniMax's blocks, dropped from the text once calls are found. */
export const WRAPPERS = [
  '<｜tool▁calls▁begin｜>', '<｜tool▁calls▁end｜>', '<|tool_calls_section_begin|>', '<|tool_calls_section_end|>', '<minimax:tool_call>', '</minimax:tool_call>',
];
export const DS_SEP = '<｜tool▁sep｜>';
export const KIMI_ARGS = '<|tool_call_argument_begin|>';
export const MISTRAL = '[TOOL_CALLS]';
/** Where a held-back stream starts: any of these. */
/** A `<tool_calls>` list's markers. */
export const LIST_OPEN = '<tool_calls>';
export const LIST_CLOSE = '</tool_calls>';
/** Granite 3.x's call marker: a JSON list of calls follows it. */
export const GRANITE = '<|tool_call|>';
export const STARTS = [...BLOCKS.map(([open]) => open), WRAPPERS[0], WRAPPERS[2], WRAPPERS[4], MISTRAL, LIST_OPEN, GRANITE];
/** MiniMax's parameter pairs, and the start of one. */
export const MINIMAX_PAIR = /\s*<parameter name="([^"]+)">([\s\S]*?)<\/parameter>\s*/y;
/** The one newline a template may write on each side of a value is not part of it. */
export const trimValueNewlines = (raw: string): string => raw.replace(/^\n/, '').replace(/\n$/, '');

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** The tools of a request, for the parameter types some formats need. */
export type ToolDefs = readonly { function: { name: string; parameters?: Record<string, unknown> } }[] | null | undefined;

/** Splits finished output into its text and the tool calls it makes. */
export function parseToolCalls(text: string, tools?: ToolDefs): { content: string; calls: ToolCall[]; cut: boolean } {
  const calls: ToolCall[] = [];
  let content = '';
  let at = 0;
  let cut = false;  // a block opened and never closed: the output stopped inside it
  for (;;) {
    const best = nextBlock(text, at);
    if (!best) break;
    const end = text.indexOf(best.close, best.start + best.open.length);
    if (end < 0) {
      cut = true;
      break;
    }
    const call = blockCall(best.open, text.slice(best.start + best.open.length, end), tools);
    if (call) {
      calls.push(call);
      content += text.slice(at, best.start);
    } else content += text.slice(at, end + best.close.length);
    at = end + best.close.length;
  }
  content += text.slice(at);
  if (!calls.length) {
    const m = text.indexOf(MISTRAL);
    const mistral = m >= 0 ? mistralCalls(text.slice(m)) : null;
    if (mistral) return { content: text.slice(0, m).trim(), calls: mistral, cut: false };
    const g = text.indexOf(GRANITE);
    const granite = g >= 0 && text.slice(g + GRANITE.length).trimStart().startsWith('[') ? listCalls(text.slice(g + GRANITE.length)) : null;
    if (granite) return { content: text.slice(0, g).trim(), calls: granite, cut: false };
    const l = text.indexOf(LIST_OPEN);
    if (l >= 0) {
      const e = text.indexOf(LIST_CLOSE, l + LIST_OPEN.length);
      const list = e >= 0 ? listCalls(text.slice(l + LIST_OPEN.length, e)) : null;
      if (list) return { content: (text.slice(0, l) + text.slice(e + LIST_CLOSE.length)).trim(), calls: list, cut: false };
      if (e < 0) cut = true;
    }
    const bare = llamaCall(text, tools);
    return bare ? { content: '', calls: [bare], cut: false } : { content, calls, cut };
  }
  for (const w of WRAPPERS) content = content.split(w).join('');
  return { content: content.trim(), calls, cut };
}

/** The call a whole block (between its markers) makes, or null. */
export function blockCall(open: string, body: string, tools: ToolDefs): ToolCall | null {
  return open === BLOCKS[0][0] ? (hermesCall(body) ?? glmCall(body, tools) ?? xmlCall(body, tools))
    : open === BLOCKS[1][0] ? deepseekCall(body)
    : open === BLOCKS[2][0] ? kimiCall(body)
    : open === BLOCKS[4][0] ? minimaxCall(body, tools)
    : xmlCall(body, tools);
}

/** The first call block in text from `from`: where it starts and its markers. */
export function nextBlock(text: string, from: number): { start: number; open: string; close: string } | null {
  let best: { start: number; open: string; close: string } | null = null;
  for (const [open, close] of BLOCKS) {
    const i = text.indexOf(open, from);
    if (i >= 0 && (!best || i < best.start)) best = { start: i, open, close };
  }
  return best;
}

export function makeCall(name: string, args: unknown, id?: string): ToolCall | null {
  if (name.length === 0) return null;
  // OpenAI sends arguments as a JSON string; a model writes an object (or, sometimes, the string).
  const argText = typeof args === 'string' ? args : JSON.stringify(args ?? {});
  return { id: id ?? `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`, type: 'function', function: { name, arguments: argText } };
}

export function jsonOrNull(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function hermesCall(body: string): ToolCall | null {
  const v = jsonOrNull(body);
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return null;
  const { name, arguments: args } = v as { name?: unknown; arguments?: unknown };
  return typeof name === 'string' ? makeCall(name, args) : null;
}

function glmCall(body: string, tools: ToolDefs): ToolCall | null {
  const firstArg = body.indexOf('<arg_key>');
  const name = (firstArg < 0 ? body : body.slice(0, firstArg)).trim();
  if (!/^[\w.-]+$/.test(name)) return null;
  const rest = firstArg < 0 ? '' : body.slice(firstArg);
  const args = pairArgs(rest, /<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*?)<\/arg_value>\s*/y, name, tools, (raw) => raw);
  return args ? makeCall(name, args) : null;
}

function xmlCall(body: string, tools: ToolDefs): ToolCall | null {
  const m = /^\s*<function=([^>\s]+)>([\s\S]*?)<\/function>\s*$/.exec(body);
  if (!m) return null;
  const args = pairArgs(m[2], /\s*<parameter=([^>]+)>([\s\S]*?)<\/parameter>\s*/y, m[1], tools, trimValueNewlines);
  return args ? makeCall(m[1], args) : null;
}

/** MiniMax-M2: the body after `<invoke name="` is `f">` and parameter pairs. */
function minimaxCall(body: string, tools: ToolDefs): ToolCall | null {
  const m = /^([^"<>]+)">([\s\S]*)$/.exec(body);
  if (!m) return null;
  // Its template writes each value inline, so a value's newlines are its own.
  const args = pairArgs(m[2], new RegExp(MINIMAX_PAIR.source, 'y'), m[1], tools, (raw) => raw);
  return args ? makeCall(m[1], args) : null;
}

/** The declared parameters of a tool, for their types. */
export function paramTypes(tools: ToolDefs, name: string): Record<string, { type?: unknown }> {
  return (tools?.find((t) => t.function.name === name)?.function.parameters?.properties ?? {}) as Record<string, { type?: unknown }>;
}

/**
 * Arguments written as key/value pairs (`pair` matches one, sticky): a value is the raw text for a
 * parameter the tool's schema types as a string, else JSON when it parses, else the text. Null when
 * anything but pairs is there.
 */
function pairArgs(text: string, pair: RegExp, name: string, tools: ToolDefs, clean: (raw: string) => string): Record<string, unknown> | null {
  const props = paramTypes(tools, name);
  const args: Record<string, unknown> = {};
  let m: RegExpExecArray | null;
  let seen = 0;
  while ((m = pair.exec(text))) {
    const key = m[1].trim();
    const raw = clean(m[2]);
    const parsed = props[key]?.type === 'string' ? undefined : jsonOrNull(raw);
    args[key] = parsed === undefined ? raw : parsed;
    seen = pair.lastIndex;
  }
  return text.slice(seen).trim().length > 0 ? null : args;
}

export const PYTHON_TAG = '<|python_tag|>';

export function llamaCall(text: string, tools: ToolDefs): ToolCall | null {
  let body = text.trim();
  if (body.startsWith(PYTHON_TAG)) body = body.slice(PYTHON_TAG.length).trim();
  if (!body.startsWith('{') || !tools?.length) return null;
  const v = jsonOrNull(body);
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return null;
  const { name, parameters, arguments: args } = v as { name?: unknown; parameters?: unknown; arguments?: unknown };
  if (typeof name !== 'string' || !tools.some((t) => t.function.name === name)) return null;
  return makeCall(name, parameters ?? args ?? {});
}

function deepseekCall(body: string): ToolCall | null {
  const sep = body.indexOf(DS_SEP);
  if (sep < 0) return null;
  const left = body.slice(0, sep).trim();
  const right = body.slice(sep + DS_SEP.length);
  // V3/R1: "function<sep>name\n```json\n{...}\n```"; V3.1: "name<sep>{...}".
  const fenced = /^([\w.-]+)\s*\n```(?:json)?\s*\n([\s\S]*?)\n?```\s*$/.exec(right);
  if (left === 'function' && fenced) {
    const args = jsonOrNull(fenced[2]);
    return args !== undefined ? makeCall(fenced[1], args) : null;
  }
  const args = jsonOrNull(right);
  return args !== undefined && /^[\w.-]+$/.test(left) ? makeCall(left, args) : null;
}

/** Mistral's calls, from the first `[TOOL_CALLS]` to the end; null unless all of it parses. */
export function mistralCalls(text: string): ToolCall[] | null {
  const calls: ToolCall[] = [];
  for (const part of text.split(MISTRAL).slice(1)) {
    const body = part.trim();
    if (body.startsWith('[')) {
      const list = jsonOrNull(body);
      if (!Array.isArray(list) || list.length === 0) return null;
      for (const c of list as { name?: unknown; arguments?: unknown; id?: unknown }[]) {
        const call = c && typeof c.name === 'string' ? makeCall(c.name, c.arguments ?? {}, typeof c.id === 'string' && c.id ? c.id : undefined) : null;
        if (!call) return null;
        calls.push(call);
      }
      continue;
    }
    const m = /^([\w.-]+)(?:\[CALL_ID\]([A-Za-z0-9]+))?\[ARGS\]([\s\S]*)$/.exec(body);
    const args = m ? jsonOrNull(m[3]) : undefined;
    if (!m || args === undefined) return null;
    calls.push(makeCall(m[1], args, m[2])!);
  }
  return calls.length ? calls : null;
}

/** A `<tool_calls>` body: a JSON list of calls, or one call object per line; null unless all of it parses. */
export function listCalls(body: string): ToolCall[] | null {
  const text = body.trim();
  let items: unknown[];
  if (text.startsWith('[')) {
    const v = jsonOrNull(text);
    if (!Array.isArray(v)) return null;
    items = v;
  } else {
    items = [];
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      const v = jsonOrNull(line.trim());
      if (v === undefined) return null;
      items.push(v);
    }
  }
  const calls: ToolCall[] = [];
  for (const it of items) {
    if (it === null || typeof it !== 'object' || Array.isArray(it)) return null;
    const { name, arguments: args, id } = it as { name?: unknown; arguments?: unknown; id?: unknown };
    // Apriel's calls carry their ids: kept, as Mistral's.
    const call = typeof name === 'string' ? makeCall(name, args ?? {}, typeof id === 'string' && id ? id : undefined) : null;
    if (!call) return null;
    calls.push(call);
  }
  return calls.length ? calls : null;
}

function kimiCall(body: string): ToolCall | null {
  const sep = body.indexOf(KIMI_ARGS);
  if (sep < 0) return null;
  const header = body.slice(0, sep).trim();
  const m = /^(?:functions\.)?([\w.-]+?)(?::\d+)?$/.exec(header);
  const args = jsonOrNull(body.slice(sep + KIMI_ARGS.length));
  return m && args !== undefined ? makeCall(m[1], args, header) : null;
}
