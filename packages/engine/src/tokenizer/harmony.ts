/**
 * gpt-oss answers in OpenAI's harmony format: a sequence of messages, each a header and a body,
 *
 *     <|channel|>analysis<|message|>…reasoning…<|end|>
 *     <|start|>assistant<|channel|>final<|message|>…the answer…
 *     <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}
 *
 * (the chat template's generation prompt ends with `<|start|>assistant`, so the first header starts
 * at `<|channel|>`; `<|end|>` and the end-of-generation `<|return|>`/`<|call|>` are control tokens,
 * which the engine does not render, so a message also ends where the next `<|start|>` begins).
 * As llama-server's gpt-oss parser: the `analysis` channel is reasoning, `final` and a
 * `commentary` message without a recipient (a preamble) are content, and a message to a recipient
 * (`to=functions.NAME`, in the channel or the role part of the header) is a tool call whose body is
 * the arguments. A call is handed on as a Hermes block, `<tool_call>{"name": …, "arguments": …}</tool_call>`,
 * in the content, so the tool-call parsers (tool-calls.ts, tool-call-stream.ts) take it from there
 * like any other model's; arguments that are not JSON leave the block as text, as they do there.
 */
import type { Split } from './reasoning';

/**
 * A harmony answer starts with one of these (after whitespace): a channel, or a recipient in the
 * role part of the header (as a forced call may be written, ` to=functions.f<|channel|>…`).
 */
export const HARMONY_STARTS = ['<|channel|>', 'to=functions.'];
const MESSAGE = '<|message|>';
/** What ends a message body. */
const ENDS = ['<|end|>', '<|start|>', '<|call|>', '<|return|>'];

interface Header {
  channel: string;
  recipient: string | null;
}

/** The channel and recipient of a header (the text between a message's start and `<|message|>`). */
export function parseHeader(h: string): Header {
  const ch = /<\|channel\|>\s*([^\s<]+)/.exec(h);
  const to = /\bto=([^\s<]+)/.exec(h);
  return { channel: ch ? ch[1] : '', recipient: to ? to[1] : null };
}

/**
 * Splits a harmony answer as it streams: `push` returns the reasoning and content that can go out
 * now, holding back what may still be part of a marker; tool calls go out whole, when their
 * message ends.
 */
export class HarmonySplitter {
  private held = '';
  private inBody = false;
  private header = '';
  private msg: Header = { channel: '', recipient: null };
  private args = '';
  private sentReasoning = false;
  /** The last analysis message ended: the next one starts a new paragraph. */  private sentContent = false;

  /** In an analysis (reasoning) message: its header read, its end not yet. */
  get inReasoning(): boolean {
    return this.inBody && this.msg.channel === 'analysis';
  }

  push(text: string): Split {
    const out: Split = { reasoning: '', content: '' };
    let s = this.held + text;
    this.held = '';
    for (;;) {
      if (!this.inBody) {
        s = this.header + s;
        const m = s.indexOf(MESSAGE);
        if (m < 0) {
          this.header = s;
          return out;
        }
        this.msg = parseHeader(s.slice(0, m));
        this.header = '';
        this.inBody = true;
        this.args = '';
        s = s.slice(m + MESSAGE.length);
        continue;
      }
      let end = -1;
      let marker = '';
      for (const e of ENDS) {
        const i = s.indexOf(e);
        if (i >= 0 && (end < 0 || i < end)) {
          end = i;
          marker = e;
        }
      }
      if (end >= 0) {
        this.body(s.slice(0, end), true, out);
        this.inBody = false;
        // `<|start|>` begins the next header; the others only end this message.
        s = s.slice(end + (marker === '<|start|>' ? 0 : marker.length));
        if (marker === '<|start|>') {
          this.header = '';
          s = s.slice(marker.length);
        }
        continue;
      }
      // Hold back an ending that may begin a marker.
      let keep = Math.min(s.length, Math.max(...ENDS.map((e) => e.length)) - 1);
      while (keep > 0 && !ENDS.some((e) => e.startsWith(s.slice(s.length - keep)))) keep--;
      this.body(s.slice(0, s.length - keep), false, out);
      this.held = s.slice(s.length - keep);
      return out;
    }
  }

  /**
   * The end of the answer. A call ends with `<|call|>`, which is not rendered, so a call whose
   * arguments are whole JSON is complete; other arguments were cut off (max_tokens) and go on as an
   * unterminated block, which the tool-call parsers report as cut and leave as text. Other
   * messages count as far as they got.
   */
  finish(): Split {
    const out: Split = { reasoning: '', content: '' };
    const held = this.held;
    this.held = '';
    if (this.inBody) {
      if (this.msg.recipient && !isJson(this.args + held)) {
        out.content += this.lead(callOpen(this.msg.recipient) + this.args + held);
      } else this.body(held, true, out);
    }
    this.inBody = false;
    return out;
  }

  private body(t: string, last: boolean, out: Split): void {
    const { channel, recipient } = this.msg;
    if (recipient) {
      this.args += t;
      if (last) {
        out.content += this.lead(`${callOpen(recipient)}${this.args.trim() || '{}'}}</tool_call>`);
        this.args = '';
      }
      return;
    }
    if (channel === 'analysis') {
      // Reasoning: leading whitespace of the first piece and trailing whitespace of each message dropped.
      if (!this.sentReasoning) t = t.trimStart();
      if (last) t = t.trimEnd();
      if (t) {
        if (this.sentReasoning && this.reasoningEnded) t = `\n\n${t}`;
        this.sentReasoning = true;
      }
      this.reasoningEnded = last && this.sentReasoning;
      out.reasoning += t;
      return;
    }
    out.content += this.lead(t);
  }

  private reasoningEnded = false;

  /** Content pieces: leading whitespace of the answer dropped. */
  private lead(t: string): string {
    if (!this.sentContent) t = t.trimStart();
    if (t) this.sentContent = true;
    return t;
  }
}

function isJson(t: string): boolean {
  try {
    JSON.parse(t);
    return true;
  } catch {
    return false;
  }
}

/** A call handed on as a Hermes block, up to its arguments. */
function callOpen(recipient: string): string {
  return `<tool_call>{"name": ${JSON.stringify(callName(recipient))}, "arguments": `;
}

/** The function a recipient names: `functions.NAME` → NAME; other recipients (built-in tools) as written. */
function callName(recipient: string): string {
  return recipient.startsWith('functions.') ? recipient.slice('functions.'.length) : recipient;
}
