// kimi-linear: the tensor list and keys llama.cpp's loader (src/models/kimi-linear.cpp) takes, as
// conversion/kimi_linear.py writes them, in both layouts; the types quantized files give the KDA
// tensors; the configs the writer refuses.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { KimiLinearConfig } from './architectures/kimi-linear';
import { getArch } from './architectures';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const shapes = (preset: string) => new Map(planModel(getPreset(preset).config, 'F32').tensors.map((t) => [t.name, t.shape]));
const config = () => getPreset('tiny-kimi-linear').config as KimiLinearConfig;

describe('kimi-linear', () => {
  it('KDA blocks 0 and 2, MLA blocks 1 and 3 (split attn_k_b/attn_v_b), a dense block 0, experts with a selection bias and a shared expert', () => {
    const s = shapes('tiny-kimi-linear');
    for (const i of [0, 2]) {
      for (const x of ['q', 'k', 'v']) {
        expect(s.get(`blk.${i}.ssm_conv1d_${x}.weight`)).toEqual([4, 1, 256, 1]);
        expect(s.get(`blk.${i}.attn_${x}.weight`)).toEqual([256, 256]);
      }
      expect(s.get(`blk.${i}.ssm_f_a.weight`)).toEqual([256, 64]);
      expect(s.get(`blk.${i}.ssm_f_b.weight`)).toEqual([64, 256]);
      expect(s.get(`blk.${i}.ssm_g_a.weight`)).toEqual([256, 64]);
      expect(s.get(`blk.${i}.ssm_g_b.weight`)).toEqual([64, 256]);
      expect(s.get(`blk.${i}.ssm_beta.weight`)).toEqual([256, 4]);
      expect(s.get(`blk.${i}.ssm_a`)).toEqual([1, 4, 1, 1]);
      expect(s.get(`blk.${i}.ssm_dt.bias`)).toEqual([256]);
      expect(s.get(`blk.${i}.ssm_norm.weight`)).toEqual([64]);
      expect(s.get(`blk.${i}.attn_output.weight`)).toEqual([256, 256]);
      expect(s.has(`blk.${i}.attn_kv_a_mqa.weight`)).toBe(false);
    }
    for (const i of [1, 3]) {
      expect(s.get(`blk.${i}.attn_q.weight`)).toEqual([256, 4 * 96]);
      expect(s.get(`blk.${i}.attn_kv_a_mqa.weight`)).toEqual([256, 128 + 32]);
      expect(s.get(`blk.${i}.attn_kv_a_norm.weight`)).toEqual([128]);
      expect(s.get(`blk.${i}.attn_k_b.weight`)).toEqual([64, 128, 4]);
      expect(s.get(`blk.${i}.attn_v_b.weight`)).toEqual([128, 64, 4]);
      expect(s.get(`blk.${i}.attn_output.weight`)).toEqual([256, 256]);
      expect(s.has(`blk.${i}.attn_kv_b.weight`)).toBe(false);
      expect(s.has(`blk.${i}.ssm_a`)).toBe(false);
    }
    expect(s.get('blk.0.ffn_gate.weight')).toEqual([256, 512]);
    expect(s.has('blk.0.ffn_gate_inp.weight')).toBe(false);
    for (const i of [1, 2, 3]) {
      expect(s.get(`blk.${i}.ffn_gate_inp.weight`)).toEqual([256, 16]);
      expect(s.get(`blk.${i}.ffn_down_exps.weight`)).toEqual([128, 256, 16]);
      expect(s.get(`blk.${i}.exp_probs_b.bias`)).toEqual([16]);
      expect(s.get(`blk.${i}.ffn_up_shexp.weight`)).toEqual([256, 128]);
    }
    expect(s.get('output.weight')).toEqual([256, 1024]);
    // 3 globals; per block attn_norm + ffn_norm; KDA 15, MLA 6; dense 3 or routed 4 + bias + shared 3.
    expect(s.size).toBe(3 + 4 * 2 + 2 * 15 + 2 * 6 + 3 + 3 * 8);
  });

  it('-fused: a fused attn_qkv, 3-D convolution taps and a 2-D ssm_a, MLA split as tiny-kimi-linear', () => {
    const s = shapes('tiny-kimi-linear-fused');
    expect(s.get('blk.0.attn_qkv.weight')).toEqual([256, 3 * 256]);
    expect(s.has('blk.0.attn_q.weight')).toBe(false);
    expect(s.get('blk.0.ssm_conv1d_k.weight')).toEqual([4, 1, 256]);
    expect(s.get('blk.2.ssm_a')).toEqual([1, 4]);
    expect(s.get('blk.1.attn_k_b.weight')).toEqual([64, 128, 4]);
    expect(s.has('blk.1.attn_kv_b.weight')).toBe(false);
  });

  it('-kvb: one attn_kv_b per MLA block, the fold of tiny-kimi-linear’s attn_k_b/attn_v_b; every other tensor as tiny-kimi-linear', () => {
    const s = shapes('tiny-kimi-linear-kvb');
    const split = shapes('tiny-kimi-linear');
    expect(s.get('blk.1.attn_kv_b.weight')).toEqual([128, 4 * (64 + 64)]);
    expect(s.has('blk.1.attn_k_b.weight')).toBe(false);
    expect(s.has('blk.1.attn_v_b.weight')).toBe(false);
    const kvbCfg = getPreset('tiny-kimi-linear-kvb').config;
    const others = [...s.keys()].filter((n) => !n.endsWith('attn_kv_b.weight'));
    expect(others.sort()).toEqual([...split.keys()].filter((n) => !/attn_[kv]_b\.weight$/.test(n)).sort());
    // (Byte comparisons: jest's toEqual walks a typed array value by value, seconds per embedding.)
    const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    const differ = others.filter((n) => !bytes(generateTensorF32(kvbCfg, 7, n)).equals(bytes(generateTensorF32(config(), 7, n))));
    expect(differ).toEqual([]);
    // kv_b_proj (HF [n_head x (nope + v), L]) = per head [k_b (ggml [nope, L, H], stored transposed); v_b (ggml [L, v, H])],
    // what conversion/kimi_linear.py views and splits.
    const [L, H, n, v] = [128, 4, 64, 64];
    for (const i of [1, 3]) {
      const kvb = generateTensorF32(kvbCfg, 7, `blk.${i}.attn_kv_b.weight`);
      const kb = generateTensorF32(config(), 7, `blk.${i}.attn_k_b.weight`);
      const vb = generateTensorF32(config(), 7, `blk.${i}.attn_v_b.weight`);
      const want = new Float32Array(kvb.length);
      for (let h = 0; h < H; h++)
        for (let l = 0; l < L; l++) {
          for (let j = 0; j < n; j++) want[(h * (n + v) + j) * L + l] = kb[h * L * n + l * n + j];
          for (let j = 0; j < v; j++) want[(h * (n + v) + n + j) * L + l] = vb[h * v * L + j * L + l];
        }
      expect(kvb.length).toBe(want.length);
      expect(bytes(kvb).equals(bytes(want))).toBe(true);
    }
  });

  it('writes the converter’s keys: per-block KV heads, kda.head_dim, the MLA lengths (0 without the MLA cache)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-kimi-linear-'));
    try {
      for (const [preset, kvHeads, lengths] of [
        ['tiny-kimi-linear', [0, 1, 0, 1], [160, 128, 96, 64]],
        ['tiny-kimi-linear-fused', [0, 1, 0, 1], [160, 128, 96, 64]],
        ['tiny-kimi-linear-kvb', [0, 4, 0, 4], [96, 64, 0, 0]],
      ] as const) {
        const out = path.join(dir, `${preset}.gguf`);
        writeModel({ config: getPreset(preset).config, fileType: 'F32', seed: 1, out });
        const kv = readGgufHeader(out).kv;
        const v = (k: string) => kv.get(`kimi-linear.${k}`)?.value;
        expect(kv.get('general.architecture')!.value).toBe('kimi-linear');
        expect(kv.get('kimi-linear.attention.head_count_kv')!.elemType).toBe(GgufType.INT32);
        expect(v('attention.head_count_kv')).toEqual(kvHeads);
        expect([v('attention.key_length'), v('attention.value_length'), v('attention.key_length_mla'), v('attention.value_length_mla')]).toEqual(lengths);
        expect([v('kda.head_dim'), v('ssm.conv_kernel'), v('attention.kv_lora_rank'), v('rope.dimension_count')]).toEqual([64, 4, 128, 32]);
        expect([v('expert_feed_forward_length'), v('expert_shared_count'), v('leading_dense_block_count'), v('expert_gating_func')]).toEqual([128, 1, 1, 2]);
        expect(v('expert_weights_scale')).toBeCloseTo(2.446, 5);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('ssm_a is negative (-exp(A_log)); convolutions and 1-D tensors stay F32, the projections quantize', () => {
    const c = config();
    for (const i of [0, 2]) expect(Math.max(...generateTensorF32(c, 1, `blk.${i}.ssm_a`))).toBeLessThan(0);
    for (const ft of ['Q8_0', 'Q4_K_M'] as const) {
      const t = new Map(planModel(c, ft).tensors.map((x) => [x.name, x.type]));
      for (const n of ['ssm_conv1d_q.weight', 'ssm_conv1d_v.weight', 'ssm_dt.bias', 'ssm_a', 'ssm_norm.weight']) expect([n, t.get(`blk.0.${n}`)]).toEqual([n, GgmlType.F32]);
      for (const n of ['attn_q.weight', 'ssm_f_a.weight', 'ssm_beta.weight', 'ssm_g_b.weight', 'attn_output.weight']) expect(t.get(`blk.0.${n}`)).not.toBe(GgmlType.F32);
    }
  });

  it('refuses configs llama.cpp cannot run', () => {
    const a = getArch('kimi-linear');
    expect(() => a.normalize({ ...config(), attnLayers: [] } as KimiLinearConfig)).toThrow(/needs both KDA and MLA blocks/);
    expect(() => a.normalize({ ...config(), attnLayers: [0, 1, 2, 3] } as KimiLinearConfig)).toThrow(/needs both KDA and MLA blocks/);
    expect(() => a.normalize({ ...config(), nShared: 0 } as KimiLinearConfig)).toThrow(/shared expert/);
    expect(() => a.normalize({ ...config(), nExperts: 0 } as KimiLinearConfig)).toThrow(/experts/);
    expect(() => a.normalize({ ...config(), kda: { headDim: 64, convKernel: 1 } } as KimiLinearConfig)).toThrow(/convKernel/);
    expect(DEFAULT_PRESET_FOR_ARCH['kimi-linear']).toBe('tiny-kimi-linear');
  });
});
