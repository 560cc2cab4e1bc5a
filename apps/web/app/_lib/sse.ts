/**
 * Incremental parser for an OpenAI-style server-sent-event stream: feed it text as it arrives,
 * get the JSON payload of every complete `data:` event; `[DONE]` ends the stream.
 */
export class SseParser {
  private buf = '';
  done = false;

  push(text: string): unknown[] {
    this.buf += text.replace(/\r\n/g, '\n');
    const out: unknown[] = [];
    let i: number;
    while ((i = this.buf.indexOf('\n\n')) >= 0) {
      const event = this.buf.slice(0, i);
      this.buf = this.buf.slice(i + 2);
      const data = event
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n');
      if (!data) continue;
      if (data === '[DONE]') {
        this.done = true;
        continue;
      }
      try {
        out.push(JSON.parse(data));
      } catch {
        throw new Error(`the server sent an event that is not JSON: ${data.slice(0, 120)}`);
      }
    }
    return out;
  }
}

export interface ChatChunk {
  choices?: { delta?: { content?: string; reasoning_content?: string }; finish_reason?: string | null }[];
  usage?: { prompt_tokens: number; completion_tokens: number };
  error?: { message: string };
}

/** Timing of one streamed completion, measured in the browser. */
export interface StreamTiming {
  /** Request sent -> first content token, ms. */
  ttftMs: number | null;
  /** Completion tokens per second after the first one (decode speed). */
  tokensPerSecond: number | null;
  completionTokens: number;
  totalMs: number;
}

/**
 * Decode speed as the console shows it: tokens after the first over the time after the first
 * (the first token's time is TTFT, which includes the prompt).
 */
export function streamTiming(startMs: number, firstTokenMs: number | null, endMs: number, completionTokens: number): StreamTiming {
  const decodeMs = firstTokenMs === null ? 0 : endMs - firstTokenMs;
  return {
    ttftMs: firstTokenMs === null ? null : firstTokenMs - startMs,
    tokensPerSecond: completionTokens > 1 && decodeMs > 0 ? ((completionTokens - 1) * 1000) / decodeMs : null,
    completionTokens,
    totalMs: endMs - startMs,
  };
}
