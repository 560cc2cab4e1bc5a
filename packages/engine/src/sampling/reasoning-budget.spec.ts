import { HARMONY_TAGS, ReasoningBudget } from './reasoning-budget';

// A vocabulary of byte strings: tags whole and split, text, and a two-byte character split in two.
const VOCAB = ['<think>', '</think>', 'a', ' ', '\n', '<', 'think>', 'Done.', '</', 'think>\n\n'];
const pieces = [...VOCAB.map((s) => Buffer.from(s, 'latin1')), Uint8Array.of(0xc3), Uint8Array.of(0xa9)];
const [OPEN, CLOSE, A, SPACE, NL, LT, THINK_GT, DONE, CLOSE_START, THINK_GT_NL, E_HEAD, E_TAIL] = pieces.map((_, i) => i);
const FORCED = [DONE, CLOSE];

/** Feeds the model's choices; where the budget forces a token, that token is taken instead. Returns the output. */
function run(budget: ReasoningBudget, choices: number[], steps = choices.length + FORCED.length): number[] {
  const out: number[] = [];
  let next = 0;
  for (let i = 0; i < steps; i++) {
    const forced = budget.forcedToken;
    const t = forced ?? choices[next++];
    if (t === undefined) break;
    out.push(t);
    budget.accept(t);
  }
  return out;
}

describe('ReasoningBudget', () => {
  it('counts the tokens after an opening tag at the start of the output and then forces the message and the closing tag', () => {
    const b = new ReasoningBudget({ tokens: 3, forced: FORCED, open: false }, pieces);
    expect(run(b, [NL, OPEN, A, A, A, A, A])).toEqual([NL, OPEN, A, A, A, DONE, CLOSE, A, A]);
    expect(b.active).toBe(false);
    expect(b.forcedToken).toBeUndefined();
  });

  it('counts from the first token when the prompt left the block open', () => {
    const b = new ReasoningBudget({ tokens: 2, forced: FORCED, open: true }, pieces);
    expect(run(b, [A, SPACE, A, A])).toEqual([A, SPACE, DONE, CLOSE, A, A]);
  });

  it('closes at once with a budget of 0', () => {
    expect(run(new ReasoningBudget({ tokens: 0, forced: FORCED, open: true }, pieces), [A])).toEqual([DONE, CLOSE, A]);
    expect(run(new ReasoningBudget({ tokens: 0, forced: FORCED, open: false }, pieces), [OPEN, A])).toEqual([OPEN, DONE, CLOSE, A]);
  });

  it('matches tags written as several tokens', () => {
    const b = new ReasoningBudget({ tokens: 2, forced: FORCED, open: false }, pieces);
    expect(run(b, [LT, THINK_GT, A, A, A])).toEqual([LT, THINK_GT, A, A, DONE, CLOSE, A]);
    // A block the model closes itself, across tokens, within its budget: nothing forced.
    const own = new ReasoningBudget({ tokens: 4, forced: FORCED, open: true }, pieces);
    expect(run(own, [A, CLOSE_START, THINK_GT_NL, A, A, A])).toEqual([A, CLOSE_START, THINK_GT_NL, A, A, A]);
    expect(own.active).toBe(false);
  });

  it('does nothing for output that does not open with a block', () => {
    const b = new ReasoningBudget({ tokens: 1, forced: FORCED, open: false }, pieces);
    expect(run(b, [SPACE, A, OPEN, A, A, A])).toEqual([SPACE, A, OPEN, A, A, A]);
    expect(b.active).toBe(false);
  });

  it('waits for the end of a UTF-8 character before forcing', () => {
    const b = new ReasoningBudget({ tokens: 1, forced: FORCED, open: true }, pieces);
    expect(run(b, [E_HEAD, E_TAIL, A])).toEqual([E_HEAD, E_TAIL, DONE, CLOSE, A]);
  });

  it("counts gpt-oss's analysis channel (opened over several tokens), ends at <|end|>, forces the message and <|end|>", () => {
    const H = ['<|channel|>', 'analysis', '<|message|>', 'x', '<|end|>', '<|start|>', 'assistant', 'final', 'Done.'];
    const hp = H.map((t) => Buffer.from(t, 'latin1'));
    const [CH, ANALYSIS, MSG, X, END, START, ASSISTANT, FINAL, DONE_H] = H.map((_, i) => i);
    const forced = [DONE_H, END];
    const spec = { tokens: 3, forced, open: false, tags: HARMONY_TAGS };
    // The budget runs out: the message and <|end|>, then the model goes on (to its final channel).
    expect(run(new ReasoningBudget(spec, hp), [CH, ANALYSIS, MSG, X, X, X, X, START], 10)).toEqual([CH, ANALYSIS, MSG, X, X, X, DONE_H, END, X, START]);
    // The model ends the analysis itself within the budget: nothing forced.
    const own = new ReasoningBudget(spec, hp);
    expect(run(own, [CH, ANALYSIS, MSG, X, END, START, ASSISTANT, CH, FINAL, MSG, X, X])).toEqual([CH, ANALYSIS, MSG, X, END, START, ASSISTANT, CH, FINAL, MSG, X, X]);
    expect(own.active).toBe(false);
    // Straight to the final channel: nothing to count.
    const fin = new ReasoningBudget(spec, hp);
    expect(run(fin, [CH, FINAL, MSG, X, X, X, X])).toEqual([CH, FINAL, MSG, X, X, X, X]);
    expect(fin.active).toBe(false);
  });
});
