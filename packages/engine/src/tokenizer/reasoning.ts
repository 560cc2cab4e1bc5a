/**
 * Reasoning in chat answers: the `<think>…</think>` block that reasoning models (Qwen3 and its MoE,
 * QwQ, DeepSeek R1/V3.1, GLM-4.5+, Kimi K2 Thinking) write before their answer goes to
 * `message.reasoning_content` (streamed as `delta.reasoning_content`), and the rest to `content`,
 * as llama-server's default reasoning format ("deepseek") and vLLM's reasoning parsers do.
 *
 * - The block counts only at the start of the answer (after whitespace); a `<think>` later on is text.
 * - When the template itself opened the block (its generation prompt ends with `<think>`: the
 *   engine says so with `reasoning_open`), the answer starts as reasoning.
 * - An answer cut off inside the block is all reasoning.
 * - Whitespace around the reasoning, and between `</think>` and the answer, is dropped.
 * - An answer that starts with a harmony header (`<|channel|>` or `to=functions.`: gpt-oss) is split by its channels
 *   instead (harmony.ts), tool calls included.
 */
import { THINK_TAGS, type ReasoningTags } from '../sampling/reasoning-budget';
import { HARMONY_STARTS, HarmonySplitter } from './harmony';

export { parseHeader } from './harmony';

const OPEN = '<think>';
const CLOSE = '</think>';

export interface Split {
  reasoning: string;
  content: string;
}

/** Splits a whole answer. */
export function splitReasoning(text: string, startsOpen: boolean): Split {
  const s = new ReasoningSplitter(startsOpen);
  const a = s.push(text);
  const b = s.finish();
  return { reasoning: (a.reasoning + b.reasoning).trim(), content: a.content + b.content };
}

/**
 * Splits an answer as it streams: `push` returns the reasoning and content that can go out now,
 * holding back what may still be part of a marker (and the whitespace the split drops).
 */
export class ReasoningSplitter {
  private state: 'start' | 'reasoning' | 'after' | 'content' | 'harmony';
  private harmony: HarmonySplitter | null = null;
  private held = '';
  /** Reasoning sent so far (its leading whitespace is dropped). */
  private sentReasoning = false;

  constructor(startsOpen: boolean) {
    this.state = startsOpen ? 'reasoning' : 'start';
  }

  /** Inside the reasoning (a <think> block, or a harmony analysis message) at this point of the answer. */
  get inReasoning(): boolean {
    return this.state === 'reasoning' || (this.state === 'harmony' && this.harmony!.inReasoning);
  }

  push(text: string): Split {
    const out: Split = { reasoning: '', content: '' };
    let s = this.held + text;
    this.held = '';
    for (;;) {
      if (this.state === 'harmony') return this.harmony!.push(s);
      if (this.state === 'start') {
        const lead = s.length - s.trimStart().length;
        const rest = s.slice(lead);
        if (rest.startsWith(OPEN)) {
          this.state = 'reasoning';
          s = rest.slice(OPEN.length);
          continue;
        }
        if (HARMONY_STARTS.some((h) => rest.startsWith(h))) {
          this.state = 'harmony';
          this.harmony = new HarmonySplitter();
          s = rest;
          continue;
        }
        if (OPEN.startsWith(rest) || HARMONY_STARTS.some((h) => h.startsWith(rest))) {
          // Whitespace, or the beginning of the marker: wait for more.
          this.held = s;
          return out;
        }
        this.state = 'content';
        out.content += s;
        return out;
      }
      if (this.state === 'reasoning') {
        const end = s.indexOf(CLOSE);
        if (end >= 0) {
          out.reasoning += this.reasoningText(s.slice(0, end), true);
          this.state = 'after';
          s = s.slice(end + CLOSE.length);
          continue;
        }
        // Hold back an ending that may begin the closing marker, and trailing whitespace (dropped
        // if the block ends after it).
        let keep = Math.min(CLOSE.length - 1, s.length);
        while (keep > 0 && !CLOSE.startsWith(s.slice(s.length - keep))) keep--;
        let cut = s.length - keep;
        while (cut > 0 && /\s/.test(s[cut - 1])) cut--;
        out.reasoning += this.reasoningText(s.slice(0, cut), false);
        this.held = s.slice(cut);
        return out;
      }
      if (this.state === 'after') {
        const t = s.trimStart();
        if (t.length === 0) return out;
        this.state = 'content';
        s = t;
        continue;
      }
      out.content += s;
      return out;
    }
  }

  /** The end of the answer: what was held back. */
  finish(): Split {
    if (this.state === 'harmony') return this.harmony!.finish();
    const held = this.held;
    this.held = '';
    if (this.state === 'start') return { reasoning: '', content: held };
    if (this.state === 'reasoning') return { reasoning: this.reasoningText(held.trimEnd(), true), content: '' };
    return { reasoning: '', content: held };
  }

  private reasoningText(t: string, last: boolean): string {
    if (!this.sentReasoning) t = t.trimStart();
    if (last) t = t.trimEnd();
    if (t.length) this.sentReasoning = true;
    return t;
  }
}

/** Whether a rendered chat prompt ends inside an opened block with these tags (default <think>): the answer then starts as reasoning. */
export function opensReasoning(text: string, t: ReasoningTags = THINK_TAGS): boolean {
  const open = text.lastIndexOf(t.open);
  return open >= 0 && text.indexOf(t.close, open) < 0 && text.slice(open + t.open.length).trim() === '';
}
