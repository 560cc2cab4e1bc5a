// bailingmoe3: the tensor list and keys llama.cpp's loader (src/models/bailingmoe3.cpp) takes, as
// conversion/bailingmoe3.py writes them (the NextN block included); the block pattern of the
// converter's is_full_attention; the types quantized files give the KDA tensors; the configs the
// writer refuses.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { isMla, type BailingMoe3Config } from './architectures/bailingmoe3';
import { getArch } from './architectures';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const shapes = (preset: string) => new Map(planModel(getPreset(preset).config, 'F32').tensors.map((t) => [t.name, t.shape]));
const config = () => getPreset('tiny-bailingmoe3').config as BailingMoe3Config;

describe('bailingmoe3', () => {
  it('KDA blocks 0 and 2 (full-width gates), MLA blocks 1 and 3 with q LoRA and a head-wise gate, the NextN block 4, a dense block 0, a shared expert of 192', () => {
    const s = shapes('tiny-bailingmoe3');
    for (const i of [0, 2]) {
      for (const x of ['q', 'k', 'v']) {
        expect(s.get(`blk.${i}.ssm_conv1d_${x}.weight`)).toEqual([4, 1, 256, 1]);
        expect(s.get(`blk.${i}.attn_${x}.weight`)).toEqual([256, 256]);
      }
      expect(s.get(`blk.${i}.ssm_f_a.weight`)).toEqual([256, 256]);
      expect(s.get(`blk.${i}.ssm_g_a.weight`)).toEqual([256, 256]);
      expect(s.has(`blk.${i}.ssm_f_b.weight`) || s.has(`blk.${i}.ssm_g_b.weight`)).toBe(false);
      expect(s.get(`blk.${i}.ssm_beta.weight`)).toEqual([256, 4]);
      expect(s.get(`blk.${i}.ssm_a`)).toEqual([1, 4]);
      expect(s.get(`blk.${i}.ssm_dt.bias`)).toEqual([256]);
      expect(s.get(`blk.${i}.ssm_norm.weight`)).toEqual([64]);
      expect(s.get(`blk.${i}.attn_output.weight`)).toEqual([256, 256]);
      expect(s.has(`blk.${i}.attn_gate.weight`)).toBe(false);
    }
    for (const i of [1, 3, 4]) {
      expect(s.get(`blk.${i}.attn_q_a.weight`)).toEqual([256, 128]);
      expect(s.get(`blk.${i}.attn_q_a_norm.weight`)).toEqual([128]);
      expect(s.get(`blk.${i}.attn_q_b.weight`)).toEqual([128, 4 * 96]);
      expect(s.has(`blk.${i}.attn_q.weight`)).toBe(false);
      expect(s.get(`blk.${i}.attn_kv_a_mqa.weight`)).toEqual([256, 128 + 32]);
      expect(s.get(`blk.${i}.attn_k_b.weight`)).toEqual([64, 128, 4]);
      expect(s.get(`blk.${i}.attn_v_b.weight`)).toEqual([128, 64, 4]);
      expect(s.get(`blk.${i}.attn_gate.weight`)).toEqual([256, 4]);
      expect(s.get(`blk.${i}.attn_output.weight`)).toEqual([256, 256]);
    }
    expect(s.get('blk.0.ffn_gate.weight')).toEqual([256, 512]);
    expect(s.has('blk.0.ffn_gate_inp.weight')).toBe(false);
    for (const i of [1, 2, 3, 4]) {
      expect(s.get(`blk.${i}.ffn_gate_inp.weight`)).toEqual([256, 16]);
      expect(s.get(`blk.${i}.ffn_down_exps.weight`)).toEqual([128, 256, 16]);
      expect(s.get(`blk.${i}.exp_probs_b.bias`)).toEqual([16]);
      expect(s.get(`blk.${i}.ffn_up_shexp.weight`)).toEqual([256, 192]);
      expect(s.get(`blk.${i}.ffn_down_shexp.weight`)).toEqual([192, 256]);
    }
    // The NextN block's own tensors (layer_output_norm: its head norm).
    expect(s.get('blk.4.nextn.eh_proj.weight')).toEqual([512, 256]);
    for (const n of ['nextn.enorm', 'nextn.hnorm', 'layer_output_norm']) expect(s.get(`blk.4.${n}.weight`)).toEqual([256]);
    expect(s.get('output.weight')).toEqual([256, 1024]);
    // 3 globals; per block attn_norm + ffn_norm; KDA 13, MLA 9; dense 3 or routed 4 + bias + shared 3; NextN 4.
    expect(s.size).toBe(3 + 5 * 2 + 2 * 13 + 3 * 9 + 3 + 4 * 8 + 4);
  });

  it('the converter’s is_full_attention: every layer_group_size-th block, the blocks past the last whole group and the NextN block', () => {
    const c = config();
    expect([0, 1, 2, 3, 4].map((i) => isMla(c, i))).toEqual([false, true, false, true, true]);
    const t = getPreset('tiny-bailingmoe3-tied').config as BailingMoe3Config;
    expect([0, 1, 2, 3, 4].map((i) => isMla(t, i))).toEqual([false, false, false, true, true]);
    expect([0, 1, 2, 3, 4, 5, 6].map((i) => isMla({ ...t, nLayers: 6, groupSize: 3 }, i))).toEqual([false, false, true, false, false, true, true]);
    const s = shapes('tiny-bailingmoe3-tied');
    expect(s.get('blk.3.attn_q.weight')).toEqual([256, 4 * 96]);
    expect(s.has('blk.3.attn_q_a.weight')).toBe(false);
    expect(s.get('blk.2.ffn_up_shexp.weight')).toEqual([256, 256]);
    expect(s.has('output.weight') || s.has('blk.5.attn_norm.weight')).toBe(false);
  });

  it('writes the converter’s keys: per-block KV heads, the KDA gate, the MLA lengths, the shared width, clamps per block, nextn_predict_layers', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-bailingmoe3-'));
    try {
      const out = path.join(dir, 'b.gguf');
      writeModel({ config: config(), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const v = (k: string) => kv.get(`bailingmoe3.${k}`)?.value;
      expect(kv.get('general.architecture')!.value).toBe('bailingmoe3');
      expect(kv.get('bailingmoe3.attention.head_count_kv')!.elemType).toBe(GgufType.INT32);
      expect([v('block_count'), v('nextn_predict_layers'), v('attention.head_count_kv')]).toEqual([5, 1, [0, 1, 0, 1, 1]]);
      expect([v('attention.key_length'), v('attention.value_length'), v('attention.key_length_mla'), v('attention.value_length_mla')]).toEqual([160, 64, 96, 64]);
      expect([v('kda.head_dim'), v('ssm.conv_kernel'), v('kda.safe_gate'), v('kda.gate_lower_bound')]).toEqual([64, 4, true, -5]);
      expect(kv.get('bailingmoe3.kda.safe_gate')!.type).toBe(GgufType.BOOL);
      expect(kv.get('bailingmoe3.kda.gate_lower_bound')!.type).toBe(GgufType.FLOAT32);
      expect([v('attention.q_lora_rank'), v('attention.kv_lora_rank'), v('rope.dimension_count')]).toEqual([128, 128, 32]);
      expect([v('expert_feed_forward_length'), v('expert_shared_feed_forward_length'), v('expert_shared_count'), v('leading_dense_block_count'), v('expert_gating_func'), v('expert_weights_norm')]).toEqual([128, 192, 1, 1, 2, true]);
      expect(v('expert_weights_scale')).toBeCloseTo(2.5, 6);
      expect(kv.get('bailingmoe3.swiglu_clamp_exp')!.elemType).toBe(GgufType.FLOAT32);
      expect([v('swiglu_clamp_exp'), v('swiglu_clamp_shexp')]).toEqual([[0, 1, 1.5, 1, 1.25], [0, 2, 1, 1.5, 1]]);
      const tied = path.join(dir, 't.gguf');
      writeModel({ config: getPreset('tiny-bailingmoe3-tied').config, fileType: 'F32', seed: 1, out: tied });
      const kt = readGgufHeader(tied).kv;
      for (const k of ['attention.q_lora_rank', 'expert_shared_feed_forward_length', 'swiglu_clamp_exp', 'swiglu_clamp_shexp', 'nextn_predict_layers']) expect([k, kt.has(`bailingmoe3.${k}`)]).toEqual([k, false]);
      expect(kt.get('bailingmoe3.attention.head_count_kv')!.value).toEqual([0, 0, 0, 1, 1]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('ssm_a is positive (exp(A_log)); convolutions and 1-D tensors stay F32, the projections quantize', () => {
    const c = config();
    for (const i of [0, 2]) expect(Math.min(...generateTensorF32(c, 1, `blk.${i}.ssm_a`))).toBeGreaterThan(0);
    for (const ft of ['Q8_0', 'Q4_K_M'] as const) {
      const t = new Map(planModel(c, ft).tensors.map((x) => [x.name, x.type]));
      for (const n of ['ssm_conv1d_q.weight', 'ssm_conv1d_v.weight', 'ssm_dt.bias', 'ssm_a', 'ssm_norm.weight', 'exp_probs_b.bias']) expect([n, t.get(`blk.2.${n}`)]).toEqual([n, GgmlType.F32]);
      for (const n of ['attn_q.weight', 'ssm_f_a.weight', 'ssm_g_a.weight', 'attn_output.weight']) expect(t.get(`blk.0.${n}`)).not.toBe(GgmlType.F32);
      expect(t.get('blk.1.attn_gate.weight')).not.toBe(GgmlType.F32);
    }
  });

  it('refuses configs llama.cpp cannot run', () => {
    const a = getArch('bailingmoe3');
    expect(() => a.normalize({ ...config(), groupSize: 1 } as BailingMoe3Config)).toThrow(/needs both KDA and MLA blocks/);
    expect(() => a.normalize({ ...config(), kda: { ...config().kda, lowerBound: 0 } } as BailingMoe3Config)).toThrow(/lowerBound must be negative/);
    expect(() => a.normalize({ ...config(), nShared: 0 } as BailingMoe3Config)).toThrow(/shared expert/);
    expect(() => a.normalize({ ...config(), nextn: 2 } as BailingMoe3Config)).toThrow(/one NextN block/);
    expect(() => a.normalize({ ...config(), swigluLimitShared: [1, 1, 1, 1, 1] } as BailingMoe3Config)).toThrow(/swigluLimitShared\[0\] must be 0 on dense block 0/);
    expect(() => a.normalize({ ...config(), mla: { ...config().mla, qkRope: 31 } } as BailingMoe3Config)).toThrow(/even qkRope/);
    expect(DEFAULT_PRESET_FOR_ARCH.bailingmoe3).toBe('tiny-bailingmoe3');
  });
});
