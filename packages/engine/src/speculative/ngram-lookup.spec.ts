import { createSampler } from '../sampling/sampler';
import { lookupDraft } from './ngram-lookup';
import { chooseK } from './speculative-decoder';

describe('lookupDraft', () => {
  it('proposes what followed the most recent earlier copy of the longest matching suffix', () => {
    //            0  1  2  3  4  5  6  7  8  9
    const h = [1, 2, 3, 9, 1, 2, 3, 4, 5, 2, 3];
    // suffix [2,3] last appeared at 5..6 (before 9..10), followed by 4, 5, 2.
    expect(lookupDraft(h, 3)).toEqual([4, 5, 2]);
    // k bounds the proposal; what follows may run up to the end of the history.
    expect(lookupDraft(h, 1)).toEqual([4]);
    expect(lookupDraft(h, 20)).toEqual([4, 5, 2, 3]);
  });

  it('prefers longer n-grams and returns nothing without a match', () => {
    // [7, 8] matches at 0 (followed by 1); the 1-gram [8] also matches at 3 (followed by 2).
    expect(lookupDraft([7, 8, 1, 8, 2, 7, 8], 1)).toEqual([1]);
    expect(lookupDraft([7, 8, 1, 8, 2, 7, 8], 1, 1, 1)).toEqual([2]);
    expect(lookupDraft([1, 2, 3, 4], 4)).toEqual([]);
    expect(lookupDraft([5], 4)).toEqual([]);
    expect(lookupDraft([5, 5], 0)).toEqual([]);
  });
});

describe('chooseK', () => {
  it('drafts long when acceptance is high and the draft is cheap, short otherwise', () => {
    expect(chooseK(0.99, 0.05, 1, 12)).toBe(12);
    expect(chooseK(0.1, 0.3, 1, 12)).toBe(1);
    const mid = chooseK(0.7, 0.1, 1, 12);
    expect(mid).toBeGreaterThan(1);
    expect(mid).toBeLessThan(12);
    expect(chooseK(0.7, 0.1, 1, 12)).toBeLessThanOrEqual(chooseK(0.9, 0.1, 1, 12));
  });
});

describe('Sampler.probabilities', () => {
  const logits = Float32Array.from({ length: 200 }, (_, i) => Math.sin(i * 1.7) * 4);
  it.each([
    [{ temperature: 0.8 }],
    [{ temperature: 1.3, topK: 20 }],
    [{ temperature: 1, topP: 0.7, minP: 0.02 }],
    [{ temperature: 0.7, topK: 50, topP: 0.9, repetitionPenalty: 1.3 }],
  ])('is the distribution sample() draws from (%j)', (params) => {
    const hist = [3, 5, 7, 9];
    const s = createSampler({ ...params, seed: 7 });
    const p = s.probabilities(logits, hist);
    expect(p.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 5);
    for (let i = 0; i < 50; i++) {
      const r = s.sample(logits, hist);
      expect(p[r.token]).toBeGreaterThan(0);
      expect(Math.log(p[r.token])).toBeCloseTo(r.logprob, 4);
    }
  });
  it('is one-hot at the argmax when greedy', () => {
    const p = createSampler({ temperature: 0 }).probabilities(logits);
    expect(p.filter((x) => x > 0)).toEqual(Float32Array.of(1));
    expect(p.indexOf(1)).toBe(createSampler({ temperature: 0 }).sample(logits).token);
  });
});
