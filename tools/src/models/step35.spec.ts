// step35 (StepFun Step-3.5-Flash): the tensors and keys llama.cpp's loader (src/models/step35.cpp)
// takes, as conversion/step3.py Step35Model writes them: per-block head counts on full and sliding
// blocks, leading dense blocks then routed blocks with a selection bias and a shared expert, the
// optional SwiGLU clamp arrays and llama3 rope_freqs, and the weights' scales.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { step35RopeFactors, type Step35Config } from './architectures/step35';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'attn_output.weight', 'attn_gate.weight'];
const DENSE = [...ATTN, 'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
const MOE = [
  ...ATTN, 'ffn_norm.weight', 'ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight', 'exp_probs_b.bias',
  'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight',
];

const config = (preset: string, over: Partial<Step35Config> = {}) => ({ ...getPreset(preset).config, ...over }) as Step35Config;
const plan = (preset: string, over: Partial<Step35Config> = {}) => planModel(config(preset, over), 'F32');
const shapes = (preset: string, over: Partial<Step35Config> = {}) => new Map(plan(preset, over).tensors.map((t) => [t.name, t.shape]));
const std = (a: Float32Array) => {
  const m = a.reduce((s, x) => s + x, 0) / a.length;
  return Math.sqrt(a.reduce((s, x) => s + x * x, 0) / a.length - m * m);
};

describe('step35', () => {
  it('tensors: dense block 0, then routed blocks with exp_probs_b.bias and a shared expert; attn_gate and q/k norms everywhere; untied head', () => {
    for (const p of ['tiny-step35', 'tiny-step35-clamp']) {
      const t = plan(p).tensors;
      const block = (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
      expect(block(0)).toEqual([...DENSE].sort());
      for (let i = 1; i < 6; i++) expect(block(i)).toEqual([...MOE].sort());
      const globals = ['token_embd.weight', 'output_norm.weight', 'output.weight', ...(p === 'tiny-step35-clamp' ? ['rope_freqs.weight'] : [])];
      expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(globals);
      expect(t.length).toBe(globals.length + DENSE.length + 5 * MOE.length);
    }
    expect(DEFAULT_PRESET_FOR_ARCH.step35).toBe('tiny-step35');
  });

  it('shapes: full blocks (0, 4) 4 heads / 2 KV of 16, sliding blocks 6 / 2; attn_gate [n_embd, n_head_l]; experts and shared expert', () => {
    const s = shapes('tiny-step35');
    const attn = (i: number) => ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'attn_gate', 'attn_q_norm', 'attn_k_norm'].map((n) => s.get(`blk.${i}.${n}.weight`));
    const full = [[64, 64], [64, 32], [64, 32], [64, 64], [64, 4], [16], [16]];
    const sliding = [[64, 96], [64, 32], [64, 32], [96, 64], [64, 6], [16], [16]];
    expect([0, 1, 2, 3, 4, 5].map(attn)).toEqual([full, sliding, sliding, sliding, full, sliding]);
    expect(['ffn_gate', 'ffn_up', 'ffn_down'].map((n) => s.get(`blk.0.${n}.weight`))).toEqual([[64, 128], [64, 128], [128, 64]]);
    expect(['ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight', 'exp_probs_b.bias', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'].map((n) => s.get(`blk.3.${n}`))).toEqual([
      [64, 8], [64, 32, 8], [64, 32, 8], [32, 64, 8], [8], [64, 32], [64, 32], [32, 64],
    ]);
    expect([s.get('token_embd.weight'), s.get('output.weight')]).toEqual([[64, 1024], [64, 1024]]);
  });

  it('rope_freqs: llama3 factors of the full blocks\' head/4 pairs (as Step35Model computes them), padded with 1 to the loader\'s n_rot_max / 2', () => {
    const c = config('tiny-step35-clamp');
    // Base 5e6, rotary dims 8: wavelengths 6.3, 297, 1.4e4, 6.6e5 against 16/4 and 16; pair 0 between.
    const f = [...generateTensorF32(c, 1, 'rope_freqs.weight')];
    expect(f.length).toBe(8);
    const smooth = (16 / (2 * Math.PI) - 1) / (4 - 1);
    expect(f[0]).toBeCloseTo(1 / ((1 - smooth) / 8 + smooth), 5); // 1.736
    expect(f.slice(1)).toEqual([8, 8, 8, 1, 1, 1, 1]);
    // Over an original context of 512: one factor of each regime (1, smooth, factor).
    const r512 = step35RopeFactors({ ...c, ropeFreqs: { ...c.ropeFreqs!, origCtx: 512 } });
    expect(r512[1]).toBeCloseTo(2.9767, 3);
    expect([r512[0], r512[2], r512[3]]).toEqual([1, 8, 8]);
    // One full block and nothing sliding: every block rotates head/2, so the loader wants head/4 entries.
    expect(shapes('tiny-step35-clamp', { nLayers: 1 }).get('rope_freqs.weight')).toEqual([4]);
    // F32 in every file type (1-D), as the norms and the selection bias.
    const q = new Map(planModel(c, 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
    expect([q.get('rope_freqs.weight'), q.get('blk.1.exp_probs_b.bias'), q.get('blk.1.ffn_gate_inp.weight'), q.get('blk.1.attn_q_norm.weight')]).toEqual([GgmlType.F32, GgmlType.F32, GgmlType.F32, GgmlType.F32]);
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan('tiny-step35', { nExperts: 0, nExpertsUsed: 0 })).toThrow(/experts/);
    expect(() => plan('tiny-step35', { nExpertsUsed: 9 })).toThrow(/experts-used/);
    expect(() => plan('tiny-step35', { sharedFf: 0 })).toThrow(/sharedFf/);
    expect(() => plan('tiny-step35', { expertFf: 0 })).toThrow(/expertFf/);
    expect(() => plan('tiny-step35', { nHeadsSwa: 0 })).toThrow(/nHeadsSwa/);
    expect(() => plan('tiny-step35', { nKvHeadsSwa: 4 })).toThrow(/nHeadsSwa 6 not divisible by nKvHeadsSwa 4/);
    expect(() => plan('tiny-step35', { nKvHeads: 3 })).toThrow(/divisible/);
    expect(() => plan('tiny-step35', { headDim: 18 })).toThrow(/headDim 18 must be a multiple of 4/);
    expect(() => plan('tiny-step35', { window: 0 })).toThrow(/window/);
    expect(() => plan('tiny-step35', { fullInterval: 0 })).toThrow(/fullInterval/);
    expect(() => plan('tiny-step35', { ropeBaseSwa: 0 })).toThrow(/ropeBaseSwa/);
    expect(() => plan('tiny-step35', { nDense: -1 })).toThrow(/nDense/);
    expect(() => plan('tiny-step35', { wScale: 0 })).toThrow(/wScale/);
    expect(() => plan('tiny-step35', { normW: undefined })).toThrow(/normW/);
    expect(() => plan('tiny-step35', { swigluLimit: [0, -1] })).toThrow(/swigluLimit\[1\]/);
    expect(() => plan('tiny-step35', { swigluLimitShared: [1] })).toThrow(/swigluLimitShared\[0\] must be 0 on dense block 0/);
    expect(() => plan('tiny-step35-clamp', { ropeFreqs: { factor: 8, lowFreqFactor: 4, highFreqFactor: 1, origCtx: 512 } })).toThrow(/ropeFreqs/);
  });

  it('--layers N keeps the first N blocks: the pattern by rule, dense blocks and clamp arrays cut (or padded with 0)', () => {
    const cut = plan('bench-step35-flash-shaped', { nLayers: 2 });
    const c = cut.config as Step35Config;
    expect(c.nDense).toBe(2);
    expect(cut.tensors.some((t) => t.name.includes('_exps'))).toBe(false);
    const four = shapes('bench-step35-flash-shaped', { nLayers: 5 });
    expect([four.get('blk.0.attn_q.weight'), four.get('blk.1.attn_q.weight'), four.get('blk.4.attn_q.weight'), four.get('blk.3.ffn_gate_exps.weight'), four.get('blk.2.ffn_up.weight')]).toEqual([
      [4096, 8192], [4096, 12288], [4096, 8192], [4096, 1280, 288], [4096, 11264],
    ]);
    const full = plan('bench-step35-flash-shaped');
    expect(full.tensors.length).toBe(753);
    // 196B total, as the model's name says (with a vocabulary of 32000 rather than 128896).
    expect(full.tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0) / 1e9).toBeCloseTo(196.2, 1);
    expect((plan('tiny-step35-clamp', { nLayers: 3 }).config as Step35Config).swigluLimitShared).toEqual([0, 0, 1]);
    expect((plan('tiny-step35-clamp', { nLayers: 8 }).config as Step35Config).swigluLimit).toEqual([0, 1, 0, 1, 0.75, 1, 0, 0]);
  });

  it('scales: unit-std embeddings, routers of std 2/sqrt(dim), gate at unit gain, writers at residualGain (routed experts / wScale), q/k norms ~1', () => {
    const c = config('tiny-step35');
    // Within ~5%.
    const ratio = (name: string, want: number) => std(generateTensorF32(c, 1, name)) / want;
    const rg = 1 / Math.sqrt(12); // 6 blocks
    expect(ratio('token_embd.weight', 1)).toBeCloseTo(1, 1);
    expect(ratio('output.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.1.ffn_gate_inp.weight', 2 / 8)).toBeCloseTo(1, 1);
    // 384 values: within 10%.
    expect(Math.abs(ratio('blk.1.attn_gate.weight', 1 / 8) - 1)).toBeLessThan(0.1);
    expect(ratio('blk.1.attn_output.weight', rg / Math.sqrt(96))).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_down.weight', rg / Math.sqrt(128))).toBeCloseTo(1, 1);
    // The routed mix is multiplied by expert_weights_scale 3: its writer at residualGain / 3.
    expect(ratio('blk.2.ffn_down_exps.weight', rg / 3 / Math.sqrt(32))).toBeCloseTo(1, 1);
    expect(ratio('blk.2.ffn_gate_exps.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio('blk.2.ffn_down_shexp.weight', rg / Math.sqrt(32))).toBeCloseTo(1, 1);
    expect(ratio('blk.2.exp_probs_b.bias', 0.05)).toBeGreaterThan(0.5);
    const qn = generateTensorF32(c, 1, 'blk.0.attn_q_norm.weight');
    expect(qn.reduce((a, x) => a + x, 0) / qn.length).toBeCloseTo(1, 0);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-step35-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    const header = (preset: string) => {
      const out = path.join(dir, `${preset}.gguf`);
      writeModel({ config: config(preset), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      expect(kv.get('general.architecture')!.value).toBe('step35');
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('step35.')).map((k) => [k.slice('step35.'.length), kv.get(k)!.value]));
      return { kv, keys };
    };
    const COMMON = {
      vocab_size: 1024, context_length: 4096, embedding_length: 64, block_count: 6, feed_forward_length: 128,
      'attention.head_count': [4, 6, 6, 6, 4, 6], 'attention.head_count_kv': [2, 2, 2, 2, 2, 2],
      'attention.key_length': 16, 'attention.value_length': 16, 'rope.dimension_count': 16,
      'rope.freq_base': 5e6, 'rope.freq_base_swa': 1e4, 'attention.layer_norm_rms_epsilon': Math.fround(1e-5),
      'attention.sliding_window': 8, 'attention.sliding_window_pattern': [false, true, true, true, false, true],
      expert_count: 8, expert_used_count: 2, expert_feed_forward_length: 32, expert_shared_feed_forward_length: 32,
      expert_weights_scale: 3, expert_weights_norm: true, expert_gating_func: 2, leading_dense_block_count: 1, moe_every_n_layers: 1,
    };

    it('tiny-step35: per-block head arrays (INT32), the sliding pattern (BOOL), no clamp keys', () => {
      const { kv, keys } = header('tiny-step35');
      expect(keys).toEqual(COMMON);
      expect([kv.get('step35.attention.head_count')!.elemType, kv.get('step35.attention.head_count_kv')!.elemType, kv.get('step35.attention.sliding_window_pattern')!.elemType]).toEqual([
        GgufType.INT32, GgufType.INT32, GgufType.BOOL,
      ]);
    });

    it('tiny-step35-clamp: swiglu_clamp_exp / _shexp as FLOAT32 arrays per block', () => {
      const { kv, keys } = header('tiny-step35-clamp');
      expect(keys).toEqual({ ...COMMON, swiglu_clamp_exp: [0, 1, 0, 1, 0.75, 1], swiglu_clamp_shexp: [0, 0, 1, 1, 0.75, 0] });
      expect(kv.get('step35.swiglu_clamp_exp')!.elemType).toBe(GgufType.FLOAT32);
      expect(kv.get('step35.swiglu_clamp_shexp')!.elemType).toBe(GgufType.FLOAT32);
    });
  });
});
