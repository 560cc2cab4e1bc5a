// dbrx (Databricks DBRX): the tensors and keys llama.cpp's loader (src/models/dbrx.cpp) takes, as
// conversion/dbrx.py DbrxModel writes them: LayerNorm weights without biases, a fused attn_qkv,
// attn_output_norm before the experts (no ffn_norm), a required untied head, the required
// attention.layer_norm_epsilon and attention.clamp_kqv keys, and the weights' scales.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { dbrxQkvWidth, type DbrxConfig } from './architectures/dbrx';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { Xoshiro128 } from './rng';

const BLOCK = [
  'attn_norm.weight', 'attn_qkv.weight', 'attn_output.weight', 'attn_output_norm.weight',
  'ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight',
];
const GLOBALS = ['token_embd.weight', 'output_norm.weight', 'output.weight'];

const config = (preset: string, over: Partial<DbrxConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as DbrxConfig;
const plan = (preset: string, over: Partial<DbrxConfig> = {}) => planModel(config(preset, over), 'F32');
const shapes = (preset: string, over: Partial<DbrxConfig> = {}) => new Map(plan(preset, over).tensors.map((t) => [t.name, t.shape]));
const stats = (a: ArrayLike<number>) => {
  const v = Array.from(a);
  const m = v.reduce((s, x) => s + x, 0) / v.length;
  return { mean: m, std: Math.sqrt(v.reduce((s, x) => s + x * x, 0) / v.length - m * m) };
};

describe('dbrx', () => {
  it('tensors: LayerNorm weights, fused attn_qkv, attn_output_norm and the experts per block (no ffn_norm, no biases); untied head', () => {
    const t = plan('tiny-dbrx').tensors;
    const block = (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
    for (let i = 0; i < 4; i++) expect(block(i)).toEqual([...BLOCK].sort());
    expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(GLOBALS);
    expect(t.length).toBe(GLOBALS.length + 4 * BLOCK.length);
    expect(t.some((x) => x.name.endsWith('.bias') || x.name.includes('ffn_norm'))).toBe(false);
    expect(DEFAULT_PRESET_FOR_ARCH.dbrx).toBe('tiny-dbrx');
  });

  it('shapes: attn_qkv [n_embd, n_embd + 2 n_embd_gqa], attn_output n_embd x n_embd, experts of feed_forward_length', () => {
    const s = shapes('tiny-dbrx');
    expect(['attn_norm', 'attn_qkv', 'attn_output', 'attn_output_norm', 'ffn_gate_inp', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps'].map((n) => s.get(`blk.3.${n}.weight`))).toEqual([
      [64], [64, 128], [64, 64], [64], [64, 16], [64, 32, 16], [64, 32, 16], [32, 64, 16],
    ]);
    expect([s.get('token_embd.weight'), s.get('output_norm.weight'), s.get('output.weight')]).toEqual([[64, 1024], [64], [64, 1024]]);
    // MHA (kv heads = heads): Q, K and V all n_embd wide.
    expect(shapes('tiny-dbrx', { nKvHeads: 4 }).get('blk.0.attn_qkv.weight')).toEqual([64, 192]);
    expect(dbrxQkvWidth(config('tiny-dbrx', { nKvHeads: 1 }))).toBe(96);
    // --ff moves the experts; expertFf is normalized to it.
    const wide = plan('tiny-dbrx', { ff: 48 });
    expect(new Map(wide.tensors.map((t) => [t.name, t.shape])).get('blk.0.ffn_down_exps.weight')).toEqual([48, 64, 16]);
    expect(wide.config.expertFf).toBe(48);
  });

  it('types: norms and routers F32 in every file; Q4_K_M types attn_qkv as attn_v (Q6_K on the use_more_bits blocks, here falling back to Q8_0)', () => {
    const q = new Map(planModel(config('tiny-dbrx'), 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
    for (const n of ['blk.0.attn_norm.weight', 'blk.0.attn_output_norm.weight', 'blk.0.ffn_gate_inp.weight', 'output_norm.weight']) expect([n, q.get(n)]).toEqual([n, GgmlType.F32]);
    // 4 blocks: use_more_bits on blocks 2 and 3. Rows of 64 fall back: Q6_K -> Q8_0, Q4_K -> Q5_0.
    expect([0, 1, 2, 3].map((i) => q.get(`blk.${i}.attn_qkv.weight`))).toEqual([GgmlType.Q5_0, GgmlType.Q5_0, GgmlType.Q8_0, GgmlType.Q8_0]);
    expect([q.get('blk.0.attn_output.weight'), q.get('output.weight')]).toEqual([GgmlType.Q5_0, GgmlType.Q8_0]);
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan('tiny-dbrx', { nExperts: 0, nExpertsUsed: 0 })).toThrow(/needs experts/);
    expect(() => plan('tiny-dbrx', { nExpertsUsed: 17 })).toThrow(/experts-used 17/);
    expect(() => plan('tiny-dbrx', { ff: 0 })).toThrow(/ff must be a positive integer/);
    expect(() => plan('tiny-dbrx', { headDim: 32 })).toThrow(/heads 4 x head size 32 must be dim 64/);
    expect(() => plan('tiny-dbrx', { nHeads: 3, nKvHeads: 3 })).toThrow(/must be dim 64/);
    expect(() => plan('tiny-dbrx', { nKvHeads: 3 })).toThrow(/divisible/);
    expect(() => plan('tiny-dbrx', { dim: 68, nHeads: 4, nKvHeads: 2 })).toThrow(/head size 17 must be even/);
    expect(() => plan('tiny-dbrx', { ropeBase: 0 })).toThrow(/ropeBase/);
    expect(() => plan('tiny-dbrx', { normEps: 0 })).toThrow(/normEps/);
    expect(() => plan('tiny-dbrx', { tiedEmbeddings: true })).toThrow(/tiedEmbeddings must be false/);
    expect(() => plan('tiny-dbrx', { expertFf: 16 })).toThrow(/expertFf 16 must be 0 or ff 32/);
    expect(plan('tiny-dbrx', { expertFf: 32 }).config.expertFf).toBe(32);
    for (const v of [-1, Number.NaN, Number.POSITIVE_INFINITY, undefined]) expect(() => plan('tiny-dbrx', { clampKqv: v as number })).toThrow(/dbrx: clampKqv must be a finite number >= 0/);
    // 0: no clamp, still a valid file.
    expect((plan('tiny-dbrx', { clampKqv: 0 }).config as DbrxConfig).clampKqv).toBe(0);
  });

  it('bench-dbrx-shaped: 323 tensors, 130.8B parameters, Q4_K everywhere; --layers N keeps N blocks', () => {
    const full = plan('bench-dbrx-shaped');
    expect(full.tensors.length).toBe(GLOBALS.length + 40 * BLOCK.length);
    expect(full.tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0) / 1e9).toBeCloseTo(130.8, 1);
    const cut = planModel(config('bench-dbrx-shaped', { nLayers: 1 }), 'Q4_K');
    expect(cut.tensors.length).toBe(GLOBALS.length + BLOCK.length);
    expect(cut.tensors.filter((t) => t.shape.length > 1 && t.role !== 'router').every((t) => t.type === GgmlType.Q4_K)).toBe(true);
    const s = new Map(cut.tensors.map((t) => [t.name, t.shape]));
    expect(['attn_qkv', 'attn_output', 'ffn_gate_inp', 'ffn_up_exps', 'ffn_down_exps'].map((n) => s.get(`blk.0.${n}.weight`))).toEqual([
      [6144, 8192], [6144, 6144], [6144, 16], [6144, 10752, 16], [10752, 6144, 16],
    ]);
    expect((cut.config as DbrxConfig).clampKqv).toBe(8);
  });

  it('scales: embedding 1, qkv ~N(0, 1) after the LayerNorm (the clamp at 1.5 hits ~13% of block 0\'s q|k|v), writers at 1/sqrt(2L), routers and head at gain 2', () => {
    const c = config('tiny-dbrx');
    const ratio = (name: string, want: number) => stats(generateTensorF32(c, 1, name)).std / want;
    expect(ratio('token_embd.weight', 1)).toBeCloseTo(1, 1);
    expect(ratio('output.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.attn_qkv.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.attn_output.weight', 1 / 8 / Math.sqrt(8))).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_gate_inp.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_gate_exps.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_down_exps.weight', 1 / Math.sqrt(32) / Math.sqrt(8))).toBeCloseTo(1, 1);
    for (const n of ['attn_norm', 'attn_output_norm']) expect(stats(generateTensorF32(c, 1, `blk.2.${n}.weight`)).mean).toBeCloseTo(1, 1);

    // Block 0's q|k|v over 64 tokens: LayerNorm(token_embd row) x attn_norm, then attn_qkv.
    const E = generateTensorF32(c, 1, 'token_embd.weight');
    const g = generateTensorF32(c, 1, 'blk.0.attn_norm.weight');
    const W = generateTensorF32(c, 1, 'blk.0.attn_qkv.weight');
    const rng = new Xoshiro128(42);
    const qkv: number[] = [];
    for (let s = 0; s < 64; s++) {
      const tk = Math.floor(rng.nextFloat() * 1000);
      const x = Array.from(E.subarray(tk * 64, tk * 64 + 64));
      const { mean, std } = stats(x);
      const h = x.map((v, i) => ((v - mean) / Math.sqrt(std * std + 1e-5)) * g[i]);
      for (let o = 0; o < 128; o++) qkv.push(h.reduce((acc, v, i) => acc + v * W[o * 64 + i], 0));
    }
    expect(stats(qkv).std).toBeCloseTo(1, 1);
    const clipped = qkv.filter((v) => Math.abs(v) > c.clampKqv).length / qkv.length;
    expect(clipped).toBeGreaterThan(0.08);
    expect(clipped).toBeLessThan(0.2);

    // Routing over unit-variance inputs (what attn_output_norm hands the router): every expert in some top-4, none in all.
    const r = generateTensorF32(c, 1, 'blk.1.ffn_gate_inp.weight');
    const hits = new Array(16).fill(0);
    const x = new Float32Array(64);
    const rr = new Xoshiro128(5);
    for (let s = 0; s < 200; s++) {
      rr.fillNormal(x, 0, 1);
      const logits = Array.from({ length: 16 }, (_, e) => [x.reduce((acc, v, i) => acc + v * r[e * 64 + i], 0), e] as const).sort((p, q) => q[0] - p[0]);
      for (const [, e] of logits.slice(0, 4)) hits[e]++;
    }
    expect(Math.min(...hits)).toBeGreaterThan(0);
    expect(Math.max(...hits)).toBeLessThan(200);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-dbrx-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    it('tiny-dbrx: the converter\'s keys (layer_norm_epsilon, clamp_kqv as FLOAT32; no RMS eps, no rope.dimension_count, no key/value length)', () => {
      const out = path.join(dir, 'tiny-dbrx.gguf');
      writeModel({ config: config('tiny-dbrx'), fileType: 'F32', seed: 1, out });
      const h = readGgufHeader(out);
      const kv = h.kv;
      expect(kv.get('general.architecture')!.value).toBe('dbrx');
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('dbrx.')).map((k) => [k.slice('dbrx.'.length), kv.get(k)!.value]));
      expect(keys).toEqual({
        vocab_size: 1024, context_length: 4096, embedding_length: 64, block_count: 4, feed_forward_length: 32,
        'attention.head_count': 4, 'attention.head_count_kv': 2, 'rope.freq_base': 500000, expert_count: 16, expert_used_count: 4,
        'attention.layer_norm_epsilon': Math.fround(1e-5), 'attention.clamp_kqv': 1.5,
      });
      for (const k of ['attention.layer_norm_epsilon', 'attention.clamp_kqv', 'rope.freq_base']) expect([k, kv.get(`dbrx.${k}`)!.type]).toEqual([k, GgufType.FLOAT32]);
      for (const k of ['block_count', 'feed_forward_length', 'expert_count', 'expert_used_count']) expect([k, kv.get(`dbrx.${k}`)!.type]).toEqual([k, GgufType.UINT32]);
      expect(kv.get('tokenizer.ggml.model')!.value).toBe('gpt2');
      expect(h.tensors.find((t) => t.name === 'blk.0.attn_qkv.weight')!.shape).toEqual([64, 128]);
    });
  });
});
