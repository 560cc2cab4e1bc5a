// MiniMax-01's program (lightning blocks as the loader picks them, their slope scales, the
// residual_scale residuals) and the metadata its builder refuses, naming the key. Numerics are
// checked against llama.cpp in tools/src/parity/parity-moe-families.native.spec.ts, the op against
// a reference in ../lightning-attn.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { editedKv, programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('minimax-01 program', () => {
  let f: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-minimax-01-interval');
  }, 60_000);
  const kv = (extra: Record<string, GgufValue | undefined>) => editedKv(f.kv, extra);

  it('lightning blocks where the keys say, with the slope scale of their depth; residual_scale on the normed inputs', () => {
    const p = programOf(f.kv, f.tensors);
    const la = p.ops.filter((o) => o.op === 'lightning_attn');
    // full_attention_interval 2 over 4 blocks: lightning 0 and 2, softmax 1 and 3.
    expect(la.map((o) => o.params!.slope_scale)).toEqual([1 + 1e-5, 1 - 2 / 3 + 1e-5]);
    expect(la.every((o) => o.params!.n_head === 8 && o.params!.head_dim === 64 && o.params!.silu === 1)).toBe(true);
    expect(p.rsWidth).toEqual([8 * 64 * 64, 8 * 64 * 64]);
    expect(p.kvKWidth).toEqual([128, 128]);
    expect(p.ops.filter((o) => o.op === 'scale').map((o) => o.params!.scale)).toEqual(Array(8).fill(f.kv['minimax-01.residual_scale']));
    expect(p.ops.filter((o) => o.op === 'moe').every((o) => o.params!.norm_w === true && o.params!.gating === 0 && o.params!.w_scale === 0)).toBe(true);
    // attention.recurrent_layers wins over the interval (3 would make block 1 lightning, which has no attn_qkv).
    const flags = programOf(kv({ 'minimax-01.full_attention_interval': 3, 'minimax-01.attention.recurrent_layers': [true, false, true, false] }), f.tensors);
    expect(flags.ops.filter((o) => o.op === 'lightning_attn').map((o) => o.params!.slope_scale)).toEqual(la.map((o) => o.params!.slope_scale));
  });

  it('refuses missing or malformed keys with the key named', () => {
    const bad = (extra: Record<string, GgufValue | undefined>, want: RegExp) => expect(() => programOf(kv(extra), f.tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
    bad({ 'minimax-01.residual_scale': undefined }, /lacks metadata 'minimax-01.residual_scale'/);
    bad({ 'minimax-01.residual_scale': 'x' }, /'minimax-01.residual_scale' must be a number/);
    bad({ 'minimax-01.attention.layer_norm_rms_epsilon': undefined }, /lacks metadata 'minimax-01.attention.layer_norm_rms_epsilon'/);
    bad({ 'minimax-01.full_attention_interval': 0 }, /'minimax-01.full_attention_interval' is 0/);
    bad({ 'minimax-01.attention.recurrent_layers': [true, false] }, /'minimax-01.attention.recurrent_layers' has 2 entries for 4 layers/);
    bad({ 'minimax-01.attention.recurrent_layers': [1, 0, 2, 1] }, /'minimax-01.attention.recurrent_layers' entry 2 is 2/);
    bad({ 'minimax-01.expert_count': undefined, 'minimax-01.expert_used_count': undefined }, /no experts/);
    bad({ 'minimax-01.attention.key_length': 32 }, /key length 32 and value length 64 differ/);
    bad({ 'minimax-01.attention.key_length': 32, 'minimax-01.attention.value_length': 32 }, /'blk.0.attn_qkv.weight' is \[256, 1536\], expected \[256, 768\]/);
  });

  it('a lightning block where the file has softmax tensors is a missing tensor, not a crash', () => {
    expect(() => programOf(kv({ 'minimax-01.attention.recurrent_layers': [true, true, true, true] }), f.tensors)).toThrow(expect.objectContaining({ message: expect.stringMatching(/blk\.1\.attn_qkv\.weight/) }));
  });
});
