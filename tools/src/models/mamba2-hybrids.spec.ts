// nemotron_h / nemotron_h_moe and granitehybrid: the tensor list and keys llama.cpp's loaders
// (src/models/nemotron-h.cpp, granite-hybrid.cpp) take, and the types the quantized files give the
// Mamba2 tensors.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { getArch } from './architectures';
import type { NemotronHConfig } from './architectures/nemotron-h';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const shapes = (preset: string) => new Map(planModel(getPreset(preset).config, 'F32').tensors.map((t) => [t.name, t.shape]));

/** The header's `<arch>.*` values of a preset written at F32. */
function keys(preset: string): { v: (k: string) => unknown; type: (k: string) => number | undefined; elemType: (k: string) => number | undefined; all: Map<string, unknown> } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-mamba2-'));
  try {
    const out = path.join(dir, 'm.gguf');
    const { config } = getPreset(preset);
    writeModel({ config, fileType: 'F32', seed: 1, out });
    const kv = readGgufHeader(out).kv;
    const a = kv.get('general.architecture')!.value as string;
    return {
      v: (k) => kv.get(`${a}.${k}`)?.value,
      type: (k) => kv.get(`${a}.${k}`)?.type,
      elemType: (k) => kv.get(`${a}.${k}`)?.elemType,
      all: new Map([...kv].map(([k, x]) => [k, x.value])),
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// The Mamba2 mixer of both Nemotron presets: 8 heads of 64 (d_inner 512), 2 groups of state 64, 4 taps.
function expectNemotronMixer(s: Map<string, number[]>, i: number): void {
  expect(s.get(`blk.${i}.ssm_in.weight`)).toEqual([256, 2 * 512 + 2 * 2 * 64 + 8]);
  expect(s.get(`blk.${i}.ssm_conv1d.weight`)).toEqual([4, 512 + 2 * 2 * 64]);
  expect(s.get(`blk.${i}.ssm_conv1d.bias`)).toEqual([768]);
  expect(s.get(`blk.${i}.ssm_dt.bias`)).toEqual([8]);
  expect(s.get(`blk.${i}.ssm_a`)).toEqual([1, 8]);
  expect(s.get(`blk.${i}.ssm_d`)).toEqual([1, 8]);
  expect(s.get(`blk.${i}.ssm_norm.weight`)).toEqual([256, 2]);
  expect(s.get(`blk.${i}.ssm_out.weight`)).toEqual([512, 256]);
}

describe('nemotron_h_moe / nemotron_h', () => {
  it('blocks M E * E M E: Mamba2, sigmoid experts with a relu² shared expert, NoPE attention; attn_norm only', () => {
    const s = shapes('tiny-nemotron-h-moe');
    for (const i of [0, 4]) {
      expectNemotronMixer(s, i);
      expect(s.has(`blk.${i}.attn_q.weight`)).toBe(false);
      expect(s.has(`blk.${i}.ffn_gate_inp.weight`)).toBe(false);
    }
    for (const i of [1, 3, 5]) {
      expect(s.get(`blk.${i}.ffn_gate_inp.weight`)).toEqual([256, 16]);
      expect(s.get(`blk.${i}.exp_probs_b.bias`)).toEqual([16]);
      expect(s.get(`blk.${i}.ffn_up_exps.weight`)).toEqual([256, 256, 16]);
      expect(s.get(`blk.${i}.ffn_down_exps.weight`)).toEqual([256, 256, 16]);
      expect(s.get(`blk.${i}.ffn_up_shexp.weight`)).toEqual([256, 512]);
      expect(s.get(`blk.${i}.ffn_down_shexp.weight`)).toEqual([512, 256]);
      // relu² up/down: no gates.
      expect(s.has(`blk.${i}.ffn_gate_exps.weight`)).toBe(false);
      expect(s.has(`blk.${i}.ffn_gate_shexp.weight`)).toBe(false);
      expect(s.has(`blk.${i}.ssm_in.weight`)).toBe(false);
    }
    expect(s.get('blk.2.attn_q.weight')).toEqual([256, 256]);
    expect(s.get('blk.2.attn_k.weight')).toEqual([256, 128]);
    expect(s.get('blk.2.attn_v.weight')).toEqual([256, 128]);
    expect(s.get('blk.2.attn_output.weight')).toEqual([256, 256]);
    for (let i = 0; i < 6; i++) {
      expect(s.get(`blk.${i}.attn_norm.weight`)).toEqual([256]);
      expect(s.has(`blk.${i}.ffn_norm.weight`)).toBe(false);
    }
    // token_embd, output_norm, output; per block attn_norm + 8 mixer / 6 MoE / 4 attention tensors.
    expect(s.size).toBe(3 + 6 + 2 * 8 + 3 * 6 + 4);

    const d = shapes('tiny-nemotron-h');
    for (const i of [0, 4]) expectNemotronMixer(d, i);
    for (const i of [1, 3, 5]) {
      expect(d.get(`blk.${i}.ffn_up.weight`)).toEqual([256, 512]);
      expect(d.get(`blk.${i}.ffn_down.weight`)).toEqual([512, 256]);
      expect(d.has(`blk.${i}.ffn_gate.weight`)).toBe(false);
      expect(d.has(`blk.${i}.ffn_norm.weight`)).toBe(false);
      expect(d.has(`blk.${i}.ffn_gate_inp.weight`)).toBe(false);
    }
    expect(d.size).toBe(3 + 6 + 2 * 8 + 3 * 2 + 4);
  });

  it('writes the per-block arrays, ssm and expert keys as the converter', () => {
    const { v, elemType, all } = keys('tiny-nemotron-h-moe');
    expect(all.get('general.architecture')).toBe('nemotron_h_moe');
    expect(v('block_count')).toBe(6);
    // A block is Mamba2 iff both are 0, attention iff only head_count_kv is set, else an FFN.
    expect(v('attention.head_count_kv')).toEqual([0, 0, 2, 0, 0, 0]);
    expect(v('feed_forward_length')).toEqual([0, 256, 0, 256, 0, 256]);
    expect([elemType('attention.head_count_kv'), elemType('feed_forward_length')]).toEqual([GgufType.INT32, GgufType.INT32]);
    expect([v('attention.head_count'), v('attention.key_length'), v('attention.value_length')]).toEqual([4, 64, 64]);
    expect(v('attention.layer_norm_epsilon')).toBeCloseTo(1e-5);
    expect(v('attention.layer_norm_rms_epsilon')).toBeCloseTo(1e-5);
    expect(v('rope.scaling.finetuned')).toBe(false);
    expect([v('ssm.conv_kernel'), v('ssm.state_size'), v('ssm.group_count'), v('ssm.inner_size'), v('ssm.time_step_rank')]).toEqual([4, 64, 2, 512, 8]);
    expect([v('expert_count'), v('expert_used_count'), v('expert_feed_forward_length'), v('expert_shared_feed_forward_length'), v('expert_shared_count')]).toEqual([16, 4, 256, 512, 1]);
    expect(v('expert_weights_norm')).toBe(true);
    expect(v('expert_weights_scale')).toBeCloseTo(2.5);
    expect([v('expert_group_count'), v('expert_group_used_count')]).toEqual([1, 1]);
    // The gating is fixed (sigmoid) in llama.cpp's graph; the converter writes no key for it.
    expect(v('expert_gating_func')).toBeUndefined();

    const d = keys('tiny-nemotron-h');
    expect(d.all.get('general.architecture')).toBe('nemotron_h');
    expect(d.v('feed_forward_length')).toEqual([0, 512, 0, 512, 0, 512]);
    expect(d.v('attention.head_count_kv')).toEqual([0, 0, 2, 0, 0, 0]);
    expect(d.v('expert_count')).toBeUndefined();
  });

  it('--layers repeats the block pattern', () => {
    const c = { ...getPreset('tiny-nemotron-h-moe').config, nLayers: 9 };
    const s = new Map(planModel(c, 'F32').tensors.map((t) => [t.name, t.shape]));
    expect([6, 7, 8].map((i) => [s.has(`blk.${i}.ssm_in.weight`), s.has(`blk.${i}.ffn_up_exps.weight`), s.has(`blk.${i}.attn_q.weight`)])).toEqual([
      [true, false, false],
      [false, true, false],
      [false, false, true],
    ]);
  });
});

describe('nemotron_h_moe with a latent MoE (tiny-nemotron-h-moe-latent)', () => {
  it('routes on the full width, runs the experts in the latent width between ffn_latent_down and ffn_latent_up', () => {
    const plan = planModel(getPreset('tiny-nemotron-h-moe-latent').config, 'F32').tensors;
    const s = new Map(plan.map((t) => [t.name, t.shape]));
    for (const i of [1, 3, 5]) {
      expect(s.get(`blk.${i}.ffn_gate_inp.weight`)).toEqual([256, 16]);
      expect(s.get(`blk.${i}.exp_probs_b.bias`)).toEqual([16]);
      expect(s.get(`blk.${i}.ffn_latent_down.weight`)).toEqual([256, 128]);
      expect(s.get(`blk.${i}.ffn_latent_up.weight`)).toEqual([128, 256]);
      expect(s.get(`blk.${i}.ffn_up_exps.weight`)).toEqual([128, 256, 16]);
      expect(s.get(`blk.${i}.ffn_down_exps.weight`)).toEqual([256, 128, 16]);
      // The shared expert stays full width.
      expect(s.get(`blk.${i}.ffn_up_shexp.weight`)).toEqual([256, 512]);
      expect(s.get(`blk.${i}.ffn_down_shexp.weight`)).toEqual([512, 256]);
      // llama.cpp's load order: router, selection bias, latent down/up, then the experts.
      const names = plan.filter((t) => t.layer === i && !t.name.includes('shexp') && !t.name.endsWith('attn_norm.weight')).map((t) => t.name.slice(`blk.${i}.`.length));
      expect(names).toEqual(['ffn_gate_inp.weight', 'exp_probs_b.bias', 'ffn_latent_down.weight', 'ffn_latent_up.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight']);
    }
    for (const i of [0, 4]) {
      expectNemotronMixer(s, i);
      expect(s.has(`blk.${i}.ffn_latent_down.weight`)).toBe(false);
    }
    expect(s.get('blk.2.attn_q.weight')).toEqual([256, 256]);
    expect(s.has('blk.2.ffn_latent_up.weight')).toBe(false);
    // tiny-nemotron-h-moe's tensors plus 2 per expert block.
    expect(s.size).toBe(3 + 6 + 2 * 8 + 3 * 8 + 4);
    // Without a latent: no latent tensors, experts in n_embd.
    expect([...shapes('tiny-nemotron-h-moe').keys()].some((n) => n.includes('latent'))).toBe(false);
  });

  it('writes moe_latent_size (UINT32) and keeps the other keys of tiny-nemotron-h-moe', () => {
    const { v, type, all } = keys('tiny-nemotron-h-moe-latent');
    expect(all.get('general.architecture')).toBe('nemotron_h_moe');
    expect(v('moe_latent_size')).toBe(128);
    expect(type('moe_latent_size')).toBe(GgufType.UINT32);
    expect([v('embedding_length'), v('expert_count'), v('expert_used_count'), v('expert_feed_forward_length'), v('expert_shared_feed_forward_length')]).toEqual([256, 16, 4, 256, 512]);
    expect(v('feed_forward_length')).toEqual([0, 256, 0, 256, 0, 256]);
    expect(keys('tiny-nemotron-h-moe').v('moe_latent_size')).toBeUndefined();
  });

  it('keeps K-quants on rows of 256 and falls back on the latent rows of 128; the block writes at the usual scale', () => {
    const { config } = getPreset('tiny-nemotron-h-moe-latent');
    const q = new Map(planModel(config, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    // No llama-quant category for the latent projections: the default Q4_K (Q5_0 on rows of 128).
    expect(q.get('blk.1.ffn_latent_down.weight')).toBe(GgmlType.Q4_K);
    expect(q.get('blk.1.ffn_latent_up.weight')).toBe(GgmlType.Q5_0);
    expect(q.get('blk.1.ffn_up_exps.weight')).toBe(GgmlType.Q5_0);
    // ffn_down_exps: use_more_bits (Q6_K) on block 5 of 6, Q4_K on block 3.
    expect([q.get('blk.3.ffn_down_exps.weight'), q.get('blk.5.ffn_down_exps.weight')]).toEqual([GgmlType.Q4_K, GgmlType.Q6_K]);
    expect(q.get('blk.1.ffn_gate_inp.weight')).toBe(GgmlType.F32);
    const t = new Map(planModel(config, 'F32').tensors.map((x) => [x.name, x.init]));
    const std = (n: string) => (t.get(n) as { std: number }).std;
    expect(std('blk.1.ffn_latent_down.weight')).toBeCloseTo(1 / 16);
    expect(std('blk.1.ffn_up_exps.weight')).toBeCloseTo(1 / Math.sqrt(128));
    expect(std('blk.1.ffn_latent_up.weight')).toBeCloseTo(1 / Math.sqrt(128));
    // The residual gain 1 / sqrt(2 x 6 blocks) stays on ffn_down_exps, over its 256 inputs.
    expect(std('blk.1.ffn_down_exps.weight')).toBeCloseTo(1 / 16 / Math.sqrt(12));
    expect(std('blk.1.ffn_gate_inp.weight')).toBeCloseTo(2 / 16);
  });

  it('rejects a latent on nemotron_h or a non-integer one', () => {
    const n = getPreset('tiny-nemotron-h-moe').config;
    expect(() => planModel({ ...n, latent: 0 } as typeof n, 'F32')).toThrow(/latent/);
    expect(() => planModel({ ...n, latent: 12.5 } as typeof n, 'F32')).toThrow(/latent/);
    const d = getPreset('tiny-nemotron-h').config;
    expect(() => planModel({ ...d, latent: 128 } as typeof d, 'F32')).toThrow(/latent/);
  });
});

describe('nemotron_h_moe with its MTP block (tiny-nemotron-h-moe-mtp)', () => {
  it("writes blk.6 as llama.cpp's loader takes it: nextn inputs, NoPE attention, post_attention_norm, the experts", () => {
    const plan = planModel(getPreset('tiny-nemotron-h-moe-mtp').config, 'F32').tensors;
    const s = new Map(plan.map((t) => [t.name, t.shape]));
    const mtp = new Map(plan.filter((t) => t.layer === 6).map((t) => [t.name.slice('blk.6.'.length), t.shape]));
    expect(Object.fromEntries(mtp)).toEqual({
      'nextn.eh_proj.weight': [512, 256],
      'nextn.enorm.weight': [256],
      'nextn.hnorm.weight': [256],
      'nextn.shared_head_norm.weight': [256],
      'attn_norm.weight': [256],
      'attn_q.weight': [256, 256],
      'attn_k.weight': [256, 128],
      'attn_v.weight': [256, 128],
      'attn_output.weight': [256, 256],
      'post_attention_norm.weight': [256],
      'ffn_gate_inp.weight': [256, 16],
      'exp_probs_b.bias': [16],
      'ffn_up_exps.weight': [256, 256, 16],
      'ffn_down_exps.weight': [256, 256, 16],
      'ffn_up_shexp.weight': [256, 512],
      'ffn_down_shexp.weight': [512, 256],
    });
    // The loader creates neither nextn.embed_tokens nor nextn.shared_head_head, nor gates or ffn_norm.
    expect([...s.keys()].filter((n) => n.startsWith('blk.7.') || /nextn\.(embed_tokens|shared_head_head)|gate_(exps|shexp)|ffn_norm/.test(n))).toEqual([]);
    // The trunk is tiny-nemotron-h-moe's, tensor for tensor (names, shapes, inits: the same weights for a seed).
    const trunk = planModel(getPreset('tiny-nemotron-h-moe').config, 'F32').tensors;
    expect(plan.filter((t) => t.layer !== 6).map((t) => [t.name, t.shape, t.init])).toEqual(trunk.map((t) => [t.name, t.shape, t.init]));
    expect(s.size).toBe(trunk.length + 16);
  });

  it('counts the block in block_count and both per-block arrays, as the converter, with nextn_predict_layers 1', () => {
    const { v, type, elemType } = keys('tiny-nemotron-h-moe-mtp');
    expect(v('block_count')).toBe(7);
    expect(v('nextn_predict_layers')).toBe(1);
    expect(type('nextn_predict_layers')).toBe(GgufType.UINT32);
    // The converter registers the MTP block as attention (head_count_kv) and expert block (moe_intermediate_size).
    expect(v('attention.head_count_kv')).toEqual([0, 0, 2, 0, 0, 0, 2]);
    expect(v('feed_forward_length')).toEqual([0, 256, 0, 256, 0, 256, 256]);
    expect([elemType('attention.head_count_kv'), elemType('feed_forward_length')]).toEqual([GgufType.INT32, GgufType.INT32]);
    // shared_head_norm is a LayerNorm with layer_norm_epsilon (the loader requires the key).
    expect(v('attention.layer_norm_epsilon')).toBeCloseTo(1e-5);
    expect([v('expert_feed_forward_length'), v('expert_shared_feed_forward_length'), v('expert_used_count')]).toEqual([256, 512, 4]);
    const base = keys('tiny-nemotron-h-moe');
    expect([base.v('block_count'), base.v('nextn_predict_layers')]).toEqual([6, undefined]);
  });

  it('inits the block at the trunk scales; with a latent it takes the latent projections too', () => {
    const { config } = getPreset('tiny-nemotron-h-moe-mtp');
    const t = new Map(planModel(config, 'F32').tensors.map((x) => [x.name, x.init as { mean?: number; std: number }]));
    // [enorm(e); hnorm(h)]: 2 x 256 unit-scale inputs to a unit-scale stream.
    expect(t.get('blk.6.nextn.eh_proj.weight')!.std).toBeCloseTo(1 / Math.sqrt(512));
    for (const n of ['nextn.enorm', 'nextn.hnorm', 'nextn.shared_head_norm', 'attn_norm', 'post_attention_norm']) expect([n, t.get(`blk.6.${n}.weight`)]).toEqual([n, { kind: 'normal', mean: 1, std: 0.1 }]);
    expect(t.get('blk.6.attn_output.weight')!.std).toBeCloseTo(t.get('blk.2.attn_output.weight')!.std);
    expect(t.get('blk.6.ffn_down_exps.weight')!.std).toBeCloseTo(t.get('blk.5.ffn_down_exps.weight')!.std);
    expect(t.get('blk.6.exp_probs_b.bias')!.std).toBe(0.05);
    const lat = new Map(planModel({ ...getPreset('tiny-nemotron-h-moe-latent').config, nextn: 1 } as NemotronHConfig, 'F32').tensors.map((x) => [x.name, x.shape]));
    expect([lat.get('blk.6.ffn_latent_down.weight'), lat.get('blk.6.ffn_latent_up.weight'), lat.get('blk.6.ffn_up_exps.weight')]).toEqual([[256, 128], [128, 256], [128, 256, 16]]);
  });

  it('rejects nextn other than 0 or 1, and on nemotron_h', () => {
    const n = getPreset('tiny-nemotron-h-moe').config as NemotronHConfig;
    expect(() => planModel({ ...n, nextn: 2 } as unknown as NemotronHConfig, 'F32')).toThrow(/nextn/);
    expect(planModel({ ...n, nextn: 0 } as NemotronHConfig, 'F32').tensors.length).toBe(planModel(n, 'F32').tensors.length);
    expect(() => planModel({ ...(getPreset('tiny-nemotron-h').config as NemotronHConfig), nextn: 1 } as NemotronHConfig, 'F32')).toThrow(/nextn/);
  });
});

describe('bench-nemotron-3-nano-shaped', () => {
  it('--layers 8 plans M E M E M * E M in the real widths (Q4_K: Q5_0 where rows are not a multiple of 256)', () => {
    const c = { ...getPreset('bench-nemotron-3-nano-shaped').config, nLayers: 8 };
    const { tensors } = planModel(c, 'Q4_K');
    const s = new Map(tensors.map((t) => [t.name, t.shape]));
    const ty = new Map(tensors.map((t) => [t.name, t.type]));
    // 3 globals, 8 attn_norm, 4 mixers of 8, 3 expert blocks of 6, 1 attention block of 4.
    expect(tensors.length).toBe(3 + 8 + 4 * 8 + 3 * 6 + 4);
    expect(s.get('token_embd.weight')).toEqual([2688, 131072]);
    expect(s.get('output.weight')).toEqual([2688, 131072]);
    for (const i of [0, 2, 4, 7]) {
      expect(s.get(`blk.${i}.ssm_in.weight`)).toEqual([2688, 2 * 4096 + 2 * 8 * 128 + 64]);
      expect(s.get(`blk.${i}.ssm_conv1d.weight`)).toEqual([4, 4096 + 2 * 8 * 128]);
      expect(s.get(`blk.${i}.ssm_norm.weight`)).toEqual([512, 8]);
      expect(s.get(`blk.${i}.ssm_a`)).toEqual([1, 64]);
      expect(s.get(`blk.${i}.ssm_out.weight`)).toEqual([4096, 2688]);
    }
    for (const i of [1, 3, 6]) {
      expect(s.get(`blk.${i}.ffn_gate_inp.weight`)).toEqual([2688, 128]);
      expect(s.get(`blk.${i}.exp_probs_b.bias`)).toEqual([128]);
      expect(s.get(`blk.${i}.ffn_up_exps.weight`)).toEqual([2688, 1856, 128]);
      expect(s.get(`blk.${i}.ffn_down_exps.weight`)).toEqual([1856, 2688, 128]);
      expect(s.get(`blk.${i}.ffn_up_shexp.weight`)).toEqual([2688, 3712]);
      expect(s.get(`blk.${i}.ffn_down_shexp.weight`)).toEqual([3712, 2688]);
      expect(s.has(`blk.${i}.ffn_latent_down.weight`)).toBe(false);
    }
    expect(s.get('blk.5.attn_q.weight')).toEqual([2688, 4096]);
    expect(s.get('blk.5.attn_k.weight')).toEqual([2688, 256]);
    expect(s.get('blk.5.attn_v.weight')).toEqual([2688, 256]);
    expect(s.get('blk.5.attn_output.weight')).toEqual([4096, 2688]);
    // Rows of 2688, 1856 and 3712 take Q4_K's fallback; rows of 4096 keep Q4_K.
    for (const n of ['token_embd.weight', 'output.weight', 'blk.0.ssm_in.weight', 'blk.5.attn_q.weight', 'blk.1.ffn_up_exps.weight', 'blk.1.ffn_down_exps.weight', 'blk.1.ffn_up_shexp.weight', 'blk.1.ffn_down_shexp.weight']) {
      expect([n, ty.get(n)]).toEqual([n, GgmlType.Q5_0]);
    }
    for (const n of ['blk.0.ssm_out.weight', 'blk.5.attn_output.weight']) expect([n, ty.get(n)]).toEqual([n, GgmlType.Q4_K]);
    for (const n of ['blk.1.ffn_gate_inp.weight', 'blk.1.exp_probs_b.bias', 'blk.0.ssm_conv1d.weight', 'blk.0.ssm_norm.weight']) expect([n, ty.get(n)]).toEqual([n, GgmlType.F32]);
    // A selection bias small next to the saturated sigmoids of 128 experts (tiny-nemotron-h-moe keeps 0.05).
    const init = new Map(tensors.map((t) => [t.name, t.init]));
    expect(init.get('blk.1.exp_probs_b.bias')).toEqual({ kind: 'normal', std: 0.002 });
    expect((planModel(getPreset('tiny-nemotron-h-moe').config, 'F32').tensors.find((t) => t.name === 'blk.1.exp_probs_b.bias')!.init as { std: number }).std).toBe(0.05);
  });

  it('the full preset: 52 blocks of the published pattern and its keys', () => {
    const { config, tensors } = planModel(getPreset('bench-nemotron-3-nano-shaped').config, 'F32');
    const p = (config as NemotronHConfig).pattern;
    expect([p.length, [...p].filter((b) => b === 'M').length, [...p].filter((b) => b === 'E').length, [...p].filter((b) => b === '*').length]).toEqual([52, 23, 23, 6]);
    expect(tensors.length).toBe(3 + 52 + 23 * 8 + 23 * 6 + 6 * 4);
    const m = new Map(getArch('nemotron_h_moe').metadata(config));
    const val = (k: string) => (m.get(`nemotron_h_moe.${k}`) as { value: unknown } | undefined)?.value;
    expect([val('embedding_length'), val('attention.head_count'), val('attention.key_length'), val('expert_count'), val('expert_used_count'), val('expert_feed_forward_length'), val('expert_shared_feed_forward_length')]).toEqual([
      2688, 32, 128, 128, 6, 1856, 3712,
    ]);
    expect([val('ssm.inner_size'), val('ssm.state_size'), val('ssm.group_count'), val('ssm.time_step_rank'), val('ssm.conv_kernel')]).toEqual([4096, 128, 8, 64, 4]);
    expect(val('moe_latent_size')).toBeUndefined();
  });
});

describe('granitehybrid', () => {
  it('blocks Mamba2, Mamba2, GQA, Mamba2, each with ffn_norm and experts plus a shared expert', () => {
    const s = shapes('tiny-granitehybrid');
    for (const i of [0, 1, 3]) {
      expect(s.get(`blk.${i}.ssm_in.weight`)).toEqual([256, 2 * 512 + 2 * 64 + 8]);
      expect(s.get(`blk.${i}.ssm_conv1d.weight`)).toEqual([4, 512 + 2 * 64]);
      expect(s.get(`blk.${i}.ssm_conv1d.bias`)).toEqual([640]);
      expect(s.get(`blk.${i}.ssm_dt.bias`)).toEqual([8]);
      expect(s.get(`blk.${i}.ssm_a`)).toEqual([1, 8]);
      expect(s.get(`blk.${i}.ssm_d`)).toEqual([1, 8]);
      expect(s.get(`blk.${i}.ssm_norm.weight`)).toEqual([512, 1]);
      expect(s.get(`blk.${i}.ssm_out.weight`)).toEqual([512, 256]);
      expect(s.has(`blk.${i}.attn_q.weight`)).toBe(false);
    }
    expect(s.get('blk.2.attn_q.weight')).toEqual([256, 256]);
    expect(s.get('blk.2.attn_k.weight')).toEqual([256, 128]);
    expect(s.has('blk.2.ssm_in.weight')).toBe(false);
    for (let i = 0; i < 4; i++) {
      expect(s.get(`blk.${i}.attn_norm.weight`)).toEqual([256]);
      expect(s.get(`blk.${i}.ffn_norm.weight`)).toEqual([256]);
      expect(s.get(`blk.${i}.ffn_gate_inp.weight`)).toEqual([256, 16]);
      expect(s.get(`blk.${i}.ffn_gate_exps.weight`)).toEqual([256, 256, 16]);
      expect(s.get(`blk.${i}.ffn_down_exps.weight`)).toEqual([256, 256, 16]);
      expect(s.get(`blk.${i}.ffn_gate_shexp.weight`)).toEqual([256, 512]);
      expect(s.get(`blk.${i}.ffn_down_shexp.weight`)).toEqual([512, 256]);
      expect(s.has(`blk.${i}.ffn_gate_inp_shexp.weight`)).toBe(false);
      expect(s.has(`blk.${i}.exp_probs_b.bias`)).toBe(false);
    }
    // 3 globals; per block attn_norm + ffn_norm + 4 routed + 3 shared; 8 mixer or 4 attention tensors.
    expect(s.size).toBe(3 + 4 * 9 + 3 * 8 + 4);

    const d = shapes('tiny-granitehybrid-dense');
    expect(d.get('blk.0.ffn_gate.weight')).toEqual([256, 512]);
    expect(d.get('blk.2.ffn_down.weight')).toEqual([512, 256]);
    expect(d.get('blk.3.ffn_norm.weight')).toEqual([256]);
    expect(d.has('blk.0.ffn_gate_inp.weight')).toBe(false);
    expect(d.size).toBe(3 + 4 * 5 + 3 * 8 + 4);
  });

  it('writes Granite multipliers, NoPE and the ssm keys as the converter', () => {
    const { v, elemType, all } = keys('tiny-granitehybrid');
    expect(all.get('general.architecture')).toBe('granitehybrid');
    expect(v('attention.head_count_kv')).toEqual([0, 0, 2, 0]);
    expect(elemType('attention.head_count_kv')).toBe(GgufType.INT32);
    expect([v('attention.head_count'), v('feed_forward_length'), v('expert_count'), v('expert_used_count'), v('expert_shared_feed_forward_length')]).toEqual([4, 256, 16, 4, 512]);
    expect([v('embedding_scale'), v('residual_scale'), v('logit_scale'), v('attention.scale')].map((x) => Math.round((x as number) * 1e6) / 1e6)).toEqual([12, 0.22, 8, 0.015625]);
    expect(v('rope.scaling.finetuned')).toBe(false);
    expect([v('ssm.conv_kernel'), v('ssm.state_size'), v('ssm.group_count'), v('ssm.inner_size'), v('ssm.time_step_rank')]).toEqual([4, 64, 1, 512, 8]);
    // head_dim is dim / heads: the Granite converter drops head_dim, so no key_length.
    expect(v('attention.key_length')).toBeUndefined();

    const d = keys('tiny-granitehybrid-dense');
    expect([d.v('feed_forward_length'), d.v('expert_count'), d.v('expert_used_count'), d.v('expert_shared_feed_forward_length')]).toEqual([512, 0, 0, 512]);
  });

  it('undoes the multipliers in the init: unit-scale embeddings, logits of the usual scale', () => {
    const { config } = getPreset('tiny-granitehybrid');
    const t = new Map(planModel(config, 'F32').tensors.map((x) => [x.name, x.init]));
    const std = (n: string) => (t.get(n) as { std: number }).std;
    expect(std('token_embd.weight') * 12).toBeCloseTo(1);
    expect(std('output.weight')).toBeCloseTo((2 / 16) * 8);
    // The residual writers at 1 / 0.22 of their usual gain 1 / sqrt(2 x 4 blocks).
    expect(std('blk.0.ssm_out.weight')).toBeCloseTo(1 / Math.sqrt(512) / Math.sqrt(8) / 0.22);
    expect(std('blk.2.attn_output.weight')).toBeCloseTo(1 / 16 / Math.sqrt(8) / 0.22);
    expect(std('blk.0.ssm_in.weight')).toBeCloseTo(1 / 16);
  });
});

describe('Mamba2 tensors', () => {
  it('ssm_a = -exp(A_log) in [-8, -1]; conv, ssm_a/d and the grouped norm stay F32, the projections quantize', () => {
    for (const preset of ['tiny-nemotron-h-moe', 'tiny-granitehybrid']) {
      const { config } = getPreset(preset);
      for (const { name } of planModel(config, 'F32').tensors.filter((x) => x.name.endsWith('.ssm_a'))) {
        const a = generateTensorF32(config, 1, name);
        expect([name, Math.min(...a) >= -8, Math.max(...a) <= -1]).toEqual([name, true, true]);
      }
      for (const ft of ['Q8_0', 'Q4_K_M'] as const) {
        const t = new Map(planModel(config, ft).tensors.map((x) => [x.name, x.type]));
        for (const n of ['ssm_conv1d.weight', 'ssm_conv1d.bias', 'ssm_dt.bias', 'ssm_a', 'ssm_d', 'ssm_norm.weight', 'attn_norm.weight']) expect([preset, ft, n, t.get(`blk.0.${n}`)]).toEqual([preset, ft, n, GgmlType.F32]);
        // No llama-quant category: the file type's default (Q4_K in Q4_K_M).
        for (const n of ['ssm_in.weight', 'ssm_out.weight']) expect([preset, ft, n, t.get(`blk.0.${n}`)]).toEqual([preset, ft, n, ft === 'Q8_0' ? GgmlType.Q8_0 : GgmlType.Q4_K]);
      }
    }
  });

  it('rejects inconsistent shapes', () => {
    const g = getPreset('tiny-granitehybrid').config;
    expect(() => planModel({ ...g, dim: 512 }, 'F32')).toThrow(/2 x dim/);
    expect(() => planModel({ ...g, ssm: undefined } as typeof g, 'F32')).toThrow(/ssm needs/);
    expect(() => planModel({ ...getPreset('tiny-granitehybrid-dense').config, sharedFf: 256 }, 'F32')).toThrow(/without experts/);
    const n = getPreset('tiny-nemotron-h-moe').config;
    expect(() => planModel({ ...n, pattern: 'M-*' } as typeof n, 'F32')).toThrow(/pattern/);
    expect(() => planModel({ ...n, ssm: { convKernel: 4, stateSize: 64, nGroup: 3, nHeads: 8, headDim: 64 } } as typeof n, 'F32')).toThrow(/groups/);
    expect(() => planModel({ ...n, nExperts: 0, nExpertsUsed: 0 }, 'F32')).toThrow(/experts/);
    expect(() => planModel({ ...getPreset('tiny-nemotron-h').config, nExperts: 16, nExpertsUsed: 4 }, 'F32')).toThrow(/dense/);
    expect([getArch('nemotron_h').ggufArch, getArch('nemotron_h_moe').ggufArch, getArch('granitehybrid').ggufArch]).toEqual(['nemotron_h', 'nemotron_h_moe', 'granitehybrid']);
    expect([DEFAULT_PRESET_FOR_ARCH.nemotron_h_moe, DEFAULT_PRESET_FOR_ARCH.nemotron_h, DEFAULT_PRESET_FOR_ARCH.granitehybrid]).toEqual(['tiny-nemotron-h-moe', 'tiny-nemotron-h', 'tiny-granitehybrid']);
  });
});
