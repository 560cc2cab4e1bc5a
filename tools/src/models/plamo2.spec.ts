// plamo2: the tensors and keys conversion/plamo.py Plamo2Model writes and llama.cpp's loader
// (src/models/plamo2.cpp) takes, the types quantized files give them (src/llama-quant.cpp), and the
// refusals of configurations llama.cpp cannot run.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { getArch } from './architectures';
import { isPlamo2Mamba, type Plamo2Config } from './architectures/plamo2';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const config = (over: Partial<Plamo2Config> = {}) => ({ ...getPreset('tiny-plamo2').config, ...over }) as Plamo2Config;

const MAMBA = ['attn_norm.weight', 'ssm_in.weight', 'ssm_conv1d.weight', 'ssm_x.weight', 'ssm_dt.weight', 'ssm_dt.bias', 'ssm_a', 'ssm_d', 'ssm_out.weight', 'ssm_dt_norm', 'ssm_b_norm', 'ssm_c_norm'];
const ATTN = ['attn_norm.weight', 'attn_qkv.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'attn_output.weight'];
const FFN = ['post_attention_norm', 'ffn_norm.weight', 'ffn_down.weight', 'ffn_up.weight', 'post_ffw_norm'];

describe('plamo2 (tiny-plamo2)', () => {
  it("blocks Mamba, attention, Mamba, attention in llama.cpp's load order, with its shapes and bare norm names", () => {
    const plan = planModel(config(), 'F32').tensors;
    const block = (i: number) => plan.filter((t) => t.layer === i).map((t) => t.name.slice(`blk.${i}.`.length));
    expect(plan.filter((t) => t.layer === undefined).map((t) => [t.name, t.shape])).toEqual([
      ['token_embd.weight', [256, 1024]],
      ['output_norm.weight', [256]],
      ['output.weight', [256, 1024]],
    ]);
    for (const i of [0, 2]) expect(block(i)).toEqual([...MAMBA, ...FFN]);
    for (const i of [1, 3]) expect(block(i)).toEqual([...ATTN, ...FFN]);
    const shape = new Map(plan.map((t) => [t.name, t.shape]));
    // d_inner 8 heads x 64 = 512; dt max(64, 256 / 16) = 64; state 16.
    expect(shape.get('blk.0.ssm_in.weight')).toEqual([256, 1024]);
    expect(shape.get('blk.0.ssm_conv1d.weight')).toEqual([4, 512]);
    expect(shape.get('blk.0.ssm_x.weight')).toEqual([512, 64 + 32]);
    expect(shape.get('blk.0.ssm_dt.weight')).toEqual([64, 8]);
    for (const n of ['ssm_dt.bias', 'ssm_a', 'ssm_d']) expect(shape.get(`blk.0.${n}`)).toEqual([8]);
    expect(shape.get('blk.0.ssm_dt_norm')).toEqual([64]);
    expect(shape.get('blk.0.ssm_b_norm')).toEqual([16]);
    expect(shape.get('blk.1.attn_qkv.weight')).toEqual([256, 256 + 2 * 128]);
    expect(shape.get('blk.1.attn_q_norm.weight')).toEqual([64, 4]);
    expect(shape.get('blk.1.attn_k_norm.weight')).toEqual([64, 2]);
    expect(shape.get('blk.1.ffn_up.weight')).toEqual([256, 1024]);
    expect(shape.get('blk.1.ffn_down.weight')).toEqual([512, 256]);
  });

  it("writes the converter's keys: per-block head counts (0 for Mamba), key/value length, ssm.* with group_count 0, no rope.dimension_count", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-plamo2-'));
    try {
      const out = path.join(dir, 'p.gguf');
      writeModel({ config: config(), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const get = (k: string) => kv.get(`plamo2.${k}`);
      expect(kv.get('general.architecture')!.value).toBe('plamo2');
      expect(get('attention.head_count')!.value).toEqual([0, 4, 0, 4]);
      expect(get('attention.head_count_kv')!.value).toEqual([0, 2, 0, 2]);
      expect(get('attention.head_count_kv')!.elemType).toBe(GgufType.INT32);
      expect([get('attention.key_length')!.value, get('attention.value_length')!.value]).toEqual([64, 64]);
      expect(['state_size', 'conv_kernel', 'time_step_rank', 'inner_size', 'group_count'].map((k) => get(`ssm.${k}`)!.value)).toEqual([16, 4, 8, 512, 0]);
      expect(get('rope.dimension_count')).toBeUndefined();
      expect(get('rope.freq_base')!.value).toBe(10000);
      // _set_vocab_plamo: model plamo2, pre default, <|plamo:op|> the EOT, add_space_prefix false, no add_bos_token.
      expect(['model', 'pre', 'eot_token_id', 'add_space_prefix'].map((k) => kv.get(`tokenizer.ggml.${k}`)?.value)).toEqual(['plamo2', 'default', 4, false]);
      expect(kv.has('tokenizer.ggml.add_bos_token')).toBe(false);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('quantized: the projections quantize; the convolution, A, D, biases and norms (2-D q/k norms too) stay F32', () => {
    const types = new Map(planModel(config(), 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
    for (const n of ['blk.0.ssm_in.weight', 'blk.0.ssm_x.weight', 'blk.0.ssm_out.weight', 'blk.1.attn_qkv.weight', 'blk.1.ffn_up.weight']) expect(types.get(n)).not.toBe(GgmlType.F32);
    for (const n of ['blk.0.ssm_conv1d.weight', 'blk.0.ssm_a', 'blk.0.ssm_d', 'blk.0.ssm_dt.bias', 'blk.0.ssm_dt_norm', 'blk.1.attn_q_norm.weight', 'blk.1.post_attention_norm']) expect(types.get(n)).toBe(GgmlType.F32);
  });

  it("HF's is_mamba: mamba_step 2 makes the even blocks Mamba; a layout without both kinds is refused (llama.cpp's hybrid memory needs both)", () => {
    expect([0, 1, 2, 3, 4].map((i) => isPlamo2Mamba(config({ nLayers: 5 }), i))).toEqual([true, false, true, false, true]);
    expect([0, 1, 2, 3].map((i) => isPlamo2Mamba(config({ mambaStep: 4 }), i))).toEqual([true, true, false, true]);
    expect(() => planModel(config({ nLayers: 1 }), 'F32')).toThrow(/leave no Mamba block/);
    expect(() => planModel(config({ mambaStep: 1 }), 'F32')).toThrow(/leave no Mamba block/);
    expect(() => planModel(config({ ssm: { convKernel: 1, stateSize: 16, nHeads: 8 } }), 'F32')).toThrow(/convKernel/);
    expect(() => planModel(config({ nExperts: 4, nExpertsUsed: 2 }), 'F32')).toThrow(/no experts/);
    expect(getArch('plamo2').ggufArch).toBe('plamo2');
    expect(DEFAULT_PRESET_FOR_ARCH.plamo2).toBe('tiny-plamo2');
  });
});
