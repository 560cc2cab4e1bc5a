// dots.llm3's program as its blocks differ (MLA geometry, window and RoPE base of sliding blocks,
// the indexer on full ones, the RoPE-key norm and head-wise gate), the MTP block left out, and the
// metadata its builder refuses, naming the key. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { buildProgram } from '.';
import { Metadata, readHParams } from '../hparams';
import { opsOf, programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));


describe('dots3note program', () => {
  let f: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-dots3note');
  }, 60_000);

  it('full blocks (0, 3) with their MLA sizes and the indexer, sliding ones with theirs, window 8 and base_swa; the MTP block left out', () => {
    const p = programOf(f.kv, f.tensors);
    const mla = opsOf(p, 'mla_attention').map((o) => o.params!);
    expect(mla.map((o) => [o.n_head, o.kv_lora, o.qk_nope, o.qk_rope, o.v_head, o.window ?? 0, o.top_k ?? 0])).toEqual([
      [4, 128, 64, 32, 64, 0, 16], [6, 64, 32, 32, 32, 8, 0], [6, 64, 32, 32, 32, 8, 0], [4, 128, 64, 32, 64, 0, 16], [6, 64, 32, 32, 32, 8, 0],
    ]);
    expect(mla.map((o) => o.scale)).toEqual([96, 64, 64, 96, 64].map((k) => Math.fround(1 / Math.fround(Math.sqrt(k)))));
    expect(opsOf(p, 'dsa_index').length).toBe(2);
    // The latent's rope (head_dim kv_lora + rope) per block: 1e6 on full blocks, 1e4 on sliding ones.
    const kRope = opsOf(p, 'rope').filter((o) => o.params!.n_head === 1 && o.params!.rot_off !== undefined);
    expect(kRope.map((o) => o.params!.freq_base)).toEqual([1e6, 1e4, 1e4, 1e6, 1e4]);
    expect(kRope.every((o) => o.params!.neox === false)).toBe(true);
    expect(opsOf(p, 'sigmoid_mul').map((o) => o.params!.group)).toEqual([64, 32, 32, 64, 32]);
    expect(opsOf(p, 'rms_norm').filter((o) => o.weights!.weight.endsWith('attn_k_norm.weight')).length).toBe(5);
    expect(p.ops.some((o) => Object.values(o.weights ?? {}).some((w) => w.startsWith('blk.5.')))).toBe(false);
  });

  it('with a context no longer than top_k, the full blocks attend densely (no indexer)', () => {
    const hp = readHParams(new Metadata(f.kv, 'dots3note'), f.tensors);
    const p = buildProgram(hp, f.tensors, { nCtxSeq: 16 });
    expect(opsOf(p, 'dsa_index').length).toBe(0);
    expect(opsOf(p, 'mla_attention').map((o) => o.params!.window ?? 0)).toEqual([0, 8, 8, 0, 8]);
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no sliding-window pattern', (kv) => delete kv['dots3note.attention.sliding_window_pattern'], /lacks metadata 'dots3note\.attention\.sliding_window_pattern'/],
    ['a pattern that is not an array', (kv) => (kv['dots3note.attention.sliding_window_pattern'] = 3), /sliding_window_pattern' must be an array/],
    ['no indexer types', (kv) => delete kv['dots3note.attention.indexer.types'], /lacks metadata 'dots3note\.attention\.indexer\.types'/],
    ['a full block without an indexer', (kv) => (kv['dots3note.attention.indexer.types'] = [true, false, false, false, false]), /block 3 has full attention, which runs the lightning indexer/],
    ['no window', (kv) => delete kv['dots3note.attention.sliding_window'], /lacks metadata 'dots3note\.attention\.sliding_window'/],
    ['a window of 0', (kv) => (kv['dots3note.attention.sliding_window'] = 0), /sliding_window' is 0; expected an integer in 1\.\./],
    ['no sliding RoPE base', (kv) => delete kv['dots3note.rope.freq_base_swa'], /lacks metadata 'dots3note\.rope\.freq_base_swa'/],
    ['no sliding latent rank', (kv) => delete kv['dots3note.attention.kv_lora_rank_swa'], /lacks metadata 'dots3note\.attention\.kv_lora_rank_swa'/],
    ['a sliding key no wider than the rotary dims', (kv) => (kv['dots3note.attention.key_length_mla_swa'] = 32), /key_length_mla_swa 32 leaves no dimensions beside the 32 rotary ones/],
    ['no key_length_mla', (kv) => delete kv['dots3note.attention.key_length_mla'], /lacks metadata 'dots3note\.attention\.key_length_mla'/],
    ['no gating function', (kv) => delete kv['dots3note.expert_gating_func'], /no expert_gating_func/],
    ['no indexer top_k', (kv) => delete kv['dots3note.attention.indexer.top_k'], /lacks metadata 'dots3note\.attention\.indexer\.top_k'/],
    ['an indexer head of 48', (kv) => (kv['dots3note.attention.indexer.key_length'] = 48), /indexer\.key_length 48 must be a power of two/],
    ['no leading dense count', (kv) => delete kv['dots3note.leading_dense_block_count'], /lacks metadata 'dots3note\.leading_dense_block_count'/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...f.kv };
    edit(kv);
    expect(() => programOf(kv, f.tensors)).toThrow(want);
  });

  it('refuses a file without the head gate or the RoPE-key norm, naming the tensor', () => {
    for (const name of ['blk.2.attn_gate.weight', 'blk.1.attn_k_norm.weight', 'blk.3.indexer.proj.weight', 'blk.4.exp_probs_b.bias']) {
      const ts = new Map(f.tensors);
      ts.delete(name);
      expect(() => programOf(f.kv, ts)).toThrow(new RegExp(`lacks tensor '${name.replace(/\./g, '\\.')}'`));
    }
  });
});
