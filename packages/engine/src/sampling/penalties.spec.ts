import { applyPenalties, penaltiesActive } from './penalties';

const base = { repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyLastN: 64 };

function penalize(logits: number[], history: number[], p: Partial<typeof base>): number[] {
  const src = new Float32Array(logits);
  const out = applyPenalties(src, history, { ...base, ...p }, new Float32Array(src.length));
  expect([...src]).toEqual(logits.map(Math.fround));
  return [...out];
}

describe('applyPenalties', () => {
  it('divides positive and multiplies non-positive logits of seen tokens only', () => {
    expect(penalize([4, -4, 0, 3, -2], [0, 1, 2, 0], { repetitionPenalty: 2 })).toEqual([2, -8, 0, 3, -2]);
  });

  it('applies the repetition penalty once per token, however often it was seen', () => {
    expect(penalize([8, 1], [0, 0, 0], { repetitionPenalty: 2 })).toEqual([4, 1]);
  });

  it('subtracts presence once and frequency per occurrence', () => {
    expect(penalize([1, 1, 1], [0, 1, 1, 1], { presencePenalty: 0.5, frequencyPenalty: 0.25 })).toEqual([0.25, -0.25, 1]);
  });

  it('combines them in llama.cpp order: scale first, then subtract', () => {
    expect(penalize([3, -3], [0, 1], { repetitionPenalty: 1.5, presencePenalty: 1 })).toEqual([1, -5.5]);
  });

  it('looks only at the last penaltyLastN tokens; -1 looks at all', () => {
    expect(penalize([4, 4, 4], [0, 1, 2], { repetitionPenalty: 2, penaltyLastN: 2 })).toEqual([4, 2, 2]);
    expect(penalize([4, 4, 4], [0, 1, 2], { repetitionPenalty: 2, penaltyLastN: -1 })).toEqual([2, 2, 2]);
  });

  it('ignores ids outside the vocabulary and returns the input when nothing is penalized', () => {
    const src = new Float32Array([1, 2]);
    expect(applyPenalties(src, [5, -1, 1.5], { ...base, repetitionPenalty: 2 }, new Float32Array(2))).toBe(src);
    expect(applyPenalties(src, [], { ...base, repetitionPenalty: 2 }, new Float32Array(2))).toBe(src);
  });

  it('reports whether any penalty is on', () => {
    expect(penaltiesActive(base)).toBe(false);
    expect(penaltiesActive({ ...base, repetitionPenalty: 1.1 })).toBe(true);
    expect(penaltiesActive({ ...base, frequencyPenalty: -0.1 })).toBe(true);
    expect(penaltiesActive({ ...base, presencePenalty: 1, penaltyLastN: 0 })).toBe(false);
  });
});
