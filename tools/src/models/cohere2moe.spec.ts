// cohere2moe (Cohere's MoE decoder, 30B-A3B): the tensors and keys llama.cpp's loader
// (src/models/cohere2moe.cpp) takes, as conversion/command_r.py Cohere2MoeModel writes them:
// parallel blocks with one attn_norm and no ffn_norm, leading dense blocks then routed blocks with
// separate or fused gate/up experts and an optional shared expert, the sliding-window pattern as a
// BOOL array, the LayerNorm / RMSNorm choice by the eps key, logit_scale; refusals naming the
// field; the weights' scales; and written files read back.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import { cohere2moeHeadStd, cohere2moeIsSwa, cohere2moeUsesRope, type Cohere2MoeConfig } from './architectures/cohere2moe';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset, PRESETS } from './presets';
import { Xoshiro128 } from './rng';

const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight'];
const BIAS = ['attn_q.bias', 'attn_k.bias', 'attn_v.bias'];
const DENSE = [...ATTN, 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
const SPLIT = ['ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight'];
const FUSED = ['ffn_gate_inp.weight', 'ffn_gate_up_exps.weight', 'ffn_down_exps.weight'];
const SHEXP = ['ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'];

const config = (preset: string, over: Partial<Cohere2MoeConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as Cohere2MoeConfig;
const plan = (preset: string, over: Partial<Cohere2MoeConfig> = {}) => planModel(config(preset, over), 'F32');
const shapes = (preset: string, over: Partial<Cohere2MoeConfig> = {}) => new Map(plan(preset, over).tensors.map((t) => [t.name, t.shape]));
const stats = (a: ArrayLike<number>) => {
  const v = Array.from(a);
  const m = v.reduce((s, x) => s + x, 0) / v.length;
  return { mean: m, std: Math.sqrt(v.reduce((s, x) => s + x * x, 0) / v.length - m * m) };
};

describe('cohere2moe', () => {
  it('tensors: one attn_norm per block (no ffn_norm), dense block 0, routed blocks 1-4; shared expert (tiny) or fused gate_up + q/k/v biases (rms); tied / untied head', () => {
    const cases: [string, string[], string[], string[]][] = [
      ['tiny-cohere2moe', DENSE, [...ATTN, ...SPLIT, ...SHEXP], ['token_embd.weight', 'output_norm.weight']],
      ['tiny-cohere2moe-rms', [...DENSE, ...BIAS], [...ATTN, ...BIAS, ...FUSED], ['token_embd.weight', 'output_norm.weight', 'output.weight']],
    ];
    for (const [p, dense, moe, globals] of cases) {
      const t = plan(p).tensors;
      const block = (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
      expect([p, 0, block(0)]).toEqual([p, 0, [...dense].sort()]);
      for (let i = 1; i < 5; i++) expect([p, i, block(i)]).toEqual([p, i, [...moe].sort()]);
      expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(globals);
      expect(t.length).toBe(globals.length + dense.length + 4 * moe.length);
      expect(new Set(t.map((x) => x.name)).size).toBe(t.length);
      expect(t.some((x) => /ffn_norm|attn_q_norm|attn_k_norm|nextn|exp_probs_b|ffn_gate_inp_shexp/.test(x.name))).toBe(false);
    }
    expect(DEFAULT_PRESET_FOR_ARCH.cohere2moe).toBe('tiny-cohere2moe');
    expect(Object.keys(PRESETS).filter((k) => k.includes('cohere2moe')).sort()).toEqual(['tiny-cohere2moe', 'tiny-cohere2moe-rms']);
  });

  it('shapes: 4 heads / 2 KV of 16, dense FFN of 128, 8 experts of 32 (fused: [n_embd, 2 x 32, 8]), shared expert of 32', () => {
    const s = shapes('tiny-cohere2moe');
    for (let i = 0; i < 5; i++) {
      expect(['attn_norm', 'attn_q', 'attn_k', 'attn_v', 'attn_output'].map((n) => s.get(`blk.${i}.${n}.weight`))).toEqual([[64], [64, 64], [64, 32], [64, 32], [64, 64]]);
    }
    expect(['ffn_gate', 'ffn_up', 'ffn_down'].map((n) => s.get(`blk.0.${n}.weight`))).toEqual([[64, 128], [64, 128], [128, 64]]);
    expect([...SPLIT, ...SHEXP].map((n) => s.get(`blk.3.${n}`))).toEqual([[64, 8], [64, 32, 8], [64, 32, 8], [32, 64, 8], [64, 32], [64, 32], [32, 64]]);
    expect([s.get('token_embd.weight'), s.get('output_norm.weight'), s.has('output.weight')]).toEqual([[64, 1024], [64], false]);

    const r = shapes('tiny-cohere2moe-rms');
    expect([...FUSED, ...BIAS].map((n) => r.get(`blk.2.${n}`))).toEqual([[64, 8], [64, 64, 8], [32, 64, 8], [64], [32], [32]]);
    expect(BIAS.map((n) => r.get(`blk.0.${n}`))).toEqual([[64], [32], [32]]);
    expect(r.get('output.weight')).toEqual([64, 1024]);

    // A head wider than n_embd / heads: q and attn_output follow heads x headDim.
    const w = shapes('tiny-cohere2moe', { headDim: 32 });
    expect([w.get('blk.1.attn_q.weight'), w.get('blk.1.attn_k.weight'), w.get('blk.1.attn_output.weight')]).toEqual([[64, 128], [64, 64], [128, 64]]);
    // Two shared experts: expert_shared_feed_forward_length defaults to expertFf x count (the converter's value).
    const two = plan('tiny-cohere2moe', { nShared: 2, sharedFf: 0 });
    expect(two.config.sharedFf).toBe(64);
    expect(new Map(two.tensors.map((t) => [t.name, t.shape])).get('blk.1.ffn_down_shexp.weight')).toEqual([64, 64]);
    expect(shapes('tiny-cohere2moe', { sharedFf: 48 }).get('blk.1.ffn_up_shexp.weight')).toEqual([64, 48]);
  });

  it('pattern and RoPE: [F, S, S, S, F] (dense-first period 4); RoPE on sliding blocks and the dense lead, block 4 NoPE; explicit patterns and --layers', () => {
    const c = plan('tiny-cohere2moe').config as Cohere2MoeConfig;
    expect([0, 1, 2, 3, 4].map((i) => cohere2moeIsSwa(c, i))).toEqual([false, true, true, true, false]);
    expect([0, 1, 2, 3, 4].map((i) => cohere2moeUsesRope(c, i))).toEqual([true, true, true, true, false]);
    // Without a dense lead block 0 is NoPE too.
    const nd = plan('tiny-cohere2moe', { nDense: 0 }).config as Cohere2MoeConfig;
    expect([0, 4].map((i) => cohere2moeUsesRope(nd, i))).toEqual([false, false]);
    expect(plan('tiny-cohere2moe', { nDense: 0 }).tensors.some((t) => t.name.startsWith('blk.0.ffn_gate_inp'))).toBe(true);
    // An explicit pattern is what the file says.
    const ex = plan('tiny-cohere2moe', { swaPattern: [true, false, true, true, true] }).config as Cohere2MoeConfig;
    expect([0, 1, 2, 3, 4].map((i) => [cohere2moeIsSwa(ex, i), cohere2moeUsesRope(ex, i)])).toEqual([[true, true], [false, false], [true, true], [true, true], [true, true]]);
    // --layers N: the rule's first N blocks, the dense lead cut to N.
    const one = plan('tiny-cohere2moe', { nLayers: 1 });
    expect((one.config as Cohere2MoeConfig).nDense).toBe(1);
    expect(one.tensors.some((t) => t.name.includes('_exps') || t.name.includes('shexp'))).toBe(false);
    const nine = plan('tiny-cohere2moe', { nLayers: 9 }).config as Cohere2MoeConfig;
    expect(Array.from({ length: 9 }, (_, i) => cohere2moeIsSwa(nine, i))).toEqual([false, true, true, true, false, true, true, true, false]);
  });

  it('types: norms, routers and biases F32 in every file; the fused gate_up and the rest quantized (rows of 64 fall back to Q5_0 / Q8_0)', () => {
    for (const p of ['tiny-cohere2moe', 'tiny-cohere2moe-rms']) {
      const q = new Map(planModel(config(p), 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
      for (const n of ['blk.0.attn_norm.weight', 'blk.1.ffn_gate_inp.weight', 'output_norm.weight']) expect([p, n, q.get(n)]).toEqual([p, n, GgmlType.F32]);
      expect(q.get('blk.0.attn_q.weight')).toBe(GgmlType.Q5_0);
      expect(q.get('blk.1.ffn_down_exps.weight')).toBe(GgmlType.Q5_0);
    }
    const r = new Map(planModel(config('tiny-cohere2moe-rms'), 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
    expect([r.get('blk.1.attn_q.bias'), r.get('blk.1.attn_k.bias'), r.get('blk.1.ffn_gate_up_exps.weight'), r.get('output.weight')]).toEqual([GgmlType.F32, GgmlType.F32, GgmlType.Q5_0, GgmlType.Q8_0]);
    // Tied: token_embd is the head, typed as output.
    expect(new Map(planModel(config('tiny-cohere2moe'), 'Q4_K_M').tensors.map((t) => [t.name, t.type])).get('token_embd.weight')).toBe(GgmlType.Q8_0);
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    const p = 'tiny-cohere2moe';
    expect(() => plan(p, { nExperts: 0, nExpertsUsed: 0 })).toThrow(/cohere2moe: needs experts/);
    expect(() => plan(p, { nExpertsUsed: 9 })).toThrow(/experts-used 9/);
    expect(() => plan(p, { expertFf: 0 })).toThrow(/expertFf must be a positive integer/);
    expect(() => plan(p, { ff: 0 })).toThrow(/ff must be a positive integer/);
    expect(() => plan(p, { nKvHeads: 3 })).toThrow(/heads 4 not divisible by kv heads 3/);
    expect(() => plan(p, { headDim: 15 })).toThrow(/headDim 15 must be even/);
    expect(() => plan(p, { headDim: undefined, dim: 66 })).toThrow(/headDim must be a positive integer/);
    expect(() => plan(p, { ropeBase: 0 })).toThrow(/ropeBase must be positive/);
    expect(() => plan(p, { normEps: 0 })).toThrow(/normEps must be positive/);
    expect(() => plan(p, { normKind: 'group' as never })).toThrow(/normKind must be 'layer'/);
    expect(() => plan(p, { normKind: undefined })).toThrow(/normKind/);
    for (const w of [0, -8, 2.5, undefined]) expect(() => plan(p, { window: w as number })).toThrow(/window must be a positive integer \(attention.sliding_window is required\)/);
    expect(() => plan(p, { swaPattern: [false, true] })).toThrow(/swaPattern must have one flag per block \(5\), got length 2/);
    expect(() => plan(p, { swaPattern: [false, true, 1, true, false] as never })).toThrow(/swaPattern\[2\] must be a boolean/);
    for (const v of [0, -0.25, Number.NaN, Number.POSITIVE_INFINITY, undefined]) expect(() => plan(p, { logitScale: v as number })).toThrow(/logitScale must be a positive finite number \(logit_scale is required\)/);
    for (const v of [-1, 0.5, undefined]) expect(() => plan(p, { nDense: v as number })).toThrow(/nDense must be a non-negative integer/);
    expect(() => plan(p, { nShared: -1 })).toThrow(/nShared must be a non-negative integer/);
    expect(() => plan(p, { sharedFf: -4 })).toThrow(/sharedFf must be a non-negative integer/);
    expect(() => plan(p, { nShared: 0, sharedFf: 32 })).toThrow(/sharedFf 32 needs nShared > 0/);
    expect(() => plan(p, { gating: 'softplus' as never })).toThrow(/gating must be 'softmax' or 'sigmoid'/);
    expect(() => plan(p, { normW: undefined })).toThrow(/normW must be a boolean/);
    for (const v of [0, -1, Number.NaN]) expect(() => plan(p, { wScale: v })).toThrow(/wScale must be a positive finite number/);
    expect(() => plan(p, { fusedGateUp: 1 as never })).toThrow(/fusedGateUp must be a boolean/);
    expect(() => plan(p, { qkvBias: 'yes' as never })).toThrow(/qkvBias must be a boolean/);
    // Defaults: headDim from dim / heads, no shared expert when nShared is absent.
    const d = plan(p, { headDim: undefined, nShared: undefined, sharedFf: 0 }).config as Cohere2MoeConfig;
    expect([d.headDim, d.nShared, d.sharedFf]).toEqual([16, 0, 0]);
  });

  it('scales: tied token_embd / head at 2 / (sqrt(dim) x logit_scale) (logits of std ~2 after the multiply), writers at 1/sqrt(2L) (x sqrt 2 when averaged with the shared expert, / wScale when scaled), routers at gain 2', () => {
    const c = config('tiny-cohere2moe');
    const r = config('tiny-cohere2moe-rms');
    const ratio = (cfg: Cohere2MoeConfig, name: string, want: number) => stats(generateTensorF32(cfg, 1, name)).std / want;
    const rg = 1 / Math.sqrt(10); // 5 blocks
    expect(cohere2moeHeadStd(c)).toBe(1);
    expect(ratio(c, 'token_embd.weight', 1)).toBeCloseTo(1, 1);
    expect(ratio(r, 'token_embd.weight', 1)).toBeCloseTo(1, 1);
    expect(ratio(r, 'output.weight', 1)).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.0.attn_q.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.0.attn_output.weight', rg / 8)).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.0.ffn_down.weight', rg / Math.sqrt(128))).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.1.ffn_gate_inp.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.1.ffn_gate_exps.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.1.ffn_down_exps.weight', (rg * Math.SQRT2) / Math.sqrt(32))).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.1.ffn_down_shexp.weight', (rg * Math.SQRT2) / Math.sqrt(32))).toBeCloseTo(1, 1);
    expect(ratio(r, 'blk.1.ffn_gate_up_exps.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio(r, 'blk.1.ffn_down_exps.weight', rg / 2.5 / Math.sqrt(32))).toBeCloseTo(1, 1);
    expect(stats(generateTensorF32(r, 1, 'blk.1.attn_q.bias')).std).toBeGreaterThan(0.05);
    for (const n of ['blk.2.attn_norm.weight', 'output_norm.weight']) expect(stats(generateTensorF32(c, 1, n)).mean).toBeCloseTo(1, 1);

    // Logits over unit-variance (normed) inputs: tied token_embd x 0.25 has std ~2.
    const E = generateTensorF32(c, 1, 'token_embd.weight');
    const x = new Float32Array(64);
    const rng = new Xoshiro128(3);
    const logits: number[] = [];
    for (let s = 0; s < 8; s++) {
      rng.fillNormal(x, 0, 1);
      for (let v = 0; v < 1024; v++) logits.push(c.logitScale * x.reduce((acc, xi, i) => acc + xi * E[v * 64 + i], 0));
    }
    expect(stats(logits).std).toBeGreaterThan(1.7);
    expect(stats(logits).std).toBeLessThan(2.3);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cohere2moe-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    const write = (preset: string) => {
      const out = path.join(dir, `${preset}.gguf`);
      const cfg = config(preset);
      writeModel({ config: cfg, fileType: 'F32', seed: 5, out });
      const h = readGgufHeader(out);
      expect(h.kv.get('general.architecture')!.value).toBe('cohere2moe');
      const keys = Object.fromEntries([...h.kv.keys()].filter((k) => k.startsWith('cohere2moe.')).map((k) => [k.slice('cohere2moe.'.length), h.kv.get(k)!.value]));
      const types = Object.fromEntries([...h.kv.keys()].filter((k) => k.startsWith('cohere2moe.')).map((k) => [k.slice('cohere2moe.'.length), h.kv.get(k)!.type]));
      return { out, cfg, h, keys, types };
    };
    const COMMON = {
      vocab_size: 1024, context_length: 4096, embedding_length: 64, block_count: 5, feed_forward_length: 128,
      'attention.head_count': 4, 'attention.head_count_kv': 2, 'rope.freq_base': 50000, 'rope.dimension_count': 16,
      'attention.key_length': 16, 'attention.value_length': 16, expert_count: 8, expert_used_count: 2,
      logit_scale: 0.25, 'attention.sliding_window': 8, 'attention.sliding_window_pattern': [false, true, true, true, false],
      expert_feed_forward_length: 32, leading_dense_block_count: 1, expert_weights_norm: true, 'rope.scaling.type': 'none',
    };
    const U32 = [
      'vocab_size', 'context_length', 'embedding_length', 'block_count', 'feed_forward_length', 'attention.head_count', 'attention.head_count_kv',
      'rope.dimension_count', 'attention.key_length', 'attention.value_length', 'expert_count', 'expert_used_count', 'attention.sliding_window',
      'expert_feed_forward_length', 'leading_dense_block_count',
    ];

    it('tiny-cohere2moe: attention.layer_norm_epsilon only, softmax gating key, shared-expert keys, pattern as BOOL array; no output.weight', () => {
      const { out, cfg, h, keys, types } = write('tiny-cohere2moe');
      expect(keys).toEqual({
        ...COMMON, 'attention.layer_norm_epsilon': Math.fround(1e-5), expert_gating_func: 1, expert_shared_count: 1, expert_shared_feed_forward_length: 32,
      });
      for (const k of [...U32, 'expert_gating_func', 'expert_shared_count', 'expert_shared_feed_forward_length']) expect([k, types[k]]).toEqual([k, GgufType.UINT32]);
      for (const k of ['rope.freq_base', 'logit_scale', 'attention.layer_norm_epsilon']) expect([k, types[k]]).toEqual([k, GgufType.FLOAT32]);
      expect([types.expert_weights_norm, types['rope.scaling.type'], types['attention.sliding_window_pattern']]).toEqual([GgufType.BOOL, GgufType.STRING, GgufType.ARRAY]);
      expect(h.kv.get('cohere2moe.attention.sliding_window_pattern')!.elemType).toBe(GgufType.BOOL);
      // Round trip: the planned tensors, shapes and bytes.
      const planned = planModel(cfg, 'F32').tensors;
      expect(h.tensors.map((t) => [t.name, t.shape])).toEqual(planned.map((t) => [t.name, t.shape]));
      expect(h.tensors.some((t) => t.name === 'output.weight' || t.name.includes('ffn_norm'))).toBe(false);
      for (const name of ['token_embd.weight', 'blk.0.ffn_down.weight', 'blk.4.ffn_gate_exps.weight', 'blk.2.ffn_down_shexp.weight', 'blk.3.attn_norm.weight']) {
        const t = h.tensors.find((x) => x.name === name)!;
        expect(t.type).toBe(GgmlType.F32);
        expect([name, Buffer.from(readGgufTensorBytes(out, t)).equals(Buffer.from(generateTensorF32(cfg, 5, name).buffer))]).toEqual([name, true]);
      }
    });

    it('tiny-cohere2moe-rms: attention.layer_norm_rms_epsilon only, no gating / shared keys, expert_weights_scale FLOAT32; fused gate_up, biases, output.weight', () => {
      const { out, cfg, h, keys, types } = write('tiny-cohere2moe-rms');
      expect(keys).toEqual({ ...COMMON, 'attention.layer_norm_rms_epsilon': Math.fround(1e-6), expert_weights_scale: 2.5 });
      for (const k of U32) expect([k, types[k]]).toEqual([k, GgufType.UINT32]);
      for (const k of ['rope.freq_base', 'logit_scale', 'attention.layer_norm_rms_epsilon', 'expert_weights_scale']) expect([k, types[k]]).toEqual([k, GgufType.FLOAT32]);
      expect(h.tensors.map((t) => [t.name, t.shape])).toEqual(planModel(cfg, 'F32').tensors.map((t) => [t.name, t.shape]));
      for (const name of ['output.weight', 'blk.1.ffn_gate_up_exps.weight', 'blk.0.attn_v.bias']) {
        const t = h.tensors.find((x) => x.name === name)!;
        expect([name, Buffer.from(readGgufTensorBytes(out, t)).equals(Buffer.from(generateTensorF32(cfg, 5, name).buffer))]).toEqual([name, true]);
      }
    });

    it('an explicit pattern and --layers are written as the block count says', () => {
      const out = path.join(dir, 'cut.gguf');
      writeModel({ config: config('tiny-cohere2moe', { nLayers: 2 }), fileType: 'Q8_0', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      expect([kv.get('cohere2moe.block_count')!.value, kv.get('cohere2moe.attention.sliding_window_pattern')!.value, kv.get('cohere2moe.leading_dense_block_count')!.value]).toEqual([2, [false, true], 1]);
      const out2 = path.join(dir, 'pattern.gguf');
      writeModel({ config: config('tiny-cohere2moe', { swaPattern: [true, true, false, true, true] }), fileType: 'F32', seed: 1, out: out2 });
      expect(readGgufHeader(out2).kv.get('cohere2moe.attention.sliding_window_pattern')!.value).toEqual([true, true, false, true, true]);
    });
  });
});
