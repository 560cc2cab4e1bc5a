// Cohere's MoE program (parallel blocks, the norm kind the file's epsilon key says, RoPE on sliding
// and dense blocks only, the shared expert averaged in, the logit scale) and the metadata its
// builder refuses, naming the key. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue, ModelProgram, ProgramOp } from '@kailstream/core-native';

import { programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const opsOf = (p: ModelProgram, op: ProgramOp['op']) => p.ops.filter((o) => o.op === op);

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
