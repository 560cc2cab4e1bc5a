// kimi-k3's program as llama.cpp's graph (src/models/kimi-k3.cpp) builds it: the residual attention's
// banking and mixing, situ in every FFN, latent experts, the full-rank KDA gate and its lower bound,
// the MLA output gate; and the files it refuses with the key or tensor at fault (numerics against
// llama.cpp: tools/src/parity).
import fs from 'node:fs';

import type { GgufTensorInfo } from '@kailstream/core-native';

import { programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const without = (m: Map<string, GgufTensorInfo>, name: string) => new Map([...m].filter(([k]) => k !== name));
const badModel = (re: RegExp) => expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(re) });

describe('kimi-k3', () => {
  it('banks every 2nd block’s input, mixes before each sublayer and the head, situ everywhere, latent experts, KDA and MLA gates', () => {
    const f = testModelFile(dir, 'tiny-kimi-k3');
    const p = programOf(f.kv, f.tensors);
    const names = p.buffers.map((b) => b.name);
    const stack = names.indexOf('attn_res_stack');
    expect(p.buffers[stack].width).toBe(3 * 256);
    // Blocks 0, 2 and 4 bank their raw input x at checkpoints 0, 1, 2.
    const x = names.indexOf('x');
    expect(p.ops.filter((o) => o.op === 'copy' && o.out === stack).map((o) => [o.a, o.params!.out_off])).toEqual([[x, 0], [x, 256], [x, 512]]);
    // Mixes: block 0's attention reads x itself (nothing banked yet); then ffn, attn, ffn, ... and the head.
    const mixes = p.ops.filter((o) => o.op === 'attn_res').map((o) => [o.weights!.score, o.params!.n_ckpt]);
    expect(mixes).toEqual([
      ['blk.0.ffn_res_score.weight', 1],
      ['blk.1.attn_res_score.weight', 1], ['blk.1.ffn_res_score.weight', 1],
      ['blk.2.attn_res_score.weight', 1], ['blk.2.ffn_res_score.weight', 2],
      ['blk.3.attn_res_score.weight', 2], ['blk.3.ffn_res_score.weight', 2],
      ['blk.4.attn_res_score.weight', 2], ['blk.4.ffn_res_score.weight', 3],
      ['output_res_score.weight', 3],
    ]);
    // A banking block restarts the stream from its attention output.
    const attnOut = names.indexOf('attn_out');
    expect(p.ops.filter((o) => o.op === 'copy' && o.out === x && o.a === attnOut).length).toBe(3);
    expect(p.ops.filter((o) => o.op === 'add' && o.out === x && o.b === attnOut).length).toBe(2);
    // situ: the dense block and the shared experts (swiglu with situ_beta), the experts (act 8).
    expect(p.ops.filter((o) => o.op === 'swiglu').map((o) => [o.params!.situ_beta, o.params!.situ_linear_beta])).toEqual(Array(5).fill([2, 3]));
    const moe = p.ops.filter((o) => o.op === 'moe');
    expect(moe.map((o) => [o.params!.act, o.params!.gating, o.params!.norm_w, o.params!.w_scale, p.buffers[o.a!].width, names[o.b!]])).toEqual(
      [1, 2, 3, 4].map(() => [8, 1, true, 2.5, 128, 'h']),
    );
    expect(p.ops.filter((o) => o.op === 'rms_norm' && o.weights!.weight?.endsWith('ffn_routed_norm.weight')).length).toBe(4);
    // KDA: the lower-bounded gate (sigmoid of -(alpha + dt_bias) ssm_a), the full-rank ssm_g.
    expect(p.ops.filter((o) => o.op === 'gated_delta_net').map((o) => [o.params!.lower_bound, o.params!.neg_a])).toEqual([[-5, 1], [-5, 1], [-5, 1]]);
    expect(p.ops.filter((o) => o.op === 'matmul' && o.weights!.weight?.endsWith('ssm_g.weight')).length).toBe(3);
    // MLA: q LoRA, the sigmoid output gate, no RoPE.
    expect(p.ops.filter((o) => o.op === 'rope')).toEqual([]);
    expect(p.ops.filter((o) => o.op === 'matmul' && o.weights!.weight?.endsWith('attn_q_b.weight')).length).toBe(2);
    expect(p.ops.filter((o) => o.op === 'sigmoid_mul' && names[o.out] === 'mla_attn256').length).toBe(2);
  });

  it('-plain: no residual attention, experts at n_embd, softplus decay, attn_q, no MLA gate', () => {
    const f = testModelFile(dir, 'tiny-kimi-k3-plain');
    const p = programOf(f.kv, f.tensors);
    expect(p.ops.filter((o) => o.op === 'attn_res')).toEqual([]);
    expect(p.buffers.some((b) => b.name === 'attn_res_stack')).toBe(false);
    expect(p.ops.filter((o) => o.op === 'moe').map((o) => [o.params!.act, o.params!.norm_w, o.b, p.buffers[o.a!].width])).toEqual([1, 2, 3].map(() => [8, false, undefined, 256]));
    expect(p.ops.filter((o) => o.op === 'gated_delta_net').map((o) => o.params!.lower_bound)).toEqual([undefined, undefined]);
    expect(p.ops.filter((o) => o.op === 'swiglu').map((o) => o.params!.situ_linear_beta)).toEqual(Array(4).fill(0));
    expect(p.ops.filter((o) => o.op === 'sigmoid_mul' && p.buffers[o.out].name.startsWith('mla_attn')).length).toBe(0);
  });

  it('refuses missing or malformed keys and tensors with what is wrong', () => {
    const f = testModelFile(dir, 'tiny-kimi-k3');
    const kv = (k: string, v: unknown) => ({ ...f.kv, [`kimi-k3.${k}`]: v }) as typeof f.kv;
    const del = (k: string) => Object.fromEntries(Object.entries(f.kv).filter(([x]) => x !== `kimi-k3.${k}`)) as typeof f.kv;
    for (const key of ['attn_res.block_size', 'activation.situ_beta', 'activation.situ_linear_beta', 'kda.head_dim', 'ssm.conv_kernel', 'attention.kv_lora_rank', 'attention.key_length_mla', 'expert_shared_count', 'expert_feed_forward_length', 'attention.layer_norm_rms_epsilon'])
      expect(() => programOf(del(key), f.tensors)).toThrow(badModel(new RegExp(`lacks metadata 'kimi-k3.${key.replace(/\./g, '\\.')}'`)));
    expect(() => programOf(del('expert_gating_func'), f.tensors)).toThrow(badModel(/no expert_gating_func/));
    expect(() => programOf(kv('activation.situ_beta', 0), f.tensors)).toThrow(badModel(/situ_beta is 0; the situ activation needs a positive beta/));
    expect(() => programOf(kv('kda.gate_lower_bound', 1), f.tensors)).toThrow(badModel(/gate_lower_bound is 1; a gate lower bound must be negative/));
    expect(() => programOf(kv('attn_res.block_size', -1), f.tensors)).toThrow(badModel(/attn_res\.block_size' is -1/));
    expect(() => programOf(kv('expert_latent_length', 'x'), f.tensors)).toThrow(badModel(/expert_latent_length' must be a number/));
    for (const t of ['output_res_score.weight', 'blk.3.attn_res_score.weight', 'blk.0.ffn_res_score.weight', 'blk.1.ffn_routed_down.weight', 'blk.3.ssm_g.weight', 'blk.0.ffn_gate.weight', 'blk.4.exp_probs_b.bias'])
      expect(() => programOf(f.kv, without(f.tensors, t))).toThrow(badModel(new RegExp(`lacks tensor '${t.replace(/\./g, '\\.')}'`)));
  });
});
