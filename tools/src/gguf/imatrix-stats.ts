// Statistics of an importance matrix, as `llama-imatrix --in-file F --show-statistics` prints them
// (tools/imatrix/imatrix.cpp: compute_statistics, compute_cossim, show_statistics): per tensor,
// its columns' mean squared activations (each expert's sums over its own count) summed, their
// range, mean and spread, the share of columns that are active, the entropy of their
// distribution, the share more than one deviation above the mean (ZD), and the cosine similarity
// of its sums with the same tensor one block earlier; then per block, those weighted by columns.
// The arithmetic is llama.cpp's f32 arithmetic (Math.fround where it uses float).
import { mergeImatrixEntries, type ImatrixEntry, type ImatrixFile } from './imatrix';

const f32 = Math.fround;

export interface ImatrixTensorStats {
  /** The weight's name, and its block ('-' outside the blocks) and short name as llama-imatrix splits them. */
  name: string;
  layer: string;
  tensor: string;
  /** Σ(Act²): the columns' mean squared activations summed. */
  total: number;
  min: number;
  max: number;
  mean: number;
  stddev: number;
  /** Share of columns whose value is above 1e-5. */
  active: number;
  /** Columns counted (experts no token reached are left out). */
  elements: number;
  /** Entropy (bits) of the columns' shares of the total, and as a share of its maximum. */
  entropy: number;
  entropyNorm: number;
  /** Share of columns more than one deviation above the mean. */
  zd: number;
  /** Cosine similarity of the sums with the same tensor in the block before (0 without one). */
  cossim: number;
}

export interface ImatrixLayerStats {
  layer: number;
  /** Σ(Act²), ZD and cosine similarity of its tensors, weighted by their columns. */
  total: number;
  zd: number;
  cossim: number;
}

export interface ImatrixStatistics {
  tensors: ImatrixTensorStats[];
  layers: ImatrixLayerStats[];
  /** Entries left out, and why (no activations, sizes that do not divide). */
  skipped: { name: string; why: string }[];
}

/** llama-imatrix's process_tensor_name: the word after "blk", and the word before "weight". */
function splitName(name: string): { layer: string; tensor: string } {
  const parts = name.split('.');
  const b = parts.indexOf('blk');
  const w = parts.indexOf('weight');
  return { layer: b >= 0 && b + 1 < parts.length ? parts[b + 1] : '-', tensor: w > 0 ? parts[w - 1] : name };
}

function tensorStats(name: string, e: ImatrixEntry): ImatrixTensorStats | string {
  const nMat = e.counts.length;
  if (nMat === 0) return 'no activations';
  if (e.sums.length % nMat !== 0) return `${e.sums.length} sums for ${nMat} counts`;
  const row = e.sums.length / nMat;
  const acts: number[] = [];
  for (let i = 0; i < nMat; i++) {
    if (e.counts[i] === 0) continue;
    const c = f32(e.counts[i]);
    for (let j = 0; j < row; j++) acts.push(f32(e.sums[i * row + j] / c));
  }
  if (!acts.length) return 'every count is zero';
  const n = acts.length;
  let total = 0;
  let sq = 0;
  let max = acts[0];
  let min = acts[0];
  for (const a of acts) {
    total = f32(total + a);
    sq = f32(sq + f32(a * a));
    if (a > max) max = a;
    if (a < min) min = a;
  }
  const mean = f32(total / n);
  const variance = f32(f32(sq / n) - f32(mean * mean));
  const stddev = f32(Math.sqrt(Math.max(0, variance)));
  let inactive = 0;
  for (const a of acts) if (Math.abs(a) <= f32(1e-5)) inactive++;
  let entropy = 0;
  if (total > 0) {
    for (const a of acts) {
      const p = f32(a / total);
      if (p > 0) entropy = f32(entropy - f32(p * f32(Math.log2(p))));
    }
  }
  let z = 0;
  if (stddev > 0) for (const a of acts) if (f32(f32(a - mean) / stddev) > 1) z++;
  const { layer, tensor } = splitName(name);
  return {
    name,
    layer,
    tensor,
    total,
    min,
    max,
    mean,
    stddev,
    active: f32(1 - f32(inactive / n)),
    elements: n,
    entropy,
    // (std::log2 of an int is a double: the quotient is taken in f64.)
    entropyNorm: n > 0 ? f32(100 * (entropy / Math.log2(n))) : 0,
    zd: f32(z / n),
    cossim: 0,
  };
}

function dot(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s = f32(s + f32(a[i] * b[i]));
  return s;
}

/** llama-imatrix --show-statistics of a file read by readImatrixFile (chunkSize: a legacy file's, as its -c). */
export function imatrixStatistics(file: ImatrixFile, chunkSize = 512): ImatrixStatistics {
  // The file's statistics as llama-imatrix loads them (a legacy file's means back to sums).
  const entries = new Map<string, ImatrixEntry>();
  mergeImatrixEntries(entries, file, chunkSize, 'imatrix');
  const tensors: ImatrixTensorStats[] = [];
  const skipped: { name: string; why: string }[] = [];
  for (const [name, e] of entries) {
    const s = tensorStats(name, e);
    if (typeof s === 'string') skipped.push({ name, why: s });
    else tensors.push(s);
  }
  // compute_cossim: against the same name one block down.
  const byName = new Map(tensors.map((t) => [t.name, t]));
  for (const t of tensors) {
    const m = /blk\.(\d+)\./.exec(t.name);
    if (!m) continue;
    const prev = byName.get(t.name.replace(/blk\.(\d+)\./, `blk.${Number(m[1]) - 1}.`));
    if (!prev) continue;
    const a = entries.get(t.name)!.sums;
    const b = entries.get(prev.name)!.sums;
    if (a.length !== b.length) continue;
    t.cossim = f32(dot(a, b) / f32(f32(Math.sqrt(dot(a, a))) * f32(Math.sqrt(dot(b, b)))));
  }
  tensors.sort((x, y) => (x.tensor < y.tensor ? -1 : x.tensor > y.tensor ? 1 : y.total - x.total));
  const ws = new Map<number, { bias: number; zd: number; cossim: number; n: number }>();
  for (const t of tensors) {
    const blk = /^\d+$/.test(t.layer) ? Number(t.layer) : -1;
    const w = ws.get(blk) ?? { bias: 0, zd: 0, cossim: 0, n: 0 };
    w.bias = f32(w.bias + f32(t.elements * t.total));
    w.zd = f32(w.zd + f32(t.elements * t.zd));
    w.cossim = f32(w.cossim + f32(t.elements * t.cossim));
    w.n += t.elements;
    ws.set(blk, w);
  }
  const layers = [...ws]
    .filter(([l, w]) => l >= 0 && w.n > 0)
    .sort((a, b) => a[0] - b[0])
    .map(([layer, w]) => ({ layer, total: f32(w.bias / w.n), zd: f32(w.zd / w.n), cossim: f32(w.cossim / w.n) }));
  return { tensors, layers, skipped };
}

const fx = (v: number, w: number, d: number) => v.toFixed(d).padStart(w);

/** The report in llama-imatrix's layout (tab-separated columns). */
export function imatrixStatisticsLines(file: string, s: ImatrixStatistics): string[] {
  return [
    ...s.skipped.map((k) => `skipped ${k.name}: ${k.why}`),
    '',
    `Computing statistics for ${file} (${s.tensors.length} tensors)`,
    '',
    [' Layer', '       Tensor', '          Σ(Act²)', '  Min', '            Max', '           μ', '   σ', ' % Active', 'N', '   Entropy', 'E (norm)', 'ZD', '  CosSim'].join('\t'),
    '='.repeat(169),
    ...s.tensors.map((t) =>
      [
        t.layer.padStart(5),
        t.tensor.padEnd(20),
        fx(t.total, 10, 2),
        fx(t.min, 8, 4),
        fx(t.max, 11, 4),
        fx(t.mean, 6, 2),
        fx(t.stddev, 6, 2),
        `${fx(100 * t.active, 8, 2)}%`,
        String(t.elements).padStart(6),
        fx(t.entropy, 10, 4),
        `${fx(t.entropyNorm, 6, 2)}%`,
        `${fx(100 * t.zd, 10, 2)}%`,
        fx(t.cossim, 8, 4),
      ].join('\t'),
    ),
    '',
    `Computing weighted average statistics per layer (${s.layers.length} layers)`,
    '',
    ['  Layer', '     μΣ(Act²)', '      μZD', 'μCosSim'].join('\t'),
    '='.repeat(48),
    ...s.layers.map((l) => [String(l.layer).padStart(5), fx(l.total, 14, 2), `${fx(100 * l.zd, 10, 4)}%`, fx(l.cossim, 6, 4)].join('\t')),
  ];
}
