import { Mt19937, foldSeed, randomSeed } from './rng';

describe('Mt19937', () => {
  it('matches std::mt19937: the 10000th output of the default seed is 4123659995', () => {
    const rng = new Mt19937();
    for (let i = 1; i < 10000; i++) rng.nextUint32();
    expect(rng.nextUint32()).toBe(4123659995);
  });

  it.each([
    // std::uniform_real_distribution<double>(0, 1) over std::mt19937(seed), printed with %.17g by g++/libstdc++.
    [0, [0.59284461651668263, 0.84426574425659828, 0.85794561998982988, 0.84725173738433124, 0.62356369649610832]],
    [42, [0.79654298428784598, 0.18343478789336848, 0.77969099761266125, 0.59685016158005655, 0.44583275754843343]],
    [4294967295, [0.11160666544400902, 0.56269337421105781, 0.52632130700839574, 0.77061474201735192, 0.28356165439308145]],
  ])('draws the same doubles as std::uniform_real_distribution<double> with seed %d', (seed, expected) => {
    const rng = new Mt19937(seed);
    expect(expected.map(() => rng.nextDouble())).toEqual(expected);
  });

  it('restarts the stream on seed()', () => {
    const rng = new Mt19937(7);
    const first = [rng.nextDouble(), rng.nextDouble()];
    for (let i = 0; i < 1000; i++) rng.nextUint32();
    rng.seed(7);
    expect([rng.nextDouble(), rng.nextDouble()]).toEqual(first);
  });

  it('draws in [0, 1)', () => {
    const rng = new Mt19937(1);
    for (let i = 0; i < 10000; i++) {
      const x = rng.nextDouble();
      expect(x >= 0 && x < 1).toBe(true);
    }
  });
});

describe('foldSeed', () => {
  it('keeps 32-bit seeds, so they draw what llama.cpp draws', () => {
    for (const s of [0, 1, 42, 2 ** 31, 2 ** 32 - 1]) expect(foldSeed(s)).toBe(s);
  });

  it('maps wider and negative seeds into 32 bits without collapsing them', () => {
    const seeds = [-1, -2, 2 ** 32, 2 ** 32 + 1, 2 ** 40, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER, 1];
    const folded = seeds.map(foldSeed);
    for (const f of folded) expect(f >= 0 && f < 2 ** 32 && Number.isInteger(f)).toBe(true);
    expect(new Set(folded).size).toBe(seeds.length);
  });

  it('randomSeed gives a 32-bit seed', () => {
    const s = randomSeed();
    expect(Number.isInteger(s) && s >= 0 && s < 2 ** 32).toBe(true);
  });
});

describe('Mt19937.nextBelow', () => {
  it("draws what libstdc++'s uniform_int_distribution<size_t> draws from std::mt19937(1)", () => {
    // Printed by g++ 12 (Debian 12) from: std::mt19937 rng(1); for 3 rounds, for each n,
    // std::uniform_int_distribution<size_t>(0, n - 1)(rng).
    const ns = [1, 2, 3, 7, 10, 100, 1000, 10042, 4000000000, 123456789];
    const want = [
      0, 1, 2, 6, 0, 12, 302, 10032, 587023570, 29146786, 0, 0, 0, 2, 3, 66, 396, 9394, 2155266927, 104482828, 0, 0, 2, 3, 2, 44, 878, 2305, 109550383, 65977024,
    ];
    const r = new Mt19937(1);
    const got: number[] = [];
    for (let k = 0; k < 3; k++) for (const n of ns) got.push(r.nextBelow(n));
    expect(got).toEqual(want);
    expect(() => r.nextBelow(0)).toThrow(RangeError);
  });

  it('redraws below the threshold, so it stays uniform for a range that does not divide 2^32', () => {
    const r = new Mt19937(7);
    const n = 3 * 2 ** 30; // threshold 2^30: a quarter of the draws are redrawn
    const counts = [0, 0, 0];
    for (let i = 0; i < 30000; i++) counts[Math.floor(r.nextBelow(n) / 2 ** 30)]++;
    for (const c of counts) expect(Math.abs(c - 10000)).toBeLessThan(400);
  });
});
