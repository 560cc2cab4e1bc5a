// mellum (JetBrains Mellum2) and maple (deepgrove maple-preview): the tensors and keys llama.cpp's
// loaders (src/models/mellum.cpp, src/models/maple.cpp) take, as conversion/mellum.py and
// conversion/maple.py write them: Qwen3-MoE-shaped blocks with a required untied head, mellum's
// optional sliding-window keys, maple's required window, pattern, partial RoPE and per-block
// swiglu_clamp_exp, and the scales that make the clamp bite.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { MapleConfig, MellumConfig } from './architectures/mellum-maple';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { Xoshiro128 } from './rng';

const BLOCK = [
  'attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'attn_output.weight',
  'ffn_norm.weight', 'ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight',
];
const GLOBALS = ['token_embd.weight', 'output_norm.weight', 'output.weight'];
const PRESET_NAMES = ['tiny-mellum', 'tiny-mellum-full', 'tiny-maple'] as const;

type Cfg = MellumConfig & MapleConfig;
const config = (preset: string, over: Partial<Cfg> = {}) => ({ ...getPreset(preset).config, ...over }) as Cfg;
const plan = (preset: string, over: Partial<Cfg> = {}) => planModel(config(preset, over), 'F32');
const shapes = (preset: string, over: Partial<Cfg> = {}) => new Map(plan(preset, over).tensors.map((t) => [t.name, t.shape]));
const std = (a: ArrayLike<number>) => {
  const v = Array.from(a);
  const m = v.reduce((s, x) => s + x, 0) / v.length;
  return Math.sqrt(v.reduce((s, x) => s + x * x, 0) / v.length - m * m);
};

describe('mellum / maple', () => {
  it('tensors: q/k/v without biases, per-head q/k norms, attn_output, ffn_norm, router and experts in every block; untied head', () => {
    for (const p of PRESET_NAMES) {
      const t = plan(p).tensors;
      for (let i = 0; i < 4; i++) expect([p, t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort()]).toEqual([p, [...BLOCK].sort()]);
      expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(GLOBALS);
      expect(t.length).toBe(GLOBALS.length + 4 * BLOCK.length);
      expect(t.some((x) => x.name.endsWith('.bias') || x.name.includes('shexp'))).toBe(false);
    }
    expect([getPreset('tiny-mellum').config.arch, getPreset('tiny-mellum-full').config.arch, getPreset('tiny-maple').config.arch]).toEqual(['mellum', 'mellum', 'maple']);
    expect([DEFAULT_PRESET_FOR_ARCH.mellum, DEFAULT_PRESET_FOR_ARCH.maple]).toEqual(['tiny-mellum', 'tiny-maple']);
  });

  it('shapes: 4 heads / 2 KV of 32 (query width 128 over n_embd 64), q/k norms [head], router [n_embd, E], experts [n_embd, n_ff_exp, E] / [n_ff_exp, n_embd, E]', () => {
    for (const p of PRESET_NAMES) {
      const s = shapes(p);
      expect(['attn_norm', 'attn_q', 'attn_k', 'attn_v', 'attn_q_norm', 'attn_k_norm', 'attn_output'].map((n) => s.get(`blk.3.${n}.weight`))).toEqual([
        [64], [64, 128], [64, 64], [64, 64], [32], [32], [128, 64],
      ]);
      expect(['ffn_norm', 'ffn_gate_inp', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps'].map((n) => s.get(`blk.3.${n}.weight`))).toEqual([
        [64], [64, 8], [64, 32, 8], [64, 32, 8], [32, 64, 8],
      ]);
      expect(GLOBALS.map((n) => s.get(n))).toEqual([[64, 1024], [64], [64, 1024]]);
    }
    // --head-dim / --expert-ff move the shapes (the loaders size by key_length and expert_feed_forward_length).
    const s = shapes('tiny-maple', { headDim: 16, ropeDims: 8, expertFf: 64 });
    expect([s.get('blk.0.attn_q.weight'), s.get('blk.0.attn_k_norm.weight'), s.get('blk.0.ffn_down_exps.weight')]).toEqual([[64, 64], [16], [64, 64, 8]]);
  });

  it('types: norms and routers F32 in every file; rows of 64 and 32 fall back from the K-quants', () => {
    for (const p of PRESET_NAMES) {
      const q = new Map(planModel(config(p), 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
      for (const n of ['blk.0.attn_norm.weight', 'blk.0.attn_q_norm.weight', 'blk.0.attn_k_norm.weight', 'blk.0.ffn_norm.weight', 'blk.0.ffn_gate_inp.weight', 'output_norm.weight']) {
        expect([p, n, q.get(n)]).toEqual([p, n, GgmlType.F32]);
      }
      expect([q.get('blk.0.ffn_up_exps.weight'), q.get('blk.0.attn_q.weight')]).toEqual([GgmlType.Q5_0, GgmlType.Q5_0]);
    }
  });

  it('rejects configs the loaders cannot take, naming the field', () => {
    for (const p of ['tiny-mellum', 'tiny-maple']) {
      expect(() => plan(p, { nExperts: 0, nExpertsUsed: 0 })).toThrow(/needs experts/);
      expect(() => plan(p, { nExpertsUsed: 9 })).toThrow(/experts-used 9/);
      expect(() => plan(p, { expertFf: 0 })).toThrow(/expertFf must be a positive integer/);
      expect(() => plan(p, { nKvHeads: 3 })).toThrow(/divisible/);
      expect(() => plan(p, { tiedEmbeddings: true })).toThrow(/tiedEmbeddings must be false \(the loader requires output.weight\)/);
      expect(() => plan(p, { ropeBase: 0 })).toThrow(/ropeBase must be positive/);
      expect(() => plan(p, { normEps: 0 })).toThrow(/normEps must be positive/);
      expect(() => plan(p, { ropeBaseSwa: -1 })).toThrow(/ropeBaseSwa must be positive/);
      expect(() => plan(p, { swaPattern: [true, true, false] })).toThrow(/swaPattern needs one boolean per block \(4\), got 3 entries/);
      expect(() => plan(p, { swaPattern: [1, 1, 1, 0] as unknown as boolean[] })).toThrow(/swaPattern needs one boolean per block/);
      // --layers N with the preset's fixed pattern: refused rather than guessed.
      expect(() => plan(p, { nLayers: 2 })).toThrow(/swaPattern needs one boolean per block \(2\)/);
    }
    // mellum: window 0 means no sliding keys at all; a window without a pattern leaves llama.cpp's default.
    expect(() => plan('tiny-mellum', { window: -1 })).toThrow(/mellum: window must be a non-negative integer/);
    expect(() => plan('tiny-mellum', { window: 0 })).toThrow(/mellum: swaPattern needs a window/);
    expect(() => plan('tiny-mellum-full', { ropeBaseSwa: 1e4 })).toThrow(/mellum: ropeBaseSwa needs a window/);
    expect(() => plan('tiny-mellum-full', { swaPattern: [true, true, true, false] })).toThrow(/mellum: swaPattern needs a window/);
    expect((plan('tiny-mellum', { swaPattern: undefined }).config as MellumConfig).swaPattern).toBeUndefined();
    expect(plan('tiny-mellum-full', { nLayers: 2 }).tensors.length).toBe(GLOBALS.length + 2 * BLOCK.length);
    // maple: window, pattern, rope dims and one clamp per block are all required.
    for (const w of [0, -8, 1.5, undefined]) expect(() => plan('tiny-maple', { window: w as number })).toThrow(/maple: window must be a positive integer/);
    expect(() => plan('tiny-maple', { swaPattern: undefined })).toThrow(/maple: swaPattern needs one boolean per block/);
    for (const r of [0, 15, 34, undefined]) expect(() => plan('tiny-maple', { ropeDims: r as number })).toThrow(/maple: ropeDims must be even, positive and at most the head size 32/);
    expect(() => plan('tiny-maple', { swigluLimit: undefined })).toThrow(/maple: swigluLimit needs one limit per block \(4; swiglu_clamp_exp is required\)/);
    expect(() => plan('tiny-maple', { swigluLimit: [1, 1, 1] })).toThrow(/maple: swigluLimit needs one limit per block \(4.*got 3 entries/);
    expect(() => plan('tiny-maple', { swigluLimit: [1, -0.5, 0, 1] })).toThrow(/maple: swigluLimit\[1\] must be a finite limit >= 0 \(0: none\), got -0.5/);
    expect(() => plan('tiny-maple', { swigluLimit: [1, 1, Number.NaN, 1] })).toThrow(/swigluLimit\[2\]/);
    expect(() => plan('tiny-maple', { swigluLimit: [1, 1, 1, Number.POSITIVE_INFINITY] })).toThrow(/swigluLimit\[3\]/);
    // 0: no clamp on that block, still a valid file; a full rotation (ropeDims = head) too.
    expect((plan('tiny-maple', { swigluLimit: [0, 0, 0, 0] }).config as MapleConfig).swigluLimit).toEqual([0, 0, 0, 0]);
    expect((plan('tiny-maple', { ropeDims: 32 }).config as MapleConfig).ropeDims).toBe(32);
  });

  it('scales: unit-std embeddings, head and routers at gain 2, writers at 1/sqrt(2L); the clamps bite: expert gate/up pre-activations ~N(0, 1) after ffn_norm', () => {
    const c = config('tiny-maple');
    const ratio = (name: string, want: number) => std(generateTensorF32(c, 1, name)) / want;
    const rg = 1 / Math.sqrt(8); // 4 blocks
    expect(ratio('token_embd.weight', 1)).toBeCloseTo(1, 1);
    expect(ratio('output.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_gate_inp.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_gate_exps.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.attn_output.weight', rg / Math.sqrt(128))).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_down_exps.weight', rg / Math.sqrt(32))).toBeCloseTo(1, 1);

    // Block 0's experts over 64 tokens: RMS-normed token_embd rows x ffn_norm (the attention's
    // write at residual gain only tilts the normed input), then every expert's gate and up rows.
    const E = generateTensorF32(c, 1, 'token_embd.weight');
    const g = generateTensorF32(c, 1, 'blk.0.ffn_norm.weight');
    const Wg = generateTensorF32(c, 1, 'blk.0.ffn_gate_exps.weight');
    const Wu = generateTensorF32(c, 1, 'blk.0.ffn_up_exps.weight');
    const rng = new Xoshiro128(7);
    const gate: number[] = [];
    const up: number[] = [];
    for (let s = 0; s < 64; s++) {
      const tk = Math.floor(rng.nextFloat() * 1024);
      const x = Array.from(E.subarray(tk * 64, tk * 64 + 64));
      const rms = Math.sqrt(x.reduce((a, v) => a + v * v, 0) / 64 + 1e-6);
      const h = x.map((v, i) => (v / rms) * g[i]);
      for (let r = 0; r < 32 * 8; r++) {
        gate.push(h.reduce((a, v, i) => a + v * Wg[r * 64 + i], 0));
        up.push(h.reduce((a, v, i) => a + v * Wu[r * 64 + i], 0));
      }
    }
    // Measured (seed 1): std 1.008 / 1.005; |up| > 1: 32.5%, gate > 1: 15.8%; 0.5: 62.1% / 31.2%; 0.75: 46.2% / 22.8%.
    expect(Math.abs(std(gate) - 1)).toBeLessThan(0.05);
    expect(Math.abs(std(up) - 1)).toBeLessThan(0.05);
    // ggml_swiglu_clamp: up clamped to [-limit, limit], the gate capped at limit before silu.
    const frac = (a: number[], f: (v: number) => boolean) => a.filter(f).length / a.length;
    const within = (v: number, lo: number, hi: number) => expect([v > lo, v < hi]).toEqual([true, true]);
    within(frac(up, (v) => Math.abs(v) > 1), 0.25, 0.4); // block 0's limit 1
    within(frac(gate, (v) => v > 1), 0.1, 0.22);
    within(frac(up, (v) => Math.abs(v) > 0.5), 0.5, 0.72); // block 1's 0.5
    within(frac(gate, (v) => v > 0.5), 0.24, 0.38);
    within(frac(up, (v) => Math.abs(v) > 0.75), 0.37, 0.55); // block 3's 0.75
    // The real model's 7: never reached by these weights (hence the preset's small limits).
    expect(frac(up, (v) => Math.abs(v) > 7)).toBe(0);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-mellum-maple-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    const header = (preset: string, arch: string) => {
      const out = path.join(dir, `${preset}.gguf`);
      writeModel({ config: config(preset), fileType: 'F32', seed: 1, out });
      const h = readGgufHeader(out);
      expect(h.kv.get('general.architecture')!.value).toBe(arch);
      const keys = Object.fromEntries([...h.kv.keys()].filter((k) => k.startsWith(`${arch}.`)).map((k) => [k.slice(arch.length + 1), h.kv.get(k)!.value]));
      return { h, kv: h.kv, keys };
    };
    const COMMON = {
      vocab_size: 1024, context_length: 4096, embedding_length: 64, block_count: 4, feed_forward_length: 128,
      'attention.head_count': 4, 'attention.head_count_kv': 2, 'attention.key_length': 32, 'attention.value_length': 32,
      'rope.freq_base': 1e6, 'attention.layer_norm_rms_epsilon': Math.fround(1e-6),
      expert_count: 8, expert_used_count: 2, expert_feed_forward_length: 32,
    };
    const U32 = ['vocab_size', 'context_length', 'embedding_length', 'block_count', 'feed_forward_length', 'attention.head_count', 'attention.head_count_kv', 'attention.key_length', 'attention.value_length', 'rope.dimension_count', 'expert_count', 'expert_used_count', 'expert_feed_forward_length'];

    it('tiny-mellum: rope over the whole head, window 8 with the BOOL pattern, freq_base_swa (FLOAT32)', () => {
      const { h, kv, keys } = header('tiny-mellum', 'mellum');
      expect(keys).toEqual({
        ...COMMON, 'rope.dimension_count': 32, 'attention.sliding_window': 8, 'attention.sliding_window_pattern': [true, true, true, false], 'rope.freq_base_swa': 1e4,
      });
      for (const k of [...U32, 'attention.sliding_window']) expect([k, kv.get(`mellum.${k}`)!.type]).toEqual([k, GgufType.UINT32]);
      for (const k of ['rope.freq_base', 'rope.freq_base_swa', 'attention.layer_norm_rms_epsilon']) expect([k, kv.get(`mellum.${k}`)!.type]).toEqual([k, GgufType.FLOAT32]);
      expect([kv.get('mellum.attention.sliding_window_pattern')!.type, kv.get('mellum.attention.sliding_window_pattern')!.elemType]).toEqual([GgufType.ARRAY, GgufType.BOOL]);
      expect(h.tensors.length).toBe(GLOBALS.length + 4 * BLOCK.length);
      expect(h.tensors.find((t) => t.name === 'output.weight')!.shape).toEqual([64, 1024]);
      expect(h.tensors.find((t) => t.name === 'blk.2.attn_q.weight')!.shape).toEqual([64, 128]);
    });

    it('tiny-mellum-full: no sliding-window keys at all', () => {
      const { keys } = header('tiny-mellum-full', 'mellum');
      expect(keys).toEqual({ ...COMMON, 'rope.dimension_count': 32 });
    });

    it('tiny-maple: partial rope.dimension_count, window, pattern, freq_base_swa and swiglu_clamp_exp (FLOAT32 per block)', () => {
      const { h, kv, keys } = header('tiny-maple', 'maple');
      expect(keys).toEqual({
        ...COMMON, 'rope.dimension_count': 16, 'attention.sliding_window': 8, 'attention.sliding_window_pattern': [true, true, true, false], 'rope.freq_base_swa': 1e4,
        swiglu_clamp_exp: [1, 0.5, 0, 0.75],
      });
      for (const k of [...U32, 'attention.sliding_window']) expect([k, kv.get(`maple.${k}`)!.type]).toEqual([k, GgufType.UINT32]);
      for (const k of ['rope.freq_base', 'rope.freq_base_swa', 'attention.layer_norm_rms_epsilon']) expect([k, kv.get(`maple.${k}`)!.type]).toEqual([k, GgufType.FLOAT32]);
      expect([kv.get('maple.attention.sliding_window_pattern')!.elemType, kv.get('maple.swiglu_clamp_exp')!.elemType]).toEqual([GgufType.BOOL, GgufType.FLOAT32]);
      expect(h.tensors.find((t) => t.name === 'blk.3.ffn_gate_exps.weight')!.shape).toEqual([64, 32, 8]);
    });
  });
});
