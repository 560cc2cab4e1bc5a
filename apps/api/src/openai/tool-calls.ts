import { randomUUID } from 'node:crypto';

/**
 * Tool calls in model output, in the Hermes format that Qwen2.5, Qwen3 (MoE included), QwQ and the
 * Hermes models are trained on and their chat templates describe:
 *
 *     <tool_call>
 *     {"name": "get_weather", "arguments": {"city": "Paris"}}
 *     </tool_call>
 *
 * A block whose JSON does not parse, or that the output cuts off, stays in the text, as
 * llama-server leaves it. Other models' formats (Llama 3.1's bare JSON, Mistral's [TOOL_CALLS],
 * DeepSeek's tool tokens) are not parsed: their calls arrive as text.
 */

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** Splits finished output into its text and the tool calls it makes. */
export function parseToolCalls(text: string): { content: string; calls: ToolCall[] } {
  const calls: ToolCall[] = [];
  let content = '';
  let at = 0;
  for (;;) {
    const start = text.indexOf(OPEN, at);
    if (start < 0) break;
    const end = text.indexOf(CLOSE, start + OPEN.length);
    if (end < 0) break;
    const call = toolCallOf(text.slice(start + OPEN.length, end));
    if (call) {
      calls.push(call);
      content += text.slice(at, start);
    } else content += text.slice(at, end + CLOSE.length);
    at = end + CLOSE.length;
  }
  content += text.slice(at);
  return { content: calls.length ? content.trim() : content, calls };
}

function toolCallOf(body: string): ToolCall | null {
  let v: unknown;
  try {
    v = JSON.parse(body);
  } catch {
    return null;
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return null;
  const { name, arguments: args } = v as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string' || name.length === 0) return null;
  // OpenAI sends arguments as a JSON string; a model writes an object (or, sometimes, the string).
  const argText = typeof args === 'string' ? args : JSON.stringify(args ?? {});
  return { id: `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`, type: 'function', function: { name, arguments: argText } };
}

/**
 * Streams a choice's text while holding back what may be a tool call: everything from the first
 * `<tool_call>`, and an ending that could still become one. `finish` parses what was held.
 */
export class ToolCallStream {
  private held = '';
  private holding = false;

  /** Adds generated text; returns the part that can go to the client as content now. */
  push(text: string): string {
    if (this.holding) {
      this.held += text;
      return '';
    }
    const all = this.held + text;
    const start = all.indexOf(OPEN);
    if (start >= 0) {
      this.holding = true;
      this.held = all.slice(start);
      return all.slice(0, start);
    }
    // Keep back the longest ending that is a beginning of the marker.
    let keep = Math.min(OPEN.length - 1, all.length);
    while (keep > 0 && !OPEN.startsWith(all.slice(all.length - keep))) keep--;
    this.held = all.slice(all.length - keep);
    return all.slice(0, all.length - keep);
  }

  /** The end of the output: the tool calls, and the held text that was not one. */
  finish(): { content: string; calls: ToolCall[] } {
    const held = this.held;
    this.held = '';
    if (!this.holding) return { content: held, calls: [] };
    const parsed = parseToolCalls(held);
    return parsed.calls.length ? parsed : { content: held, calls: [] };
  }
}
