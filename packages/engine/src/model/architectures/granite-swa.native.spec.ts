// Granite with sliding-window attention (granite_swa): its programs as llama.cpp's granite-swa graph
// builds them (sliding blocks with a sink per head, NoPE blocks by rope_pattern, fused experts and
// shared expert; dense with FFN biases) and the metadata and tensors its builder refuses, naming
// them. Numerics are checked against llama.cpp in tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, GgufValue } from '@kailstream/core-native';

import { opsOf, programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));


describe('granite_swa program', () => {
  let moe: ReturnType<typeof testModelFile>;
  let dense: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    moe = testModelFile(dir, 'tiny-granite-swa-moe');
    dense = testModelFile(dir, 'tiny-granite-swa');
  }, 60_000);

  it('slides on the flagged blocks with a sink per head on every block, rotating all but the NoPE block', () => {
    const p = programOf(moe.kv, moe.tensors);
    const att = opsOf(p, 'attention');
    expect(att.map((o) => [o.params!.window ?? 0, o.weights!.sinks])).toEqual([0, 1, 2, 3].map((i) => [i === 0 ? 0 : 8, `blk.${i}.attn_sinks.weight`]));
    expect(att.every((o) => o.params!.scale === 0.015625)).toBe(true);
    // q and k of blocks 0-2 rotate (adjacent pairs); block 3 is NoPE.
    expect(opsOf(p, 'rope').map((o) => o.params!.neox)).toEqual(Array(6).fill(false));
    const d = programOf(dense.kv, dense.tensors);
    expect(opsOf(d, 'attention').map((o) => o.params!.window ?? 0)).toEqual([8, 0, 8]);
    expect(opsOf(d, 'rope').length).toBe(6);
  });

  it('FFN: fused gate/up experts (softmax, renormalized) plus the fused shared expert; dense: biased gate/up/down', () => {
    const p = programOf(moe.kv, moe.tensors);
    expect(opsOf(p, 'moe').map((o) => [o.weights!.gate_exps, o.params!.fused_gate_up, o.params!.gating, o.params!.norm_w, o.params!.w_scale])).toEqual(
      [0, 1, 2, 3].map((i) => [`blk.${i}.ffn_gate_up_exps.weight`, 1, 0, true, 0]),
    );
    const sw = opsOf(p, 'swiglu');
    expect(sw.map((o) => [p.buffers[o.a!].width, o.params])).toEqual(Array(4).fill([384, { a_off: 0, b_off: 192, n: 192 }]));
    const d = programOf(dense.kv, dense.tensors);
    expect(opsOf(d, 'matmul').filter((o) => /ffn_(gate|up|down)\.weight$/.test(o.weights!.weight)).every((o) => o.weights!.bias === o.weights!.weight.replace('weight', 'bias'))).toBe(true);
    expect(opsOf(d, 'moe')).toEqual([]);
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no sliding-window pattern', (kv) => delete kv['granite_swa.attention.sliding_window_pattern'], /sliding_window_pattern must be an array with one flag per block/],
    ['a pattern of the wrong length', (kv) => (kv['granite_swa.attention.sliding_window_pattern'] = [true, false]), /sliding_window_pattern has 2 entries for 4 layers/],
    ['no window', (kv) => delete kv['granite_swa.attention.sliding_window'], /attention\.sliding_window/],
    ['a rope pattern that is not an array', (kv) => (kv['granite_swa.attention.rope_pattern'] = 0), /rope_pattern must be an array with one flag per block/],
    ['a rope pattern of the wrong length', (kv) => (kv['granite_swa.attention.rope_pattern'] = [true]), /rope_pattern' has 1 entries for 4 layers/],
    ['no logit scale', (kv) => delete kv['granite_swa.logit_scale'], /logit_scale/],
    ['a vision deepstack mapping', (kv) => (kv['granite_swa.deepstack_mapping'] = [-1, -1, -1, -1]), /deepstack_mapping is not supported/],
    ['a shared expert width other than the tensors\'', (kv) => (kv['granite_swa.expert_shared_feed_forward_length'] = 128), /shared expert is ffn_up_shexp \[256, 384\] and ffn_down_shexp \[192, 256\]; expected \[256, 256\] and \[128, 256\]/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...moe.kv };
    edit(kv);
    expect(() => programOf(kv, moe.tensors)).toThrow(expect.objectContaining({ message: expect.stringMatching(want) }));
  });

  it('refuses a block without its sinks or its fused shared expert, naming the tensor', () => {
    for (const name of ['blk.2.attn_sinks.weight', 'blk.1.ffn_up_shexp.weight']) {
      const tensors = new Map<string, GgufTensorInfo>(moe.tensors);
      tensors.delete(name);
      expect(() => programOf(moe.kv, tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringContaining(`lacks tensor '${name}'`) }));
    }
  });
});
