import { steadyRate } from './serve-stats';

describe('steadyRate', () => {
  it('is one stream\'s tokens per second between its first and last token', () => {
    expect(steadyRate([[0, 100, 200, 300, 400]])).toBeCloseTo(10, 9);
  });

  it('counts only the window where every stream decodes, so a late prefill stall is left out', () => {
    // Stream a decodes every 100 ms from t=0; b starts at 1000 (its prompt stalled a for 600 ms).
    const a = [0, 100, 200, 300, 900, 1000, 1100, 1200, 1300, 1400];
    const b = [1000, 1100, 1200, 1300, 1400, 1500];
    // Window (1000, 1400]: a emits 1100..1400 (4), b 1100..1400 (4): 8 tokens in 0.4 s.
    expect(steadyRate([a, b])).toBeCloseTo(20, 9);
  });

  it('is null when the streams never decode together or one has no token', () => {
    expect(steadyRate([[0, 100], [200, 300]])).toBeNull();
    expect(steadyRate([[0, 100], []])).toBeNull();
    expect(steadyRate([])).toBeNull();
  });
});
