// laguna (Poolside Laguna XS.2 / S.2 / M.1): the tensors and keys llama.cpp's loader
// (src/models/laguna.cpp) takes, as conversion/laguna.py LagunaModel writes them: per-block query
// head counts (INT32 array) over uniform KV heads, per-head q/k norms, the softplus attention gate
// per head or per element, full and sliding blocks with their own RoPE dims and bases (the default
// pattern or an explicit BOOL array), YaRN on the full blocks, leading dense blocks then routed
// blocks with the required selection bias and an always-on shared expert of its own size; the
// optional head; refusals naming the field; and the weights' scales.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { lagunaGateKind, lagunaHeads, lagunaIsSwa, type LagunaConfig } from './architectures/laguna';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'attn_gate.weight', 'attn_output.weight'];
const DENSE = [...ATTN, 'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
const MOE = [
  ...ATTN, 'ffn_norm.weight', 'ffn_gate_inp.weight', 'exp_probs_b.bias', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight',
  'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight',
];

const config = (preset: string, over: Partial<LagunaConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as LagunaConfig;
const plan = (preset: string, over: Partial<LagunaConfig> = {}) => planModel(config(preset, over), 'F32');
const shapes = (preset: string, over: Partial<LagunaConfig> = {}) => new Map(plan(preset, over).tensors.map((t) => [t.name, t.shape]));
const std = (a: Float32Array) => {
  const m = a.reduce((s, x) => s + x, 0) / a.length;
  return Math.sqrt(a.reduce((s, x) => s + x * x, 0) / a.length - m * m);
};

describe('laguna', () => {
  it('tensors: leading dense blocks, then routed blocks with exp_probs_b.bias and a shared expert; q/k norms and attn_gate everywhere; head untied (XS.2) or tied (M.1)', () => {
    const cases: [string, number, string[]][] = [
      ['tiny-laguna', 1, ['token_embd.weight', 'output_norm.weight', 'output.weight']],
      ['tiny-laguna-m', 2, ['token_embd.weight', 'output_norm.weight']],
    ];
    for (const [p, nDense, globals] of cases) {
      const t = plan(p).tensors;
      const block = (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
      for (let i = 0; i < 4; i++) expect([p, i, block(i)]).toEqual([p, i, [...(i < nDense ? DENSE : MOE)].sort()]);
      expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(globals);
      expect(t.length).toBe(globals.length + nDense * DENSE.length + (4 - nDense) * MOE.length);
      expect(new Set(t.map((x) => x.name)).size).toBe(t.length);
    }
    expect(DEFAULT_PRESET_FOR_ARCH.laguna).toBe('tiny-laguna');
  });

  it('tiny-laguna shapes: block 0 full (6 heads), 1-3 sliding (8 heads) over 2 KV heads of 16; per-head attn_gate [n_embd, n_head_il]; routed 32 vs shared 64', () => {
    const s = shapes('tiny-laguna');
    const attn = (i: number) => ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'attn_gate', 'attn_q_norm', 'attn_k_norm'].map((n) => s.get(`blk.${i}.${n}.weight`));
    const full = [[64, 96], [64, 32], [64, 32], [96, 64], [64, 6], [16], [16]];
    const sliding = [[64, 128], [64, 32], [64, 32], [128, 64], [64, 8], [16], [16]];
    expect([0, 1, 2, 3].map(attn)).toEqual([full, sliding, sliding, sliding]);
    expect(['ffn_norm', 'ffn_gate', 'ffn_up', 'ffn_down'].map((n) => s.get(`blk.0.${n}.weight`))).toEqual([[64], [64, 128], [64, 128], [128, 64]]);
    expect(['ffn_gate_inp.weight', 'exp_probs_b.bias', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'].map((n) => s.get(`blk.2.${n}`))).toEqual([
      [64, 8], [8], [64, 32, 8], [64, 32, 8], [32, 64, 8], [64, 64], [64, 64], [64, 64],
    ]);
    expect([s.get('token_embd.weight'), s.get('output_norm.weight'), s.get('output.weight')]).toEqual([[64, 1024], [64], [64, 1024]]);
    const c = plan('tiny-laguna').config as LagunaConfig;
    expect([0, 1, 2, 3].map((i) => [lagunaIsSwa(c, i), lagunaHeads(c, i), lagunaGateKind(c, i)])).toEqual([
      [false, 6, 'head'], [true, 8, 'head'], [true, 8, 'head'], [true, 8, 'head'],
    ]);
  });

  it('tiny-laguna-m shapes: 4 heads over 1 KV head of 32 everywhere, per-element attn_gate [n_embd, n_head x head], 16 experts of 32, shared 96', () => {
    const s = shapes('tiny-laguna-m');
    for (let i = 0; i < 4; i++) {
      expect(['attn_q', 'attn_k', 'attn_v', 'attn_output', 'attn_gate', 'attn_q_norm'].map((n) => s.get(`blk.${i}.${n}.weight`))).toEqual([[64, 128], [64, 32], [64, 32], [128, 64], [64, 128], [32]]);
    }
    expect(['ffn_gate_inp.weight', 'exp_probs_b.bias', 'ffn_gate_exps.weight', 'ffn_down_exps.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'].map((n) => s.get(`blk.3.${n}`))).toEqual([
      [64, 16], [16], [64, 32, 16], [32, 64, 16], [64, 96], [96, 64],
    ]);
    expect(s.has('blk.1.ffn_gate_inp.weight')).toBe(false);
    expect(s.get('blk.1.ffn_up.weight')).toEqual([64, 128]);
    expect(s.has('output.weight')).toBe(false);
  });

  it('options: an explicit pattern moves heads and RoPE kinds; per-block heads and gate kinds; no window = every block full with nHeads', () => {
    // Pattern [S, F, S, F]: the full blocks take nHeads (6), the sliding ones nHeadsSwa (8).
    const pat = shapes('tiny-laguna', { swaPattern: [true, false, true, false] });
    expect([0, 1, 2, 3].map((i) => pat.get(`blk.${i}.attn_q.weight`))).toEqual([[64, 128], [64, 96], [64, 128], [64, 96]]);
    // Explicit heads per block, with mixed gate kinds (block 1 per element: 4 heads x 16).
    const mixed = shapes('tiny-laguna', { headsPerLayer: [2, 4, 6, 8], gate: ['head', 'element', 'head', 'element'] });
    expect([0, 1, 2, 3].map((i) => mixed.get(`blk.${i}.attn_gate.weight`))).toEqual([[64, 2], [64, 64], [64, 6], [64, 128]]);
    expect([0, 1, 2, 3].map((i) => mixed.get(`blk.${i}.attn_output.weight`))).toEqual([[32, 64], [64, 64], [96, 64], [128, 64]]);
    // Without a window nHeadsSwa is unused: every block is full.
    const c = plan('tiny-laguna', { window: 0, ropeDimsSwa: undefined, ropeBaseSwa: undefined }).config as LagunaConfig;
    expect([0, 1, 2, 3].map((i) => [lagunaIsSwa(c, i), lagunaHeads(c, i)])).toEqual([[false, 6], [false, 6], [false, 6], [false, 6]]);
    // --layers N keeps the default pattern by rule and cuts the dense lead.
    const six = plan('tiny-laguna', { nLayers: 6 }).config as LagunaConfig;
    expect(Array.from({ length: 6 }, (_, i) => lagunaHeads(six, i))).toEqual([6, 8, 8, 8, 6, 8]);
    const one = plan('tiny-laguna-m', { nLayers: 1 });
    expect((one.config as LagunaConfig).nDense).toBe(1);
    expect(one.tensors.some((t) => t.name.includes('_exps') || t.name.includes('exp_probs_b'))).toBe(false);
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan('tiny-laguna', { nExperts: 0, nExpertsUsed: 0 })).toThrow(/experts/);
    expect(() => plan('tiny-laguna', { nExpertsUsed: 9 })).toThrow(/experts-used/);
    expect(() => plan('tiny-laguna', { sharedFf: 0 })).toThrow(/sharedFf/);
    expect(() => plan('tiny-laguna', { expertFf: 0 })).toThrow(/expertFf/);
    expect(() => plan('tiny-laguna', { headDim: undefined })).toThrow(/headDim must be a positive integer/);
    expect(() => plan('tiny-laguna', { headDim: 15, ropeDims: 8, ropeDimsSwa: 8 })).toThrow(/headDim 15 must be even/);
    // Heads not divisible by the KV heads, on the block and field concerned.
    expect(() => plan('tiny-laguna', { nKvHeads: 4 })).toThrow(/nHeads 6 \(block 0\) not divisible by kv heads 4/);
    expect(() => plan('tiny-laguna', { nHeadsSwa: 7 })).toThrow(/nHeadsSwa 7 \(block 1\) not divisible by kv heads 2/);
    expect(() => plan('tiny-laguna', { headsPerLayer: [6, 8, 5, 8] })).toThrow(/headsPerLayer\[2\] 5 \(block 2\) not divisible/);
    expect(() => plan('tiny-laguna', { headsPerLayer: [6, 8, 8] })).toThrow(/headsPerLayer must have one head count per block \(4\), got length 3/);
    expect(() => plan('tiny-laguna', { headsPerLayer: [6, 0, 8, 8] })).toThrow(/headsPerLayer\[1\]/);
    expect(() => plan('tiny-laguna', { nHeadsSwa: 0 })).toThrow(/nHeadsSwa must be a positive integer/);
    // The sliding pattern.
    expect(() => plan('tiny-laguna', { swaPattern: [false, true, true] })).toThrow(/swaPattern must have one flag per block \(4\), got length 3/);
    expect(() => plan('tiny-laguna', { nLayers: 5, swaPattern: [false, true, true, true] })).toThrow(/swaPattern must have one flag per block \(5\)/);
    expect(() => plan('tiny-laguna', { swaPattern: [false, 1 as unknown as boolean, true, true] })).toThrow(/swaPattern\[1\] must be a boolean/);
    expect(() => plan('tiny-laguna-m', { swaPattern: [false, true, true, true] })).toThrow(/swaPattern needs window > 0/);
    expect(() => plan('tiny-laguna', { window: -1 })).toThrow(/window must be a non-negative integer/);
    // The gate.
    expect(() => plan('tiny-laguna', { gate: 'per-head' as unknown as 'head' })).toThrow(/gate must be 'head' or 'element'.*got per-head/);
    expect(() => plan('tiny-laguna', { gate: undefined })).toThrow(/gate must be 'head' or 'element'/);
    expect(() => plan('tiny-laguna', { gate: ['head', 'element'] })).toThrow(/gate must have one kind per block \(4\), got length 2/);
    expect(() => plan('tiny-laguna', { gate: ['head', 'head', 'both' as 'head', 'head'] })).toThrow(/gate\[2\] must be 'head' or 'element'/);
    // RoPE dims: positive, even, at most the head.
    expect(() => plan('tiny-laguna', { ropeDims: 7 })).toThrow(/ropeDims must be a positive even number of dims at most headDim 16.*got 7/);
    expect(() => plan('tiny-laguna', { ropeDims: 18 })).toThrow(/ropeDims .* got 18/);
    expect(() => plan('tiny-laguna', { ropeDims: 0 })).toThrow(/ropeDims/);
    expect(() => plan('tiny-laguna', { ropeDimsSwa: 32 })).toThrow(/ropeDimsSwa .* got 32/);
    expect(() => plan('tiny-laguna', { ropeDimsSwa: 5 })).toThrow(/ropeDimsSwa .* got 5/);
    expect(() => plan('tiny-laguna', { ropeBaseSwa: 0 })).toThrow(/ropeBaseSwa must be positive/);
    expect(() => plan('tiny-laguna', { ropeBase: 0 })).toThrow(/ropeBase must be positive/);
    // MoE options.
    expect(() => plan('tiny-laguna', { nDense: -1 })).toThrow(/nDense/);
    expect(() => plan('tiny-laguna', { wScale: 0 })).toThrow(/wScale/);
    expect(() => plan('tiny-laguna', { normW: undefined })).toThrow(/normW/);
    expect(() => plan('tiny-laguna', { gating: 'relu' as 'sigmoid' })).toThrow(/gating must be 'sigmoid' or 'softmax'/);
    expect(() => plan('tiny-laguna', { biasStd: -1 })).toThrow(/biasStd/);
    // Head count as a scalar needs uniform heads; YaRN needs a factor >= 1 and an original context.
    expect(() => plan('tiny-laguna', { scalarHeadCount: true })).toThrow(/scalarHeadCount needs the same heads on every block, got \[6, 8, 8, 8\]/);
    expect(() => plan('tiny-laguna-m', { yarn: { factor: 0.5, origCtx: 16 } })).toThrow(/yarn.factor/);
    expect(() => plan('tiny-laguna-m', { yarn: { factor: 4, origCtx: 0 } })).toThrow(/yarn.origCtx/);
    expect(() => plan('tiny-laguna-m', { yarn: { factor: 4, origCtx: 16, betaFast: -1 } })).toThrow(/yarn.betaFast/);
    expect(() => plan('tiny-laguna-m', { yarn: 4 as unknown as LagunaConfig['yarn'] })).toThrow(/yarn must be an object/);
    // null is taken as absent (JSON configs).
    expect((plan('tiny-laguna-m', { yarn: null as unknown as undefined }).config as LagunaConfig).yarn).toBeUndefined();
  });

  it('types: norms, q/k norms, routers and the selection bias F32 in every file; no F16 fallbacks', () => {
    for (const p of ['tiny-laguna', 'tiny-laguna-m']) {
      const q = new Map(planModel(config(p), 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
      for (const n of ['blk.2.exp_probs_b.bias', 'blk.2.ffn_gate_inp.weight', 'blk.2.attn_q_norm.weight', 'blk.2.attn_k_norm.weight', 'blk.0.attn_norm.weight', 'output_norm.weight']) {
        expect([p, n, q.get(n)]).toEqual([p, n, GgmlType.F32]);
      }
      expect([...q.values()].filter((t) => t === GgmlType.F16)).toEqual([]);
    }
  });

  it('scales: unit-std embeddings (tied: 2/sqrt(dim)), routers of std 2/sqrt(dim), the gate at unit gain, writers at residualGain (routed experts / wScale), visible selection bias', () => {
    const c = config('tiny-laguna');
    const ratio = (cfg: LagunaConfig, name: string, want: number) => std(generateTensorF32(cfg, 1, name)) / want;
    const rg = 1 / Math.sqrt(8); // 4 blocks
    expect(ratio(c, 'token_embd.weight', 1)).toBeCloseTo(1, 1);
    expect(ratio(c, 'output.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.1.ffn_gate_inp.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.1.attn_q.weight', 1 / 8)).toBeCloseTo(1, 1);
    // 512 values: within 10%.
    expect(Math.abs(ratio(c, 'blk.1.attn_gate.weight', 1 / 8) - 1)).toBeLessThan(0.1);
    expect(ratio(c, 'blk.1.attn_output.weight', rg / Math.sqrt(128))).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.0.attn_output.weight', rg / Math.sqrt(96))).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.0.ffn_down.weight', rg / Math.sqrt(128))).toBeCloseTo(1, 1);
    // The routed mix is multiplied by expert_weights_scale 2.5: its writer at residualGain / 2.5.
    expect(ratio(c, 'blk.2.ffn_down_exps.weight', rg / 2.5 / Math.sqrt(32))).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.2.ffn_gate_exps.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.2.ffn_down_shexp.weight', rg / Math.sqrt(64))).toBeCloseTo(1, 1);
    // exp_probs_b: std 0.1 (8 values: loosely), default 0.05 on tiny-laguna-m (16 values).
    expect(ratio(c, 'blk.2.exp_probs_b.bias', 0.1)).toBeGreaterThan(0.5);
    expect(ratio(c, 'blk.2.exp_probs_b.bias', 0.1)).toBeLessThan(1.6);
    const m = config('tiny-laguna-m');
    expect(ratio(m, 'blk.2.exp_probs_b.bias', 0.05)).toBeGreaterThan(0.5);
    expect(ratio(m, 'blk.2.exp_probs_b.bias', 0.05)).toBeLessThan(1.6);
    expect(ratio(m, 'token_embd.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio(m, 'blk.2.ffn_down_exps.weight', rg / 2 / Math.sqrt(32))).toBeCloseTo(1, 1);
    const qn = generateTensorF32(c, 1, 'blk.0.attn_q_norm.weight');
    expect(qn.reduce((a, x) => a + x, 0) / qn.length).toBeCloseTo(1, 0);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-laguna-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    const write = (name: string, cfg: LagunaConfig) => {
      const out = path.join(dir, `${name}.gguf`);
      const res = writeModel({ config: cfg, fileType: 'F32', seed: 1, out });
      const h = readGgufHeader(out);
      expect(h.kv.get('general.architecture')!.value).toBe('laguna');
      const keys = Object.fromEntries([...h.kv.keys()].filter((k) => k.startsWith('laguna.')).map((k) => [k.slice('laguna.'.length), h.kv.get(k)!.value]));
      const types = Object.fromEntries([...h.kv.keys()].filter((k) => k.startsWith('laguna.')).map((k) => [k.slice('laguna.'.length), h.kv.get(k)!.elemType !== undefined ? [h.kv.get(k)!.type, h.kv.get(k)!.elemType] : h.kv.get(k)!.type]));
      return { h, keys, types, res, out };
    };
    const COMMON = {
      vocab_size: 1024, embedding_length: 64, block_count: 4, feed_forward_length: 128, 'attention.layer_norm_rms_epsilon': Math.fround(1e-6),
      'rope.freq_base': 500000, expert_weights_norm: true, expert_gating_func: 2,
    };

    it('tiny-laguna: INT32 head array, uniform KV heads, the window without a pattern key, SWA RoPE dims and base, MoE keys', () => {
      const { keys, types } = write('tiny-laguna', config('tiny-laguna'));
      expect(keys).toEqual({
        ...COMMON, context_length: 4096, 'attention.head_count': [6, 8, 8, 8], 'attention.head_count_kv': 2, 'attention.key_length': 16, 'attention.value_length': 16,
        'rope.dimension_count': 8, 'rope.dimension_count_swa': 16, 'rope.freq_base_swa': 10000, 'attention.sliding_window': 8,
        expert_count: 8, expert_used_count: 2, expert_feed_forward_length: 32, expert_shared_feed_forward_length: 64, expert_weights_scale: 2.5, leading_dense_block_count: 1,
      });
      expect(types).toEqual({
        vocab_size: GgufType.UINT32, context_length: GgufType.UINT32, embedding_length: GgufType.UINT32, block_count: GgufType.UINT32, feed_forward_length: GgufType.UINT32,
        'attention.head_count': [GgufType.ARRAY, GgufType.INT32], 'attention.head_count_kv': GgufType.UINT32, 'attention.key_length': GgufType.UINT32, 'attention.value_length': GgufType.UINT32,
        'attention.layer_norm_rms_epsilon': GgufType.FLOAT32, 'rope.freq_base': GgufType.FLOAT32, 'rope.dimension_count': GgufType.UINT32,
        'rope.freq_base_swa': GgufType.FLOAT32, 'rope.dimension_count_swa': GgufType.UINT32, 'attention.sliding_window': GgufType.UINT32,
        expert_count: GgufType.UINT32, expert_used_count: GgufType.UINT32, expert_feed_forward_length: GgufType.UINT32, expert_shared_feed_forward_length: GgufType.UINT32,
        expert_weights_norm: GgufType.BOOL, expert_weights_scale: GgufType.FLOAT32, expert_gating_func: GgufType.UINT32, leading_dense_block_count: GgufType.UINT32,
      });
    });

    it('tiny-laguna-m: no sliding keys, YaRN keys, tied head; the file round-trips the plan (names, shapes, types, sizes)', () => {
      const cfg = config('tiny-laguna-m');
      const { h, keys, types, res, out } = write('tiny-laguna-m', cfg);
      expect(keys).toEqual({
        ...COMMON, context_length: 64, 'attention.head_count': [4, 4, 4, 4], 'attention.head_count_kv': 1, 'attention.key_length': 32, 'attention.value_length': 32,
        'rope.dimension_count': 16, 'rope.scaling.type': 'yarn', 'rope.scaling.factor': 4, 'rope.scaling.original_context_length': 16,
        expert_count: 16, expert_used_count: 4, expert_feed_forward_length: 32, expert_shared_feed_forward_length: 96, expert_weights_scale: 2, leading_dense_block_count: 2,
      });
      expect([types['attention.head_count'], types['rope.scaling.type'], types['rope.scaling.factor'], types['rope.scaling.original_context_length']]).toEqual([
        [GgufType.ARRAY, GgufType.INT32], GgufType.STRING, GgufType.FLOAT32, GgufType.UINT32,
      ]);
      expect(Object.keys(keys).some((k) => k.includes('swa') || k.includes('sliding'))).toBe(false);
      // Round trip: the header lists the planned tensors in order, and the data reads back as generated.
      const planned = planModel(cfg, 'F32').tensors;
      expect(h.tensors.map((t) => [t.name, t.shape, t.type])).toEqual(planned.map((t) => [t.name, t.shape, GgmlType.F32]));
      expect(res.tensors.map((t) => t.name)).toEqual(planned.map((t) => t.name));
      expect(h.tensors.some((t) => t.name === 'output.weight')).toBe(false);
      const fd = fs.openSync(out, 'r');
      try {
        for (const name of ['blk.3.attn_gate.weight', 'blk.2.exp_probs_b.bias', 'blk.0.ffn_down.weight']) {
          const t = h.tensors.find((x) => x.name === name)!;
          const buf = Buffer.alloc(t.bytes);
          fs.readSync(fd, buf, 0, t.bytes, t.fileOffset);
          const got = new Float32Array(buf.buffer, buf.byteOffset, t.bytes / 4);
          expect([name, Array.from(got)]).toEqual([name, Array.from(generateTensorF32(cfg, 1, name))]);
        }
      } finally {
        fs.closeSync(fd);
      }
    });

    it('options: an explicit BOOL pattern, a scalar UINT32 head count, softmax gating, no gating key, YaRN extras', () => {
      const pat = write('pattern', config('tiny-laguna', { swaPattern: [false, true, true, false] }));
      expect(pat.keys['attention.sliding_window_pattern']).toEqual([false, true, true, false]);
      expect(pat.types['attention.sliding_window_pattern']).toEqual([GgufType.ARRAY, GgufType.BOOL]);
      expect(pat.keys['attention.head_count']).toEqual([6, 8, 8, 6]);
      expect(pat.h.tensors.find((t) => t.name === 'blk.3.attn_gate.weight')!.shape).toEqual([64, 6]);

      const scalar = write('scalar', config('tiny-laguna-m', { scalarHeadCount: true, gating: undefined, yarn: { factor: 4, origCtx: 16, betaFast: 64, betaSlow: 1 } }));
      expect([scalar.keys['attention.head_count'], scalar.types['attention.head_count']]).toEqual([4, GgufType.UINT32]);
      expect('expert_gating_func' in scalar.keys).toBe(false);
      expect([scalar.keys['rope.scaling.yarn_beta_fast'], scalar.keys['rope.scaling.yarn_beta_slow']]).toEqual([64, 1]);

      const softmax = write('softmax', config('tiny-laguna', { gating: 'softmax' }));
      expect(softmax.keys.expert_gating_func).toBe(1);
    });
  });
});
