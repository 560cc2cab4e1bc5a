import { EngineError } from '../errors';
import { GbnfRecognizer, GbnfStacks, type GbnfGrammar } from './gbnf';
import type { ByteRecognizer } from './json-constraint';

/**
 * A lazy grammar's triggers (llama-server's `grammar_lazy` + `grammar_triggers`, as common/
 * sampling.cpp turns them into llama.cpp's trigger tokens and patterns): token ids, and regular
 * expressions searched in the output so far, read as bytes (one character per byte, as std::regex
 * reads a std::string).
 */
export interface LazyTriggers {
  tokens: readonly number[];
  patterns: readonly RegExp[];
}

/**
 * A trigger as a request gives it (types as llama.cpp's common_grammar_trigger_type); a token
 * trigger is `token` when `value` is empty, else the one token `value` spells.
 */
export interface TriggerSpec {
  type: number;
  value: string;
  token?: number;
}

const latin1 = (s: string) => Buffer.from(s, 'utf8').toString('latin1');
const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');

/**
 * The triggers of a request: a word that is one token of the vocabulary becomes that token (as
 * llama-server does), another word a pattern of its text; patterns as given (type 3 anchored at
 * both ends). Errors name the trigger.
 */
export function lazyTriggers(specs: readonly TriggerSpec[], tokenize: (s: string) => number[]): LazyTriggers {
  if (specs.length === 0) throw new EngineError('KAIL_E_INVALID_ARG', 'grammar_lazy needs grammar_triggers (no triggers set for lazy grammar)');
  const tokens: number[] = [];
  const patterns: RegExp[] = [];
  specs.forEach((t, i) => {
    const where = `grammar_triggers[${i}]`;
    if (t.type === 0) {
      if (t.value) {
        const ids = tokenize(t.value);
        if (ids.length !== 1) throw new EngineError('KAIL_E_INVALID_ARG', `${where}: '${t.value}' is ${ids.length} tokens, not one`);
        tokens.push(ids[0]);
      } else tokens.push(t.token ?? 0);
      return;
    }
    if (!t.value) throw new EngineError('KAIL_E_INVALID_ARG', `${where} has no value`);
    if (t.type === 1) {
      const ids = tokenize(t.value);
      if (ids.length === 1) tokens.push(ids[0]);
      else patterns.push(new RegExp(escapeRegex(latin1(t.value)), 'd'));
      return;
    }
    if (t.type !== 2 && t.type !== 3) throw new EngineError('KAIL_E_INVALID_ARG', `${where}.type must be 0 (token), 1 (word), 2 (pattern) or 3 (full pattern), got ${t.type}`);
    const src = t.type === 3 ? `^${t.value}$` : t.value;
    try {
      patterns.push(new RegExp(latin1(src), 'd'));
    } catch (e) {
      throw new EngineError('KAIL_E_INVALID_ARG', `${where}: ${(e as Error).message}`);
    }
  });
  return { tokens, patterns };
}

/**
 * Where a pattern triggers in the text so far: the start of its first non-empty capture group,
 * else of the match (llama_grammar_trigger_pattern::find); -1 when it does not match.
 */
function triggerStart(re: RegExp, text: string): number {
  const m = re.exec(text);
  if (!m) return -1;
  const spans = m.indices ?? [];
  for (let g = 1; g < spans.length; g++) {
    const sp = spans[g];
    if (sp && sp[1] > sp[0]) return sp[0];
  }
  return m.index;
}

/**
 * A GBNF grammar that holds the output only from a trigger on (llama.cpp's lazy grammars): while
 * awaiting one, every token is allowed and its bytes kept; a trigger token starts the grammar
 * at that token, a pattern at its start in the kept text, whose tokens from there are replayed
 * into the grammar. End of generation may come at any time before the trigger.
 */
export class LazyGbnfRecognizer implements ByteRecognizer {
  private awaiting = true;
  /** The output so far while awaiting (bytes as Latin-1 characters), and its tokens' spans. */
  private text = '';
  private spans: readonly (readonly [token: number, start: number, end: number])[] = [];

  constructor(
    private readonly triggers: LazyTriggers,
    private readonly grammar: GbnfRecognizer,
  ) {}

  static create(g: GbnfGrammar, triggers: LazyTriggers, table = new GbnfStacks()): LazyGbnfRecognizer {
    return new LazyGbnfRecognizer(triggers, new GbnfRecognizer(g, table));
  }

  /** Once triggered the grammar's trie walk applies. */
  get prefixClosed(): boolean {
    return !this.awaiting;
  }

  get done(): boolean {
    return !this.awaiting && this.grammar.done;
  }

  mayEnd(): boolean {
    return this.awaiting || this.grammar.done;
  }

  finished(): boolean {
    return !this.awaiting && this.grammar.finished();
  }

  wantsTokens(): boolean {
    return !this.awaiting && this.grammar.wantsTokens();
  }

  stateKey(): string {
    return this.awaiting ? `A${this.spans.map((s) => s[0]).join(',')}|${this.text}` : `G${this.grammar.stateKey()}`;
  }

  assign(o: LazyGbnfRecognizer): void {
    this.awaiting = o.awaiting;
    this.text = o.text;
    this.spans = o.spans;
    this.grammar.assign(o.grammar);
  }

  copy(): this {
    const r = new LazyGbnfRecognizer(this.triggers, this.grammar.copy());
    r.assign(this);
    return r as this;
  }

  feed(bytes: Uint8Array): boolean {
    return this.feedToken(-1, bytes);
  }

  feedToken(token: number, bytes: Uint8Array): boolean {
    if (!this.awaiting) return this.grammar.feedToken(token, bytes);
    if (token >= 0 && this.triggers.tokens.includes(token)) {
      this.awaiting = false;
      this.text = '';
      this.spans = [];
      return this.grammar.feedToken(token, bytes);
    }
    const start = this.text.length;
    this.text += Buffer.from(bytes).toString('latin1');
    this.spans = [...this.spans, [token, start, this.text.length]];
    for (const re of this.triggers.patterns) {
      const at = triggerStart(re, this.text);
      if (at < 0) continue;
      this.awaiting = false;
      const text = this.text;
      const spans = this.spans;
      this.text = '';
      this.spans = [];
      // The tokens from the trigger on, the first one from the trigger's byte.
      for (const [tok, s, e] of spans) {
        if (e <= at) continue;
        const piece = Buffer.from(text.slice(Math.max(s, at), e), 'latin1');
        if (piece.length && !this.grammar.feedToken(tok, piece)) return false;
      }
      return true;
    }
    return true;
  }
}
