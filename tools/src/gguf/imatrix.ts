// Importance matrices as llama.cpp's llama-imatrix writes them and llama-quantize reads them
// (common/imatrix-loader.cpp, tools/imatrix/imatrix.cpp and tools/quantize/quantize.cpp in the
// llama.cpp source bundled with node-llama-cpp, written again here).
//
// Two formats:
// - GGUF (the default since 2025): per weight tensor NAME, an F32 tensor NAME.in_sum2 of shape
//   [n_per_row, n_mat] (the sum over tokens of each input column's squared activation, per expert
//   for MoE weights, n_mat 1 otherwise) and NAME.counts of shape [1, n_mat] (how many activations
//   each sum holds); keys general.type = "imatrix", imatrix.datasets (strings),
//   imatrix.chunk_count and imatrix.chunk_size (u32).
// - legacy .dat: i32 n_entries; per entry i32 name length, the name, i32 ncall, i32 nval, nval
//   f32 (sums already divided by their count and multiplied by ncall); then optionally i32 chunk
//   count, i32 dataset name length and the name.
//
// What quantizing uses, per tensor: the mean squared activation of each column (sum / count; 1
// where an expert saw no token), n_per_row values per expert.
import fs from 'node:fs';

import { fsErrorText } from '@kailstream/engine/core';

import { GgmlType, GgufType } from './constants';
import { readGgufHeader, type GgufHeader } from './reader';
import { GgufWriter, kv } from './writer';

/** One weight tensor's statistics as a file stores them. */
export interface ImatrixEntry {
  /** n_per_row * counts.length values: per matrix (expert), each input column's sum of squares. */
  sums: Float32Array;
  /** Per matrix, the activations summed (the legacy format: one value, its ncall). */
  counts: number[];
}

export interface ImatrixFile {
  entries: Map<string, ImatrixEntry>;
  datasets: string[];
  chunkCount: number;
  chunkSize: number;
  legacy: boolean;
  /** GGUF only: all of imatrix.datasets, chunk_count and chunk_size present (llama-quantize requires it). */
  hasMetadata: boolean;
}

/** What quantizing takes: per tensor name, n_per_row * n_mat importance values. */
export interface Imatrix {
  file: string;
  values: Map<string, Float32Array>;
  datasets: string[];
  chunkCount: number;
}

const IN_SUM2 = '.in_sum2';
const COUNTS = '.counts';

/** Reads an imatrix file of either format; throws an Error naming the file and the problem. */
export function readImatrixFile(file: string): ImatrixFile {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    throw new Error(`imatrix ${file}: cannot open: ${fsErrorText(e)}`);
  }
  try {
    if (fs.fstatSync(fd).isDirectory()) throw new Error(`imatrix ${file} is a directory, not an imatrix file`);
    const magic = Buffer.alloc(4);
    const n = fs.readSync(fd, magic, 0, 4, 0);
    if (n === 4 && magic.toString('latin1') === 'GGUF') return readGgufImatrix(file, fd);
    return readLegacyImatrix(file, fd);
  } finally {
    fs.closeSync(fd);
  }
}

function readGgufImatrix(file: string, fd: number): ImatrixFile {
  let h: GgufHeader;
  try {
    h = readGgufHeader(file);
  } catch (e) {
    throw new Error(`imatrix ${file}: ${(e as Error).message}`);
  }
  if (h.tensors.length < 1) throw new Error(`imatrix ${file}: no data (no tensors)`);
  const datasetsKv = h.kv.get('imatrix.datasets');
  const countKv = h.kv.get('imatrix.chunk_count');
  const sizeKv = h.kv.get('imatrix.chunk_size');
  const datasets = datasetsKv && datasetsKv.type === GgufType.ARRAY && datasetsKv.elemType === GgufType.STRING ? (datasetsKv.value as string[]) : [];
  const u32 = (k: typeof countKv, key: string): number => {
    if (!k) return 0;
    if (k.type !== GgufType.UINT32) throw new Error(`imatrix ${file}: ${key} must be a u32`);
    return k.value as number;
  };
  const pairs = new Map<string, { sums?: (typeof h.tensors)[number]; counts?: (typeof h.tensors)[number] }>();
  for (const t of h.tensors) {
    const suffix = t.name.endsWith(IN_SUM2) ? IN_SUM2 : t.name.endsWith(COUNTS) ? COUNTS : undefined;
    if (!suffix) continue;
    const name = t.name.slice(0, -suffix.length);
    if (!name) continue;
    const p = pairs.get(name) ?? {};
    if (suffix === IN_SUM2) p.sums = t;
    else p.counts = t;
    pairs.set(name, p);
  }
  if (pairs.size === 0)
    throw new Error(`imatrix ${file}: no .in_sum2/.counts tensors: ${h.kv.get('general.type')?.value === 'model' ? 'a model, not an imatrix file' : 'not an imatrix file'}`);
  const entries = new Map<string, ImatrixEntry>();
  const read = (t: (typeof h.tensors)[number]): Float32Array => {
    const buf = Buffer.alloc(t.bytes);
    for (let off = 0; off < t.bytes; ) {
      const got = fs.readSync(fd, buf, off, t.bytes - off, t.fileOffset + off);
      if (got <= 0) throw new Error(`imatrix ${file}: ${t.name} is cut short`);
      off += got;
    }
    return new Float32Array(buf.buffer, buf.byteOffset, t.bytes / 4);
  };
  for (const name of [...pairs.keys()].sort()) {
    const p = pairs.get(name)!;
    if (!p.sums || !p.counts) throw new Error(`imatrix ${file}: mismatched sums and counts for ${name}`);
    if (p.sums.type !== GgmlType.F32 || p.counts.type !== GgmlType.F32) throw new Error(`imatrix ${file}: sums and counts for ${name} must be F32`);
    const counts = Array.from(read(p.counts), (c) => Math.round(c));
    const sums = read(p.sums);
    if (counts.length === 0 || sums.length % counts.length !== 0) {
      throw new Error(`imatrix ${file}: ${name} has ${sums.length} sums for ${counts.length} counts (not whole rows)`);
    }
    entries.set(name, { sums, counts });
  }
  return {
    entries,
    datasets,
    chunkCount: u32(countKv, 'imatrix.chunk_count'),
    chunkSize: u32(sizeKv, 'imatrix.chunk_size'),
    legacy: false,
    hasMetadata: !!datasetsKv && !!countKv && !!sizeKv,
  };
}

function readLegacyImatrix(file: string, fd: number): ImatrixFile {
  const size = fs.fstatSync(fd).size;
  let pos = 0;
  const take = (n: number, what: string): Buffer => {
    if (pos + n > size) throw new Error(`imatrix ${file}: not a GGUF imatrix, and as a legacy .dat file it ends early reading ${what} (at byte ${pos} of ${size})`);
    const b = Buffer.alloc(n);
    fs.readSync(fd, b, 0, n, pos);
    pos += n;
    return b;
  };
  const i32 = (what: string) => take(4, what).readInt32LE(0);
  const nEntries = i32('the entry count');
  if (nEntries < 1) throw new Error(`imatrix ${file}: no data in file (entry count ${nEntries})`);
  const entries = new Map<string, ImatrixEntry>();
  for (let i = 0; i < nEntries; i++) {
    const len = i32(`entry ${i + 1}'s name length`);
    if (len < 0 || len > 4096) throw new Error(`imatrix ${file}: entry ${i + 1} has a name length of ${len}: not an imatrix file`);
    const name = take(len, `entry ${i + 1}'s name`).toString('utf8');
    const ncall = i32(`entry ${i + 1}'s call count`);
    const nval = i32(`entry ${i + 1}'s value count`);
    if (nval < 1) throw new Error(`imatrix ${file}: failed reading number of values for entry ${i + 1} (${nval})`);
    const b = take(nval * 4, `entry ${i + 1}'s ${nval} values`);
    entries.set(name, { sums: new Float32Array(b.buffer, b.byteOffset, nval), counts: [ncall] });
  }
  const datasets: string[] = [];
  let chunkCount = 0;
  if (pos + 4 <= size) {
    chunkCount = i32('the chunk count');
    if (pos + 4 <= size) {
      const len = i32('the dataset name length');
      if (len > 0 && pos + len <= size) datasets.push(take(len, 'the dataset name').toString('utf8').replace(/\0.*$/s, ''));
    }
  }
  return { entries, datasets, chunkCount, chunkSize: 0, legacy: true, hasMetadata: false };
}

/**
 * llama-quantize's load_imatrix and prepare_imatrix: the file read, its sums turned into means
 * (GGUF: sum / count per matrix, 1 for a matrix that saw nothing; legacy: value / ncall), then
 * only names containing one of `include` kept, or names containing one of `exclude` dropped.
 */
export function loadImatrix(file: string, opts: { include?: string[]; exclude?: string[] } = {}): Imatrix {
  const f = readImatrixFile(file);
  if (!f.legacy && !f.hasMetadata) throw new Error(`imatrix ${file}: missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size)`);
  const values = new Map<string, Float32Array>();
  for (const [name, e] of f.entries) {
    const out = new Float32Array(e.sums.length);
    if (!f.legacy) {
      const ne0 = e.sums.length / e.counts.length;
      e.counts.forEach((c, j) => {
        // (Float32 division, as ggml's float arithmetic.)
        const cf = Math.fround(c);
        for (let i = 0; i < ne0; i++) out[j * ne0 + i] = cf > 0 ? e.sums[j * ne0 + i] / cf : 1;
      });
    } else {
      const ncall = e.counts[0] ?? 0;
      for (let i = 0; i < out.length; i++) out[i] = ncall > 0 ? e.sums[i] / ncall : e.sums[i];
    }
    values.set(name, out);
  }
  const include = opts.include ?? [];
  const exclude = opts.exclude ?? [];
  if (include.length && exclude.length) throw new Error('imatrix: include and exclude weights cannot both be given');
  for (const name of [...values.keys()]) {
    if (exclude.some((x) => name.includes(x))) values.delete(name);
    else if (include.length && !include.some((x) => name.includes(x))) values.delete(name);
  }
  for (const [name, v] of values) {
    const bad = v.findIndex((x) => !Number.isFinite(x));
    if (bad >= 0) throw new Error(`imatrix ${file}: ${name} holds a non-finite value (${v[bad]}) at ${bad}`);
  }
  return { file, values, datasets: f.datasets, chunkCount: f.chunkCount };
}

/** Writes the GGUF format as llama-imatrix does: names sorted, sums [n_per_row, n_mat], counts [1, n_mat]. */
export function writeImatrixGguf(file: string, data: { entries: Map<string, ImatrixEntry>; datasets: string[]; chunkCount: number; chunkSize: number }): void {
  const w = new GgufWriter(file, { alignmentKey: false });
  w.set('general.type', kv.str('imatrix'));
  w.set('imatrix.datasets', kv.arr(GgufType.STRING, data.datasets));
  w.set('imatrix.chunk_count', kv.u32(data.chunkCount));
  w.set('imatrix.chunk_size', kv.u32(data.chunkSize));
  const names = [...data.entries.keys()].sort();
  for (const name of names) {
    const e = data.entries.get(name)!;
    const nMat = e.counts.length;
    if (nMat < 1 || e.sums.length % nMat !== 0) throw new Error(`imatrix: ${name} has ${e.sums.length} sums for ${nMat} counts`);
    w.addTensor({ name: `${name}${IN_SUM2}`, shape: [e.sums.length / nMat, nMat], type: GgmlType.F32 });
    w.addTensor({ name: `${name}${COUNTS}`, shape: [1, nMat], type: GgmlType.F32 });
  }
  w.begin();
  try {
    for (const name of names) {
      const e = data.entries.get(name)!;
      w.writeTensorData(`${name}${IN_SUM2}`, new Uint8Array(e.sums.buffer, e.sums.byteOffset, e.sums.byteLength));
      const c = Float32Array.from(e.counts);
      w.writeTensorData(`${name}${COUNTS}`, new Uint8Array(c.buffer));
    }
    w.finish();
  } catch (e) {
    w.abort();
    throw e;
  }
}

/**
 * The legacy .dat format, as llama-imatrix --output-format dat writes it: entries that saw nothing
 * left out, ncall = ceil(largest count / chunk size), each value (sum / count) * ncall (a matrix
 * that saw nothing: 1 * ncall).
 */
export function writeImatrixDat(file: string, data: { entries: Map<string, ImatrixEntry>; datasets: string[]; chunkCount: number; chunkSize: number }): void {
  if (!(data.chunkSize > 0)) throw new Error(`imatrix: the legacy format needs a chunk size, got ${data.chunkSize}`);
  const parts: Buffer[] = [];
  const i32 = (v: number) => {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    parts.push(b);
  };
  const names = [...data.entries.keys()].filter((n) => data.entries.get(n)!.counts.some((c) => c !== 0)).sort();
  i32(names.length);
  const f = Math.fround;
  for (const name of names) {
    const e = data.entries.get(name)!;
    const nb = Buffer.from(name, 'utf8');
    i32(nb.length);
    parts.push(nb);
    const ncall = Math.floor((Math.max(...e.counts) + data.chunkSize - 1) / data.chunkSize);
    i32(ncall);
    i32(e.sums.length);
    const per = e.sums.length / e.counts.length;
    const v = new Float32Array(e.sums.length);
    for (let i = 0; i < v.length; i++) {
      const c = e.counts[Math.floor(i / per)];
      v[i] = c === 0 ? f(1 * ncall) : f(f(e.sums[i] / f(c)) * ncall);
    }
    parts.push(Buffer.from(v.buffer));
  }
  i32(data.chunkCount);
  const ds = Buffer.from(data.datasets[data.datasets.length - 1] ?? '', 'utf8');
  i32(ds.length);
  parts.push(ds);
  fs.writeFileSync(file, Buffer.concat(parts));
}

/**
 * Adds an imatrix's statistics into `into` (llama-imatrix --in-file: combining files, or
 * continuing one): GGUF sums and counts as they are; legacy means times `chunkSize` (its ncall
 * counts chunks). A dense entry meeting a per-expert one of the same name takes its count for
 * every expert. Sizes that differ are an error naming the entry and the source.
 */
export function mergeImatrixEntries(into: Map<string, ImatrixEntry>, from: { entries: Map<string, ImatrixEntry>; legacy: boolean }, chunkSize: number, source: string): void {
  for (const [name, e] of from.entries) {
    const sums = from.legacy ? Float32Array.from(e.sums, (v) => v * chunkSize) : e.sums;
    const counts = from.legacy ? [e.counts[0] * chunkSize] : e.counts;
    const cur = into.get(name);
    if (!cur) {
      into.set(name, { sums: Float32Array.from(sums), counts: [...counts] });
      continue;
    }
    if (cur.sums.length !== sums.length) throw new Error(`imatrix ${source}: ${name} has ${sums.length} sums, the others ${cur.sums.length} (another model?)`);
    if (cur.counts.length === 1 && counts.length > 1) cur.counts = Array.from({ length: counts.length }, () => cur.counts[0]);
    if (from.legacy) {
      // (llama-imatrix adds a legacy entry's ncall to every count.)
      for (let j = 0; j < cur.counts.length; j++) cur.counts[j] += counts[0];
    } else {
      if (counts.length !== cur.counts.length) throw new Error(`imatrix ${source}: ${name} has ${counts.length} counts, the others ${cur.counts.length}`);
      for (let j = 0; j < counts.length; j++) cur.counts[j] += counts[j];
    }
    for (let i = 0; i < sums.length; i++) cur.sums[i] += sums[i];
  }
}

/** llama-imatrix's chunk count of merged statistics: the largest count over the chunk size. */
export function imatrixChunkCount(entries: Map<string, ImatrixEntry>, chunkSize: number): number {
  let max = 0;
  for (const e of entries.values()) for (const c of e.counts) max = Math.max(max, c);
  return chunkSize > 0 ? Math.floor(max / chunkSize) : 0;
}
