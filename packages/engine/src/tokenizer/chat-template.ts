// Chat templates: the model's Jinja template (`tokenizer.chat_template`) rendered with
// @huggingface/jinja, with the variables llama.cpp's jinja path passes (messages, tools,
// add_generation_prompt, bos_token, eos_token, enable_thinking).

import type { Template as JinjaTemplate } from '@huggingface/jinja' with { 'resolution-mode': 'import' };

// The package is an ES module with a CommonJS build under its "require" export; this package is
// CommonJS, so it is loaded with require and typed from the ESM declarations.
const { Template } = require('@huggingface/jinja') as { Template: typeof JinjaTemplate };

import { TokenizerError } from './errors';
import type { Tokenizer } from './tokenizer';

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

export class ChatTemplate {
  readonly source: string;
  private readonly template: JinjaTemplate;
  private readonly tokens: Required<ChatTemplateTokens>;

  /** Parses a Jinja chat template; an empty source or "chatml" means CHATML_TEMPLATE. */
  constructor(source: string | undefined, tokens: ChatTemplateTokens = {}) {
    this.source = source === undefined || source === '' || source === 'chatml' ? CHATML_TEMPLATE : source;
    this.tokens = { bosToken: '', eosToken: '', addBos: false, addEos: false, ...tokens };
    try {
      this.template = new Template(this.source);
    } catch (e) {
      throw new TokenizerError('KAIL_E_BAD_MODEL', `cannot parse chat template: ${(e as Error).message}`);
    }
  }

  /**
   * The model's template (`tokenizer.chat_template`, or `tokenizer.chat_template.<name>` for a named
   * one such as "tool_use"), with its BOS/EOS texts. Falls back to ChatML when the model has none.
   */
  static fromTokenizer(tokenizer: Tokenizer, options: { name?: string; override?: string } = {}): ChatTemplate {
    const v = tokenizer.vocab;
    let source = options.override;
    if (source === undefined) source = options.name ? v.namedChatTemplates.get(options.name) : v.chatTemplate;
    if (source === undefined && !options.name) source = v.namedChatTemplates.get('tool_use');
    const text = (id: number | null) =>
      id === null ? '' : new TextDecoder().decode(tokenizer.tokenToPiece(id, { special: true }));
    return new ChatTemplate(source, {
      bosToken: text(v.special.bos),
      eosToken: text(v.special.eos),
      addBos: v.addBos,
      addEos: v.addEos,
    });
  }

  get usesDefault(): boolean {
    return this.source === CHATML_TEMPLATE;
  }

  /**
   * Renders the conversation to the prompt text. Tokenize the result with `parseSpecial: true` so
   * the template's special-token text becomes those tokens, and `addSpecial: true` for BOS/EOS.
   */
  render(messages: readonly ChatMessage[], options: ChatTemplateRenderOptions = {}): string {
    const vars: Record<string, unknown> = {
      messages,
      bos_token: this.tokens.bosToken,
      eos_token: this.tokens.eosToken,
      enable_thinking: options.enableThinking ?? true,
      add_generation_prompt: options.addGenerationPrompt ?? true,
    };
    if (options.tools !== undefined && options.tools.length > 0) vars.tools = options.tools;
    Object.assign(vars, options.variables);

    let out: string;
    try {
      out = this.template.render(vars);
    } catch (e) {
      throw new TokenizerError('KAIL_E_INVALID_ARG', `chat template failed: ${(e as Error).message}`);
    }
    const { bosToken, eosToken, addBos, addEos } = this.tokens;
    if (addBos && bosToken !== '' && out.startsWith(bosToken)) out = out.slice(bosToken.length);
    if (addEos && eosToken !== '' && out.endsWith(eosToken)) out = out.slice(0, out.length - eosToken.length);
    return out;
  }
}
