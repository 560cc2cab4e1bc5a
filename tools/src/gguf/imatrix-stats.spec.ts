// llama-imatrix --show-statistics against plain float64 math on hand-made statistics: per tensor
// (experts no token reached left out), the cosine similarity with the block before, the order
// llama-imatrix prints in, the per-layer averages weighted by columns, and what it skips.
import { imatrixStatistics, imatrixStatisticsLines } from './imatrix-stats';
import type { ImatrixEntry, ImatrixFile } from './imatrix';

function file(entries: [string, ImatrixEntry][], legacy = false): ImatrixFile {
  return { entries: new Map(entries), datasets: ['t.txt'], chunkCount: 1, chunkSize: 4, legacy, hasMetadata: true };
}

const e = (sums: number[], counts: number[]): ImatrixEntry => ({ sums: Float32Array.from(sums), counts });

function reference(acts: number[]) {
  const n = acts.length;
  const total = acts.reduce((a, b) => a + b, 0);
  const mean = total / n;
  const sd = Math.sqrt(Math.max(0, acts.reduce((a, b) => a + b * b, 0) / n - mean * mean));
  const entropy = -acts.reduce((a, x) => (x / total > 0 ? a + (x / total) * Math.log2(x / total) : a), 0);
  return {
    total,
    mean,
    stddev: sd,
    min: Math.min(...acts),
    max: Math.max(...acts),
    active: acts.filter((x) => Math.abs(x) > 1e-5).length / n,
    entropy,
    entropyNorm: (100 * entropy) / Math.log2(n),
    zd: acts.filter((x) => (x - mean) / sd > 1).length / n,
  };
}

describe('imatrix statistics (llama-imatrix --show-statistics)', () => {
  const q0 = [4, 8, 0.5, 2, 16, 0, 1, 3];
  const q1 = [5, 7, 1, 2, 12, 0.25, 1, 4];
  const up = [2, 4, 6, 8, /* unseen expert */ 0, 0, 0, 0, /* third */ 10, 5, 0, 15];
  const f = file([
    ['blk.1.attn_q.weight', e(q1, [4])],
    ['blk.0.attn_q.weight', e(q0, [4])],
    ['blk.0.ffn_up_exps.weight', e(up, [2, 0, 5])],
    ['blk.0.attn_k.weight', e([0, 0], [0])],
    ['output.weight', e([3, 1, 2, 2], [2])],
  ]);
  const s = imatrixStatistics(f);

  it('per tensor: the columns\' mean squares (each expert over its own count), as float64 gives them', () => {
    const byName = new Map(s.tensors.map((t) => [t.name, t]));
    const cases: [string, number[]][] = [
      ['blk.0.attn_q.weight', q0.map((x) => x / 4)],
      ['blk.1.attn_q.weight', q1.map((x) => x / 4)],
      ['blk.0.ffn_up_exps.weight', [...up.slice(0, 4).map((x) => x / 2), ...up.slice(8).map((x) => x / 5)]],
      ['output.weight', [1.5, 0.5, 1, 1]],
    ];
    for (const [name, acts] of cases) {
      const t = byName.get(name)!;
      const r = reference(acts);
      expect(t.elements).toBe(acts.length);
      for (const k of ['total', 'mean', 'stddev', 'min', 'max', 'active', 'entropy', 'entropyNorm', 'zd'] as const) expect(t[k]).toBeCloseTo(r[k], 4);
    }
    expect(byName.get('output.weight')).toMatchObject({ layer: '-', tensor: 'output' });
    expect(byName.get('blk.0.ffn_up_exps.weight')).toMatchObject({ layer: '0', tensor: 'ffn_up_exps' });
  });

  it('cosine similarity of the sums with the block before; 0 without one', () => {
    const t1 = s.tensors.find((t) => t.name === 'blk.1.attn_q.weight')!;
    const dot = q0.reduce((a, x, i) => a + x * q1[i], 0);
    const cos = dot / Math.sqrt(q0.reduce((a, x) => a + x * x, 0) * q1.reduce((a, x) => a + x * x, 0));
    expect(t1.cossim).toBeCloseTo(cos, 6);
    expect(s.tensors.find((t) => t.name === 'blk.0.attn_q.weight')!.cossim).toBe(0);
  });

  it('sorts by short name, then by Σ(Act²) down; averages per layer weighted by columns; names what it skips', () => {
    // (blk.0's attn_q sums to more than blk.1's: it comes first.)
    expect(s.tensors.map((t) => t.name)).toEqual(['blk.0.attn_q.weight', 'blk.1.attn_q.weight', 'blk.0.ffn_up_exps.weight', 'output.weight']);
    expect(s.tensors[0].total).toBeGreaterThan(s.tensors[1].total);
    expect(s.skipped).toEqual([{ name: 'blk.0.attn_k.weight', why: 'every count is zero' }]);
    const l0 = s.tensors.filter((t) => t.layer === '0');
    const n = l0.reduce((a, t) => a + t.elements, 0);
    expect(s.layers.map((l) => l.layer)).toEqual([0, 1]);
    expect(s.layers[0].total).toBeCloseTo(l0.reduce((a, t) => a + t.elements * t.total, 0) / n, 4);
    expect(s.layers[0].zd).toBeCloseTo(l0.reduce((a, t) => a + t.elements * t.zd, 0) / n, 6);
    const lines = imatrixStatisticsLines('x.gguf', s);
    expect(lines).toContain('Computing statistics for x.gguf (4 tensors)');
    expect(lines).toContain('skipped blk.0.attn_k.weight: every count is zero');
    expect(lines.find((l) => l.startsWith('    1\tattn_q'))).toMatch(/^ {4}1\tattn_q {14}\t +[\d.]+\t/);
  });

  it('reads a legacy file (means times ncall) as llama-imatrix loads it: the same statistics', () => {
    // Legacy: per entry the means x ncall and one count, ncall; llama-imatrix scales both by the chunk size.
    const legacy = file([['blk.0.attn_q.weight', e(q0.map((x) => x / 4), [1])]], true);
    const a = imatrixStatistics(legacy, 4).tensors[0];
    const b = s.tensors.find((t) => t.name === 'blk.0.attn_q.weight')!;
    expect(a.total).toBeCloseTo(b.total, 5);
    expect(a.entropy).toBeCloseTo(b.entropy, 5);
  });
});
