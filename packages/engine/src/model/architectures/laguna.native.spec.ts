// Laguna's program as its blocks differ (query heads, RoPE widths, bases and scaling, windows,
// the softplus gate per head or per value, leading dense blocks) and the metadata its builder
// refuses, naming the key. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, GgufValue } from '@kailstream/core-native';

import { opsOf, programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));


describe('laguna program', () => {
  let xs: ReturnType<typeof testModelFile>;
  let m: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    xs = testModelFile(dir, 'tiny-laguna');
    m = testModelFile(dir, 'tiny-laguna-m');
  }, 60_000);

  it('XS.2 shape: block 0 full (its heads, half-head RoPE at the file base), blocks 1-3 sliding (all of the head at base_swa, no scaling), a softplus gate per head', () => {
    const p = programOf(xs.kv, xs.tensors);
    const q = opsOf(p, 'rope').filter((_, i) => i % 2 === 0);
    expect(q.map((o) => [o.params!.n_head, o.params!.n_dims, o.params!.freq_base])).toEqual([[6, 8, 5e5], [8, 16, 1e4], [8, 16, 1e4], [8, 16, 1e4]]);
    expect(opsOf(p, 'attention').map((o) => o.params!.window ?? 0)).toEqual([0, 8, 8, 8]);
    expect(opsOf(p, 'sigmoid_mul').map((o) => o.params)).toEqual(Array(4).fill({ softplus: 1, group: 16 }));
    // Block 0 dense; the others sigmoid + bias experts with a shared expert, the file's norm and scale.
    const moe = opsOf(p, 'moe');
    expect(moe).toHaveLength(3);
    expect(moe.every((o) => o.weights!.exp_probs_b !== undefined && o.params!.gating === 1 && o.params!.norm_w === true && o.params!.w_scale === 2.5)).toBe(true);
  });

  it('M.1 shape: full blocks with YaRN, a softplus gate per value, two dense blocks', () => {
    const p = programOf(m.kv, m.tensors);
    expect(opsOf(p, 'attention').every((o) => o.params!.window === undefined)).toBe(true);
    expect(opsOf(p, 'rope').every((o) => o.params!.freq_scale === 0.25 && Number(o.params!.ext_factor) > 0)).toBe(true);
    expect(opsOf(p, 'sigmoid_mul').map((o) => o.params)).toEqual(Array(4).fill({ softplus: 1, per_element: 1 }));
    expect(opsOf(p, 'moe')).toHaveLength(2);
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no leading_dense_block_count', (kv) => delete kv['laguna.leading_dense_block_count'], /lacks metadata 'laguna\.leading_dense_block_count'/],
    ['an odd sliding RoPE width', (kv) => (kv['laguna.rope.dimension_count_swa'] = 5), /rope\.dimension_count_swa 5 is not an even number/],
    ['a sliding base that is not positive', (kv) => (kv['laguna.rope.freq_base_swa'] = -1), /rope\.freq_base_swa -1 is not positive/],
    ['a pattern of the wrong length', (kv) => (kv['laguna.attention.sliding_window_pattern'] = [true]), /sliding_window_pattern has 1 entries for 4 layers/],
    ['a gating function it cannot run', (kv) => (kv['laguna.expert_gating_func'] = 3), /expert_gating_func 3 is not supported/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...xs.kv };
    edit(kv);
    expect(() => programOf(kv, xs.tensors)).toThrow(want);
  });

  it('refuses a gate that is neither per head nor per value, and a routed block without its selection bias', () => {
    const odd = new Map<string, GgufTensorInfo>(xs.tensors);
    const g = odd.get('blk.1.attn_gate.weight')!;
    odd.set('blk.1.attn_gate.weight', { ...g, dims: [g.dims[0], 5] });
    expect(() => programOf(xs.kv, odd)).toThrow(/laguna: layer 1: attn_gate\.weight has 5 outputs; expected 8 \(one per head\) or 128 \(one per value\)/);
    const nob = new Map<string, GgufTensorInfo>(xs.tensors);
    nob.delete('blk.2.exp_probs_b.bias');
    expect(() => programOf(xs.kv, nob)).toThrow(/blk\.2\.exp_probs_b\.bias/);
  });
});
