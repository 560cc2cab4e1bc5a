/**
 * llama-server's limits for code completion (its `n_indent` and `t_max_predict_ms`, which editor
 * plugins such as llama.vim and llama.vscode send), applied to the text a sequence emits:
 *
 * - `nIndent`: every line after the first newline must start with at least `nIndent` spaces or
 *   tabs. The first line that reaches another character sooner (a newline included: an empty line
 *   counts as too little indentation, as in llama-server) ends the output, cut just before that
 *   character. llama-server checks one line per token and may notice a token or two later, then
 *   cuts at the same place (its streamed text keeps the few characters already sent); here the
 *   check is per character, so streamed and whole answers end at the same character.
 * - `tMaxPredictMs`: once the generation has run that long since its first token, the output ends
 *   after the next token whose text holds a newline (that text kept whole).
 */
export class LineLimits {
  /** Past the first newline, at the start of a line whose indentation is not yet enough. */
  private checking = false;
  private indent = 0;

  constructor(
    private readonly nIndent: number,
    private readonly tMaxPredictMs: number,
  ) {}

  /** Whether any limit is set. */
  get active(): boolean {
    return this.nIndent > 0 || this.tMaxPredictMs > 0;
  }

  /**
   * One token's emitted text and the milliseconds since the first generated token: the text to
   * keep, and whether the output ends here.
   */
  push(text: string, msSinceFirst: number): { text: string; end: boolean; cut: boolean } {
    if (this.nIndent > 0) {
      for (let i = 0; i < text.length; i++) {
        const c = text[i];
        if (this.checking) {
          if (c === ' ' || c === '\t') {
            if (++this.indent >= this.nIndent) this.checking = false;
            continue;
          }
          return { text: text.slice(0, i), end: true, cut: true };
        }
        if (c === '\n') {
          this.checking = true;
          this.indent = 0;
        }
      }
    }
    const end = this.tMaxPredictMs > 0 && msSinceFirst > this.tMaxPredictMs && text.includes('\n');
    return { text, end, cut: false };
  }
}
