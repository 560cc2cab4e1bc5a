// Splits a GGUF file as llama.cpp's `llama-gguf-split --split-max-tensors N` does, so tests and
// benchmarks have split models like those large models are published as: PREFIX-00001-of-0000K.gguf
// carries every metadata key plus split.no = 0, split.count = K and split.tensors.count; each later
// split carries only the three split.* keys; every split holds at most N of the tensors, in file order,
// with its own tensor table and data section. Tensor bytes are copied unchanged.
import fs from 'node:fs';

import { checkOutputFile } from '@kailstream/engine/core';
import { readGgufHeader, type GgufHeader } from './reader';
import { GgufWriter, kv } from './writer';

/** llama.cpp's split file name (llama_split_path): PREFIX-%05d-of-%05d.gguf, numbered from 1. */
export function ggufSplitPath(prefix: string, no: number, count: number): string {
  return `${prefix}-${String(no).padStart(5, '0')}-of-${String(count).padStart(5, '0')}.gguf`;
}

/** How llama-gguf-split cuts a file: at most N tensors per split, or at most N bytes of tensor data. */
export interface SplitOptions {
  /** --split-max-tensors (llama.cpp's default mode, 128). */
  maxTensors?: number;
  /** --split-max-size, in bytes: a split takes tensors (each padded to 32 bytes) while their sum stays within it. */
  maxBytes?: number;
  /** --no-tensor-first-split: the first split holds the metadata alone. */
  noTensorFirstSplit?: boolean;
}

export interface SplitPlan {
  /** Per split, the input's tensor indices it holds (in file order). */
  splits: number[][];
  /** Per split, its file size in bytes (header and padded tensor data). */
  bytes: number[];
  /** The input's header the plan was made from (splitGguf writes from it). */
  header: GgufHeader;
}

const pad32 = (n: number) => Math.ceil(n / 32) * 32;

/** llama-gguf-split's split_strategy: which tensors go in which split. */
export function planGgufSplit(input: string, opts: SplitOptions): SplitPlan {
  if (!fs.existsSync(input)) throw new Error(`gguf split: ${input} does not exist`);
  const h = readGgufHeader(input);
  if (h.kv.has('split.count')) throw new Error(`gguf split: ${input} is itself a split file (merge it first)`);
  if (opts.maxTensors !== undefined && opts.maxBytes !== undefined) throw new Error('gguf split: either a tensor count or a size per split, not both');
  const maxTensors = opts.maxTensors ?? (opts.maxBytes === undefined ? 128 : undefined);
  if (maxTensors !== undefined && (!Number.isInteger(maxTensors) || maxTensors < 1)) throw new Error(`gguf split: the tensors per split must be a positive integer, got ${maxTensors}`);
  if (opts.maxBytes !== undefined && (!Number.isSafeInteger(opts.maxBytes) || opts.maxBytes < 1)) throw new Error(`gguf split: the size per split must be a positive number of bytes, got ${opts.maxBytes}`);
  const splits: number[][] = [[]];
  if (opts.noTensorFirstSplit) splits.push([]);
  let size = 0;
  h.tensors.forEach((t, i) => {
    const n = pad32(t.bytes);
    const split = maxTensors !== undefined ? i > 0 && i % maxTensors === 0 : size + n > opts.maxBytes!;
    if (split) {
      if (splits[splits.length - 1].length === 0) throw new Error(`gguf split: tensor '${t.name}' (${n} bytes) would leave a split with no tensors: the size per split is too small`);
      splits.push([]);
      size = n;
    } else size += n;
    splits[splits.length - 1].push(i);
  });
  if (splits.length > 99999) throw new Error(`gguf split: ${splits.length} splits is more than the names allow`);
  const bytes = splits.map((ids, s) => {
    const w = splitWriter('/dev/null', h, s, splits.length);
    for (const i of ids) w.addTensor({ name: h.tensors[i].name, shape: h.tensors[i].shape, type: h.tensors[i].type });
    return w.headerBytes().length + ids.reduce((a, i) => a + pad32(h.tensors[i].bytes), 0);
  });
  return { splits, bytes, header: h };
}

/** A split's writer with its metadata: every key of the input on the first, the split.* keys on each. */
function splitWriter(out: string, h: ReturnType<typeof readGgufHeader>, s: number, count: number): GgufWriter {
  const w = new GgufWriter(out, { alignment: h.alignment, alignmentKey: s === 0 ? h.kv.has('general.alignment') : h.alignment !== 32 });
  if (s === 0) for (const [key, v] of h.kv) if (key !== 'general.alignment') w.set(key, kv.raw(v.type, v.raw));
  w.set('split.no', kv.u16(s));
  w.set('split.count', kv.u16(count));
  w.set('split.tensors.count', kv.i32(h.tensors.length));
  return w;
}

/** Copies tensors' bytes unchanged from `fd` (the file `from`) into `w`, which declared them in the same order, through `chunk`. */
export function copyTensors(fd: number, w: GgufWriter, tensors: readonly { name: string; bytes: number; fileOffset: number }[], from: string, chunk: Buffer): void {
  for (const t of tensors) {
    for (let off = 0; off < t.bytes; ) {
      const n = fs.readSync(fd, chunk, 0, Math.min(chunk.length, t.bytes - off), t.fileOffset + off);
      if (n <= 0) throw new Error(`${from}: the file ends inside tensor '${t.name}'`);
      w.writeTensorData(t.name, chunk.subarray(0, n));
      off += n;
    }
  }
}

/**
 * Writes `input` as split files PREFIX-0000i-of-0000K.gguf as llama-gguf-split does (a number: at
 * most that many tensors each) and returns their paths, first split first. The input is left as it
 * is; on an error no split is left behind.
 */
export function splitGguf(input: string, prefix: string, opts: number | SplitOptions | SplitPlan): string[] {
  // (A plan already made, as `kail gguf-split` makes one to print, is not made again.)
  const plan = typeof opts === 'object' && 'splits' in opts ? opts : planGgufSplit(input, typeof opts === 'number' ? { maxTensors: opts } : opts);
  const h = plan.header;
  const count = plan.splits.length;
  const paths: string[] = [];
  checkOutputFile(ggufSplitPath(prefix, 1, count), 'gguf split: the output');
  const fd = fs.openSync(input, 'r');
  const chunk = Buffer.alloc(16 << 20);
  try {
    for (let s = 0; s < count; s++) {
      const out = ggufSplitPath(prefix, s + 1, count);
      const w = splitWriter(out, h, s, count);
      const mine = plan.splits[s].map((i) => h.tensors[i]);
      for (const t of mine) w.addTensor({ name: t.name, shape: t.shape, type: t.type });
      try {
        w.begin();
        copyTensors(fd, w, mine, input, chunk);
        w.finish();
      } catch (e) {
        w.abort();
        for (const p of paths) fs.rmSync(p, { force: true });
        throw e;
      }
      paths.push(out);
    }
  } finally {
    fs.closeSync(fd);
  }
  return paths;
}

/** The split files of a model from its first, checked: each exists, is split i of the same count, and the tensors add up. */
export function ggufSplitFiles(first: string): { files: string[]; headers: ReturnType<typeof readGgufHeader>[] } {
  if (!fs.existsSync(first)) throw new Error(`gguf merge: ${first} does not exist`);
  const h0 = readGgufHeader(first);
  const countKv = h0.kv.get('split.count');
  if (!countKv) throw new Error(`gguf merge: ${first} has no split.count: not a split file`);
  const count = Number(countKv.value);
  if (!Number.isInteger(count) || count < 1) throw new Error(`gguf merge: ${first} has split.count ${String(countKv.value)}`);
  const m = /^(.*)-00001-of-(\d{5})\.gguf$/.exec(first);
  if (!m || Number(m[2]) !== count) throw new Error(`gguf merge: ${first} is not named PREFIX-00001-of-${String(count).padStart(5, '0')}.gguf (give the first split)`);
  const files = Array.from({ length: count }, (_, i) => ggufSplitPath(m[1], i + 1, count));
  const headers = files.map((f, i) => {
    if (i === 0) return h0;
    if (!fs.existsSync(f)) throw new Error(`gguf merge: split ${i + 1} of ${count}, ${f}, is missing`);
    const h = readGgufHeader(f);
    if (Number(h.kv.get('split.no')?.value) !== i || Number(h.kv.get('split.count')?.value) !== count) throw new Error(`gguf merge: ${f} says it is split ${Number(h.kv.get('split.no')?.value) + 1} of ${String(h.kv.get('split.count')?.value)}`);
    return h;
  });
  const total = headers.reduce((a, h) => a + h.tensors.length, 0);
  const declared = h0.kv.get('split.tensors.count');
  if (declared && Number(declared.value) !== total) throw new Error(`gguf merge: the splits hold ${total} tensors, split.tensors.count says ${String(declared.value)}`);
  return { files, headers };
}

/**
 * Merges a split model into one file as `llama-gguf-split --merge` does: the first split's
 * metadata (split.count set to 0, so the result is not taken for a split) and every split's
 * tensors in order. Refuses an existing output.
 */
export function mergeGguf(first: string, output: string): { files: string[]; tensors: number } {
  if (fs.existsSync(output)) throw new Error(`gguf merge: the output ${output} already exists`);
  const { files, headers } = ggufSplitFiles(first);
  checkOutputFile(output, 'gguf merge: the output');
  const h0 = headers[0];
  const w = new GgufWriter(output, { alignment: h0.alignment, alignmentKey: h0.kv.has('general.alignment') });
  for (const [key, v] of h0.kv) if (key !== 'general.alignment') w.set(key, key === 'split.count' ? kv.u16(0) : kv.raw(v.type, v.raw));
  for (const h of headers) for (const t of h.tensors) w.addTensor({ name: t.name, shape: t.shape, type: t.type });
  const chunk = Buffer.alloc(16 << 20);
  try {
    w.begin();
    files.forEach((f, i) => {
      const fd = fs.openSync(f, 'r');
      try {
        copyTensors(fd, w, headers[i].tensors, f, chunk);
      } finally {
        fs.closeSync(fd);
      }
    });
    w.finish();
  } catch (e) {
    w.abort();
    throw e;
  }
  return { files, tensors: headers.reduce((a, h) => a + h.tensors.length, 0) };
}
