// arctic (Snowflake Arctic): the tensors and keys llama.cpp's loader (src/models/arctic.cpp) takes,
// as conversion/arctic.py ArcticModel writes them: q/k/v/o, a dense SwiGLU MLP n_embd wide under
// ffn_norm, and the experts under their own norm ffn_norm_exps (of the block input), the
// converter's keys (baseMetadata's, feed_forward_length the experts' width), and the weights'
// scales (three writers per block: attention, the dense MLP and the experts' mix).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { arcticFfnGain, type ArcticConfig } from './architectures/arctic';
import { residualGain } from './arch';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { Xoshiro128 } from './rng';

const BLOCK = [
  'attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight',
  'ffn_norm.weight', 'ffn_gate.weight', 'ffn_down.weight', 'ffn_up.weight',
  'ffn_gate_inp.weight', 'ffn_norm_exps.weight', 'ffn_gate_exps.weight', 'ffn_down_exps.weight', 'ffn_up_exps.weight',
];
const GLOBALS = ['token_embd.weight', 'output_norm.weight', 'output.weight'];

const config = (preset: string, over: Partial<ArcticConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as ArcticConfig;
const plan = (preset: string, over: Partial<ArcticConfig> = {}) => planModel(config(preset, over), 'F32');
const shapes = (preset: string, over: Partial<ArcticConfig> = {}) => new Map(plan(preset, over).tensors.map((t) => [t.name, t.shape]));
const stats = (a: ArrayLike<number>) => {
  const v = Array.from(a);
  const m = v.reduce((s, x) => s + x, 0) / v.length;
  return { mean: m, std: Math.sqrt(v.reduce((s, x) => s + x * x, 0) / v.length - m * m) };
};

describe('arctic', () => {
  it('tensors: attention, a dense MLP under ffn_norm and the experts under ffn_norm_exps in every block; untied head (tied drops output.weight)', () => {
    const t = plan('tiny-arctic').tensors;
    const block = (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
    for (let i = 0; i < 4; i++) expect(block(i)).toEqual([...BLOCK].sort());
    expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(GLOBALS);
    expect(t.length).toBe(GLOBALS.length + 4 * BLOCK.length);
    expect(t.some((x) => x.name.endsWith('.bias') || x.name.includes('shexp'))).toBe(false);
    // The loader falls back to token_embd when output.weight is absent.
    expect(plan('tiny-arctic', { tiedEmbeddings: true }).tensors.some((x) => x.name === 'output.weight')).toBe(false);
    expect(DEFAULT_PRESET_FOR_ARCH.arctic).toBe('tiny-arctic');
  });

  it('shapes: the dense MLP n_embd x n_embd, experts of feed_forward_length, router [n_embd, n_expert]', () => {
    const s = shapes('tiny-arctic');
    expect(BLOCK.map((n) => s.get(`blk.3.${n}`))).toEqual([
      [64], [64, 64], [64, 32], [64, 32], [64, 64],
      [64], [64, 64], [64, 64], [64, 64],
      [64, 16], [64], [64, 32, 16], [32, 64, 16], [64, 32, 16],
    ]);
    expect([s.get('token_embd.weight'), s.get('output_norm.weight'), s.get('output.weight')]).toEqual([[64, 1024], [64], [64, 1024]]);
    // --ff moves the experts only (the dense MLP stays n_embd wide); expertFf is normalized to it.
    const wide = plan('tiny-arctic', { ff: 48 });
    const w = new Map(wide.tensors.map((t) => [t.name, t.shape]));
    expect([w.get('blk.0.ffn_down_exps.weight'), w.get('blk.0.ffn_down.weight')]).toEqual([[48, 64, 16], [64, 64]]);
    expect(wide.config.expertFf).toBe(48);
    // --dim moves the dense MLP with it.
    expect(shapes('tiny-arctic', { dim: 128 }).get('blk.0.ffn_gate.weight')).toEqual([128, 128]);
  });

  it('types: norms (ffn_norm_exps too) and routers F32 in every file; Q4_K_M falls back on rows of 64 / 32', () => {
    const q = new Map(planModel(config('tiny-arctic'), 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
    for (const n of ['blk.0.attn_norm.weight', 'blk.0.ffn_norm.weight', 'blk.0.ffn_norm_exps.weight', 'blk.0.ffn_gate_inp.weight', 'output_norm.weight']) expect([n, q.get(n)]).toEqual([n, GgmlType.F32]);
    // 4 blocks: use_more_bits on blocks 2 and 3 (Q6_K -> Q8_0 on rows of 64 / 32), else Q4_K -> Q5_0.
    expect([0, 1, 2, 3].map((i) => q.get(`blk.${i}.ffn_down.weight`))).toEqual([GgmlType.Q5_0, GgmlType.Q5_0, GgmlType.Q8_0, GgmlType.Q8_0]);
    expect([0, 1, 2, 3].map((i) => q.get(`blk.${i}.ffn_down_exps.weight`))).toEqual([GgmlType.Q5_0, GgmlType.Q5_0, GgmlType.Q8_0, GgmlType.Q8_0]);
    expect([q.get('blk.0.ffn_gate_exps.weight'), q.get('blk.0.attn_output.weight'), q.get('output.weight')]).toEqual([GgmlType.Q5_0, GgmlType.Q5_0, GgmlType.Q8_0]);
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan('tiny-arctic', { nExperts: 0, nExpertsUsed: 0 })).toThrow(/arctic: needs experts/);
    expect(() => plan('tiny-arctic', { nExpertsUsed: 17 })).toThrow(/experts-used 17/);
    expect(() => plan('tiny-arctic', { ff: 0 })).toThrow(/arctic: ff must be a positive integer/);
    expect(() => plan('tiny-arctic', { vocabSize: 0 })).toThrow(/vocabSize must be a positive integer/);
    expect(() => plan('tiny-arctic', { headDim: 32 })).toThrow(/heads 4 x head size 32 must be dim 64/);
    expect(() => plan('tiny-arctic', { nHeads: 3, nKvHeads: 3 })).toThrow(/must be dim 64/);
    expect(() => plan('tiny-arctic', { nKvHeads: 3 })).toThrow(/heads 4 not divisible by kv heads 3/);
    expect(() => plan('tiny-arctic', { dim: 68, nHeads: 4, nKvHeads: 2 })).toThrow(/head size 17 must be even/);
    expect(() => plan('tiny-arctic', { ropeBase: 0 })).toThrow(/arctic: ropeBase/);
    expect(() => plan('tiny-arctic', { normEps: 0 })).toThrow(/arctic: normEps/);
    expect(() => plan('tiny-arctic', { expertFf: 16 })).toThrow(/arctic: expertFf 16 must be 0 or ff 32/);
    expect(plan('tiny-arctic', { expertFf: 32 }).config.expertFf).toBe(32);
    // headDim = dim / nHeads is allowed (and adds key_length / value_length, equal to it).
    expect(plan('tiny-arctic', { headDim: 16 }).config.headDim).toBe(16);
  });

  it('bench-arctic-shaped: 563 tensors, 478.6B parameters, Q4_K everywhere; --layers N keeps N blocks', () => {
    const full = plan('bench-arctic-shaped');
    expect(full.tensors.length).toBe(GLOBALS.length + 35 * BLOCK.length);
    expect(full.tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0) / 1e9).toBeCloseTo(478.6, 1);
    const cut = planModel(config('bench-arctic-shaped', { nLayers: 1 }), 'Q4_K');
    expect(cut.tensors.length).toBe(GLOBALS.length + BLOCK.length);
    expect(cut.tensors.filter((t) => t.shape.length > 1 && t.role !== 'router').every((t) => t.type === GgmlType.Q4_K)).toBe(true);
    const s = new Map(cut.tensors.map((t) => [t.name, t.shape]));
    expect(['attn_q', 'attn_k', 'attn_output', 'ffn_gate', 'ffn_down', 'ffn_gate_inp', 'ffn_up_exps', 'ffn_down_exps'].map((n) => s.get(`blk.0.${n}.weight`))).toEqual([
      [7168, 7168], [7168, 1024], [7168, 7168], [7168, 7168], [7168, 7168], [7168, 128], [7168, 4864, 128], [4864, 7168, 128],
    ]);
    expect([cut.config.nExperts, cut.config.nExpertsUsed, cut.config.vocabSize, cut.config.ctx]).toEqual([128, 2, 32000, 4096]);
  });

  it('scales: embedding 1, head and routers at gain 2, attn_output at 1/sqrt(2L), the dense MLP and the experts each at 1/sqrt(4L)', () => {
    const c = config('tiny-arctic');
    expect(arcticFfnGain(c)).toBeCloseTo(residualGain(c) / Math.SQRT2, 12);
    const ratio = (name: string, want: number) => stats(generateTensorF32(c, 1, name)).std / want;
    expect(ratio('token_embd.weight', 1)).toBeCloseTo(1, 1);
    expect(ratio('output.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.attn_q.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.attn_output.weight', 1 / 8 / Math.sqrt(8))).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_gate.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_down.weight', 1 / 8 / 4)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_gate_inp.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_up_exps.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_down_exps.weight', 1 / Math.sqrt(32) / 4)).toBeCloseTo(1, 1);
    for (const n of ['attn_norm', 'ffn_norm', 'ffn_norm_exps']) expect(stats(generateTensorF32(c, 1, `blk.2.${n}.weight`)).mean).toBeCloseTo(1, 1);

    // Routing over the RMS-normed block input (token embeddings of std 1 at block 0): every expert
    // in some top-2, none in all.
    const E = generateTensorF32(c, 1, 'token_embd.weight');
    const g = generateTensorF32(c, 1, 'blk.0.ffn_norm_exps.weight');
    const r = generateTensorF32(c, 1, 'blk.0.ffn_gate_inp.weight');
    const hits = new Array(16).fill(0);
    const rng = new Xoshiro128(5);
    for (let s = 0; s < 200; s++) {
      const tk = Math.floor(rng.nextFloat() * 1000);
      const x = Array.from(E.subarray(tk * 64, tk * 64 + 64));
      const rms = Math.sqrt(x.reduce((a, v) => a + v * v, 0) / 64 + 1e-5);
      const h = x.map((v, i) => (v / rms) * g[i]);
      const logits = Array.from({ length: 16 }, (_, e) => [h.reduce((acc, v, i) => acc + v * r[e * 64 + i], 0), e] as const).sort((p, q) => q[0] - p[0]);
      for (const [, e] of logits.slice(0, 2)) hits[e]++;
    }
    expect(Math.min(...hits)).toBeGreaterThan(0);
    expect(Math.max(...hits)).toBeLessThan(200);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-arctic-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    it('tiny-arctic: the converter\'s keys (rope.dimension_count = head size, RMS eps; no key/value length), SentencePiece vocabulary', () => {
      const out = path.join(dir, 'tiny-arctic.gguf');
      writeModel({ config: config('tiny-arctic'), fileType: 'F32', seed: 1, out });
      const h = readGgufHeader(out);
      const kv = h.kv;
      expect(kv.get('general.architecture')!.value).toBe('arctic');
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('arctic.')).map((k) => [k.slice('arctic.'.length), kv.get(k)!.value]));
      expect(keys).toEqual({
        vocab_size: 1024, context_length: 4096, embedding_length: 64, block_count: 4, feed_forward_length: 32,
        'attention.head_count': 4, 'attention.head_count_kv': 2, 'rope.freq_base': 10000, 'rope.dimension_count': 16,
        'attention.layer_norm_rms_epsilon': Math.fround(1e-5), expert_count: 16, expert_used_count: 2,
      });
      for (const k of ['attention.layer_norm_rms_epsilon', 'rope.freq_base']) expect([k, kv.get(`arctic.${k}`)!.type]).toEqual([k, GgufType.FLOAT32]);
      for (const k of ['block_count', 'feed_forward_length', 'rope.dimension_count', 'expert_count', 'expert_used_count']) expect([k, kv.get(`arctic.${k}`)!.type]).toEqual([k, GgufType.UINT32]);
      expect(kv.get('tokenizer.ggml.model')!.value).toBe('llama');
      const shape = (n: string) => h.tensors.find((t) => t.name === n)!.shape;
      expect([shape('blk.0.ffn_up.weight'), shape('blk.0.ffn_norm_exps.weight'), shape('blk.0.ffn_gate_exps.weight')]).toEqual([[64, 64], [64], [64, 32, 16]]);
    });
  });
});
