import { EngineError } from '../errors';
import { logprobs } from './logprobs';

describe('logprobs', () => {
  it('is the log-softmax of the raw logits', () => {
    const r = logprobs(new Float32Array([Math.log(0.1), Math.log(0.2), Math.log(0.7)]), 1, 2);
    expect(r.token).toBe(1);
    expect(r.logprob).toBeCloseTo(Math.log(0.2), 6);
    expect(r.top.map((t) => t.token)).toEqual([2, 1]);
    expect(r.top[0].logprob).toBeCloseTo(Math.log(0.7), 6);
  });

  it('keeps precision for near-certain tokens', () => {
    const r = logprobs(new Float32Array([40, 0, 0]), 0);
    expect(r.logprob).toBeLessThan(0);
    expect(r.logprob).toBeCloseTo(-2 * Math.exp(-40), 20);
    expect(r.top).toEqual([]);
  });

  it('orders ties by id and gives -Infinity for masked tokens', () => {
    const r = logprobs(new Float32Array([1, NaN, 1, -Infinity]), 3, 10);
    expect(r.logprob).toBe(-Infinity);
    expect(r.top.map((t) => t.token)).toEqual([0, 2]);
    expect(r.top[0].logprob).toBeCloseTo(Math.log(0.5), 6);
  });

  it('works on a 152k vocabulary', () => {
    const logits = new Float32Array(152064);
    logits[7] = 10;
    const r = logprobs(logits, 7, 20);
    expect(r.top[0]).toEqual({ token: 7, logprob: r.logprob });
    expect(r.top.slice(1).map((t) => t.token)).toEqual(Array.from({ length: 19 }, (_, i) => (i < 7 ? i : i + 1)));
    expect(Math.exp(r.logprob)).toBeCloseTo(Math.exp(10) / (Math.exp(10) + 152063), 6);
  });

  it.each<[Float32Array, number, number, RegExp]>([
    [new Float32Array(0), 0, 0, /non-empty Float32Array/],
    [new Float32Array(3), 3, 0, /token must be an id in \[0, 3\), got 3/],
    [new Float32Array(3), 0, -1, /k must be an integer ≥ 0, got -1/],
  ])('rejects bad arguments', (logits, token, k, message) => {
    expect(() => logprobs(logits, token, k)).toThrow(message);
    expect(() => logprobs(logits, token, k)).toThrow(EngineError);
  });

  it('refuses when no logit is finite', () => {
    expect(() => logprobs(new Float32Array([-Infinity, NaN]), 0)).toThrow(/largest logit is -Infinity/);
  });
});
