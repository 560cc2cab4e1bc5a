// kimi-k3: the tensor list and keys llama.cpp's loader (src/models/kimi-k3.cpp) takes, as
// conversion/kimi_k3.py writes them (with and without residual attention, latent experts, the gate
// lower bound, q LoRA and the MLA gate); the types quantized files give them; the configs the writer
// refuses.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { KimiK3Config } from './architectures/kimi-k3';
import { getArch } from './architectures';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const shapes = (preset: string) => new Map(planModel(getPreset(preset).config, 'F32').tensors.map((t) => [t.name, t.shape]));
const config = () => getPreset('tiny-kimi-k3').config as KimiK3Config;

describe('kimi-k3', () => {
  it('KDA blocks 0, 1, 3 (full-rank ssm_g, 1-D ssm_a), MLA blocks 2, 4 (q LoRA, attn_gate), residual scores, latent experts', () => {
    const s = shapes('tiny-kimi-k3');
    for (const i of [0, 1, 3]) {
      expect(s.get(`blk.${i}.ssm_conv1d_q.weight`)).toEqual([4, 1, 256, 1]);
      expect(s.get(`blk.${i}.ssm_g.weight`)).toEqual([256, 256]);
      expect(s.get(`blk.${i}.ssm_a`)).toEqual([4]);
      expect(s.get(`blk.${i}.ssm_dt.bias`)).toEqual([256]);
      expect(s.has(`blk.${i}.ssm_g_a.weight`)).toBe(false);
      expect(s.has(`blk.${i}.attn_gate.weight`)).toBe(false);
    }
    for (const i of [2, 4]) {
      expect(s.get(`blk.${i}.attn_q_a.weight`)).toEqual([256, 64]);
      expect(s.get(`blk.${i}.attn_q_a_norm.weight`)).toEqual([64]);
      expect(s.get(`blk.${i}.attn_q_b.weight`)).toEqual([64, 4 * 96]);
      expect(s.has(`blk.${i}.attn_q.weight`)).toBe(false);
      expect(s.get(`blk.${i}.attn_k_b.weight`)).toEqual([64, 128, 4]);
      expect(s.get(`blk.${i}.attn_v_b.weight`)).toEqual([128, 64, 4]);
      expect(s.get(`blk.${i}.attn_gate.weight`)).toEqual([256, 4 * 64]);
      expect(s.has(`blk.${i}.ssm_g.weight`)).toBe(false);
    }
    expect(s.get('output_res_score.weight')).toEqual([256]);
    for (let i = 0; i < 5; i++) for (const n of ['attn_res_score', 'ffn_res_score']) expect(s.get(`blk.${i}.${n}.weight`)).toEqual([256]);
    expect(s.get('blk.0.ffn_gate.weight')).toEqual([256, 512]);
    expect(s.has('blk.0.ffn_gate_inp.weight')).toBe(false);
    for (const i of [1, 2, 3, 4]) {
      expect(s.get(`blk.${i}.ffn_gate_inp.weight`)).toEqual([256, 16]);
      expect(s.get(`blk.${i}.ffn_gate_exps.weight`)).toEqual([128, 128, 16]);
      expect(s.get(`blk.${i}.ffn_down_exps.weight`)).toEqual([128, 128, 16]);
      expect(s.get(`blk.${i}.ffn_routed_down.weight`)).toEqual([256, 128]);
      expect(s.get(`blk.${i}.ffn_routed_up.weight`)).toEqual([128, 256]);
      expect(s.get(`blk.${i}.ffn_routed_norm.weight`)).toEqual([128]);
      expect(s.get(`blk.${i}.ffn_up_shexp.weight`)).toEqual([256, 128]);
    }
    // 4 globals; per block 2 norms + 2 scores; KDA 14, MLA 9; dense 3 or routed 5 + latent 3 + shared 3.
    expect(s.size).toBe(4 + 5 * 4 + 3 * 14 + 2 * 9 + 3 + 4 * 11);
  });

  it('-plain: no residual scores, experts at n_embd without routed projections, attn_q, no attn_gate', () => {
    const s = shapes('tiny-kimi-k3-plain');
    expect([...s.keys()].filter((n) => n.includes('res_score') || n.includes('ffn_routed') || n.includes('attn_gate') || n.includes('attn_q_a'))).toEqual([]);
    expect(s.get('blk.1.attn_q.weight')).toEqual([256, 4 * 96]);
    expect(s.get('blk.1.ffn_gate_exps.weight')).toEqual([256, 128, 16]);
    expect(s.get('blk.1.ffn_down_exps.weight')).toEqual([128, 256, 16]);
    const r = shapes('tiny-kimi-k3-res3');
    expect(r.has('blk.1.ffn_routed_norm.weight')).toBe(false);
    expect(r.has('blk.1.ffn_up_shexp.weight')).toBe(false);
    expect(r.get('blk.6.attn_res_score.weight')).toEqual([256]);
  });

  it('writes the converter’s keys and types', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-kimi-k3-'));
    try {
      for (const preset of ['tiny-kimi-k3', 'tiny-kimi-k3-plain'] as const) {
        const out = path.join(dir, `${preset}.gguf`);
        writeModel({ config: getPreset(preset).config, fileType: 'F32', seed: 1, out });
        const kv = readGgufHeader(out).kv;
        const e = (k: string) => kv.get(`kimi-k3.${k}`);
        const v = (k: string) => e(k)?.value;
        expect(kv.get('general.architecture')!.value).toBe('kimi-k3');
        expect(e('attention.head_count_kv')!.elemType).toBe(GgufType.INT32);
        expect([e('attn_res.block_size')!.type, e('activation.situ_beta')!.type, e('activation.situ_linear_beta')!.type, e('expert_weights_norm')!.type]).toEqual([GgufType.UINT32, GgufType.FLOAT32, GgufType.FLOAT32, GgufType.BOOL]);
        expect([v('attention.key_length'), v('attention.value_length'), v('attention.key_length_mla'), v('attention.value_length_mla')]).toEqual([160, 128, 96, 64]);
        expect([v('kda.head_dim'), v('ssm.conv_kernel'), v('attention.kv_lora_rank'), v('rope.dimension_count'), v('expert_gating_func')]).toEqual([64, 4, 128, 32, 2]);
        if (preset === 'tiny-kimi-k3') {
          expect(v('attention.head_count_kv')).toEqual([0, 0, 1, 0, 1]);
          expect([v('attn_res.block_size'), v('activation.situ_beta'), v('activation.situ_linear_beta'), v('expert_latent_length'), v('kda.gate_lower_bound'), v('attention.q_lora_rank'), v('expert_weights_norm')]).toEqual([2, 2, 3, 128, -5, 64, true]);
          expect(e('expert_latent_length')!.type).toBe(GgufType.UINT32);
          expect(e('kda.gate_lower_bound')!.type).toBe(GgufType.FLOAT32);
        } else {
          expect(v('attention.head_count_kv')).toEqual([0, 1, 0, 1]);
          expect([v('attn_res.block_size'), v('activation.situ_linear_beta'), v('expert_weights_norm')]).toEqual([0, 0, false]);
          // (Optional in llama.cpp's loader: the converter writes them only when the model has them.)
          for (const k of ['expert_latent_length', 'kda.gate_lower_bound', 'attention.q_lora_rank']) expect(kv.has(`kimi-k3.${k}`)).toBe(false);
        }
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('ssm_a is negative; 1-D tensors (scores, norms, ssm_a) stay F32, the projections quantize', () => {
    const c = config();
    expect(Math.max(...generateTensorF32(c, 1, 'blk.0.ssm_a'))).toBeLessThan(0);
    for (const ft of ['Q8_0', 'Q4_K_M'] as const) {
      const t = new Map(planModel(c, ft).tensors.map((x) => [x.name, x.type]));
      for (const n of ['blk.0.ssm_a', 'blk.0.attn_res_score.weight', 'blk.1.ffn_res_score.weight', 'output_res_score.weight', 'blk.1.ffn_routed_norm.weight', 'blk.0.ssm_conv1d_k.weight']) expect([n, t.get(n)]).toEqual([n, GgmlType.F32]);
      for (const n of ['blk.0.ssm_g.weight', 'blk.2.attn_gate.weight', 'blk.1.ffn_routed_down.weight', 'blk.1.ffn_routed_up.weight', 'blk.2.attn_q_b.weight']) expect(t.get(n)).not.toBe(GgmlType.F32);
    }
  });

  it('refuses configs llama.cpp cannot run', () => {
    const a = getArch('kimi-k3');
    expect(() => a.normalize({ ...config(), attnLayers: [] } as KimiK3Config)).toThrow(/needs both KDA and MLA blocks/);
    expect(() => a.normalize({ ...config(), situBeta: 0 } as KimiK3Config)).toThrow(/situBeta must be positive/);
    expect(() => a.normalize({ ...config(), kda: { headDim: 64, convKernel: 4, lowerBound: 1 } } as KimiK3Config)).toThrow(/lowerBound must be negative/);
    expect(() => a.normalize({ ...config(), latent: 0 } as KimiK3Config)).toThrow(/ffn_routed_norm exists only with latent experts/);
    expect(() => a.normalize({ ...config(), resBlock: -1 } as KimiK3Config)).toThrow(/resBlock/);
    expect(DEFAULT_PRESET_FOR_ARCH['kimi-k3']).toBe('tiny-kimi-k3');
  });
});
