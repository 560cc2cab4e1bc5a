// bailingmoe3's program as llama.cpp's graph (src/models/bailingmoe3.cpp) builds it, and the files
// its loader refuses (its asserts included) refused with the key or tensor at fault (numerics
// against llama.cpp: tools/src/parity).
import fs from 'node:fs';

import type { GgufTensorInfo } from '@kailstream/core-native';

import { programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const without = (m: Map<string, GgufTensorInfo>, name: string) => new Map([...m].filter(([k]) => k !== name));
const badModel = (re: RegExp) => expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(re) });

describe('bailingmoe3', () => {
  it('KDA blocks with the safe gate where head_count_kv is 0, RoPE MLA with a q LoRA and a gate per head elsewhere; the MTP block left out', () => {
    const f = testModelFile(dir, 'tiny-bailingmoe3');
    const p = programOf(f.kv, f.tensors);
    const gdn = p.ops.filter((o) => o.op === 'gated_delta_net');
    expect(gdn.map((o) => [o.params!.kda, o.params!.lower_bound, o.weights!.a])).toEqual([0, 2].map((i) => [1, -5, `blk.${i}.ssm_a`]));
    // Full-width gate and output-gate projections (no f_b / g_b).
    expect(p.ops.filter((o) => o.op === 'matmul' && /ssm_[fg]_a/.test(o.weights!.weight)).map((o) => p.buffers[o.out].width)).toEqual([256, 256, 256, 256]);
    // Per KDA block three convolution windows and the delta-rule matrices.
    expect(p.rsWidth).toEqual([0, 2].flatMap(() => [3 * 256, 3 * 256, 3 * 256, 4 * 64 * 64]));
    const mla = p.ops.filter((o) => o.op === 'mla_attention');
    expect(mla.map((o) => [o.weights!.k_b, o.params!.scale])).toEqual([1, 3].map((i) => [`blk.${i}.attn_k_b.weight`, Math.fround(1 / Math.sqrt(96))]));
    // RoPE on the shared key part and the queries' last 32 dims, adjacent pairs.
    expect(p.ops.filter((o) => o.op === 'rope').map((o) => [o.params!.n_dims, o.params!.neox, o.params!.rot_off])).toEqual([1, 3].flatMap(() => [[32, false, 128], [32, false, 64]]));
    expect(p.ops.filter((o) => o.op === 'matmul' && /attn_q_a\.weight/.test(o.weights!.weight)).length).toBe(2);
    expect(p.ops.filter((o) => o.op === 'sigmoid_mul' && o.params!.group === 64).length).toBe(2);
    // Nothing reads the NextN block (blk.4); the head is output.weight.
    expect(JSON.stringify(p.ops)).not.toMatch(/blk\.4\./);
    expect(p.ops.filter((o) => o.op === 'matmul' && o.out === p.logits).map((o) => o.weights!.weight)).toEqual(['output.weight']);
    // Experts clamped per block (swiglu_clamp_exp), the shared expert of its own width (192) and
    // clamped per block (swiglu_clamp_shexp); the dense block 0 unclamped.
    const moe = p.ops.filter((o) => o.op === 'moe');
    expect(moe.map((o) => [o.params!.act, o.params!.limit, o.params!.gating, o.params!.norm_w, o.params!.w_scale, o.weights!.exp_probs_b])).toEqual(
      [[1, 1], [2, 1.5], [3, 1]].map(([i, l]) => [6, l, 1, true, 2.5, `blk.${i}.exp_probs_b.bias`]),
    );
    const swiglu = p.ops.filter((o) => o.op === 'swiglu');
    expect(swiglu.map((o) => [p.buffers[o.out].width, o.params?.limit])).toEqual([[512, undefined], [192, 2], [192, 1], [192, 1.5]]);
  });

  it('-tied: attn_q without q LoRA, the shared width from expert_feed_forward_length x expert_shared_count, no limits, the tied head', () => {
    const f = testModelFile(dir, 'tiny-bailingmoe3-tied');
    const p = programOf(f.kv, f.tensors);
    expect(p.ops.filter((o) => o.op === 'gated_delta_net').length).toBe(3);
    expect(p.ops.filter((o) => o.op === 'mla_attention').length).toBe(2);
    // (The KDA blocks' attn_q is the delta rule's query, 256 wide; the MLA blocks' 4 heads of 96.)
    expect(p.ops.filter((o) => o.op === 'matmul' && /attn_q(_a)?\.weight/.test(o.weights!.weight)).map((o) => [o.weights!.weight, p.buffers[o.out].width])).toEqual(
      [0, 1, 2, 3, 4].map((i) => [`blk.${i}.attn_q.weight`, i < 3 ? 256 : 384]),
    );
    expect(p.ops.filter((o) => o.op === 'moe').map((o) => [o.params!.act, o.params!.norm_w])).toEqual([[undefined, false], [undefined, false], [undefined, false]]);
    expect(p.ops.filter((o) => o.op === 'swiglu').map((o) => [p.buffers[o.out].width, o.params?.limit])).toEqual([[512, undefined], [512, undefined], [256, undefined], [256, undefined], [256, undefined]]);
    expect(p.ops.filter((o) => o.op === 'matmul' && o.out === p.logits).map((o) => o.weights!.weight)).toEqual(['token_embd.weight']);
  });

  it('refuses what llama.cpp\'s loader refuses or asserts, with the key or tensor at fault', () => {
    const f = testModelFile(dir, 'tiny-bailingmoe3');
    const kv = (k: string, v: unknown) => ({ ...f.kv, [`bailingmoe3.${k}`]: v }) as typeof f.kv;
    const del = (k: string) => Object.fromEntries(Object.entries(f.kv).filter(([x]) => x !== `bailingmoe3.${k}`)) as typeof f.kv;
    for (const key of ['kda.head_dim', 'ssm.conv_kernel', 'attention.kv_lora_rank', 'attention.key_length_mla', 'attention.value_length_mla', 'kda.gate_lower_bound', 'expert_shared_count', 'expert_feed_forward_length', 'leading_dense_block_count'])
      expect(() => programOf(del(key), f.tensors)).toThrow(badModel(new RegExp(`lacks metadata 'bailingmoe3.${key.replace('.', '\\.')}'`)));
    expect(() => programOf(del('expert_gating_func'), f.tensors)).toThrow(badModel(/no expert_gating_func/));
    // GGML_ASSERT(kda_safe_gate) and GGML_ASSERT(kda_gate_lower_bound < 0).
    expect(() => programOf(kv('kda.safe_gate', false), f.tensors)).toThrow(badModel(/kda\.safe_gate is false/));
    expect(() => programOf(kv('kda.gate_lower_bound', 0), f.tensors)).toThrow(badModel(/kda\.gate_lower_bound 0 must be a finite negative number/));
    expect(() => programOf(kv('kda.gate_lower_bound', 2), f.tensors)).toThrow(badModel(/kda\.gate_lower_bound 2 must be/));
    // (Without the key the gate is safe, as llama.cpp defaults it.)
    expect(programOf(del('kda.safe_gate'), f.tensors).ops.filter((o) => o.op === 'gated_delta_net').length).toBe(2);
    expect(() => programOf(kv('attention.head_count_kv', [0, 2, 0, 1, 1]), f.tensors)).toThrow(badModel(/block 1 has attention\.head_count_kv 2/));
    expect(() => programOf(kv('attention.head_count', [4, 8, 4, 4, 4]), f.tensors)).toThrow(badModel(/head_count differs between blocks/));
    // The shared expert's width against expert_shared_feed_forward_length (and its default).
    expect(() => programOf(kv('expert_shared_feed_forward_length', 128), f.tensors)).toThrow(badModel(/'blk\.1\.ffn_gate_shexp\.weight' is \[256, 192\], expected \[256, 128\]/));
    expect(() => programOf(del('expert_shared_feed_forward_length'), f.tensors)).toThrow(badModel(/expected \[256, 128\]/));
    expect(() => programOf(kv('attention.q_lora_rank', 64), f.tensors)).toThrow(badModel(/'blk\.1\.attn_q_a\.weight' is \[256, 128\], expected \[256, 64\]/));
    expect(() => programOf(kv('swiglu_clamp_exp', [0, 1, 1]), f.tensors)).toThrow(badModel(/swiglu_clamp_exp' has 3 entries for 5 layers/));
    expect(() => programOf(f.kv, without(f.tensors, 'blk.2.ssm_f_a.weight'))).toThrow(badModel(/lacks tensor 'blk.2.ssm_f_a.weight'/));
    expect(() => programOf(f.kv, without(f.tensors, 'blk.3.attn_gate.weight'))).toThrow(badModel(/lacks tensor 'blk.3.attn_gate.weight'/));
    expect(() => programOf(f.kv, without(f.tensors, 'blk.3.exp_probs_b.bias'))).toThrow(badModel(/lacks tensor 'blk.3.exp_probs_b.bias'/));
    // q LoRA and attn_q together: llama.cpp would leave attn_q unused and refuse the file.
    const t = testModelFile(dir, 'tiny-bailingmoe3-tied');
    const both = new Map([...f.tensors, ['blk.1.attn_q.weight', t.tensors.get('blk.3.attn_q.weight')!]]);
    expect(() => programOf(f.kv, both)).toThrow(badModel(/block 1 has attn_q beside attention\.q_lora_rank 128/));
  });
});
