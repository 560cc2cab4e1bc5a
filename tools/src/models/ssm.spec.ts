// mamba, mamba2 and falcon-h1 (architectures/ssm.ts): the tensor lists and keys llama.cpp's loaders
// (src/models/mamba.cpp, mamba2.cpp, falcon-h1.cpp) take, and the types the quantized files give them.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { FalconH1Config, Mamba2Config, MambaConfig } from './architectures/ssm';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const blocks = (preset: string) => {
  const plan = planModel(getPreset(preset).config, 'F32').tensors;
  return { plan, block: (i: number) => plan.filter((t) => t.layer === i).map((t) => [t.name.slice(`blk.${i}.`.length), t.shape] as const), shape: new Map(plan.map((t) => [t.name, t.shape])) };
};

/** The header's `<arch>.*` keys of a preset written at F32: value and GGUF type by key. */
function keys(preset: string): Map<string, { value: unknown; type: number }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-ssm-'));
  try {
    const out = path.join(dir, 'm.gguf');
    writeModel({ config: getPreset(preset).config, fileType: 'F32', seed: 1, out });
    const kv = readGgufHeader(out).kv;
    const a = kv.get('general.architecture')!.value as string;
    return new Map([...kv].filter(([k]) => k.startsWith(`${a}.`)).map(([k, x]) => [k.slice(a.length + 1), { value: x.value, type: x.type }]));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const MAMBA1 = (dim: number, inner: number, rank: number, state: number) => [
  ['attn_norm.weight', [dim]],
  ['ssm_in.weight', [dim, 2 * inner]],
  ['ssm_conv1d.weight', [4, inner]],
  ['ssm_conv1d.bias', [inner]],
  ['ssm_x.weight', [inner, rank + 2 * state]],
  ['ssm_dt.weight', [rank, inner]],
  ['ssm_dt.bias', [inner]],
  ['ssm_a', [state, inner]],
  ['ssm_d', [inner]],
  ['ssm_out.weight', [inner, dim]],
];

describe('mamba (tiny-mamba, tiny-falcon-mamba)', () => {
  it("blocks of attn_norm and a Mamba-1 mixer without dt/B/C norm weights, in the loader's order and shapes; tied or untied head", () => {
    const { plan, block } = blocks('tiny-mamba');
    expect(plan.slice(0, 2).map((t) => t.name)).toEqual(['token_embd.weight', 'output_norm.weight']);
    for (let i = 0; i < 4; i++) expect(block(i)).toEqual(MAMBA1(256, 512, 32, 16));
    expect(plan.length).toBe(2 + 4 * 10);
    const f = blocks('tiny-falcon-mamba');
    expect(f.plan.slice(0, 3).map((t) => t.name)).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    expect(f.plan.length).toBe(3 + 3 * 10);
  });

  it('writes the keys conversion/mamba.py writes: head_count 0, feed_forward_length 0, ssm.*, ssm.dt_b_c_rms (BOOL)', () => {
    const k = keys('tiny-falcon-mamba');
    expect([...k.keys()].sort()).toEqual(
      ['vocab_size', 'context_length', 'embedding_length', 'feed_forward_length', 'attention.head_count', 'block_count', 'ssm.conv_kernel', 'ssm.inner_size', 'ssm.state_size', 'ssm.time_step_rank', 'attention.layer_norm_rms_epsilon', 'ssm.dt_b_c_rms'].sort(),
    );
    const v = (n: string) => k.get(n)!.value;
    expect([v('attention.head_count'), v('feed_forward_length'), v('block_count'), v('ssm.conv_kernel'), v('ssm.inner_size'), v('ssm.state_size'), v('ssm.time_step_rank'), v('ssm.dt_b_c_rms')]).toEqual([0, 0, 3, 4, 512, 16, 32, true]);
    expect([k.get('ssm.dt_b_c_rms')!.type, k.get('attention.head_count')!.type, k.get('ssm.time_step_rank')!.type]).toEqual([GgufType.BOOL, GgufType.UINT32, GgufType.UINT32]);
    expect(keys('tiny-mamba').get('ssm.dt_b_c_rms')!.value).toBe(false);
  });
});

describe('mamba2 (tiny-mamba2)', () => {
  it('blocks of attn_norm and a Mamba-2 mixer with its grouped norm; keys with head_count 0 and ssm.group_count', () => {
    const { plan, block } = blocks('tiny-mamba2');
    expect(plan.length).toBe(3 + 4 * 9);
    expect(block(3)).toEqual([
      ['attn_norm.weight', [256]],
      ['ssm_in.weight', [256, 2 * 512 + 2 * 2 * 64 + 8]],
      ['ssm_conv1d.weight', [4, 512 + 2 * 2 * 64]],
      ['ssm_conv1d.bias', [512 + 2 * 2 * 64]],
      ['ssm_dt.bias', [8]],
      ['ssm_a', [1, 8]],
      ['ssm_d', [1, 8]],
      ['ssm_norm.weight', [256, 2]],
      ['ssm_out.weight', [512, 256]],
    ]);
    const k = keys('tiny-mamba2');
    const v = (n: string) => k.get(n)!.value;
    expect([v('attention.head_count'), v('feed_forward_length'), v('ssm.conv_kernel'), v('ssm.inner_size'), v('ssm.state_size'), v('ssm.time_step_rank'), v('ssm.group_count')]).toEqual([0, 0, 4, 512, 64, 8, 2]);
    expect(k.has('attention.head_count_kv')).toBe(false);
  });
});

describe('falcon-h1 (tiny-falcon-h1, -plain)', () => {
  it('blocks of a Mamba-2 mixer, attention (attn_norm shared) and a SwiGLU FFN under `blk.N.ffn_norm`', () => {
    const { block, plan } = blocks('tiny-falcon-h1');
    expect(block(0).map(([n]) => n)).toEqual([
      'ssm_in.weight', 'ssm_conv1d.weight', 'ssm_conv1d.bias', 'ssm_dt.bias', 'ssm_a', 'ssm_d', 'ssm_norm.weight', 'ssm_out.weight',
      'attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight',
      'ffn_norm', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight',
    ]);
    const s = new Map(block(2));
    expect([s.get('ssm_in.weight'), s.get('ssm_conv1d.weight'), s.get('attn_q.weight'), s.get('attn_k.weight'), s.get('ffn_norm'), s.get('ffn_down.weight')]).toEqual([
      [256, 2 * 512 + 2 * 2 * 32 + 8], [4, 512 + 2 * 2 * 32], [256, 256], [256, 128], [256], [512, 256],
    ]);
    expect(plan.length).toBe(3 + 4 * 17);
    const p = blocks('tiny-falcon-h1-plain');
    expect(p.plan.length).toBe(2 + 3 * 16);
    expect(p.plan.some((t) => t.name.includes('ssm_norm'))).toBe(false);
    expect(p.shape.has('blk.0.ssm_conv1d.bias')).toBe(true);
  });

  it('writes the keys conversion/falcon_h1.py writes (no rope.dimension_count, no multipliers)', () => {
    const k = keys('tiny-falcon-h1');
    expect([...k.keys()].sort()).toEqual(
      [
        'vocab_size', 'context_length', 'embedding_length', 'block_count', 'feed_forward_length', 'attention.head_count', 'attention.head_count_kv', 'attention.key_length',
        'attention.value_length', 'rope.freq_base', 'attention.layer_norm_rms_epsilon', 'ssm.conv_kernel', 'ssm.state_size', 'ssm.group_count', 'ssm.inner_size', 'ssm.time_step_rank',
      ].sort(),
    );
    const v = (n: string) => k.get(n)!.value;
    expect([v('attention.head_count'), v('attention.head_count_kv'), v('attention.key_length'), v('feed_forward_length'), v('ssm.inner_size'), v('ssm.time_step_rank'), v('ssm.group_count'), v('ssm.state_size')]).toEqual([4, 2, 64, 512, 512, 8, 2, 32]);
  });
});

describe('quantized files and presets', () => {
  it('keep the convolutions, ssm_a, ssm_d, norms and biases F32; ssm_in, ssm_x and ssm_out quantized', () => {
    for (const [preset, ft] of [['tiny-mamba', 'Q4_K_M'], ['tiny-mamba2', 'Q8_0'], ['tiny-falcon-h1', 'Q4_K_M']] as const) {
      const t = new Map(planModel(getPreset(preset).config, ft).tensors.map((x) => [x.name, x.type]));
      for (const n of ['ssm_conv1d.weight', 'ssm_conv1d.bias', 'ssm_a', 'ssm_d', 'attn_norm.weight', 'ssm_dt.bias', ...(preset === 'tiny-mamba' ? [] : ['ssm_norm.weight'])]) expect([preset, n, t.get(`blk.1.${n}`)]).toEqual([preset, n, GgmlType.F32]);
      const q = ft === 'Q8_0' ? GgmlType.Q8_0 : GgmlType.Q4_K;
      for (const n of ['ssm_in.weight', 'ssm_out.weight', ...(preset === 'tiny-mamba' ? ['ssm_x.weight'] : [])]) expect([preset, n, t.get(`blk.0.${n}`)]).toEqual([preset, n, q]);
    }
    const f = new Map(planModel(getPreset('tiny-falcon-h1').config, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect(f.get('blk.0.ffn_norm')).toBe(GgmlType.F32);
    expect([DEFAULT_PRESET_FOR_ARCH.mamba, DEFAULT_PRESET_FOR_ARCH.mamba2, DEFAULT_PRESET_FOR_ARCH['falcon-h1']]).toEqual(['tiny-mamba', 'tiny-mamba2', 'tiny-falcon-h1']);
  });

  it('rejects what the loaders cannot take', () => {
    const m = getPreset('tiny-mamba').config as MambaConfig;
    const m2 = getPreset('tiny-mamba2').config as Mamba2Config;
    const f = getPreset('tiny-falcon-h1').config as FalconH1Config;
    expect(() => planModel({ ...m, ssm: { ...m.ssm, convKernel: 1 } } as MambaConfig, 'F32')).toThrow(/convKernel/);
    expect(() => planModel({ ...m, nExperts: 4, nExpertsUsed: 2 }, 'F32')).toThrow(/no experts/);
    expect(() => planModel({ ...m2, plain: true } as Mamba2Config, 'F32')).toThrow(/requires ssm_norm/);
    expect(() => planModel({ ...m2, ssm: { ...m2.ssm, nGroup: 3 } } as Mamba2Config, 'F32')).toThrow(/not divisible by 3 groups/);
    expect(() => planModel({ ...f, nKvHeads: 3 }, 'F32')).toThrow(/not divisible by kv heads/);
  });
});
