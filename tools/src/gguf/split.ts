// Splits a GGUF file as llama.cpp's `llama-gguf-split --split-max-tensors N` does, so tests and
// benchmarks have split models like those large models are published as: PREFIX-00001-of-0000K.gguf
// carries every metadata key plus split.no = 0, split.count = K and split.tensors.count; each later
// split carries only the three split.* keys; every split holds at most N of the tensors, in file order,
// with its own tensor table and data section. Tensor bytes are copied unchanged.
import fs from 'node:fs';

import { readGgufHeader } from './reader';
import { GgufWriter, kv } from './writer';

/** llama.cpp's split file name (llama_split_path): PREFIX-%05d-of-%05d.gguf, numbered from 1. */
export function ggufSplitPath(prefix: string, no: number, count: number): string {
  return `${prefix}-${String(no).padStart(5, '0')}-of-${String(count).padStart(5, '0')}.gguf`;
}

/**
 * Writes `input` as split files PREFIX-0000i-of-0000K.gguf with at most `maxTensors` tensors each
 * and returns their paths, first split first. The input is left as it is.
 */
export function splitGguf(input: string, prefix: string, maxTensors: number): string[] {
  if (!Number.isInteger(maxTensors) || maxTensors < 1) throw new Error(`gguf split: maxTensors must be a positive integer, got ${maxTensors}`);
  const h = readGgufHeader(input);
  if (h.kv.has('split.count')) throw new Error(`gguf split: ${input} is itself a split file`);
  const count = Math.max(1, Math.ceil(h.tensors.length / maxTensors));
  if (count > 99999) throw new Error(`gguf split: ${count} splits is more than the names allow`);
  const paths: string[] = [];
  const fd = fs.openSync(input, 'r');
  const chunk = Buffer.alloc(16 << 20);
  try {
    for (let s = 0; s < count; s++) {
      const out = ggufSplitPath(prefix, s + 1, count);
      const w = new GgufWriter(out, { alignment: h.alignment });
      if (s === 0) for (const [key, v] of h.kv) if (key !== 'general.alignment') w.set(key, kv.raw(v.type, v.raw));
      w.set('split.no', kv.u16(s));
      w.set('split.count', kv.u16(count));
      w.set('split.tensors.count', kv.i32(h.tensors.length));
      const mine = h.tensors.slice(s * maxTensors, (s + 1) * maxTensors);
      for (const t of mine) w.addTensor({ name: t.name, shape: t.shape, type: t.type });
      try {
        w.begin();
        for (const t of mine) {
          for (let off = 0; off < t.bytes; ) {
            const n = fs.readSync(fd, chunk, 0, Math.min(chunk.length, t.bytes - off), t.fileOffset + off);
            if (n <= 0) throw new Error(`gguf split: ${input} ends inside tensor '${t.name}'`);
            w.writeTensorData(t.name, chunk.subarray(0, n));
            off += n;
          }
        }
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
