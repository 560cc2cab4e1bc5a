// The programs of Cohere's decoders: the MoE (parallel blocks, the norm kind the file's epsilon key
// says, RoPE on sliding and dense blocks only, the shared expert averaged in, the logit scale),
// Command R7B / Command A (cohere2: NoPE full blocks among sliding ones, a tied head) and Command R /
// R+ (command-r: per-head q/k LayerNorms from 64 blocks), and the metadata the builder refuses,
// naming the key. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { opsOf, programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));


describe('cohere2moe program', () => {
  let ln: ReturnType<typeof testModelFile>;
  let rms: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    ln = testModelFile(dir, 'tiny-cohere2moe');
    rms = testModelFile(dir, 'tiny-cohere2moe-rms');
  }, 60_000);

  it('one LayerNorm per block feeds attention and FFN; RoPE on the dense and sliding blocks; shared expert averaged; logits scaled', () => {
    const p = programOf(ln.kv, ln.tensors);
    // attn_norm of 5 blocks, then output_norm: no FFN norm.
    expect(opsOf(p, 'layer_norm')).toHaveLength(6);
    expect(opsOf(p, 'rms_norm')).toHaveLength(0);
    const attn = opsOf(p, 'attention');
    expect(attn.map((o) => o.params!.window ?? 0)).toEqual([0, 8, 8, 8, 0]);
    // Blocks 0 (dense lead) to 3 rotate (adjacent pairs); block 4 (full) has no positions.
    expect(opsOf(p, 'rope').map((o) => o.params!.neox)).toEqual(Array(8).fill(false));
    const moe = opsOf(p, 'moe');
    expect(moe).toHaveLength(4);
    expect(moe.every((o) => o.a === moe[0].a && o.params!.gating === 0)).toBe(true);
    // Each routed block's (experts + shared) * 0.5, then the logits x logit_scale.
    expect(opsOf(p, 'scale').map((o) => o.params!.scale)).toEqual([0.5, 0.5, 0.5, 0.5, 0.25]);
  });

  it('RMSNorms with the RMS epsilon key; fused gate|up experts; sigmoid routing by default; an explicit pattern wins', () => {
    const p = programOf(rms.kv, rms.tensors);
    expect(opsOf(p, 'layer_norm')).toHaveLength(0);
    expect(opsOf(p, 'rms_norm')).toHaveLength(6);
    const moe = opsOf(p, 'moe');
    expect(moe.every((o) => o.params!.fused_gate_up === 1 && o.weights!.gate_exps === o.weights!.up_exps && o.params!.gating === 1 && o.params!.w_scale === 2.5)).toBe(true);
    expect(opsOf(p, 'scale').map((o) => o.params!.scale)).toEqual([0.25]);
    const other = programOf({ ...rms.kv, 'cohere2moe.attention.sliding_window_pattern': [false, false, true, false, true] }, rms.tensors);
    expect(opsOf(other, 'attention').map((o) => o.params!.window ?? 0)).toEqual([0, 0, 8, 0, 8]);
    // Dense block 0 and the sliding blocks 2 and 4.
    expect(opsOf(other, 'rope')).toHaveLength(6);
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no norm epsilon', (kv) => delete kv['cohere2moe.attention.layer_norm_epsilon'], /neither attention\.layer_norm_epsilon nor attention\.layer_norm_rms_epsilon/],
    ['no window', (kv) => delete kv['cohere2moe.attention.sliding_window'], /lacks metadata 'cohere2moe\.attention\.sliding_window'/],
    ['no logit scale', (kv) => delete kv['cohere2moe.logit_scale'], /lacks metadata 'cohere2moe\.logit_scale'/],
    ['no leading_dense_block_count', (kv) => delete kv['cohere2moe.leading_dense_block_count'], /lacks metadata 'cohere2moe\.leading_dense_block_count'/],
    ['a partial RoPE', (kv) => (kv['cohere2moe.rope.dimension_count'] = 8), /rope\.dimension_count 8 must equal the head size 16/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...ln.kv };
    edit(kv);
    expect(() => programOf(kv, ln.tensors)).toThrow(want);
  });
});

describe('cohere2 and command-r programs', () => {
  let c2: ReturnType<typeof testModelFile>;
  let c2p: ReturnType<typeof testModelFile>;
  let cr: ReturnType<typeof testModelFile>;
  let crp: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    c2 = testModelFile(dir, 'tiny-cohere2');
    c2p = testModelFile(dir, 'tiny-cohere2-pattern');
    cr = testModelFile(dir, 'tiny-command-r');
    crp = testModelFile(dir, 'tiny-command-r-plus');
  }, 120_000);

  it('cohere2: 3 sliding blocks of every 4 by default (the 4th full, NoPE), the pattern array when the file has one; dense FFNs; a tied head', () => {
    const p = programOf(c2.kv, c2.tensors);
    expect(opsOf(p, 'attention').map((o) => o.params!.window ?? 0)).toEqual([8, 8, 8, 0]);
    expect(opsOf(p, 'rope')).toHaveLength(6);
    expect(opsOf(p, 'moe')).toHaveLength(0);
    expect(p.ops.filter((o) => o.op === 'matmul').at(-1)!.weights!.weight).toBe('token_embd.weight');
    const q = programOf(c2p.kv, c2p.tensors);
    const flags = Array.from(c2p.kv['cohere2.attention.sliding_window_pattern'] as ArrayLike<unknown>, Boolean);
    expect(opsOf(q, 'attention').map((o) => Number(o.params!.window ?? 0) > 0)).toEqual(flags);
    expect(opsOf(q, 'rope')).toHaveLength(2 * flags.filter(Boolean).length);
  });

  it('command-r: every block rotates and attends fully; per-head q/k LayerNorms only from 64 blocks', () => {
    const p = programOf(cr.kv, cr.tensors);
    expect(opsOf(p, 'rope')).toHaveLength(2 * 4);
    expect(opsOf(p, 'attention').every((o) => o.params!.window === undefined)).toBe(true);
    expect(opsOf(p, 'head_rms_norm')).toHaveLength(0);
    const plus = programOf(crp.kv, crp.tensors);
    const norms = opsOf(plus, 'head_rms_norm');
    expect(norms).toHaveLength(2 * 64);
    expect(norms.every((o) => o.params!.layer_norm === 1)).toBe(true);
    expect(norms.slice(0, 2).map((o) => o.weights!.weight)).toEqual(['blk.0.attn_q_norm.weight', 'blk.0.attn_k_norm.weight']);
  });

  it.each<[string, () => [ReturnType<typeof testModelFile>, (kv: Record<string, GgufValue>) => void], RegExp]>([
    ['a cohere2 file without logit_scale', () => [c2, (kv) => delete kv['cohere2.logit_scale']], /lacks metadata 'cohere2\.logit_scale'/],
    ['a cohere2 file without a window', () => [c2, (kv) => delete kv['cohere2.attention.sliding_window']], /lacks metadata 'cohere2\.attention\.sliding_window'/],
    ['a command-r file without its LayerNorm epsilon', () => [cr, (kv) => delete kv['command-r.attention.layer_norm_epsilon']], /lacks metadata 'command-r\.attention\.layer_norm_epsilon'/],
  ])('refuses %s, naming the key', (_what, get, want) => {
    const [f, edit] = get();
    const kv = { ...f.kv };
    edit(kv);
    expect(() => programOf(kv, f.tensors)).toThrow(want);
  });

  it('refuses a Command R+ file without its q/k norms', () => {
    const tensors = new Map(crp.tensors);
    tensors.delete('blk.3.attn_k_norm.weight');
    expect(() => programOf(crp.kv, tensors)).toThrow(/blk\.3\.attn_k_norm\.weight/);
  });
});
