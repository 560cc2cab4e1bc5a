// kimi-linear's program as llama.cpp's graph (src/models/kimi-linear.cpp) builds it (but for the
// attn_kv_b path, which pairs the query's and key's halves as the model does), the files it refuses
// with the key or tensor at fault, and an attn_kv_b file giving the logits of its split twin
// (numerics against llama.cpp: tools/src/parity).
import fs from 'node:fs';

import type { GgufTensorInfo } from '@kailstream/core-native';

import { EngineModel } from '../model';
import { programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const without = (m: Map<string, GgufTensorInfo>, name: string) => new Map([...m].filter(([k]) => k !== name));
const badModel = (re: RegExp) => expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(re) });

describe('kimi-linear', () => {
  it('KDA blocks where head_count_kv is 0, NoPE MLA elsewhere (absorbed for attn_k_b/attn_v_b, per-head attention for attn_kv_b)', () => {
    const f = testModelFile(dir, 'tiny-kimi-linear');
    const p = programOf(f.kv, f.tensors);
    expect(p.ops.filter((o) => o.op === 'rope')).toEqual([]);
    expect(p.ops.filter((o) => o.op === 'gated_delta_net').length).toBe(2);
    expect(p.ops.filter((o) => o.op === 'mla_attention').map((o) => o.params!.scale)).toEqual([Math.fround(1 / Math.sqrt(96)), Math.fround(1 / Math.sqrt(96))]);
    // Per KDA block three convolution windows and the delta-rule matrices.
    expect(p.rsWidth).toEqual([0, 2].flatMap(() => [3 * 256, 3 * 256, 3 * 256, 4 * 64 * 64]));
    const moe = p.ops.filter((o) => o.op === 'moe');
    expect(moe.map((o) => [o.params!.gating, o.params!.norm_w, o.params!.w_scale, o.weights!.exp_probs_b])).toEqual(
      [1, 2, 3].map((i) => [1, true, Math.fround(2.446), `blk.${i}.exp_probs_b.bias`]),
    );
    const k = testModelFile(dir, 'tiny-kimi-linear-kvb');
    const q = programOf(k.kv, k.tensors);
    expect(q.ops.filter((o) => o.op === 'mla_attention')).toEqual([]);
    expect(q.ops.filter((o) => o.op === 'attention').map((o) => [o.params!.n_head_kv, o.params!.head_dim, o.params!.head_dim_v])).toEqual([[4, 96, 64], [4, 96, 64]]);
    const u = testModelFile(dir, 'tiny-kimi-linear-fused');
    const fused = programOf(u.kv, u.tensors);
    expect(fused.ops.filter((o) => o.op === 'matmul' && o.weights!.weight === 'blk.0.attn_qkv.weight').length).toBe(1);
    expect(fused.ops.filter((o) => o.op === 'mla_attention').length).toBe(2);
  });

  it('an attn_kv_b file gives the logits of the split file it folds (q_nope with k_nope, q_pe with k_pe)', async () => {
    const toks = Array.from({ length: 24 }, (_, i) => ((i * 37 + 5) % 1000) + 3);
    const logits = async (preset: string) => {
      const m = EngineModel.load(writeTestModel(dir, preset, 'F32', 3), { threads: 2, nCtx: 64, kvType: 'f32' });
      try {
        return await m.evaluate(0, toks, 'all');
      } finally {
        m.close();
      }
    };
    const [split, kvb] = [await logits('tiny-kimi-linear'), await logits('tiny-kimi-linear-kvb')];
    let d = 0;
    let n = 0;
    for (let i = 0; i < split.length; i++) {
      d += (kvb[i] - split[i]) ** 2;
      n += split[i] ** 2;
    }
    // Absorbed over the latent cache against per-head K/V: the same function, summed in other orders.
    expect(d / n).toBeLessThan(1e-12);
    const V = split.length / toks.length;
    const top = (x: Float32Array) => toks.map((_, t) => x.subarray(t * V, (t + 1) * V).reduce((b, v, j, a) => (v > a[b] ? j : b), 0));
    expect(top(kvb)).toEqual(top(split));
  }, 60_000);

  it('refuses missing or malformed keys and tensors with what is wrong', () => {
    const f = testModelFile(dir, 'tiny-kimi-linear');
    const kv = (k: string, v: unknown) => ({ ...f.kv, [`kimi-linear.${k}`]: v }) as typeof f.kv;
    const del = (k: string) => Object.fromEntries(Object.entries(f.kv).filter(([x]) => x !== `kimi-linear.${k}`)) as typeof f.kv;
    for (const key of ['kda.head_dim', 'ssm.conv_kernel', 'attention.kv_lora_rank', 'attention.key_length_mla', 'expert_shared_count', 'expert_feed_forward_length'])
      expect(() => programOf(del(key), f.tensors)).toThrow(badModel(new RegExp(`lacks metadata 'kimi-linear.${key.replace('.', '\\.')}'`)));
    expect(() => programOf(del('expert_gating_func'), f.tensors)).toThrow(badModel(/no expert_gating_func/));
    expect(() => programOf(kv('kda.head_dim', 0), f.tensors)).toThrow(badModel(/kda\.head_dim' is 0/));
    expect(() => programOf(kv('attention.value_length_mla', 0), f.tensors)).toThrow(badModel(/both be set or both be 0/));
    expect(() => programOf(kv('rope.dimension_count', 96), f.tensors)).toThrow(badModel(/shared part .* and a per-head part/));
    expect(() => programOf(f.kv, without(f.tensors, 'blk.2.ssm_conv1d_k.weight'))).toThrow(badModel(/lacks tensor 'blk.2.ssm_conv1d_k.weight'/));
    expect(() => programOf(f.kv, without(f.tensors, 'blk.1.ffn_up_shexp.weight'))).toThrow(badModel(/lacks tensor 'blk.1.ffn_up_shexp.weight'/));
    expect(() => programOf(f.kv, without(f.tensors, 'blk.3.exp_probs_b.bias'))).toThrow(badModel(/lacks tensor 'blk.3.exp_probs_b.bias'/));
    // attn_kv_b with the MLA cache's keys set: llama.cpp's graph has no input for that path.
    const k = testModelFile(dir, 'tiny-kimi-linear-kvb');
    const mla = { ...k.kv, 'kimi-linear.attention.key_length_mla': 96, 'kimi-linear.attention.value_length_mla': 64 };
    expect(() => programOf(mla, k.tensors)).toThrow(badModel(/block 1 has attn_kv_b, which llama.cpp runs only without the MLA cache/));
  });
});
