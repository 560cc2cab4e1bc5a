// qwen35 / qwen35moe: the tensor list and keys llama.cpp's loaders (src/models/qwen35.cpp,
// qwen35moe.cpp) take, and the types the quantized files give the linear-attention tensors.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { getArch } from './architectures';
import { generateTensorF32, planModel, writeModel } from './build';
import { getPreset } from './presets';

const shapes = (preset: string) => new Map(planModel(getPreset(preset).config, 'F32').tensors.map((t) => [t.name, t.shape]));

describe('qwen35moe / qwen35', () => {
  it('recurrent blocks 0-2 (gated delta net), full attention block 3, post_attention_norm and no ffn_norm', () => {
    const s = shapes('tiny-qwen35moe');
    for (const i of [0, 1, 2]) {
      expect(s.get(`blk.${i}.attn_qkv.weight`)).toEqual([256, 2 * 2 * 64 + 4 * 64]);
      expect(s.get(`blk.${i}.attn_gate.weight`)).toEqual([256, 256]);
      expect(s.get(`blk.${i}.ssm_conv1d.weight`)).toEqual([4, 512]);
      expect(s.get(`blk.${i}.ssm_dt.bias`)).toEqual([4]);
      expect(s.get(`blk.${i}.ssm_a`)).toEqual([4]);
      expect(s.get(`blk.${i}.ssm_beta.weight`)).toEqual([256, 4]);
      expect(s.get(`blk.${i}.ssm_alpha.weight`)).toEqual([256, 4]);
      expect(s.get(`blk.${i}.ssm_norm.weight`)).toEqual([64]);
      expect(s.get(`blk.${i}.ssm_out.weight`)).toEqual([256, 256]);
      expect(s.has(`blk.${i}.attn_q.weight`)).toBe(false);
    }
    expect(s.get('blk.3.attn_q.weight')).toEqual([256, 4 * 64 * 2]);
    expect(s.get('blk.3.attn_k.weight')).toEqual([256, 128]);
    expect(s.get('blk.3.attn_v.weight')).toEqual([256, 128]);
    expect(s.get('blk.3.attn_output.weight')).toEqual([256, 256]);
    expect(s.get('blk.3.attn_q_norm.weight')).toEqual([64]);
    expect(s.has('blk.3.attn_qkv.weight')).toBe(false);
    for (let i = 0; i < 4; i++) {
      expect(s.get(`blk.${i}.post_attention_norm.weight`)).toEqual([256]);
      expect(s.has(`blk.${i}.ffn_norm.weight`)).toBe(false);
      expect(s.get(`blk.${i}.ffn_gate_inp.weight`)).toEqual([256, 16]);
      expect(s.get(`blk.${i}.ffn_down_exps.weight`)).toEqual([128, 256, 16]);
      expect(s.get(`blk.${i}.ffn_gate_inp_shexp.weight`)).toEqual([256]);
      expect(s.get(`blk.${i}.ffn_down_shexp.weight`)).toEqual([128, 256]);
    }
    // 3 globals; per block 2 norms + 4 routed + 4 shared; 9 linear-attention or 6 attention tensors.
    expect(s.size).toBe(3 + 4 * 10 + 3 * 9 + 6);

    const d = shapes('tiny-qwen35');
    expect(d.get('blk.0.ffn_gate.weight')).toEqual([256, 512]);
    expect(d.get('blk.3.ffn_down.weight')).toEqual([512, 256]);
    expect(d.has('blk.0.ffn_norm.weight')).toBe(false);
    expect(d.has('blk.0.ffn_gate_inp.weight')).toBe(false);
    expect(d.size).toBe(3 + 4 * 5 + 3 * 9 + 6); // 2 norms + 3 FFN matrices per block
  });

  it('writes the ssm and M-RoPE keys as the converter', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-qwen35-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: getPreset('tiny-qwen35moe').config, fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const v = (k: string) => kv.get(`qwen35moe.${k}`)?.value;
      expect(kv.get('general.architecture')!.value).toBe('qwen35moe');
      expect(v('rope.dimension_count')).toBe(16);
      expect(kv.get('qwen35moe.rope.dimension_sections')!.elemType).toBe(GgufType.INT32);
      expect(v('rope.dimension_sections')).toEqual([3, 3, 2, 0]);
      expect([v('attention.key_length'), v('attention.value_length')]).toEqual([64, 64]);
      expect([v('ssm.conv_kernel'), v('ssm.state_size'), v('ssm.group_count'), v('ssm.time_step_rank'), v('ssm.inner_size')]).toEqual([4, 64, 2, 4, 256]);
      expect(v('full_attention_interval')).toBe(4);
      expect([v('expert_feed_forward_length'), v('expert_shared_feed_forward_length')]).toEqual([128, 128]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('ssm_a is negative (-exp(A_log)); conv and 1-D tensors stay F32, the linears quantize', () => {
    const { config } = getPreset('tiny-qwen35moe');
    for (let i = 0; i < 3; i++) expect(Math.max(...generateTensorF32(config, 1, `blk.${i}.ssm_a`))).toBeLessThan(0);
    for (const ft of ['Q8_0', 'Q4_K_M'] as const) {
      const t = new Map(planModel(config, ft).tensors.map((x) => [x.name, x.type]));
      for (const n of ['ssm_conv1d.weight', 'ssm_dt.bias', 'ssm_a', 'ssm_norm.weight', 'post_attention_norm.weight']) expect([n, t.get(`blk.0.${n}`)]).toEqual([n, GgmlType.F32]);
      for (const n of ['attn_qkv.weight', 'attn_gate.weight', 'ssm_beta.weight', 'ssm_alpha.weight', 'ssm_out.weight']) expect([n, t.get(`blk.0.${n}`)]).not.toEqual([n, GgmlType.F32]);
    }
    // Q4_K_M: llama-quant counts attn_qkv with attn_v (use_more_bits over the 4 of them).
    const q = new Map(planModel(config, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect(['blk.0.attn_qkv.weight', 'blk.1.attn_qkv.weight', 'blk.2.attn_qkv.weight', 'blk.3.attn_v.weight'].map((n) => q.get(n))).toEqual([GgmlType.Q4_K, GgmlType.Q4_K, GgmlType.Q6_K, GgmlType.Q6_K]);
  });

  it('rejects inconsistent shapes', () => {
    const c = getPreset('tiny-qwen35moe').config;
    expect(() => planModel({ ...c, ropeSections: [4, 4, 4, 0] } as typeof c, 'F32')).toThrow(/ropeDims \/ 2/);
    expect(() => planModel({ ...c, linearAttn: { kHeads: 3, vHeads: 4, headDim: 64, convKernel: 4 } } as typeof c, 'F32')).toThrow(/multiple/);
    expect(() => planModel({ ...c, nExperts: 0, nExpertsUsed: 0 }, 'F32')).toThrow(/experts/);
    expect(() => planModel({ ...getPreset('tiny-qwen35').config, nExperts: 16, nExpertsUsed: 4 }, 'F32')).toThrow(/dense/);
    expect(getArch('qwen35').ggufArch).toBe('qwen35');
  });
});
