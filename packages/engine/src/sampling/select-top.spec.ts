import { Mt19937 } from './rng';
import { selectTop, sortIdsByValue } from './select-top';

function reference(values: Float32Array, k: number): number[] {
  return [...values.keys()]
    .filter((i) => values[i] > -Infinity)
    .sort((a, b) => values[b] - values[a] || a - b)
    .slice(0, k);
}

function run(values: Float32Array, k: number): number[] {
  const ids = new Int32Array(Math.max(k, 1));
  const vals = new Float32Array(Math.max(k, 1));
  const m = selectTop(values, values.length, k, ids, vals);
  for (let i = 0; i < m; i++) expect(vals[i]).toBe(values[ids[i]]);
  return [...ids.subarray(0, m)];
}

describe('selectTop', () => {
  it('returns the k largest, best first, ties by ascending id', () => {
    const v = new Float32Array([1, 5, 3, 5, 2, 4, 5]);
    expect(run(v, 3)).toEqual([1, 3, 6]);
    expect(run(v, 4)).toEqual([1, 3, 6, 5]);
  });

  it('skips NaN and -Infinity and keeps +Infinity first', () => {
    const v = new Float32Array([NaN, -Infinity, 0, Infinity, -1, NaN]);
    expect(run(v, 10)).toEqual([3, 2, 4]);
    expect(run(v, 1)).toEqual([3]);
    expect(run(new Float32Array([NaN, -Infinity]), 2)).toEqual([]);
  });

  it('agrees with a full sort on random data with many ties, on the heap and the sort paths', () => {
    const rng = new Mt19937(3);
    for (const n of [1, 2, 17, 1000, 20000]) {
      const v = new Float32Array(n);
      for (let i = 0; i < n; i++) {
        const u = rng.nextDouble();
        v[i] = u < 0.05 ? -Infinity : u < 0.07 ? NaN : Math.floor(rng.nextDouble() * 50);
      }
      for (const k of [0, 1, 2, 40, 256, 999, n]) expect(run(v, k)).toEqual(reference(v, k));
    }
  });
});

describe('sortIdsByValue', () => {
  it('sorts descending with ties by id, across signs, zeros and infinities', () => {
    const values = new Float32Array([0, -0, 1.5, -1.5, Infinity, -Infinity, 1.5, 3e-45, -3e-45, 3.4e38, -3.4e38, 0]);
    const ids = Int32Array.from(values.keys());
    sortIdsByValue(ids, values);
    expect([...ids]).toEqual([4, 9, 2, 6, 7, 0, 1, 11, 8, 3, 10, 5]);
  });

  it('agrees with a comparator sort on random data', () => {
    const rng = new Mt19937(5);
    const values = new Float32Array(50000);
    for (let i = 0; i < values.length; i++) values[i] = Math.round((rng.nextDouble() - 0.5) * 2000) / 16;
    const ids = Int32Array.from(values.keys());
    sortIdsByValue(ids, values);
    expect([...ids]).toEqual(reference(values, values.length));
  });

  it('sorts a shuffled subset by radix the same way (zeros of both signs, infinities, ties)', () => {
    const rng = new Mt19937(9);
    const values = new Float32Array(30000);
    for (let i = 0; i < values.length; i++) {
      const r = rng.nextDouble();
      values[i] = r < 0.05 ? -Infinity : r < 0.1 ? 0 : r < 0.12 ? -0 : r < 0.4 ? Math.round(rng.nextDouble() * 8) - 4 : (rng.nextDouble() - 0.5) * (r < 0.7 ? 1e-30 : 40);
    }
    const pick = Int32Array.from(values.keys()).filter(() => rng.nextDouble() < 0.6);
    for (let i = pick.length - 1; i > 0; i--) {
      const j = Math.floor(rng.nextDouble() * (i + 1));
      [pick[i], pick[j]] = [pick[j], pick[i]];
    }
    const want = [...pick].sort((a, b) => (values[a] === values[b] ? a - b : values[b] - values[a]));
    expect(pick.length).toBeGreaterThan(4096);
    sortIdsByValue(pick, values);
    expect([...pick]).toEqual(want);
  });

  it('falls back to a comparator beyond 2^21 ids', () => {
    const values = new Float32Array(2 ** 21 + 10);
    const ids = Int32Array.from([2 ** 21 + 5, 3, 2 ** 21 + 1, 7, 2 ** 21 + 9, 1, 0, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14]);
    values[2 ** 21 + 5] = 2;
    values[7] = 2;
    values[3] = -1;
    sortIdsByValue(ids, values);
    expect([...ids]).toEqual([7, 2 ** 21 + 5, 0, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 2 ** 21 + 1, 2 ** 21 + 9, 3]);
  });
});
