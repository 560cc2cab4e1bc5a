import { NllAccumulator, perplexityChunks } from './perplexity';

describe('perplexity (llama-perplexity method)', () => {
  it('scores each row as -log softmax of its target, in float64', () => {
    const acc = new NllAccumulator();
    // Uniform logits over 4 tokens: -log(1/4) whatever the target.
    acc.addRows(new Float32Array([7, 7, 7, 7, 7, 7, 7, 7]), 4, [0, 3]);
    expect(acc.count).toBe(2);
    expect(acc.nll).toBeCloseTo(2 * Math.log(4), 12);
    expect(acc.ppl).toBeCloseTo(4, 10);
    expect(acc.pplError).toBe(0);
    // A confident row: logits (0, 10) score target 1 at log(1 + e^-10) and target 0 at 10 + that;
    // large logits do not overflow.
    const b = new NllAccumulator();
    b.addRows(new Float32Array([1000, 1010, 1000, 1010]), 2, [1, 0]);
    expect(b.nll).toBeCloseTo(2 * Math.log1p(Math.exp(-10)) + 10, 9);
    const mean = b.nll / 2;
    const sd = Math.sqrt((b.nll2 / 2 - mean * mean) / 1);
    expect(b.pplError).toBeCloseTo(sd * Math.exp(mean), 6);
  });

  it('cuts whole chunks, puts BOS first in each, and refuses a text shorter than two chunks', () => {
    const tokens = Array.from({ length: 21 }, (_, i) => 100 + i);
    expect(perplexityChunks(tokens, 8, 1)).toEqual([
      [1, 101, 102, 103, 104, 105, 106, 107],
      [1, 109, 110, 111, 112, 113, 114, 115],
    ]);
    expect(perplexityChunks(tokens, 8, null, 1)).toEqual([[100, 101, 102, 103, 104, 105, 106, 107]]);
    expect(tokens[0]).toBe(100);  // the input is not changed
    expect(() => perplexityChunks(tokens, 16, 1)).toThrow(/21 tokens; a chunk size of 16 needs at least 32/);
    expect(() => perplexityChunks(tokens, 3, 1)).toThrow(/at least 4 tokens/);
  });
});
