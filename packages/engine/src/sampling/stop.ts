import { EngineError } from '../errors';

export interface StopMatcherOptions {
  /**
   * Strings that end generation; the text from the stop string on is never emitted. Non-empty
   * strings, any number. Default: none.
   */
  stop?: readonly string[];
  /** End-of-generation token ids (EOS, EOT, `<|im_end|>` …); their text is never emitted. Default: none. */
  eogTokens?: ReadonlySet<number>;
}

/** What one step of the stream yields: `text` is safe to send to the client now. */
export type StopStep =
  | { text: string; done: false }
  | { text: string; done: true; reason: 'stop'; stop: string }
  | { text: string; done: true; reason: 'eog'; token: number };

type Finished = Extract<StopStep, { done: true }>;

/**
 * Finds stop strings and end-of-generation tokens in streamed output.
 *
 * Text that could still turn out to be the start of a stop string is held back until the next
 * piece settles it, so a stop string split across tokens ("Hel" + "lo\nUser:" with "\nUser:") never
 * reaches the client. The result does not depend on how the text is split: the stop string that
 * completes first in the text (the one ending earliest; on a tie, the longer) wins, as it would if
 * the text came one character at a time.
 */
export class StopMatcher {
  private readonly stops: readonly string[];
  private readonly eog: ReadonlySet<number>;
  private pending = '';
  private finished: Finished | undefined;
  private flushed = false;

  constructor(options: StopMatcherOptions = {}) {
    const stops = options.stop ?? [];
    for (const s of stops) {
      if (typeof s !== 'string' || s.length === 0) {
        throw new EngineError('KAIL_E_INVALID_ARG', `stop strings must be non-empty strings, got ${JSON.stringify(s)}`);
      }
    }
    this.stops = [...new Set(stops)];
    this.eog = options.eogTokens ?? new Set();
  }

  /** Whether a stop string or end-of-generation token has been seen, or `flush` called. */
  get done(): boolean {
    return this.finished !== undefined || this.flushed;
  }

  /** Text held back because it may begin a stop string. */
  get held(): string {
    return this.pending;
  }

  /** Feeds one sampled token with its decoded text. An end-of-generation token releases the held text and ends. */
  pushToken(token: number, piece: string): StopStep {
    this.checkOpen();
    if (this.finished) return { ...this.finished, text: '' };
    if (this.eog.has(token)) {
      const text = this.pending;
      this.pending = '';
      this.finished = { text: '', done: true, reason: 'eog', token };
      return { ...this.finished, text };
    }
    return this.push(piece);
  }

  /**
   * Feeds decoded text. After a stop, further text (a token already in flight) is ignored and the
   * same end is reported again with no text.
   */
  push(piece: string): StopStep {
    this.checkOpen();
    if (this.finished) return { ...this.finished, text: '' };
    if (this.stops.length === 0) return { text: piece, done: false };

    const buf = this.pending + piece;
    // The held text holds no whole stop string, so a match must end inside the new piece.
    let bestStart = -1;
    let bestEnd = Infinity;
    let bestStop = '';
    for (const s of this.stops) {
      const at = buf.indexOf(s, Math.max(0, this.pending.length - s.length + 1));
      if (at < 0) continue;
      const end = at + s.length;
      if (end < bestEnd || (end === bestEnd && at < bestStart)) {
        bestStart = at;
        bestEnd = end;
        bestStop = s;
      }
    }
    if (bestStart >= 0) {
      this.pending = '';
      this.finished = { text: '', done: true, reason: 'stop', stop: bestStop };
      return { ...this.finished, text: buf.slice(0, bestStart) };
    }

    const hold = this.longestStopPrefixSuffix(buf);
    this.pending = buf.slice(buf.length - hold);
    return { text: buf.slice(0, buf.length - hold), done: false };
  }

  /** Ends the stream without a stop (length limit, cancellation) and returns the held text. */
  flush(): string {
    const text = this.pending;
    this.pending = '';
    this.flushed = true;
    return text;
  }

  private checkOpen(): void {
    if (this.flushed) throw new EngineError('KAIL_E_INTERNAL', 'StopMatcher: text pushed after flush()');
  }

  /** Length of the longest suffix of `buf` that is a proper prefix of some stop string. */
  private longestStopPrefixSuffix(buf: string): number {
    let hold = 0;
    for (const s of this.stops) {
      for (let len = Math.min(s.length - 1, buf.length); len > hold; len--) {
        if (buf.endsWith(s.slice(0, len))) {
          hold = len;
          break;
        }
      }
    }
    return hold;
  }
}
