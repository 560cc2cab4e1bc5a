import { hashSeed, Xoshiro128 } from './rng';

const state = (r: Xoshiro128) => [r.nextU32(), r.nextU32(), r.nextU32(), r.nextU32()];

describe('Xoshiro128', () => {
  it('jump(n) lands where n single steps land', () => {
    for (const n of [0, 1, 2, 31, 32, 33, 127, 128, 129, 1000, 65537, 300_001]) {
      const a = new Xoshiro128(42);
      const b = new Xoshiro128(42);
      a.discard(n);
      b.jump(n);
      expect([n, ...state(b)]).toEqual([n, ...state(a)]);
    }
  });

  it('jumps compose for counts far past what stepping could check', () => {
    const big = 2 ** 40 + 12345;
    const a = new Xoshiro128(7);
    a.jump(big);
    a.jump(999);
    const b = new Xoshiro128(7);
    b.jump(big + 999);
    expect(state(b)).toEqual(state(a));
    expect(() => b.jump(-1)).toThrow();
  });

  it('fillNormal has the requested moments and bounded tails', () => {
    const r = new Xoshiro128(hashSeed(1, 'x'));
    const a = new Float32Array(200_000);
    r.fillNormal(a, 0.5, 2);
    let s = 0;
    let s2 = 0;
    let max = 0;
    for (const x of a) { s += x; s2 += x * x; max = Math.max(max, Math.abs(x - 0.5)); }
    const mean = s / a.length;
    expect(mean).toBeCloseTo(0.5, 1);
    expect(Math.sqrt(s2 / a.length - mean * mean)).toBeCloseTo(2, 1);
    expect(max).toBeLessThan(2 * Math.sqrt(3) * 2 + 1e-3);
  });

  it('seeds by name: different tensors get different streams', () => {
    expect(hashSeed(1, 'blk.0.attn_q.weight')).not.toBe(hashSeed(1, 'blk.1.attn_q.weight'));
    expect(hashSeed(1, 'a')).not.toBe(hashSeed(2, 'a'));
  });
});
