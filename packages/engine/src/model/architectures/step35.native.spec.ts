// Step 3.5's program as its blocks differ (head counts, RoPE widths and bases, the head-wise gate,
// per-block SwiGLU limits), and the metadata its builder refuses, naming the key. Numerics are
// checked against llama.cpp in tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { opsOf, programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** The ops of one kind in block order (one per block when every block has one). */

describe('step35 program', () => {
  let clamp: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    clamp = testModelFile(dir, 'tiny-step35-clamp');
  }, 60_000);

  it('full blocks (0, 4) rotate half of each head with the file base and rope_freqs, sliding ones all of it with base_swa', () => {
    const p = programOf(clamp.kv, clamp.tensors);
    const q = opsOf(p, 'rope').filter((_, i) => i % 2 === 0);
    expect(q.map((o) => o.params!.n_dims)).toEqual([8, 16, 16, 16, 8, 16]);
    expect(q.map((o) => o.params!.n_head)).toEqual([4, 6, 6, 6, 4, 6]);
    expect(q.map((o) => o.params!.freq_base)).toEqual([5e6, 1e4, 1e4, 1e4, 5e6, 1e4]);
    expect(q.map((o) => o.weights?.freq_factors ?? null)).toEqual(['rope_freqs.weight', null, null, null, 'rope_freqs.weight', null]);
    expect(opsOf(p, 'attention').map((o) => o.params!.window ?? 0)).toEqual([0, 8, 8, 8, 0, 8]);
  });

  it('gates each head by its own sigmoid, and limits the SwiGLUs as swiglu_clamp_exp / _shexp say', () => {
    const p = programOf(clamp.kv, clamp.tensors);
    expect(opsOf(p, 'sigmoid_mul').map((o) => o.params)).toEqual(Array(6).fill({ group: 16 }));
    // Experts (blocks 1-5): act 6 where the limit is positive.
    expect(opsOf(p, 'moe').map((o) => [o.params!.act ?? 0, o.params!.limit ?? 0])).toEqual([[6, 1], [0, 0], [6, 1], [6, 0.75], [6, 1]]);
    // The dense block 0, then each routed block's shared expert.
    expect(opsOf(p, 'swiglu').map((o) => o.params?.limit ?? 0)).toEqual([0, 0, 1, 1, 0.75, 0]);
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no sliding-window pattern', (kv) => delete kv['step35.attention.sliding_window_pattern'], /attention\.sliding_window_pattern must be an array/],
    ['no window', (kv) => delete kv['step35.attention.sliding_window'], /lacks metadata 'step35\.attention\.sliding_window'/],
    ['a pattern of the wrong length', (kv) => (kv['step35.attention.sliding_window_pattern'] = [true, false]), /sliding_window_pattern has 2 entries for 6 layers/],
    ['an odd half of the RoPE dimensions', (kv) => (kv['step35.rope.dimension_count'] = 2), /rope\.dimension_count 2: full-attention blocks rotate half of it, 1, which must be even/],
    ['a sliding head size of its own', (kv) => (kv['step35.attention.key_length_swa'] = 32), /attention\.key_length_swa 32 differs from the full blocks' 16/],
    ['a negative SwiGLU limit', (kv) => (kv['step35.swiglu_clamp_exp'] = [0, 1, 0, -1, 0, 0]), /'step35\.swiglu_clamp_exp' entry 3 is -1; expected a finite number of at least 0/],
    ['limits for too few blocks', (kv) => (kv['step35.swiglu_clamp_shexp'] = [0, 1]), /'step35\.swiglu_clamp_shexp' has 2 entries for 6 layers/],
    ['a gating function it cannot run', (kv) => (kv['step35.expert_gating_func'] = 3), /expert_gating_func 3 is not supported/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...clamp.kv };
    edit(kv);
    expect(() => programOf(kv, clamp.tensors)).toThrow(want);
  });
});
