// DBRX's program (LayerNorms, the clamped fused QKV, experts after attn_output_norm) and the
// metadata its builder refuses, naming the key. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('dbrx program', () => {
  let f: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-dbrx');
  }, 60_000);

  it('clamps each block\'s fused QKV to clamp_kqv before splitting it, and norms with LayerNorms only', () => {
    const p = programOf(f.kv, f.tensors);
    const limit = f.kv['dbrx.attention.clamp_kqv'];
    expect(p.ops.filter((o) => o.op === 'clamp').map((o) => [o.params!.limit, p.buffers[o.out].name])).toEqual(Array(4).fill([limit, 'qkv128']));
    expect(p.ops.some((o) => o.op === 'rms_norm')).toBe(false);
    // attn_norm and attn_output_norm per block, then output_norm.
    expect(p.ops.filter((o) => o.op === 'layer_norm')).toHaveLength(4 * 2 + 1);
    expect(p.ops.filter((o) => o.op === 'moe').every((o) => o.params!.n_expert_used === 4 && o.params!.norm_w === true)).toBe(true);
    // clamp_kqv 0: nothing clamped.
    expect(programOf({ ...f.kv, 'dbrx.attention.clamp_kqv': 0 }, f.tensors).ops.some((o) => o.op === 'clamp')).toBe(false);
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no clamp_kqv', (kv) => delete kv['dbrx.attention.clamp_kqv'], /lacks metadata 'dbrx\.attention\.clamp_kqv'/],
    ['no LayerNorm epsilon', (kv) => delete kv['dbrx.attention.layer_norm_epsilon'], /lacks metadata 'dbrx\.attention\.layer_norm_epsilon'/],
    ['no experts', (kv) => delete kv['dbrx.expert_count'], /expert_count and expert_used_count are required/],
    ['a partial RoPE', (kv) => (kv['dbrx.rope.dimension_count'] = 8), /rope\.dimension_count 8 must equal the head size 16/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...f.kv };
    edit(kv);
    expect(() => programOf(kv, f.tensors)).toThrow(want);
  });

  it('refuses a file without its untied head', () => {
    const tensors = new Map(f.tensors);
    tensors.delete('output.weight');
    expect(() => programOf(f.kv, tensors)).toThrow(/lacks tensor 'output\.weight', which the dbrx architecture requires/);
  });
});
