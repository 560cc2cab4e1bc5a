// The dense decoders of architectures/llama-dense.ts (olmo2, seed_oss, smollm3, exaone4, ernie4_5,
// hunyuan-dense, glm4): the tensors and keys each llama.cpp loader (src/models/<arch>.cpp) takes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import type { DenseFamilyConfig } from './architectures/llama-dense';
import { denseIsSwa } from './architectures/llama-dense';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { presetPlans, writtenKeys, BIAS, FFN, QKV } from './writer-spec.suite';

const { config, plan, block, shapes } = presetPlans<DenseFamilyConfig>();

describe('llama-dense writer', () => {
  it("each block's tensors as its loader names them", () => {
    expect(block('tiny-olmo2', 1)).toEqual([...QKV, ...FFN, 'attn_q_norm.weight', 'attn_k_norm.weight', 'post_attention_norm.weight', 'post_ffw_norm.weight'].sort());
    expect(block('tiny-seed-oss', 1)).toEqual([...QKV, ...FFN, ...BIAS, 'attn_norm.weight', 'post_attention_norm.weight'].sort());
    expect(block('tiny-smollm3', 3)).toEqual([...QKV, ...FFN, 'attn_norm.weight', 'ffn_norm.weight'].sort());
    expect(block('tiny-exaone4', 0)).toEqual([...QKV, ...FFN, 'attn_q_norm.weight', 'attn_k_norm.weight', 'post_attention_norm.weight', 'post_ffw_norm.weight'].sort());
    expect(block('tiny-ernie4_5', 2)).toEqual([...QKV, ...FFN, 'attn_norm.weight', 'ffn_norm.weight', 'attn_output.bias'].sort());
    expect(block('tiny-hunyuan-dense', 0)).toEqual([...QKV, ...FFN, 'attn_norm.weight', 'ffn_norm.weight', 'attn_q_norm.weight', 'attn_k_norm.weight'].sort());
    expect(block('tiny-glm4', 3)).toEqual([...QKV, 'ffn_up.weight', 'ffn_down.weight', ...BIAS, 'attn_norm.weight', 'post_attention_norm.weight', 'ffn_norm.weight', 'post_ffw_norm.weight'].sort());
    expect(block('tiny-apertus', 2)).toEqual([...QKV, 'ffn_up.weight', 'ffn_down.weight', 'attn_norm.weight', 'ffn_norm.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'attn_output.bias'].sort());
    const heads = (p: string) => plan(p).tensors.filter((x) => x.layer === undefined).map((x) => x.name);
    expect(heads('tiny-olmo2')).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    expect(heads('tiny-smollm3')).toEqual(['token_embd.weight', 'output_norm.weight']);
  });

  it('shapes: full-width q/k norms (olmo2), per-head ones, heads of their own size, the fused gate|up', () => {
    const o = shapes('tiny-olmo2');
    expect([o.get('blk.0.attn_q_norm.weight'), o.get('blk.0.attn_k_norm.weight')]).toEqual([[256], [128]]);
    const e = shapes('tiny-exaone4');
    expect([e.get('blk.0.attn_q_norm.weight'), e.get('blk.0.attn_k_norm.weight')]).toEqual([[64], [64]]);
    const s = shapes('tiny-seed-oss');
    expect([s.get('blk.0.attn_q.weight'), s.get('blk.0.attn_k.weight'), s.get('blk.0.attn_output.weight')]).toEqual([[256, 192], [256, 96], [192, 256]]);
    const g = shapes('tiny-glm4');
    expect([g.get('blk.0.ffn_up.weight'), g.get('blk.0.ffn_down.weight')]).toEqual([[256, 1024], [512, 256]]);
    const q = new Map(plan('tiny-glm4', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([q.get('blk.0.post_ffw_norm.weight'), q.get('blk.0.attn_q.bias')]).toEqual([GgmlType.F32, GgmlType.F32]);
    expect(q.get('blk.0.ffn_up.weight')).not.toBe(GgmlType.F32);
    expect(DEFAULT_PRESET_FOR_ARCH.olmo2).toBe('tiny-olmo2');
    expect(DEFAULT_PRESET_FOR_ARCH['hunyuan-dense']).toBe('tiny-hunyuan-dense');
  });

  it('writes the keys the loaders read: windows and patterns, rope.scaling.alpha, a partial rope.dimension_count', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llama-dense-spec-'));
    try {
      const keys = (preset: string, over: Partial<DenseFamilyConfig> = {}) => writtenKeys(dir, config(preset, over));
      const o = keys('tiny-olmo2-swa', { swaPattern: [true, false, true, false] });
      expect([o.get('attention.sliding_window'), o.get('attention.sliding_window_pattern'), o.get('attention.layer_norm_rms_epsilon')]).toEqual([8, [true, false, true, false], Math.fround(1e-6)]);
      expect(o.kv.get('olmo2.attention.sliding_window_pattern')!.elemType).toBe(GgufType.BOOL);
      expect(keys('tiny-olmo2').get('attention.sliding_window')).toBeUndefined();
      const h = keys('tiny-hunyuan-dense');
      expect([h.get('rope.scaling.alpha'), h.get('rope.dimension_count')]).toEqual([1000, 64]);
      expect(keys('tiny-glm4').get('rope.dimension_count')).toBe(32);
      const gm = keys('tiny-glm4-mrope');
      expect([gm.get('rope.dimension_sections'), gm.kv.get('glm4.rope.dimension_sections')!.elemType]).toEqual([[8, 4, 4, 0], GgufType.INT32]);
      const s = keys('tiny-seed-oss');
      expect([s.get('attention.key_length'), s.get('attention.value_length'), s.get('rope.dimension_count')]).toEqual([48, 48, 48]);
      expect(keys('tiny-exaone4-swa').get('block_count')).toBe(64);
      // Apertus's xIELU parameters: FLOAT32 arrays under keys without the architecture prefix.
      const ap = keys('tiny-apertus').kv;
      expect([...ap.keys()].filter((k) => k.startsWith('xielu.')).sort()).toEqual(['xielu.alpha_n', 'xielu.alpha_p', 'xielu.beta', 'xielu.eps']);
      expect(ap.get('xielu.alpha_p')!.elemType).toBe(GgufType.FLOAT32);
      expect((ap.get('xielu.beta')!.value as number[]).map((v) => Math.round(v * 10) / 10)).toEqual([0.5, 0.4, 0.6, 0.5]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("sliding blocks as the loaders pick them: olmo2 with a window, exaone4 only at 64 blocks", () => {
    const flags = (c: DenseFamilyConfig) => Array.from({ length: c.nLayers }, (_, i) => denseIsSwa(c, i));
    expect(flags(config('tiny-olmo2'))).toEqual([false, false, false, false]);
    expect(flags(config('tiny-olmo2-swa'))).toEqual([true, true, true, false]);
    expect(flags(config('tiny-exaone4', { window: 8 }))).toEqual([false, false, false, false]);
    expect(flags(config('tiny-exaone4-swa')).slice(0, 8)).toEqual([true, true, true, false, true, true, true, false]);
  });

  it('session 47: fused attn_qkv, rope_freqs, LayerNorm weights and biases or none, every starcoder2 bias, ungated FFNs', () => {
    expect(block('tiny-internlm2', 0)).toEqual(['attn_norm.weight', 'attn_qkv.weight', 'attn_output.weight', 'ffn_norm.weight', ...FFN].sort());
    expect(shapes('tiny-internlm2').get('blk.0.attn_qkv.weight')).toEqual([256, 512]);
    expect(block('tiny-xverse', 1)).toEqual(['attn_norm.weight', ...QKV, 'ffn_norm.weight', ...FFN].sort());
    expect(block('tiny-arcee', 2)).toEqual(['attn_norm.weight', ...QKV, 'ffn_norm.weight', 'ffn_up.weight', 'ffn_down.weight'].sort());
    expect(block('tiny-maincoder', 3)).toEqual(['attn_norm.weight', ...QKV, 'attn_q_norm.weight', 'attn_k_norm.weight', 'ffn_norm.weight', ...FFN].sort());
    expect(block('tiny-orion', 0)).toEqual(['attn_norm.weight', 'attn_norm.bias', ...QKV, 'ffn_norm.weight', 'ffn_norm.bias', ...FFN].sort());
    expect(block('tiny-olmo', 0)).toEqual([...QKV, ...FFN].sort());
    expect(block('tiny-starcoder2', 1)).toEqual(['attn_norm.weight', 'attn_norm.bias', ...QKV, ...BIAS, 'attn_output.bias', 'ffn_norm.weight', 'ffn_norm.bias', 'ffn_up.weight', 'ffn_up.bias', 'ffn_down.weight', 'ffn_down.bias'].sort());
    const heads = (p: string) => plan(p).tensors.filter((x) => x.layer === undefined).map((x) => x.name);
    expect(heads('tiny-exaone')).toEqual(['token_embd.weight', 'output_norm.weight', 'rope_freqs.weight']);
    expect(heads('tiny-orion')).toEqual(['token_embd.weight', 'output_norm.weight', 'output_norm.bias', 'output.weight']);
    expect(heads('tiny-olmo')).toEqual(['token_embd.weight']);
    expect(shapes('tiny-nanbeige').get('rope_freqs.weight')).toEqual([32]);
    const q = new Map(plan('tiny-starcoder2', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([q.get('blk.0.ffn_up.bias'), q.get('blk.0.attn_norm.bias'), q.get('output_norm.bias')]).toEqual([GgmlType.F32, GgmlType.F32, GgmlType.F32]);
    expect(DEFAULT_PRESET_FOR_ARCH.starcoder2).toBe('tiny-starcoder2');
    expect(block('tiny-stablelm-12b', 0)).toEqual(['attn_norm.weight', 'attn_norm.bias', ...QKV, 'attn_q_norm.weight', 'attn_k_norm.weight', ...FFN].sort());
    const s = shapes('tiny-stablelm-12b');
    expect([s.get('blk.0.attn_q_norm.weight'), s.get('blk.0.attn_k_norm.weight')]).toEqual([[64, 4], [64, 2]]);
    expect(new Map(plan('tiny-stablelm-12b', {}, 'Q8_0').tensors.map((x) => [x.name, x.type])).get('blk.0.attn_q_norm.weight')).toBe(GgmlType.F32);
    expect(block('tiny-nemotron', 3)).toEqual(['attn_norm.weight', 'attn_norm.bias', ...QKV, 'attn_output.bias', 'ffn_norm.weight', 'ffn_norm.bias', 'ffn_up.weight', 'ffn_up.bias', 'ffn_down.weight', 'ffn_down.bias'].sort());
  });

  it('session 47: the keys: attention.layer_norm_epsilon for the LayerNorm loaders, clamp_kqv, num_loops and skip_loop_final_norm', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llama-dense-spec-'));
    try {
      const keys = (preset: string) => writtenKeys(dir, config(preset)).get;
      const o = keys('tiny-olmo');
      expect([o('attention.layer_norm_epsilon'), o('attention.layer_norm_rms_epsilon'), o('attention.clamp_kqv')]).toEqual([Math.fround(1e-5), undefined, 1.5]);
      expect(keys('tiny-starcoder2')('attention.layer_norm_epsilon')).toBe(Math.fround(1e-5));
      const n = keys('tiny-nanbeige-skip');
      expect([n('num_loops'), n('skip_loop_final_norm'), n('block_count')]).toEqual([3, true, 2]);
      expect(keys('tiny-nanbeige')('skip_loop_final_norm')).toBeUndefined();
      const m = keys('tiny-minicpm');
      expect([m('embedding_scale'), m('residual_scale'), m('logit_scale'), m('attention.scale')]).toEqual([12, 0.5, 0.5, undefined]);
      expect(keys('tiny-minicpm-default')('logit_scale')).toBeUndefined();
      expect([keys('tiny-stablelm')('rope.dimension_count'), keys('tiny-nemotron')('rope.dimension_count')]).toEqual([16, 32]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects configs the loaders cannot take, naming the field', () => {
    expect(() => plan('tiny-xverse', { fusedQkv: true })).toThrow(/fusedQkv is internlm2's/);
    expect(() => plan('tiny-olmo', { clampKqv: 0 })).toThrow(/clampKqv is olmo's and mpt's, a positive finite number/);
    expect(() => plan('tiny-orion', { clampKqv: 1 })).toThrow(/clampKqv is olmo's/);
    expect(() => plan('tiny-nanbeige', { loops: 0 })).toThrow(/loops \/ skipLoopNorm are nanbeige's/);
    expect(() => plan('tiny-xverse', { ropeFreqs: true })).toThrow(/ropeFreqs is exaone's, arcee's and nanbeige's/);
    expect(() => plan('tiny-xverse', { tiedEmbeddings: true })).toThrow(/requires output.weight/);
    expect(() => plan('tiny-orion', { normEps: 0 })).toThrow(/attention.layer_norm_epsilon is required/);
    expect(() => plan('tiny-xverse', { scales: { embedding: 1, residual: 1, logit: 1 } })).toThrow(/scales are minicpm's/);
    expect(() => plan('tiny-orion', { parallel: true })).toThrow(/parallel \/ qkLayerNorm are stablelm's/);
    expect(() => plan('tiny-stablelm', { ffnBias: true })).toThrow(/ffnBias is nemotron's/);
    expect(() => plan('tiny-orion', { ropeDims: 16 })).toThrow(/ropeDims is glm4's, stablelm's, nemotron's, gptneox's and phi2's/);
    expect(() => plan('tiny-minicpm', { scales: { embedding: 1, residual: 0, logit: 1 } })).toThrow(/each positive and finite/);
    expect(() => plan('tiny-olmo2', { tiedEmbeddings: true })).toThrow(/requires output.weight/);
    expect(() => plan('tiny-olmo2', { headDim: 32 })).toThrow(/must be dim/);
    expect(() => plan('tiny-smollm3', { window: 8 })).toThrow(/no sliding windows/);
    expect(() => plan('tiny-seed-oss', { attnOutBias: true })).toThrow(/attnOutBias is ernie4_5's/);
    expect(() => plan('tiny-seed-oss', { ropeDims: 32 })).toThrow(/ropeDims is glm4's/);
    expect(() => plan('tiny-glm4', { ropeDims: 33 })).toThrow(/ropeDims must be even/);
    expect(() => plan('tiny-hunyuan-dense', { ropeAlpha: -1 })).toThrow(/ropeAlpha/);
    expect(() => plan('tiny-olmo2-swa', { swaPattern: [true] })).toThrow(/swaPattern has 1 entries/);
    expect(() => plan('tiny-glm4', { nExperts: 4, nExpertsUsed: 2 })).toThrow(/dense architecture/);
    expect(() => plan('tiny-smollm3', { ropeSections: [8, 4, 4, 0] })).toThrow(/ropeSections is glm4's/);
    expect(() => plan('tiny-apertus', { xielu: undefined })).toThrow(/xielu parameters are apertus's, and it requires them/);
    expect(() => plan('tiny-apertus', { xielu: { alphaN: [1], alphaP: [1], beta: [1], eps: [1] } })).toThrow(/xielu\.alphaN needs one finite number per block \(4\)/);
    expect(() => plan('tiny-glm4', { xielu: { alphaN: [1, 1, 1, 1], alphaP: [1, 1, 1, 1], beta: [1, 1, 1, 1], eps: [1, 1, 1, 1] } })).toThrow(/xielu parameters are apertus's/);
  });

  it('parallel-residual decoders: gptneox (fused attn_qkv with its bias, use_parallel_residual), phi2 (output.bias, no ffn_norm), falcon (attn_norm_2, no biases)', () => {
    const LN = (n: string) => [`${n}.weight`, `${n}.bias`];
    const GELU = ['ffn_up.weight', 'ffn_down.weight'];
    const GELU_B = [...GELU, 'ffn_up.bias', 'ffn_down.bias'];
    expect(block('tiny-gptneox', 2)).toEqual([...LN('attn_norm'), 'attn_qkv.weight', 'attn_qkv.bias', 'attn_output.weight', 'attn_output.bias', ...LN('ffn_norm'), ...GELU_B].sort());
    expect(block('tiny-phi2', 0)).toEqual([...LN('attn_norm'), ...QKV, ...BIAS, 'attn_output.bias', ...GELU_B].sort());
    expect(block('tiny-phi2-fused', 1)).toEqual([...LN('attn_norm'), 'attn_qkv.weight', 'attn_qkv.bias', 'attn_output.weight', 'attn_output.bias', ...GELU_B].sort());
    expect(block('tiny-falcon', 3)).toEqual([...LN('attn_norm'), 'attn_qkv.weight', 'attn_output.weight', ...GELU].sort());
    expect(block('tiny-falcon-40b', 0)).toEqual([...LN('attn_norm'), ...LN('attn_norm_2'), 'attn_qkv.weight', 'attn_output.weight', ...GELU].sort());
    expect(block('tiny-chatglm', 1)).toEqual(['attn_norm.weight', 'attn_qkv.weight', 'attn_qkv.bias', 'attn_output.weight', 'ffn_norm.weight', ...GELU].sort());
    expect(block('tiny-chatglm-split', 1)).toEqual(['attn_norm.weight', ...QKV, 'ffn_norm.weight', ...GELU].sort());
    expect([shapes('tiny-chatglm').get('blk.0.ffn_up.weight'), shapes('tiny-chatglm').get('blk.0.attn_qkv.weight')]).toEqual([[256, 1024], [256, 512]]);
    expect(DEFAULT_PRESET_FOR_ARCH.chatglm).toBe('tiny-chatglm');
    const heads = (p: string) => plan(p).tensors.filter((x) => x.layer === undefined).map((x) => x.name);
    expect(heads('tiny-phi2')).toEqual(['token_embd.weight', 'output_norm.weight', 'output_norm.bias', 'output.weight', 'output.bias']);
    expect(heads('tiny-gptneox')).toEqual(['token_embd.weight', 'output_norm.weight', 'output_norm.bias', 'output.weight']);
    expect(heads('tiny-falcon')).toEqual(['token_embd.weight', 'output_norm.weight', 'output_norm.bias']);
    const s = shapes('tiny-gptneox');
    expect([s.get('blk.0.attn_qkv.weight'), s.get('blk.0.attn_qkv.bias'), s.get('output.bias')]).toEqual([[256, 768], [768], undefined]);
    const f = shapes('tiny-falcon');
    expect([f.get('blk.0.attn_qkv.weight'), shapes('tiny-falcon-40b').get('blk.0.attn_qkv.weight'), shapes('tiny-phi2').get('output.bias')]).toEqual([[256, 384], [256, 512], [1024]]);
    const q = new Map(plan('tiny-gptneox', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([q.get('blk.0.attn_qkv.bias'), q.get('blk.0.ffn_norm.bias'), new Map(plan('tiny-phi2', {}, 'Q8_0').tensors.map((x) => [x.name, x.type])).get('output.bias')]).toEqual([GgmlType.F32, GgmlType.F32, GgmlType.F32]);
    expect([DEFAULT_PRESET_FOR_ARCH.gptneox, DEFAULT_PRESET_FOR_ARCH.phi2, DEFAULT_PRESET_FOR_ARCH.falcon]).toEqual(['tiny-gptneox', 'tiny-phi2', 'tiny-falcon']);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llama-dense-par-'));
    try {
      const keys = (preset: string) => writtenKeys(dir, config(preset)).get;
      const g = keys('tiny-gptneox');
      expect([g('use_parallel_residual'), g('rope.dimension_count'), g('attention.layer_norm_epsilon'), g('attention.layer_norm_rms_epsilon')]).toEqual([true, 16, Math.fround(1e-5), undefined]);
      expect(keys('tiny-gptneox-seq')('use_parallel_residual')).toBe(false);
      const f7 = keys('tiny-falcon');
      expect([f7('use_parallel_residual'), f7('rope.dimension_count'), f7('attention.head_count_kv')]).toEqual([undefined, 64, 1]);
      const cg = keys('tiny-chatglm');
      expect([cg('rope.dimension_count'), cg('attention.layer_norm_rms_epsilon'), cg('feed_forward_length')]).toEqual([32, Math.fround(1e-5), 512]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    expect(() => plan('tiny-gptneox', { parallelResidual: undefined })).toThrow(/gptneox: the loader requires attn_qkv\.bias \(qkvBias\) and use_parallel_residual/);
    expect(() => plan('tiny-gptneox', { fusedQkv: false })).toThrow(/gptneox: the loader takes one attn_qkv/);
    expect(() => plan('tiny-falcon', { fusedQkv: false })).toThrow(/falcon: the loader takes one attn_qkv/);
    expect(() => plan('tiny-falcon', { qkvBias: true })).toThrow(/falcon: the loader takes no q\/k\/v biases/);
    expect(() => plan('tiny-phi2', { parallelResidual: true })).toThrow(/parallelResidual is gptneox's/);
    expect(() => plan('tiny-phi2', { attnNorm2: true })).toThrow(/attnNorm2 is falcon's/);
    expect(() => plan('tiny-falcon', { ropeDims: 32 })).toThrow(/ropeDims is glm4's/);
    expect(() => plan('tiny-phi2', { tiedEmbeddings: true })).toThrow(/requires output.weight/);
  });

  it('ALiBi decoders: bloom (token_embd_norm, fused q/k/v with its bias), mpt (max_alibi_bias, optional biases and positions), refact, baichuan; no rope.* keys for the first three', () => {
    const LN = (n: string) => [`${n}.weight`, `${n}.bias`];
    const GELU_B = ['ffn_up.weight', 'ffn_down.weight', 'ffn_up.bias', 'ffn_down.bias'];
    const FUSED = ['attn_qkv.weight', 'attn_qkv.bias', 'attn_output.weight', 'attn_output.bias'];
    expect(block('tiny-bloom', 1)).toEqual([...LN('attn_norm'), ...FUSED, ...LN('ffn_norm'), ...GELU_B].sort());
    expect(block('tiny-mpt', 2)).toEqual([...LN('attn_norm'), ...FUSED, ...LN('ffn_norm'), ...GELU_B].sort());
    expect(block('tiny-mpt-plain', 2)).toEqual(['attn_norm.weight', 'attn_qkv.weight', 'attn_output.weight', 'ffn_norm.weight', 'ffn_up.weight', 'ffn_down.weight'].sort());
    expect(block('tiny-refact', 0)).toEqual(['attn_norm.weight', ...QKV, 'ffn_norm.weight', ...FFN].sort());
    expect(block('tiny-baichuan-13b', 39)).toEqual(['attn_norm.weight', ...QKV, 'ffn_norm.weight', ...FFN].sort());
    const heads = (p: string) => plan(p).tensors.filter((x) => x.layer === undefined).map((x) => x.name);
    expect(heads('tiny-bloom')).toEqual(['token_embd.weight', 'token_embd_norm.weight', 'token_embd_norm.bias', ...LN('output_norm')]);
    expect(heads('tiny-mpt')).toEqual(['token_embd.weight', 'position_embd.weight', ...LN('output_norm')]);
    expect(heads('tiny-mpt-plain')).toEqual(['token_embd.weight', 'output_norm.weight']);
    expect(heads('tiny-baichuan')).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    expect([shapes('tiny-bloom').get('blk.0.attn_qkv.bias'), shapes('tiny-mpt').get('position_embd.weight'), shapes('tiny-refact').get('blk.0.attn_k.weight')]).toEqual([[768], [256, 256], [256, 64]]);
    const q = new Map(plan('tiny-bloom', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([q.get('token_embd_norm.bias'), q.get('blk.0.attn_qkv.bias')]).toEqual([GgmlType.F32, GgmlType.F32]);
    expect([DEFAULT_PRESET_FOR_ARCH.bloom, DEFAULT_PRESET_FOR_ARCH.mpt, DEFAULT_PRESET_FOR_ARCH.refact, DEFAULT_PRESET_FOR_ARCH.baichuan]).toEqual(['tiny-bloom', 'tiny-mpt', 'tiny-refact', 'tiny-baichuan']);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llama-dense-alibi-'));
    try {
      const keys = (preset: string) => writtenKeys(dir, config(preset));
      for (const p of ['tiny-bloom', 'tiny-mpt', 'tiny-refact']) expect(keys(p).names.filter((k) => k.includes('.rope.'))).toEqual([]);
      const m = keys('tiny-mpt');
      expect([m.get('attention.max_alibi_bias'), m.get('attention.clamp_kqv'), m.get('attention.layer_norm_epsilon')]).toEqual([8, 1.5, Math.fround(1e-5)]);
      const b = keys('tiny-baichuan-13b');
      expect([b.get('block_count'), b.get('attention.head_count'), b.get('rope.dimension_count'), b.get('attention.max_alibi_bias')]).toEqual([40, 6, 16, undefined]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    expect(() => plan('tiny-bloom', { maxAlibiBias: 8 })).toThrow(/maxAlibiBias \/ positionEmbd \/ noNormBias are mpt's/);
    expect(() => plan('tiny-mpt', { maxAlibiBias: -1 })).toThrow(/maxAlibiBias must be a non-negative number/);
    expect(() => plan('tiny-mpt', { fusedQkv: false })).toThrow(/mpt: the loader takes one attn_qkv/);
    expect(() => plan('tiny-bloom', { qkvBias: false })).toThrow(/requires one attn_qkv and its bias/);
    expect(() => plan('tiny-baichuan', { tiedEmbeddings: true })).toThrow(/requires output.weight/);
  });
});
