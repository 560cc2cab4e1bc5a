// gemma4: the tensor list and keys llama.cpp's loader (src/models/gemma4.cpp) takes for the MoE
// (26B-A4B style) and dense per-layer-embedding (E2B style) layouts, and the values of the fixed
// tensors (proportional RoPE factors, layer and expert scales).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { Gemma4Config } from './architectures/gemma4';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'post_attention_norm.weight', 'layer_output_scale.weight'];
const MLP = ['ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight', 'post_ffw_norm.weight'];
const MOE = ['ffn_gate_inp.weight', 'ffn_gate_inp.scale', 'pre_ffw_norm_2.weight', 'post_ffw_norm_1.weight', 'post_ffw_norm_2.weight'];
const PLE = ['inp_gate.weight', 'proj.weight', 'post_norm.weight'];
const without = (a: string[], ...drop: string[]) => a.filter((x) => !drop.includes(x));

const plan = (preset: string, over: Partial<Gemma4Config> = {}) => planModel({ ...getPreset(preset).config, ...over } as Gemma4Config, 'F32');
const blocks = (preset: string) => {
  const t = plan(preset).tensors;
  return (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length));
};

describe('gemma4', () => {
  it('tiny-gemma4: sliding blocks with attn_v, full blocks without (V = K), experts fused beside the MLP', () => {
    const { tensors } = plan('tiny-gemma4');
    const s = new Map(tensors.map((t) => [t.name, t.shape]));
    const b = blocks('tiny-gemma4');
    expect(tensors.filter((t) => t.layer === undefined).map((t) => [t.name, t.shape])).toEqual([
      ['token_embd.weight', [64, 1024]],
      ['output_norm.weight', [64]],
      ['rope_freqs.weight', [16]],
    ]);
    const sliding = [...ATTN, ...MLP, ...MOE, 'ffn_gate_up_exps.weight', 'ffn_down_exps.weight', 'ffn_down_exps.scale'];
    expect([0, 1, 2, 3, 4, 5].map(b)).toEqual([sliding, sliding, without(sliding, 'attn_v.weight'), sliding, sliding, without(sliding, 'attn_v.weight')]);
    // Sliding: 4 heads of 16 over 2 KV heads; full: 4 heads of 32 over 1.
    expect([s.get('blk.0.attn_q.weight'), s.get('blk.0.attn_k.weight'), s.get('blk.0.attn_v.weight'), s.get('blk.0.attn_output.weight'), s.get('blk.0.attn_q_norm.weight')]).toEqual([[64, 64], [64, 32], [64, 32], [64, 64], [16]]);
    expect([s.get('blk.2.attn_q.weight'), s.get('blk.2.attn_k.weight'), s.get('blk.2.attn_output.weight'), s.get('blk.2.attn_k_norm.weight')]).toEqual([[64, 128], [64, 32], [128, 64], [32]]);
    expect([s.get('blk.1.ffn_gate_inp.weight'), s.get('blk.1.ffn_gate_inp.scale'), s.get('blk.1.ffn_gate_up_exps.weight'), s.get('blk.1.ffn_down_exps.weight'), s.get('blk.1.ffn_down_exps.scale'), s.get('blk.1.ffn_down.weight'), s.get('blk.1.layer_output_scale.weight')]).toEqual([
      [64, 8], [64], [64, 64, 8], [32, 64, 8], [8], [96, 64], [1],
    ]);
    expect(s.has('output.weight')).toBe(false);
    const split = new Map(plan('tiny-gemma4-split').tensors.map((t) => [t.name, t.shape]));
    expect([split.get('blk.0.ffn_gate_exps.weight'), split.get('blk.0.ffn_up_exps.weight'), split.has('blk.0.ffn_gate_up_exps.weight')]).toEqual([[64, 32, 8], [64, 32, 8], false]);
    expect(DEFAULT_PRESET_FOR_ARCH.gemma4).toBe('tiny-gemma4');
  });

  it('tiny-gemma4-e: per-layer embeddings, the last 2 blocks without K/V of their own and a double-wide MLP', () => {
    const { tensors } = plan('tiny-gemma4-e');
    const s = new Map(tensors.map((t) => [t.name, t.shape]));
    const b = blocks('tiny-gemma4-e');
    expect(tensors.filter((t) => t.layer === undefined).map((t) => [t.name, t.shape])).toEqual([
      ['token_embd.weight', [64, 1024]],
      ['per_layer_token_embd.weight', [48, 1024]],
      ['per_layer_model_proj.weight', [64, 48]],
      ['per_layer_proj_norm.weight', [8]],
      ['output_norm.weight', [64]],
      ['rope_freqs.weight', [16]],
    ]);
    const own = [...ATTN, ...MLP, ...PLE];
    const shared = without(own, 'attn_k.weight', 'attn_v.weight', 'attn_k_norm.weight');
    expect([0, 1, 2, 3, 4, 5].map(b)).toEqual([own, own, own, own, shared, shared]);
    expect([3, 4, 5].map((i) => s.get(`blk.${i}.ffn_up.weight`))).toEqual([[64, 96], [64, 192], [64, 192]]);
    expect([s.get('blk.0.inp_gate.weight'), s.get('blk.0.proj.weight'), s.get('blk.5.attn_q.weight')]).toEqual([[64, 8], [8, 64], [64, 128]]);
    // Rows of 8 and 48 fit no quantized block: F32 (llama-quant would fall back to F16).
    const q = new Map(planModel(getPreset('tiny-gemma4-e').config, 'Q8_0').tensors.map((t) => [t.name, t.type]));
    expect([q.get('per_layer_token_embd.weight'), q.get('blk.0.proj.weight'), q.get('per_layer_model_proj.weight'), q.get('blk.0.inp_gate.weight')]).toEqual([GgmlType.F32, GgmlType.F32, GgmlType.F32, GgmlType.Q8_0]);
  });

  it('rejects shared-KV layouts llama.cpp cannot serve and keeps a full block when --layers cuts the pattern', () => {
    expect(() => plan('tiny-gemma4-e', { sharedKvLayers: 1 })).toThrow(/must be sliding/);
    expect(() => plan('tiny-gemma4', { swaPattern: [true, true, true, true, true, true] })).toThrow(/full-attention/);
    const cut = plan('bench-gemma4-26b-a4b-shaped', { nLayers: 2 });
    expect((cut.config as Gemma4Config).swaPattern).toEqual([true, false]);
    expect((plan('bench-gemma4-26b-a4b-shaped').config as Gemma4Config).swaPattern.map((x) => (x ? 'S' : 'F')).join('')).toBe('SSSSSF'.repeat(5));
  });

  describe('written file', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-gemma4-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    it('keys as Gemma4Model writes them: full-block head sizes, per-block arrays, SWA values apart', () => {
      const out = path.join(dir, 'e.gguf');
      writeModel({ config: getPreset('tiny-gemma4-e').config, fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      expect(kv.get('general.architecture')!.value).toBe('gemma4');
      const v = (k: string) => kv.get(`gemma4.${k}`)?.value;
      expect(v('attention.sliding_window_pattern')).toEqual([true, true, true, false, true, false]);
      expect(kv.get('gemma4.attention.sliding_window_pattern')!.elemType).toBe(GgufType.BOOL);
      expect(v('attention.head_count_kv')).toEqual([2, 2, 2, 1, 2, 1]);
      expect(v('feed_forward_length')).toEqual([96, 96, 96, 96, 192, 192]);
      expect([v('attention.key_length'), v('attention.value_length'), v('rope.dimension_count'), v('attention.key_length_swa'), v('attention.value_length_swa'), v('rope.dimension_count_swa')]).toEqual([32, 32, 32, 16, 16, 16]);
      expect([v('rope.freq_base'), v('rope.freq_base_swa'), v('attention.sliding_window'), v('attention.shared_kv_layers'), v('embedding_length_per_layer_input'), v('final_logit_softcapping')]).toEqual([1e6, 1e4, 8, 2, 8, 30]);
      expect(kv.has('gemma4.expert_count')).toBe(false);
      const moe = path.join(dir, 'moe.gguf');
      writeModel({ config: getPreset('tiny-gemma4').config, fileType: 'F32', seed: 1, out: moe });
      const m = readGgufHeader(moe).kv;
      expect(['expert_count', 'expert_used_count', 'expert_feed_forward_length', 'feed_forward_length', 'attention.shared_kv_layers', 'embedding_length_per_layer_input'].map((k) => m.get(`gemma4.${k}`)!.value)).toEqual([8, 2, 32, 96, 0, 0]);
    });
  });

  it('fixed tensors: proportional RoPE factors, layer scales in [0.75, 1), expert scales 0.5..1.5', () => {
    const c = getPreset('tiny-gemma4').config;
    // Full head 32: 16 pairs, of which 32 x 0.25 / 2 = 4 rotate.
    expect([...generateTensorF32(c, 1, 'rope_freqs.weight')]).toEqual([...Array<number>(4).fill(1), ...Array<number>(12).fill(1e30).map(Math.fround)]);
    const ls = [0, 1, 2, 3, 4, 5].map((i) => generateTensorF32(c, 1, `blk.${i}.layer_output_scale.weight`)[0]);
    expect(ls.every((x) => x >= 0.75 && x < 1)).toBe(true);
    expect(new Set(ls).size).toBe(6);
    const es = [...generateTensorF32(c, 1, 'blk.0.ffn_down_exps.scale')];
    expect(es).toEqual([0.5, 0.625, 0.75, 0.875, 1, 1.125, 1.25, 1.375]);
  });
});
