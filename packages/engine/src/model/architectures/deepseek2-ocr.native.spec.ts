// DeepSeek-OCR's language model (deepseek2-ocr): deepseek2's program with plain multi-head
// attention in place of MLA, as llama.cpp's deepseek2 graph builds it for is_ocr, and the metadata
// and tensors its builder refuses, naming them. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { opsOf, programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));


describe('deepseek2-ocr program', () => {
  let f: ReturnType<typeof testModelFile>;
  let sig: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-deepseek2-ocr');
    sig = testModelFile(dir, 'tiny-deepseek2-ocr-sig');
  }, 60_000);

  it('attends with 4 heads of 64 over as many KV heads, NeoX RoPE over whole heads unscaled (rope.dimension_count 0 is not read), no MLA', () => {
    const p = programOf(f.kv, f.tensors);
    expect(opsOf(p, 'mla_attention')).toEqual([]);
    const att = opsOf(p, 'attention');
    expect(att.map((o) => [o.params!.n_head, o.params!.n_head_kv, o.params!.head_dim, o.params!.head_dim_v])).toEqual(Array(3).fill([4, 4, 64, 64]));
    // kq_scale = mscale^2 / sqrt(64) with mscale 1 (no scaling).
    expect(att.every((o) => o.params!.scale === Math.fround(1 / 8) && o.params!.window === undefined)).toBe(true);
    expect(opsOf(p, 'rope').map((o) => [o.params!.n_dims, o.params!.neox, o.params!.freq_scale, o.params!.ext_factor, o.params!.attn_factor])).toEqual(Array(6).fill([64, true, 1, 0, 1]));
  });

  it('FFN: dense block 0, then softmax experts (no renormalization or scale) plus shared experts; -sig: sigmoid + bias in 4 groups, renormalized x 2.5', () => {
    const p = programOf(f.kv, f.tensors);
    expect(opsOf(p, 'moe').map((o) => [o.params!.gating, o.params!.norm_w, o.params!.w_scale, o.params!.n_group, o.weights!.exp_probs_b])).toEqual(Array(2).fill([0, false, 0, 0, undefined]));
    expect(opsOf(p, 'matmul').filter((o) => /ffn_(up|gate|down)(_shexp)?\.weight$/.test(o.weights!.weight)).map((o) => o.weights!.weight)).toEqual([
      'blk.0.ffn_gate.weight', 'blk.0.ffn_up.weight', 'blk.0.ffn_down.weight',
      ...[1, 2].flatMap((i) => ['gate', 'up', 'down'].map((x) => `blk.${i}.ffn_${x}_shexp.weight`)),
    ]);
    const s = programOf(sig.kv, sig.tensors);
    expect(opsOf(s, 'moe').map((o) => [o.params!.gating, o.params!.norm_w, o.params!.w_scale, o.params!.n_group, o.params!.n_group_used, o.weights!.exp_probs_b])).toEqual(
      [0, 1, 2].map((i) => [1, true, 2.5, 4, 2, `blk.${i}.exp_probs_b.bias`]),
    );
    // q/k/v biases; attn_output has none in llama.cpp's graph.
    expect(opsOf(s, 'matmul').filter((o) => /attn_(q|k|v)\.weight$/.test(o.weights!.weight)).every((o) => o.weights!.bias === o.weights!.weight.replace('weight', 'bias'))).toBe(true);
    expect(opsOf(s, 'matmul').find((o) => o.weights!.weight === 'blk.0.attn_output.weight')!.weights!.bias).toBeUndefined();
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['fewer KV heads than heads', (kv) => (kv['deepseek2-ocr.attention.head_count_kv'] = 2), /block 0 has 4 heads and 2 KV heads; this architecture runs 4 of each/],
    ['a key length other than n_embd / heads', (kv) => (kv['deepseek2-ocr.attention.key_length'] = 32), /key_length 32 and value_length 64 must be embedding_length \/ head_count = 64/],
    ['no shared expert count', (kv) => delete kv['deepseek2-ocr.expert_shared_count'], /expert_shared_count is required/],
    ['no expert FFN length', (kv) => delete kv['deepseek2-ocr.expert_feed_forward_length'], /expert_feed_forward_length is required/],
    ['an unknown gating function', (kv) => (kv['deepseek2-ocr.expert_gating_func'] = 3), /expert_gating_func 3 is not supported/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...f.kv };
    edit(kv);
    expect(() => programOf(kv, f.tensors)).toThrow(expect.objectContaining({ message: expect.stringMatching(want) }));
  });

  it('refuses a routed block without its shared experts or an attention projection, naming the tensor', () => {
    for (const name of ['blk.1.ffn_down_shexp.weight', 'blk.2.attn_v.weight']) {
      const tensors = new Map(f.tensors);
      tensors.delete(name);
      expect(() => programOf(f.kv, tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringContaining(`lacks tensor '${name}'`) }));
    }
  });
});
