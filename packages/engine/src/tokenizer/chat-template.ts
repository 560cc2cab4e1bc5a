// Chat templates: the model's Jinja template (`tokenizer.chat_template`) rendered with
// @huggingface/jinja, with the variables llama.cpp's jinja path passes (messages, tools,
// add_generation_prompt, bos_token, eos_token, enable_thinking).

import type { Template as JinjaTemplate } from '@huggingface/jinja' with { 'resolution-mode': 'import' };

// The package is an ES module with a CommonJS build under its "require" export; this package is
// CommonJS, so it is loaded with require and typed from the ESM declarations.
const { Template, Environment } = require('@huggingface/jinja') as { Template: typeof JinjaTemplate; Environment: new () => { set(name: string, v: unknown): unknown } };

import { TokenizerError } from './errors';
import type { Tokenizer } from './tokenizer';

/** A runtime value of @huggingface/jinja, as far as addListMethods touches one. */
interface JinjaValue {
  value: unknown;
  builtins: Map<string, unknown>;
}

/**
 * Python's list.append and list.pop, which templates call (Kimi-K2's, to collect tool call ids)
 * and @huggingface/jinja 0.5 lacks ("Cannot call something that is not a function"): added to the
 * builtins of its array values, whose class the package does not export, so it is reached through
 * a value made by its Environment. `length` is kept in step (the package caches it per array).
 */
function addListMethods(): void {
  const env = new Environment();
  const proto = Object.getPrototypeOf(env.set('a', [])) as object;
  const desc = Object.getOwnPropertyDescriptor(proto, 'builtins');
  if (!desc?.get) return; // another version of the package: leave it alone
  const make = (v: unknown) => (env.set(`v${Math.random()}`, v) as { constructor: new (x: unknown) => unknown }).constructor;
  const FunctionValue = make(() => undefined);
  const NullValue = make(null);
  const IntegerValue = make(1);
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

/**
 * A chat template, rendered the way llama.cpp's Jinja path renders it: the variables it passes,
 * its message workarounds (see `caps`), and its removal of a BOS/EOS the tokenizer adds anyway.
 */
export class ChatTemplate {
  /** The template as given (CHATML_TEMPLATE when none was). */
  readonly source: string;
  private readonly template: JinjaTemplate;
  private readonly tokens: Required<ChatTemplateTokens>;
  private capsCache: ChatTemplateCaps | undefined;

  /** Parses a Jinja chat template; an empty source or "chatml" means CHATML_TEMPLATE. */
  constructor(source: string | undefined, tokens: ChatTemplateTokens = {}) {
    this.source = source === undefined || source === '' || source === 'chatml' ? CHATML_TEMPLATE : source;
    this.tokens = { bosToken: '', eosToken: '', addBos: false, addEos: false, ...tokens };
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
   */
  static fromTokenizer(tokenizer: Tokenizer, options: { name?: string; override?: string } = {}): ChatTemplate {
    const v = tokenizer.vocab;
    let source = options.override;
    if (source === undefined) source = options.name ? v.namedChatTemplates.get(options.name) : v.chatTemplate;
    if ((source === undefined || source === '' || source === 'chatml') && !options.name) {
      source = v.namedChatTemplates.get('tool_use') ?? source;
    }
    const text = (id: number | null) =>
      id === null ? '' : new TextDecoder().decode(tokenizer.tokenToPiece(id, { special: true }));
    return new ChatTemplate(source, {
      bosToken: text(v.special.bos),
      eosToken: text(v.special.eos),
      addBos: v.addBos,
      addEos: v.addEos,
    });
  }

  /** True when rendering with the ChatML fallback. */
  get usesDefault(): boolean {
    return this.source === CHATML_TEMPLATE;
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
      const call = (content: null | string): ChatMessage[] => [
        user,
        { role: 'assistant', content, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: { a: 1 } } }] },
      ];
      this.capsCache = {
        systemRole: shows([{ role: 'system', content: MARKER }, user]),
        stringContent: shows([{ role: 'user', content: MARKER }]),
        typedContent: typed.includes(MARKER) && !typed.includes(MARKER_2),
        tools: (render([user], [{ type: 'function', function: { name: marker, description: 'd', parameters: { type: 'object', properties: {} } } }]) ?? '').includes(marker),
        needsTools: render([user], null) === undefined && render([user]) !== undefined,
        nonNullContent: render(call(null)) === undefined && render(call('')) !== undefined,
      };
      // a template that renders nothing here tells nothing: keep llama.cpp's defaults
      if (!rendered) this.capsCache = { systemRole: true, stringContent: true, typedContent: false, tools: false, needsTools: false, nonNullContent: false };
    }
    return this.capsCache;
  }

  /**
   * llama.cpp's message workarounds: "developer" becomes "system" (except for gpt-oss templates);
   * a system message the template would drop or reject is merged into the next message; content
   * parts become text for templates that only take strings, and the reverse.
   */
  private normalize(messages: readonly ChatMessage[]): ChatMessage[] {
    let out = messages.map((m) => ({ ...m }));
    if (!this.source.includes('<|channel|>')) {
      for (const m of out) if (m.role === 'developer') m.role = 'system';
    }
    const caps = this.caps;
    if (!caps.systemRole && out.length > 0 && out[0].role === 'system') {
      if (out.length > 1) out[1].content = `${textOf(out[0].content)}\n${textOf(out[1].content)}`;
      out = out.slice(1);
    }
    if (caps.nonNullContent) for (const m of out) if (m.content === null) m.content = '';
    const onlyString = caps.stringContent && !caps.typedContent;
    const onlyTyped = !caps.stringContent && caps.typedContent;
    for (const m of out) {
      if (onlyString && Array.isArray(m.content)) m.content = textOf(m.content);
      else if (onlyTyped && typeof m.content === 'string') m.content = [{ type: 'text', text: m.content }];
    }
    return out;
  }
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
