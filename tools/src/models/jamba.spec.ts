// jamba: the tensor list and keys llama.cpp's loader (src/models/jamba.cpp) takes, the types the
// quantized files give the Mamba-1 tensors (src/llama-quant.cpp) and the init that keeps the scan stable.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { getArch } from './architectures';
import type { JambaConfig } from './architectures/jamba';
import { fillTensorRange, generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const config = () => getPreset('tiny-jamba').config as JambaConfig;

const MAMBA = [
  'attn_norm.weight',
  'ssm_in.weight',
  'ssm_conv1d.weight',
  'ssm_conv1d.bias',
  'ssm_x.weight',
  'ssm_dt_norm.weight',
  'ssm_dt.weight',
  'ssm_dt.bias',
  'ssm_b_norm.weight',
  'ssm_c_norm.weight',
  'ssm_a',
  'ssm_d',
  'ssm_out.weight',
];
const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight'];
const DENSE = ['ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
const MOE = ['ffn_norm.weight', 'ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight'];

describe('jamba (tiny-jamba)', () => {
  it("blocks Mamba-1 + dense, Mamba-1 + experts, attention + dense, Mamba-1 + experts, in llama.cpp's load order and shapes", () => {
    const plan = planModel(config(), 'F32').tensors;
    const block = (i: number) => plan.filter((t) => t.layer === i).map((t) => t.name.slice(`blk.${i}.`.length));
    expect(plan.slice(0, 3).map((t) => [t.name, t.shape])).toEqual([
      ['token_embd.weight', [256, 1024]],
      ['output_norm.weight', [256]],
      ['output.weight', [256, 1024]],
    ]);
    expect([block(0), block(1), block(2), block(3)]).toEqual([
      [...MAMBA, ...DENSE],
      [...MAMBA, ...MOE],
      [...ATTN, ...DENSE],
      [...MAMBA, ...MOE],
    ]);
    expect(plan.length).toBe(3 + 3 * 13 + 5 + 2 * 4 + 2 * 5);
    const s = new Map(plan.map((t) => [t.name, t.shape]));
    // d_inner 512 = 2 x dim, d_state 16, dt_rank 32, 4 taps.
    expect(Object.fromEntries(MAMBA.map((n) => [n, s.get(`blk.1.${n}`)]))).toEqual({
      'attn_norm.weight': [256],
      'ssm_in.weight': [256, 1024],
      'ssm_conv1d.weight': [4, 512],
      'ssm_conv1d.bias': [512],
      'ssm_x.weight': [512, 32 + 2 * 16],
      'ssm_dt_norm.weight': [32],
      'ssm_dt.weight': [32, 512],
      'ssm_dt.bias': [512],
      'ssm_b_norm.weight': [16],
      'ssm_c_norm.weight': [16],
      ssm_a: [16, 512],
      ssm_d: [512],
      'ssm_out.weight': [512, 256],
    });
    expect([s.get('blk.2.attn_q.weight'), s.get('blk.2.attn_k.weight'), s.get('blk.2.attn_v.weight'), s.get('blk.2.attn_output.weight')]).toEqual([
      [256, 256],
      [256, 128],
      [256, 128],
      [256, 256],
    ]);
    // One n_ff (256) for the dense FFNs and the experts.
    expect([s.get('blk.0.ffn_gate.weight'), s.get('blk.2.ffn_down.weight')]).toEqual([
      [256, 256],
      [256, 256],
    ]);
    expect([s.get('blk.1.ffn_gate_inp.weight'), s.get('blk.3.ffn_gate_exps.weight'), s.get('blk.3.ffn_up_exps.weight'), s.get('blk.3.ffn_down_exps.weight')]).toEqual([
      [256, 16],
      [256, 256, 16],
      [256, 256, 16],
      [256, 256, 16],
    ]);
  });

  it('writes the keys conversion/jamba.py writes: per-block head_count_kv (INT32), one feed_forward_length, ssm.*, no rope or gating keys', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-jamba-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: config(), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      expect(kv.get('general.architecture')!.value).toBe('jamba');
      const keys = new Map([...kv].filter(([k]) => k.startsWith('jamba.')).map(([k, x]) => [k.slice('jamba.'.length), x]));
      const v = (k: string) => keys.get(k)?.value;
      expect([...keys.keys()].sort()).toEqual(
        [
          'vocab_size', 'context_length', 'embedding_length', 'block_count', 'feed_forward_length', 'attention.head_count', 'attention.head_count_kv',
          'attention.layer_norm_rms_epsilon', 'expert_count', 'expert_used_count', 'ssm.conv_kernel', 'ssm.inner_size', 'ssm.state_size', 'ssm.time_step_rank',
        ].sort(),
      );
      expect(v('attention.head_count_kv')).toEqual([0, 0, 2, 0]);
      expect(keys.get('attention.head_count_kv')!.elemType).toBe(GgufType.INT32);
      expect([v('block_count'), v('embedding_length'), v('feed_forward_length'), v('attention.head_count'), v('expert_count'), v('expert_used_count')]).toEqual([4, 256, 256, 4, 16, 2]);
      expect([v('ssm.conv_kernel'), v('ssm.inner_size'), v('ssm.state_size'), v('ssm.time_step_rank')]).toEqual([4, 512, 16, 32]);
      for (const k of ['feed_forward_length', 'ssm.inner_size', 'ssm.time_step_rank', 'expert_count']) expect([k, keys.get(k)!.type]).toEqual([k, GgufType.UINT32]);
      expect(v('attention.layer_norm_rms_epsilon')).toBeCloseTo(1e-6);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('keeps the convolution, ssm_a, ssm_d, norms, biases and routers F32; ssm_dt (rows of dt_rank 32) takes the fallbacks', () => {
    for (const ft of ['Q8_0', 'Q4_K_M'] as const) {
      const t = new Map(planModel(config(), ft).tensors.map((x) => [x.name, x.type]));
      const ty = (n: string) => [ft, n, t.get(n)];
      for (const n of ['ssm_conv1d.weight', 'ssm_conv1d.bias', 'ssm_dt_norm.weight', 'ssm_dt.bias', 'ssm_b_norm.weight', 'ssm_c_norm.weight', 'ssm_a', 'ssm_d', 'attn_norm.weight', 'ffn_norm.weight', 'ffn_gate_inp.weight']) {
        expect(ty(`blk.1.${n}`)).toEqual([ft, `blk.1.${n}`, GgmlType.F32]);
      }
      // llama-quant's tensor_type_fallback on rows of 32: Q4_K -> Q5_0 (Q8_0 fits).
      expect(ty('blk.1.ssm_dt.weight')).toEqual([ft, 'blk.1.ssm_dt.weight', ft === 'Q8_0' ? GgmlType.Q8_0 : GgmlType.Q5_0]);
      // No llama-quant category: the file type's default.
      for (const n of ['ssm_in.weight', 'ssm_x.weight', 'ssm_out.weight']) expect(ty(`blk.0.${n}`)).toEqual([ft, `blk.0.${n}`, ft === 'Q8_0' ? GgmlType.Q8_0 : GgmlType.Q4_K]);
    }
    // HF's default rank ceil(256 / 16) = 16: rows no 32-block type fits, F16 as llama-quant gives them.
    const r16 = new Map(planModel({ ...config(), ssm: { ...config().ssm, dtRank: 16 } } as JambaConfig, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([r16.get('blk.0.ssm_dt.weight'), r16.get('blk.0.ssm_x.weight')]).toEqual([GgmlType.F16, GgmlType.Q4_K]);
    const q = new Map(planModel(config(), 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    // use_more_bits: the only attention block's attn_v, ffn_down of blocks 2 and 3 of 4.
    expect([q.get('blk.2.attn_v.weight'), q.get('blk.2.attn_k.weight'), q.get('output.weight'), q.get('token_embd.weight')]).toEqual([GgmlType.Q6_K, GgmlType.Q4_K, GgmlType.Q6_K, GgmlType.Q4_K]);
    expect([q.get('blk.0.ffn_down.weight'), q.get('blk.1.ffn_down_exps.weight'), q.get('blk.2.ffn_down.weight'), q.get('blk.3.ffn_down_exps.weight')]).toEqual([GgmlType.Q4_K, GgmlType.Q4_K, GgmlType.Q6_K, GgmlType.Q6_K]);
  });

  it('inits the scan as Mamba: ssm_a rows -1..-16, softplus(dt bias) in about [0.0003, 0.3], ssm_d and the dt/B/C norms around 1', () => {
    const c = config();
    const a = generateTensorF32(c, 7, 'blk.0.ssm_a');
    const ramp = Array.from({ length: 16 }, (_, k) => -(k + 1));
    for (const row of [0, 1, 255, 511]) expect(Array.from(a.subarray(row * 16, row * 16 + 16))).toEqual(ramp);
    // Any range of it (the writers' work units) gives the same values.
    const spec = planModel(c, 'F32').tensors.find((t) => t.name === 'blk.3.ssm_a')!;
    const part = new Float32Array(40);
    fillTensorRange(7, spec, 21, part);
    expect(Array.from(part)).toEqual(Array.from({ length: 40 }, (_, k) => -(((21 + k) % 16) + 1)));

    const softplus = (x: number) => Math.log1p(Math.exp(x));
    const b = generateTensorF32(c, 7, 'blk.1.ssm_dt.bias');
    const dt = Array.from(b, softplus).sort((x, y) => x - y);
    expect(dt[0]).toBeGreaterThan(2e-4);
    expect(dt[dt.length - 1]).toBeLessThan(0.35);
    const median = dt[dt.length >> 1];
    expect(median).toBeGreaterThan(0.005);
    expect(median).toBeLessThan(0.02);
    const mean = (x: Float32Array) => x.reduce((p, q) => p + q, 0) / x.length;
    for (const n of ['ssm_d', 'ssm_dt_norm.weight', 'ssm_b_norm.weight', 'ssm_c_norm.weight']) expect([n, Math.round(mean(generateTensorF32(c, 7, `blk.3.${n}`)) * 10) / 10]).toEqual([n, 1]);
    const init = new Map(planModel(c, 'F32').tensors.map((t) => [t.name, t.init as { std: number }]));
    expect(init.get('blk.0.ssm_dt.weight')!.std).toBeCloseTo(0.5 / Math.sqrt(32));
    expect(init.get('blk.0.ssm_conv1d.weight')!.std).toBeCloseTo(0.5);
    expect(init.get('blk.0.ssm_out.weight')!.std).toBeCloseTo(1 / Math.sqrt(512) / Math.sqrt(8));
  });

  it('--layers repeats the layout (attention every 4th block from 2, experts every 2nd from 1)', () => {
    const s = new Set(planModel({ ...config(), nLayers: 8 }, 'F32').tensors.map((t) => t.name));
    expect(Array.from({ length: 8 }, (_, i) => (s.has(`blk.${i}.attn_q.weight`) ? 'A' : 'M') + (s.has(`blk.${i}.ffn_gate_inp.weight`) ? 'E' : 'D')).join(' ')).toBe('MD ME AD ME MD ME AD ME');
    const m = new Map(getArch('jamba').metadata(planModel({ ...config(), nLayers: 8 }, 'F32').config));
    expect((m.get('jamba.attention.head_count_kv') as { value: unknown }).value).toEqual([0, 0, 2, 0, 0, 0, 2, 0]);
    // Without experts every block is dense and no expert keys are written.
    const dense = planModel({ ...config(), nExperts: 0, nExpertsUsed: 0, expertFf: 0 }, 'F32');
    expect(dense.tensors.some((t) => t.name.includes('_exps') || t.name.includes('gate_inp'))).toBe(false);
    expect(getArch('jamba').metadata(dense.config).some(([k]) => k.startsWith('jamba.expert_'))).toBe(false);
    expect(DEFAULT_PRESET_FOR_ARCH.jamba).toBe('tiny-jamba');
  });

  it('rejects what the loader cannot take', () => {
    const c = config();
    // One feed_forward_length for experts and dense FFNs.
    expect(() => planModel({ ...c, expertFf: 512 }, 'F32')).toThrow(/feed_forward_length/);
    expect(() => planModel({ ...c, headDim: 128 }, 'F32')).toThrow(/head size/);
    expect(() => planModel({ ...c, sharedFf: 128 }, 'F32')).toThrow(/shared/);
    expect(() => planModel({ ...c, ssm: undefined } as unknown as JambaConfig, 'F32')).toThrow(/ssm needs/);
    expect(() => planModel({ ...c, ssm: { ...c.ssm, convKernel: 1 } } as JambaConfig, 'F32')).toThrow(/convKernel/);
    expect(() => planModel({ ...c, layout: { ...c.layout, attnPeriod: 0 } } as JambaConfig, 'F32')).toThrow(/layout/);
    // llama.cpp aborts on a hybrid memory without attention or without Mamba layers.
    expect(() => planModel({ ...c, nLayers: 2 }, 'F32')).toThrow(/no attention block/);
    expect(() => planModel({ ...c, layout: { ...c.layout, attnPeriod: 1, attnOffset: 0 } } as JambaConfig, 'F32')).toThrow(/no Mamba block/);
  });
});
