import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, ggmlTypeTraits, GgufType } from '../gguf/constants';
import { encodeBf16, encodeF16 } from '../gguf/float-encode';
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import type { ModelConfig } from './arch';
import { fillTensorRange, generateTensorF32, planModel, planWithSimulation, UnitEncoder, writeModel, writeModelWith } from './build';
import type { WorkUnit } from './build';
import { getPreset, PRESETS } from './presets';
import { fitType, tensorType, useMoreBits } from './quant-plan';
import { Xoshiro128 } from './rng';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-build-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const TINY = ['tiny-llama', 'tiny-mixtral', 'tiny-qwen2moe', 'tiny-qwen3moe'];

function shapes(preset: string): Map<string, number[]> {
  return new Map(planModel(getPreset(preset).config, 'F32').tensors.map((t) => [t.name, t.shape]));
}

// Buffer comparison: jest's deep equality walks typed arrays element by element (slow for MBs).
function sameBytes(a: ArrayBufferView, b: ArrayBufferView): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

function stats(a: Float32Array): { mean: number; std: number } {
  let s = 0;
  let s2 = 0;
  for (const x of a) { s += x; s2 += x * x; }
  const mean = s / a.length;
  return { mean, std: Math.sqrt(s2 / a.length - mean * mean) };
}

describe('architecture tensor lists (names and ggml shapes as llama.cpp loads them)', () => {
  it('llama: dense SwiGLU, GQA k/v', () => {
    const s = shapes('tiny-llama');
    expect(s.get('token_embd.weight')).toEqual([256, 1024]);
    expect(s.get('output.weight')).toEqual([256, 1024]);
    expect(s.get('blk.0.attn_k.weight')).toEqual([256, 128]);
    expect(s.get('blk.3.ffn_down.weight')).toEqual([512, 256]);
    expect(s.size).toBe(3 + 4 * 9);
  });

  it('mixtral: llama arch with merged experts of size feed_forward_length', () => {
    const s = shapes('tiny-mixtral');
    expect(s.get('blk.1.ffn_gate_inp.weight')).toEqual([256, 8]);
    expect(s.get('blk.1.ffn_gate_exps.weight')).toEqual([256, 512, 8]);
    expect(s.get('blk.1.ffn_down_exps.weight')).toEqual([512, 256, 8]);
    expect(s.has('blk.0.ffn_gate.weight')).toBe(false);
  });

  it('qwen2moe: q/k/v biases, experts, gated shared expert', () => {
    const s = shapes('tiny-qwen2moe');
    expect(s.get('blk.0.attn_q.bias')).toEqual([256]);
    expect(s.get('blk.0.attn_k.bias')).toEqual([256]);
    expect(s.get('blk.0.ffn_up_exps.weight')).toEqual([256, 256, 16]);
    expect(s.get('blk.0.ffn_gate_inp_shexp.weight')).toEqual([256]);
    expect(s.get('blk.0.ffn_down_shexp.weight')).toEqual([512, 256]);
  });

  it('qwen3moe: q/k norms over the head, attention wider than dim', () => {
    const s = shapes('tiny-qwen3moe');
    expect(s.get('blk.0.attn_q.weight')).toEqual([256, 512]);
    expect(s.get('blk.0.attn_k.weight')).toEqual([256, 256]);
    expect(s.get('blk.0.attn_output.weight')).toEqual([512, 256]);
    expect(s.get('blk.0.attn_q_norm.weight')).toEqual([128]);
    expect(s.get('blk.1.ffn_down_exps.weight')).toEqual([256, 256, 16]);
  });

  it('rejects impossible shapes', () => {
    const c = getPreset('tiny-llama').config;
    expect(() => planModel({ ...c, nKvHeads: 3 }, 'F32')).toThrow(/kv heads/);
    expect(() => planModel({ ...getPreset('tiny-qwen3moe').config, nExpertsUsed: 17 }, 'F32')).toThrow(/experts-used/);
    expect(() => planModel({ ...c, arch: 'nope' }, 'F32')).toThrow(/unknown architecture/);
  });
});

describe('writeModel', () => {
  it.each(TINY)('%s: F32 file holds the metadata and exactly the generated weights', (preset) => {
    const { config } = getPreset(preset);
    const out = path.join(dir, `${preset}.gguf`);
    const res = writeModel({ config, fileType: 'F32', seed: 7, out });
    const h = readGgufHeader(out);
    expect(h.fileSize).toBe(res.bytes);
    const arch = h.kv.get('general.architecture')!.value as string;
    expect(arch).toBe(config.arch === 'mixtral' ? 'llama' : config.arch);
    expect(h.kv.get(`${arch}.block_count`)!.value).toBe(config.nLayers);
    expect(h.kv.get(`${arch}.embedding_length`)!.value).toBe(config.dim);
    expect(h.kv.get('tokenizer.ggml.tokens')!.elemType).toBe(GgufType.STRING);
    expect((h.kv.get('tokenizer.ggml.tokens')!.value as string[]).length).toBe(config.vocabSize);
    expect(h.kv.get('kailstream.generator.seed')!.value).toBe(7);
    if (config.nExperts > 0) expect(h.kv.get(`${arch}.expert_used_count`)!.value).toBe(config.nExpertsUsed);
    expect(h.tensors.every((t) => t.type === GgmlType.F32)).toBe(true);
    for (const t of h.tensors.filter((_, i) => i % 5 === 0)) {
      expect([t.name, sameBytes(readGgufTensorBytes(out, t), generateTensorF32(config, 7, t.name))]).toEqual([t.name, true]);
    }
  });

  it('F16 and BF16 files hold the rounded F32 weights; 1-D tensors and routers stay F32', () => {
    const { config } = getPreset('tiny-mixtral');
    for (const [ft, enc, type] of [['F16', encodeF16, GgmlType.F16], ['BF16', encodeBf16, GgmlType.BF16]] as const) {
      const out = path.join(dir, `mixtral-${ft}.gguf`);
      writeModel({ config, fileType: ft, seed: 3, out });
      const h = readGgufHeader(out);
      const byName = new Map(h.tensors.map((t) => [t.name, t]));
      expect(byName.get('blk.0.attn_norm.weight')!.type).toBe(GgmlType.F32);
      expect(byName.get('blk.0.ffn_gate_inp.weight')!.type).toBe(GgmlType.F32);
      for (const name of ['token_embd.weight', 'blk.1.ffn_down_exps.weight', 'blk.0.attn_q.weight']) {
        const t = byName.get(name)!;
        expect(t.type).toBe(type);
        expect([name, sameBytes(readGgufTensorBytes(out, t), enc(generateTensorF32(config, 3, name)))]).toEqual([name, true]);
      }
    }
  });

  it('is deterministic, independent of chunking, and seed-dependent', () => {
    const { config } = getPreset('tiny-qwen3moe');
    const a = path.join(dir, 'det-a.gguf');
    const b = path.join(dir, 'det-b.gguf');
    const c = path.join(dir, 'det-c.gguf');
    writeModel({ config, fileType: 'F16', seed: 11, out: a });
    writeModel({ config, fileType: 'F16', seed: 11, out: b, chunkElements: 1000 });
    writeModel({ config, fileType: 'F16', seed: 12, out: c });
    const fa = fs.readFileSync(a);
    expect(fa.equals(fs.readFileSync(b))).toBe(true);
    const fc = fs.readFileSync(c);
    expect(fc.length).toBe(fa.length);
    expect(fa.equals(fc)).toBe(false);
  });

  it('generates any range of a tensor on its own (what parallel writers rely on)', () => {
    const { config } = getPreset('tiny-qwen2moe');
    const spec = planModel(config, 'F32').tensors.find((t) => t.name === 'blk.1.ffn_up_exps.weight')!;
    const all = generateTensorF32(config, 9, spec.name);
    for (const [start, n] of [[0, 10], [65533, 7], [5 * 65536 + 12345, 2 * 65536 + 1], [all.length - 100, 100]]) {
      const part = new Float32Array(n);
      fillTensorRange(9, spec, start, part);
      expect([start, sameBytes(part, all.subarray(start, start + n))]).toEqual([start, true]);
    }
  });

  it('writeModelWith (units computed out of order, written in order) gives the same bytes', async () => {
    const { config } = getPreset('tiny-qwen2moe');
    const a = path.join(dir, 'seq.gguf');
    const b = path.join(dir, 'pool.gguf');
    writeModel({ config, fileType: 'BF16', seed: 4, out: a, chunkElements: 50_000 });
    const encoder = new UnitEncoder(4, planWithSimulation({ config, fileType: 'BF16' }).tensors);
    let k = 0;
    const runner = {
      // Completes units in a scrambled order, as a worker pool would.
      run: (u: WorkUnit) => new Promise<Uint8Array>((resolve) => {
        const bytes = encoder.encode(u).slice();
        setTimeout(() => resolve(bytes), (k++ * 7) % 5);
      }),
      close: async () => undefined,
    };
    const res = await writeModelWith({ config, fileType: 'BF16', seed: 4, out: b, chunkElements: 50_000 }, runner, 6);
    expect(fs.readFileSync(a).equals(fs.readFileSync(b))).toBe(true);
    expect(res.tensors.map((t) => t.name)).toEqual(planModel(config, 'BF16').tensors.map((t) => t.name));
  });

  it('scales weights so activations stay O(1): std 1/sqrt(fan_in), 1/sqrt(2L) more into the residual, norms near 1', () => {
    const { config } = getPreset('tiny-qwen3moe');
    const g = (n: string) => stats(generateTensorF32(config, 1, n));
    const res = 1 / Math.sqrt(2 * config.nLayers);
    expect(g('blk.0.attn_q.weight').std).toBeCloseTo(1 / Math.sqrt(256), 3);
    expect(g('blk.0.ffn_gate_exps.weight').std).toBeCloseTo(1 / Math.sqrt(256), 3);
    expect(g('blk.0.ffn_down_exps.weight').std).toBeCloseTo(res / Math.sqrt(256), 3);
    expect(g('blk.0.attn_output.weight').std).toBeCloseTo(res / Math.sqrt(512), 3);
    expect(g('token_embd.weight').std).toBeCloseTo(1, 1);
    const n = g('blk.1.ffn_norm.weight');
    expect(n.mean).toBeCloseTo(1, 1);
    expect(n.std).toBeGreaterThan(0.05);
    expect(n.std).toBeLessThan(0.15);
    const r0 = generateTensorF32(config, 1, 'blk.0.ffn_gate_inp.weight');
    const r1 = generateTensorF32(config, 1, 'blk.1.ffn_gate_inp.weight');
    expect(sameBytes(r0, r1)).toBe(false);
    // Routing on random unit-RMS inputs: every expert is in some top-k, none in all of them.
    const hits = new Array(config.nExperts).fill(0);
    const x = new Float32Array(config.dim);
    const rng = new Xoshiro128(99);
    for (let s = 0; s < 200; s++) {
      rng.fillNormal(x, 0, 1);
      const logits = Array.from({ length: config.nExperts }, (_, e) => {
        let acc = 0;
        for (let i = 0; i < config.dim; i++) acc += r0[e * config.dim + i] * x[i];
        return [acc, e] as const;
      }).sort((p, q) => q[0] - p[0]);
      for (const [, e] of logits.slice(0, config.nExpertsUsed)) hits[e]++;
    }
    expect(Math.min(...hits)).toBeGreaterThan(0);
    expect(Math.max(...hits)).toBeLessThan(200);
  });

  it('streams quantized types through the quantizer, whole rows at a time', () => {
    const { config } = getPreset('tiny-llama');
    const calls: [GgmlType, number][] = [];
    const fake = (type: GgmlType, data: Float32Array) => {
      const t = ggmlTypeTraits(type);
      calls.push([type, data.length]);
      return new Uint8Array((data.length / t.blockSize) * t.typeSize).fill(type);
    };
    const out = path.join(dir, 'q4km.gguf');
    const res = writeModel({ config, fileType: 'Q4_K_M', seed: 1, out, quantize: fake, chunkElements: 256 * 100 });
    const h = readGgufHeader(out);
    const type = (n: string) => h.tensors.find((t) => t.name === n)!.type;
    expect(type('output.weight')).toBe(GgmlType.Q6_K);
    expect(type('token_embd.weight')).toBe(GgmlType.Q4_K);
    expect(type('blk.0.attn_norm.weight')).toBe(GgmlType.F32);
    expect(type('blk.0.attn_v.weight')).toBe(useMoreBits(0, 4) ? GgmlType.Q6_K : GgmlType.Q4_K);
    expect(type('blk.2.ffn_down.weight')).toBe(useMoreBits(2, 4) ? GgmlType.Q6_K : GgmlType.Q4_K);
    expect(h.kv.get('general.file_type')!.value).toBe(15);
    expect(h.kv.get('general.quantization_version')!.value).toBe(2);
    for (const [, n] of calls) expect(n % 256).toBe(0);
    const emb = h.tensors.find((t) => t.name === 'token_embd.weight')!;
    expect(readGgufTensorBytes(out, emb).every((b) => b === GgmlType.Q4_K)).toBe(true);
    expect(res.tensors.find((t) => t.name === 'token_embd.weight')!.bytes).toBe((256 / 256) * 144 * 1024);
  });
});

describe('type plan', () => {
  it("follows llama.cpp's use_more_bits pattern", () => {
    const more = Array.from({ length: 16 }, (_, i) => useMoreBits(i, 16)).map((b) => (b ? 1 : 0)).join('');
    expect(more).toBe('1100100100100111');
  });

  it('Q4_K_M: Q6_K for output, alternating attn_v/ffn_down; F32 for norms and routers', () => {
    const c: ModelConfig = { ...getPreset('bench-qwen3-30b-a3b-shaped').config, nLayers: 16 };
    const { tensors } = planModel(c, 'Q4_K_M');
    const t = (n: string) => tensors.find((x) => x.name === n)!.type;
    expect(t('output.weight')).toBe(GgmlType.Q6_K);
    expect(t('blk.0.attn_v.weight')).toBe(GgmlType.Q6_K);
    expect(t('blk.2.attn_v.weight')).toBe(GgmlType.Q4_K);
    expect(t('blk.4.ffn_down_exps.weight')).toBe(GgmlType.Q6_K);
    expect(t('blk.5.ffn_down_exps.weight')).toBe(GgmlType.Q4_K);
    expect(t('blk.5.ffn_up_exps.weight')).toBe(GgmlType.Q4_K);
    expect(t('blk.5.ffn_gate_inp.weight')).toBe(GgmlType.F32);
    expect(t('blk.5.attn_k_norm.weight')).toBe(GgmlType.F32);
  });

  it('falls back like llama.cpp when rows do not fit the block', () => {
    expect(fitType(GgmlType.Q4_K, 128)).toBe(GgmlType.Q5_0);
    expect(fitType(GgmlType.Q6_K, 96)).toBe(GgmlType.Q8_0);
    expect(fitType(GgmlType.Q8_0, 48)).toBe(GgmlType.F16);
    expect(fitType(GgmlType.Q4_K, 512)).toBe(GgmlType.Q4_K);
    const c = { ...getPreset('tiny-llama').config, dim: 128, ff: 256 };
    const spec = planModel(c, 'F32').tensors.find((x) => x.name === 'blk.0.ffn_up.weight')!;
    expect(tensorType('Q4_K', spec, c)).toBe(GgmlType.Q5_0);
  });

  it('every preset plans in every type without fallbacks to F16', () => {
    for (const [name, p] of Object.entries(PRESETS)) {
      for (const ft of ['Q8_0', 'Q4_K_M', 'Q2_K'] as const) {
        const { tensors } = planModel(p.config, ft);
        // (qwen4exp's PLE taps excepted: rows of ple.conv_kernel values, F16 in every quantized file as llama-quantize's fallback makes them.)
        const f16 = tensors.filter((t) => t.type === GgmlType.F16 && !(p.config.arch === 'qwen4exp' && t.name.endsWith('.ple_conv1d.weight')));
        expect([name, ft, f16.map((t) => t.name)]).toEqual([name, ft, []]);
      }
    }
  });
});
