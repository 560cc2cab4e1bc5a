/**
 * A token budget for a reasoning model's `<think>` block (or gpt-oss's analysis channel) (llama.cpp's reasoning-budget sampler,
 * `common/reasoning-budget.cpp`; llama-server's `reasoning_budget_tokens`, Anthropic's
 * `thinking.budget_tokens`).
 *
 * The block counts when it opens the output (after whitespace), or from the first token when the
 * chat prompt left it open, as the API's reasoning splitter reads it. Its tokens are counted; when
 * the budget is spent, and the last token did not stop inside a UTF-8 character, the sequence is
 * forced through `forced` (a message, then the end tag's tokens), after which the model writes its
 * answer. A block the model closes itself, or output that does not start with one, ends the
 * budget's work. Tags are matched on the tokens' bytes, so a tag written as several tokens counts.
 */
export interface ReasoningBudgetSpec {
  /** Reasoning tokens allowed (after the opening tag); 0 closes the block at once. */
  tokens: number;
  /** The tokens forced when the budget is spent: the message, then the closing tag. */
  forced: readonly number[];
  /** The prompt left the block open: the output starts inside it. */
  open: boolean;
  /** The block's tags (default THINK_TAGS; gpt-oss: HARMONY_TAGS). */
  tags?: ReasoningTags;
}

export interface ReasoningTags {
  open: string;
  close: string;
}

/** `<think>` … `</think>` (Qwen3, DeepSeek-R1 and most reasoning models). */
export const THINK_TAGS: ReasoningTags = { open: '<think>', close: '</think>' };
/** gpt-oss's analysis channel (llama.cpp's gpt-oss parser: start `<|channel|>analysis<|message|>`, end `<|end|>`). */
export const HARMONY_TAGS: ReasoningTags = { open: '<|channel|>analysis<|message|>', close: '<|end|>' };

export class ReasoningBudget {
  private state: 'start' | 'counting' | 'forcing' | 'done';
  /** Output bytes so far (as latin1: the tags are ASCII), while looking for the opening tag. */
  private head = '';
  /** The reasoning's text since the last point that cannot be part of the closing tag. */
  private tail = '';
  private remaining: number;
  private at = 0;
  /** Bytes still owed to the UTF-8 character the last token stopped in. */
  private owed = 0;

  private readonly open: string;
  private readonly close: string;

  /** `pieces`: each token's output bytes (control tokens' text included: the tags may be control tokens). */
  constructor(
    private readonly spec: ReasoningBudgetSpec,
    private readonly pieces: readonly Uint8Array[],
  ) {
    this.open = (spec.tags ?? THINK_TAGS).open;
    this.close = (spec.tags ?? THINK_TAGS).close;
    this.remaining = spec.tokens;
    this.state = spec.open ? 'counting' : 'start';
    if (this.state === 'counting' && this.remaining <= 0) this.state = 'forcing';
  }

  /** The token the output must take next, or undefined when the model chooses. */
  get forcedToken(): number | undefined {
    return this.state === 'forcing' ? this.spec.forced[this.at] : undefined;
  }

  /** Whether the budget can still act. */
  get active(): boolean {
    return this.state !== 'done';
  }

  /**
   * Tokens the model may choose from here before the budget could force one: what a speculative
   * step may commit at most (drafts + 1). 0 while forcing.
   */
  get freeTokens(): number {
    switch (this.state) {
      case 'done':
        return Infinity;
      case 'forcing':
        return 0;
      case 'counting':
        return Math.max(1, this.remaining);
      case 'start':
        // The opening tag takes at least one token before counting starts.
        return this.spec.tokens + 1;
    }
  }

  /** A token the sequence committed. */
  accept(token: number): void {
    const bytes = this.pieces[token] ?? new Uint8Array(0);
    const text = latin1(bytes);
    switch (this.state) {
      case 'start': {
        this.head += text;
        const lead = this.head.trimStart();
        if (lead.startsWith(this.open)) {
          this.state = 'counting';
          this.tail = lead.slice(this.open.length);
          if (this.closed()) return;
          // The opening tag's own token is not reasoning; text after it in the same token is.
          if (this.tail.length > 0) this.spend(bytes);
          else if (this.remaining <= 0) this.state = 'forcing';
        } else if (lead.length > 0 && !this.open.startsWith(lead)) {
          this.state = 'done';
        }
        return;
      }
      case 'counting':
        this.tail += text;
        if (this.closed()) return;
        this.spend(bytes);
        return;
      case 'forcing':
        if (++this.at >= this.spec.forced.length) this.state = 'done';
        return;
      case 'done':
        return;
    }
  }

  /** Whether the reasoning text so far holds the closing tag (the model closed the block). */
  private closed(): boolean {
    if (this.tail.includes(this.close)) {
      this.state = 'done';
      return true;
    }
    this.tail = this.tail.slice(-(this.close.length - 1));
    return false;
  }

  /** Counts one reasoning token; when the budget is spent, forcing starts at a character boundary. */
  private spend(bytes: Uint8Array): void {
    this.owed = utf8Owed(this.owed, bytes);
    this.remaining--;
    if (this.remaining <= 0 && this.owed === 0) this.state = this.spec.forced.length ? 'forcing' : 'done';
  }
}

function latin1(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return s;
}

/** Continuation bytes still expected after `bytes`, given `owed` expected before them. */
function utf8Owed(owed: number, bytes: Uint8Array): number {
  for (const b of bytes) {
    if (owed > 0 && (b & 0xc0) === 0x80) owed--;
    else if (b >= 0xf0) owed = 3;
    else if (b >= 0xe0) owed = 2;
    else if (b >= 0xc0) owed = 1;
    else owed = 0;
  }
  return owed;
}
