// Quantized files through the native quantizer. For each type, llama.cpp runs the quantized file
// and an F32 file holding the same values decoded (native quantize -> dequantize): they agree up to
// llama.cpp's activation quantization, far below the quantization error itself. A block-layout
// mismatch between our quantizer and ggml's would show up here as garbage logits.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { native } from '@kailstream/engine';

import { GgmlType } from '../gguf/constants';
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import { llamaLogitsBatch } from '../parity/llama-ref';
import type { LlamaLogits } from '../parity/llama-ref';
import { generateTensorF32, writeModel } from './build';
import { getPreset } from './presets';
import type { FileTypeName } from './quant-plan';

const TYPES: FileTypeName[] = [
  'Q8_0', 'Q6_K', 'Q5_K', 'Q5_1', 'Q5_0', 'Q4_K_M', 'Q4_K', 'Q4_1', 'Q4_0', 'Q3_K', 'Q2_K', 'IQ4_XS', 'IQ4_NL',
  'IQ2_XXS', 'IQ2_XS', 'IQ2_S', 'IQ3_XXS', 'IQ3_S', 'IQ1_S', 'IQ1_M', 'MXFP4', 'TQ1_0', 'TQ2_0', 'NVFP4', 'Q1_0', 'Q2_0',
];
const TEXT = 'The capital of France is Paris, and of Germany Berlin.';
// tiny-llama cut to 1 layer and 512 tokens: every type once, within the suite's time budget.
const config = { ...getPreset('tiny-llama').config, nLayers: 1, vocabSize: 512 };

let dir: string;
let f32: LlamaLogits;
const quant = new Map<FileTypeName, LlamaLogits>();
const sim = new Map<FileTypeName, LlamaLogits>();

function rms(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += (a[i] - b[i]) ** 2;
  return Math.sqrt(s / a.length);
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-quant-'));
  const jobs: { model: string; text: string }[] = [];
  const file = (n: string) => path.join(dir, `${n}.gguf`);
  writeModel({ config, fileType: 'F32', seed: 2, out: file('f32') });
  jobs.push({ model: file('f32'), text: TEXT });
  for (const t of TYPES) {
    writeModel({ config, fileType: t, seed: 2, out: file(t) });
    writeModel({ config, fileType: 'F32', simulateType: t, seed: 2, out: file(`sim-${t}`) });
    jobs.push({ model: file(t), text: TEXT }, { model: file(`sim-${t}`), text: TEXT });
  }
  const res = await llamaLogitsBatch(jobs, { timeoutMs: 100_000 });
  f32 = res[0];
  TYPES.forEach((t, i) => {
    quant.set(t, res[1 + 2 * i]);
    sim.set(t, res[2 + 2 * i]);
  });
}, 150_000);

afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('quantized model files', () => {
  it('hold exactly the native quantization of the generated weights', () => {
    const out = path.join(dir, 'Q4_K_M.gguf');
    const h = readGgufHeader(out);
    const q = native().quantize;
    for (const name of ['token_embd.weight', 'output.weight', 'blk.0.attn_v.weight', 'blk.0.ffn_down.weight', 'blk.0.attn_q.weight']) {
      const t = h.tensors.find((x) => x.name === name)!;
      expect(t.type === GgmlType.Q4_K || t.type === GgmlType.Q6_K).toBe(true);
      const expected = q(t.type, generateTensorF32(config, 2, name));
      expect([name, Buffer.from(expected).equals(readGgufTensorBytes(out, t))]).toEqual([name, true]);
    }
  });

  it.each(TYPES)('%s: llama.cpp decodes the file to the values our quantizer encoded', (t) => {
    const q = quant.get(t)!;
    const s = sim.get(t)!;
    expect(q.nTokens).toBe(f32.nTokens);
    const formatError = rms(q.logits, s.logits);
    const quantError = rms(q.logits, f32.logits);
    // Residual: llama.cpp quantizes activations (Q8_0/Q8_K) for quantized matmuls.
    expect(formatError).toBeLessThan(0.06);
    if (t !== 'Q8_0') expect(formatError).toBeLessThan(quantError);
    let agree = 0;
    for (let i = 0; i < q.nTokens; i++) {
      const row = (l: LlamaLogits) => Array.from(l.logits.subarray(i * l.nVocab, (i + 1) * l.nVocab));
      const a = row(q);
      const b = row(s);
      if (a.indexOf(Math.max(...a)) === b.indexOf(Math.max(...b))) agree++;
    }
    expect(agree / q.nTokens).toBeGreaterThanOrEqual(0.9);
  });
});

describe('expert pool (benchmark files of tens of GB)', () => {
  it('fills quantized expert tensors with rows of a pool of their own quantized rows; everything else is unchanged', () => {
    const moe = { ...getPreset('tiny-qwen3moe').config, nLayers: 1 };
    const a = path.join(dir, 'pool-off.gguf');
    const b = path.join(dir, 'pool-on.gguf');
    writeModel({ config: moe, fileType: 'Q4_K', seed: 3, out: a });
    writeModel({ config: moe, fileType: 'Q4_K', seed: 3, out: b, expertPool: 16 });
    const ha = readGgufHeader(a);
    const hb = readGgufHeader(b);
    expect(hb.kv.get('kailstream.generator.expert_pool')!.value).toBe(16);
    expect(ha.kv.has('kailstream.generator.expert_pool')).toBe(false);
    let pooled = 0;
    for (const t of hb.tensors) {
      const ta = ha.tensors.find((x) => x.name === t.name)!;
      const bytesA = readGgufTensorBytes(a, ta);
      const bytesB = readGgufTensorBytes(b, t);
      if (!/_exps\./.test(t.name)) {
        expect([t.name, bytesB.equals(bytesA)]).toEqual([t.name, true]);
        continue;
      }
      pooled++;
      // The first 16 rows of the normal file are the pool; every row of the pooled file is one of them.
      const nRows = t.shape.slice(1).reduce((x, y) => x * y, 1);
      const rowBytes = bytesB.length / nRows;
      const pool = new Set<string>();
      for (let r = 0; r < 16; r++) pool.add(bytesA.subarray(r * rowBytes, (r + 1) * rowBytes).toString('hex'));
      const used = new Set<string>();
      for (let r = 0; r < nRows; r++) {
        const row = bytesB.subarray(r * rowBytes, (r + 1) * rowBytes).toString('hex');
        expect(pool.has(row)).toBe(true);
        used.add(row);
      }
      expect(used.size).toBe(16);
    }
    expect(pooled).toBe(3);
  });
});
