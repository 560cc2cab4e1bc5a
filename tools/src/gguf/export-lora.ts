// LoRA adapters merged into a model, as llama.cpp's `llama-export-lora` merges them
// (tools/export-lora/export-lora.cpp): every base tensor that each adapter pairs (NAME.lora_a and
// NAME.lora_b) becomes W + sum over adapters of scale x (alpha / rank) x B A (alpha 0: scale
// alone), computed in F32 from the dequantized base and written as F16 (F32 where the base is
// F32); every other tensor is copied as it is; the metadata is the base's with general.file_type
// set to F16 (llama.cpp's "output model is F16"). A projection's A is [n_in, rank] and B
// [rank, n_out] (routed experts: one pair per expert, a third dimension); the token embedding's
// pair is flipped, A [rank, n_vocab] and B [rank, n_embd]. The result runs without --lora.
import fs from 'node:fs';

import { GgmlType, ggmlTypeTraits, LlamaFileType } from './constants';
import { checkInputFile, checkOutputFile } from '@kailstream/engine/core';
import { readGgufHeader, type GgufHeader, type GgufReadTensor } from './reader';
import { copyTensors } from './split';
import { GgufWriter, kv } from './writer';

export interface ExportLoraOptions {
  /** Adapters in order, each with its scale (llama.cpp's --lora / --lora-scaled). */
  lora: { path: string; scale: number }[];
  threads?: number;
  /** A line per merged tensor. */
  log?: (line: string) => void;
}

export interface ExportLoraReport {
  output: string;
  merged: number;
  copied: number;
  /** Adapter tensors whose base tensor the model lacks (llama.cpp ignores them too). */
  unused: string[];
}

interface Adapter {
  path: string;
  scale: number;
  alpha: number;
  header: GgufHeader;
  byName: Map<string, GgufReadTensor>;
}

interface NativeConvert {
  convert(from: number, data: Uint8Array, n: number, to: number, threads?: number): Uint8Array;
}

function nativeConvert(): NativeConvert {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (require('@kailstream/engine/core') as { native: () => NativeConvert }).native();
}

function readBytes(fd: number, t: GgufReadTensor, start: number, length: number, what: string): Uint8Array {
  const buf = new Uint8Array(length);
  for (let off = 0; off < length; ) {
    const n = fs.readSync(fd, buf, off, length - off, t.fileOffset + start + off);
    if (n <= 0) throw new Error(`${what}: the file ends inside tensor '${t.name}'`);
    off += n;
  }
  return buf;
}

function toF32(c: NativeConvert, type: GgmlType, bytes: Uint8Array, n: number, threads: number | undefined): Float32Array {
  const out = type === GgmlType.F32 ? bytes : c.convert(type, bytes, n, GgmlType.F32, threads);
  // (A copy when the bytes do not start on a float boundary.)
  return out.byteOffset % 4 === 0 ? new Float32Array(out.buffer, out.byteOffset, n) : new Float32Array(out.slice().buffer, 0, n);
}

const str = (h: GgufHeader, key: string) => {
  const v = h.kv.get(key)?.value;
  return typeof v === 'string' ? v : '';
};

function openAdapter(path: string, scale: number, arch: string): Adapter {
  if (!Number.isFinite(scale)) throw new Error(`LoRA adapter ${path}: the scale must be a finite number`);
  checkInputFile(path, 'LoRA adapter');
  const header = readGgufHeader(path);
  if (str(header, 'general.type') !== 'adapter') throw new Error(`LoRA adapter ${path}: general.type is '${str(header, 'general.type')}', expected 'adapter' (is this a model rather than an adapter?)`);
  if (str(header, 'adapter.type') !== 'lora') throw new Error(`LoRA adapter ${path}: adapter.type is '${str(header, 'adapter.type')}', expected 'lora'`);
  if (str(header, 'general.architecture') !== arch) throw new Error(`LoRA adapter ${path}: made for architecture '${str(header, 'general.architecture')}', the model is '${arch}'`);
  const a = header.kv.get('adapter.lora.alpha')?.value;
  for (const t of header.tensors)
    if ((t.name.endsWith('.lora_a') || t.name.endsWith('.lora_b')) && ggmlTypeTraits(t.type).quantized)
      throw new Error(`LoRA adapter ${path}: tensor '${t.name}' is ${ggmlTypeTraits(t.type).name}; quantized adapters cannot be merged (as llama-export-lora: use an F16 or F32 one)`);
  return { path, scale, alpha: typeof a === 'number' ? a : 0, header, byName: new Map(header.tensors.map((t) => [t.name, t])) };
}

/** Merges `opts.lora` into `base`, written to `output` (through a temporary name). */
export function exportLora(base: string, output: string, opts: ExportLoraOptions): ExportLoraReport {
  if (!opts.lora.length) throw new Error('export-lora: give at least one adapter (--lora)');
  if (!fs.existsSync(base)) throw new Error(`export-lora: ${base} does not exist`);
  if (fs.existsSync(output) && fs.realpathSync(output) === fs.realpathSync(base)) throw new Error(`export-lora: the output ${output} is the base model`);
  checkOutputFile(output, 'export-lora: the output');
  const h = readGgufHeader(base);
  if (Number(h.kv.get('split.count')?.value ?? 0) > 1) throw new Error(`export-lora: ${base} is a split model; merge it first (kail gguf-split --merge)`);
  const arch = str(h, 'general.architecture');
  const adapters = opts.lora.map((l) => openAdapter(l.path, l.scale, arch));
  // As llama-export-lora: several adapters must pair the same tensors.
  for (const a of adapters.slice(1)) {
    const names = (x: Adapter) => [...x.byName.keys()].filter((n) => /\.lora_[ab]$/.test(n)).sort().join(',');
    if (names(a) !== names(adapters[0])) throw new Error(`export-lora: ${a.path} pairs other tensors than ${adapters[0].path}; merge them one at a time`);
  }
  const baseNames = new Set(h.tensors.map((t) => t.name));
  const unused = [...adapters[0].byName.keys()].filter((n) => /\.lora_[ab]$/.test(n) && !baseNames.has(n.slice(0, -7)));
  // The plan: per base tensor, its pairs (checked against its shape) or none.
  const plan = h.tensors.map((t) => {
    const pairs = adapters.map((ad) => ({ ad, a: ad.byName.get(`${t.name}.lora_a`), b: ad.byName.get(`${t.name}.lora_b`) }));
    if (pairs.every((p) => !p.a && !p.b)) return { t, pairs: null };
    for (const p of pairs) {
      if (!p.a || !p.b) throw new Error(`export-lora: ${p.ad.path}: tensor ${t.name} has ${p.a ? 'lora_a' : 'lora_b'} without ${p.a ? 'lora_b' : 'lora_a'}`);
      const embed = t.name.startsWith('token_embd');
      const [a, b] = [p.a.shape, p.b.shape];
      const n3 = t.shape[2] ?? 1;
      const rank = b[0];
      const ok = embed
        ? t.shape.length === 2 && a[0] === rank && a[1] === t.shape[1] && b[1] === t.shape[0]
        : a[0] === t.shape[0] && a[1] === rank && b[1] === t.shape[1] && (a[2] ?? 1) === n3 && (b[2] ?? 1) === n3 && (t.shape[3] ?? 1) === 1;
      if (!ok || rank < 1) throw new Error(`export-lora: ${p.ad.path}: lora_a [${a}] / lora_b [${b}] do not fit ${t.name} [${t.shape}] (a different base model?)`);
    }
    return { t, pairs: pairs as { ad: Adapter; a: GgufReadTensor; b: GgufReadTensor }[] };
  });

  const tmp = `${output}.tmp-${process.pid}`;
  const w = new GgufWriter(tmp, { alignment: h.alignment, alignmentKey: h.kv.has('general.alignment') });
  for (const [key, v] of h.kv) if (key !== 'general.alignment' && key !== 'general.file_type') w.set(key, kv.raw(v.type, v.raw));
  w.set('general.file_type', kv.u32(LlamaFileType.MOSTLY_F16));
  const outType = (t: GgufReadTensor) => (t.type === GgmlType.F32 ? GgmlType.F32 : GgmlType.F16);
  for (const { t, pairs } of plan) w.addTensor({ name: t.name, shape: [...t.shape], type: pairs ? outType(t) : t.type });
  const c = nativeConvert();
  const fds = new Map<string, number>();
  const fdOf = (p: string) => {
    let fd = fds.get(p);
    if (fd === undefined) {
      fd = fs.openSync(p, 'r');
      fds.set(p, fd);
    }
    return fd;
  };
  let merged = 0;
  const chunk = Buffer.alloc(16 << 20);
  try {
    w.begin();
    for (const { t, pairs } of plan) {
      const fd = fdOf(base);
      if (!pairs) {
        copyTensors(fd, w, [t], base, chunk);
        continue;
      }
      const embed = t.name.startsWith('token_embd');
      const nIn = t.shape[0];
      const nOut = t.shape[1] ?? 1;
      const nMat = t.shape[2] ?? 1;
      const matBytes = t.bytes / nMat;
      const lora = pairs.map((p) => {
        const afd = fdOf(p.ad.path);
        const rank = p.b.shape[0];
        const nA = p.a.shape.reduce((x, y) => x * y, 1);
        const nB = p.b.shape.reduce((x, y) => x * y, 1);
        return {
          rank,
          factor: p.ad.alpha ? (p.ad.scale * p.ad.alpha) / rank : p.ad.scale,
          a: toF32(c, p.a.type, readBytes(afd, p.a, 0, p.a.bytes, p.ad.path), nA, opts.threads),
          b: toF32(c, p.b.type, readBytes(afd, p.b, 0, p.b.bytes, p.ad.path), nB, opts.threads),
        };
      });
      // One matrix (an expert) at a time: W (n_out rows of n_in) + factor x B A.
      for (let e = 0; e < nMat; e++) {
        const wf = Float32Array.from(toF32(c, t.type, readBytes(fd, t, e * matBytes, matBytes, base), nIn * nOut, opts.threads));
        for (const { rank, factor, a, b } of lora) {
          const f = Math.fround(factor);
          if (embed) {
            // A [rank, n_vocab], B [rank, n_embd]: row v += sum_r A[v][r] B[.][r].
            for (let v = 0; v < nOut; v++) {
              const row = v * nIn;
              for (let r = 0; r < rank; r++) {
                const av = a[v * rank + r] * f;
                if (av === 0) continue;
                for (let i = 0; i < nIn; i++) wf[row + i] += av * b[i * rank + r];
              }
            }
          } else {
            const ao = e * nIn * rank;
            const bo = e * rank * nOut;
            for (let o = 0; o < nOut; o++) {
              const row = o * nIn;
              for (let r = 0; r < rank; r++) {
                const bv = b[bo + o * rank + r] * f;
                if (bv === 0) continue;
                const ar = ao + r * nIn;
                for (let i = 0; i < nIn; i++) wf[row + i] += bv * a[ar + i];
              }
            }
          }
        }
        const bytes = outType(t) === GgmlType.F32 ? new Uint8Array(wf.buffer) : c.convert(GgmlType.F32, new Uint8Array(wf.buffer), wf.length, GgmlType.F16, opts.threads);
        w.writeTensorData(t.name, bytes);
      }
      merged++;
      opts.log?.(`merged ${t.name} [${t.shape.join(', ')}] ${ggmlTypeTraits(t.type).name} -> ${ggmlTypeTraits(outType(t)).name} with ${pairs.length} adapter(s), rank ${lora.map((l) => l.rank).join('/')}`);
    }
    w.finish();
    fs.renameSync(tmp, output);
  } catch (e) {
    w.abort();
    fs.rmSync(tmp, { force: true });
    throw e;
  } finally {
    for (const fd of fds.values()) fs.closeSync(fd);
  }
  return { output, merged, copied: plan.length - merged, unused };
}
