// Tencent Hunyuan v4 (`hy_v4`; llama.cpp src/models/hy-v4.cpp, converted by conversion/hy_v4.py
// HYV4Model on top of DeepseekV2Model). The converter writes DeepseekV2Model's MLA and MoE keys
// (q/kv LoRA ranks, head_count_kv 1 with key_length kv_lora + rope and value_length kv_lora, the
// per-head sizes in key_length_mla / value_length_mla, rope.dimension_count the rotary dims,
// leading_dense_block_count, expert_feed_forward_length, expert_shared_count, expert_weights_scale
// and _norm), expert_gating_func 2 (sigmoid; HY4 has no scoring_func key), no expert groups (HY4's
// n_group = topk_group = 1 are dropped), swiglu_clamp_exp (FLOAT32 per block, the routed experts'
// limit, when HF swiglu_limit > 0), hyper_connection.count / .epsilon / .magnitude (HF hc_mult,
// hc_eps, hc_magnitude) and, on DSA checkpoints, attention.indexer.head_count / key_length / top_k
// and attention.indexer.types (BOOL per block, true = its own indexer, false = the last one's
// selection; block 0 true). MTP layers are dropped.
//
// Tensors: token_embd, output_norm, output (untied), output_hc_fn [hc*n_embd, hc], output_hc_base
// [hc], output_hc_scale [1]; per block attn_norm, attn_sinks [n_head], attn_q_a / attn_q_a_norm /
// attn_q_b, attn_kv_a_mqa / attn_kv_a_norm, attn_k_b [qk_nope, kv_lora, n_head], attn_v_b [kv_lora,
// v_head, n_head], attn_output, attn_gate [n_embd, n_head*v_head], hc_attn_fn / hc_ffn_fn
// [hc*n_embd, 2*hc], hc_*_base [2*hc], hc_*_scale [2], ffn_norm, then ffn_gate/up/down on the leading
// dense blocks, else ffn_gate_inp, exp_probs_b.bias, ffn_{gate,up,down}_exps and the shared experts
// ffn_{gate,up,down}_shexp of expertFf x expert_shared_count; the indexer.* tensors on indexing
// blocks. The hc_*_fn matrices are F32 in every file (the converter forces them), as the 1-D
// tensors and the router are.
import { denseFfn, embeddings, f32Tensor, linear, linearInit, moeFfn, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { checkDeepseekMoe, deepseekMoeMetadata, ungatedSharedExpert, type DeepseekMoeOptions } from './deepseek2';

/**
 * mla: the MLA sizes (q LoRA required). hc: the hyper-connections (count of residual streams,
 * the coefficients' epsilon, the post coefficients' magnitude). dsa: the lightning indexer
 * (absent: the all-full_attention checkpoints), `full` per block (block 0 true). swigluLimit: the
 * routed experts' clamp written on every block (absent or 0: the key is not written).
 */
export type HyV4Config = ModelConfig & {
  mla: { qLora: number; kvLora: number; qkNope: number; qkRope: number; vHead: number };
  hc: { count: number; eps: number; magnitude: number };
  dsa?: { nHead: number; headDim: number; topK: number; full: boolean[] };
  moe: DeepseekMoeOptions;
  swigluLimit?: number;
};

/** HC coefficient inputs: fn of the normed streams at unit gain (mixes of std ~1), bases and scales near the converter's. */
function hcTensors(prefix: string, c: HyV4Config, nOut: number, nScale: number, layer?: number): TensorSpec[] {
  const W = c.hc.count * c.dim;
  return [
    f32Tensor(`${prefix}_fn.weight`, [W, nOut], linearInit(W), layer),
    f32Tensor(`${prefix}_base.weight`, [nOut], { kind: 'normal', std: 0.5 }, layer),
    f32Tensor(`${prefix}_scale.weight`, [nScale], { kind: 'normal', mean: 1, std: 0.3 }, layer),
  ];
}

export const hyV4: ArchDefinition = {
  name: 'hy_v4',
  ggufArch: 'hy_v4',
  normalize(c: ModelConfig): ModelConfig {
    const d = c as HyV4Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'vocabSize', 'ctx', 'expertFf']);
    const m = d.mla;
    if (!m || ![m.qLora, m.kvLora, m.qkNope, m.qkRope, m.vHead].every((x) => Number.isInteger(x) && x > 0)) throw new Error('hy_v4: mla needs positive qLora, kvLora, qkNope, qkRope, vHead (use a preset)');
    if (m.qkRope % 2 !== 0) throw new Error(`hy_v4: qkRope ${m.qkRope} must be even`);
    const h = d.hc;
    if (!h || !Number.isInteger(h.count) || h.count < 1 || !(h.eps >= 0) || !Number.isFinite(h.magnitude)) throw new Error('hy_v4: hc needs a positive integer count, eps >= 0 and a finite magnitude');
    const x = d.dsa;
    if (x) {
      if (x.nHead < 1 || x.topK < 1 || x.headDim <= m.qkRope) throw new Error('hy_v4: the indexer needs heads and topK positive and a key longer than the rotary dims');
      if (x.full.length !== c.nLayers || !x.full[0]) throw new Error('hy_v4: dsa.full needs one flag per block, block 0 true (nothing precedes it to share)');
    }
    checkDeepseekMoe(c, d.moe);
    if (d.moe.nShared < 1 || d.moe.nGroup > 1) throw new Error('hy_v4: shared experts are required and there are no expert groups (the converter drops n_group = 1)');
    if (d.swigluLimit !== undefined && !(d.swigluLimit >= 0)) throw new Error(`hy_v4: swigluLimit must be >= 0, got ${String(d.swigluLimit)}`);
    return { ...c, nKvHeads: 1, moe: { ...d.moe, nDense: Math.min(d.moe.nDense, c.nLayers) } } as HyV4Config;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const d = c as HyV4Config;
    const a = 'hy_v4';
    const m = d.mla;
    const out: [string, GgufValue][] = [
      [`${a}.vocab_size`, kv.u32(c.vocabSize)],
      [`${a}.context_length`, kv.u32(c.ctx)],
      [`${a}.embedding_length`, kv.u32(c.dim)],
      [`${a}.block_count`, kv.u32(c.nLayers)],
      [`${a}.feed_forward_length`, kv.u32(c.ff)],
      [`${a}.attention.head_count`, kv.u32(c.nHeads)],
      [`${a}.attention.head_count_kv`, kv.u32(1)],
      [`${a}.attention.key_length`, kv.u32(m.kvLora + m.qkRope)],
      [`${a}.attention.value_length`, kv.u32(m.kvLora)],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${a}.attention.q_lora_rank`, kv.u32(m.qLora)],
      [`${a}.attention.kv_lora_rank`, kv.u32(m.kvLora)],
      [`${a}.attention.key_length_mla`, kv.u32(m.qkNope + m.qkRope)],
      [`${a}.attention.value_length_mla`, kv.u32(m.vHead)],
      [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${a}.rope.dimension_count`, kv.u32(m.qkRope)],
      [`${a}.expert_count`, kv.u32(c.nExperts)],
      [`${a}.expert_used_count`, kv.u32(c.nExpertsUsed)],
      ...deepseekMoeMetadata(a, c, d.moe),
      [`${a}.hyper_connection.count`, kv.u32(d.hc.count)],
      [`${a}.hyper_connection.epsilon`, kv.f32(d.hc.eps)],
      [`${a}.hyper_connection.magnitude`, kv.f32(d.hc.magnitude)],
    ];
    if (d.swigluLimit) out.push([`${a}.swiglu_clamp_exp`, kv.arr(GgufType.FLOAT32, new Array<number>(c.nLayers).fill(d.swigluLimit))]);
    if (d.dsa)
      out.push(
        [`${a}.attention.indexer.head_count`, kv.u32(d.dsa.nHead)],
        [`${a}.attention.indexer.key_length`, kv.u32(d.dsa.headDim)],
        [`${a}.attention.indexer.top_k`, kv.u32(d.dsa.topK)],
        [`${a}.attention.indexer.types`, kv.arr(GgufType.BOOL, d.dsa.full)],
      );
    return out;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const d = c as HyV4Config;
    const { mla: m, moe } = d;
    const H = c.nHeads;
    const t = embeddings(c);
    t.push(...hcTensors('output_hc', d, d.hc.count, 1));
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(
        norm(`${p}.attn_norm.weight`, c.dim, i),
        f32Tensor(`${p}.attn_sinks.weight`, [H], { kind: 'normal', std: 1 }, i),
        linear(`${p}.attn_q_a.weight`, c.dim, m.qLora, 'attn_q', i),
        norm(`${p}.attn_q_a_norm.weight`, m.qLora, i),
        linear(`${p}.attn_q_b.weight`, m.qLora, H * (m.qkNope + m.qkRope), 'attn_q', i),
        linear(`${p}.attn_kv_a_mqa.weight`, c.dim, m.kvLora + m.qkRope, 'attn_k', i),
        norm(`${p}.attn_kv_a_norm.weight`, m.kvLora, i),
        { name: `${p}.attn_k_b.weight`, shape: [m.qkNope, m.kvLora, H], init: linearInit(m.kvLora), role: 'attn_k', layer: i },
        { name: `${p}.attn_v_b.weight`, shape: [m.kvLora, m.vHead, H], init: linearInit(m.kvLora), role: 'attn_v', layer: i },
        linear(`${p}.attn_output.weight`, H * m.vHead, c.dim, 'attn_output', i, residualGain(c)),
        linear(`${p}.attn_gate.weight`, c.dim, H * m.vHead, 'attn_q', i),
      );
      if (d.dsa && d.dsa.full[i]) {
        const x = d.dsa;
        t.push(
          norm(`${p}.indexer.k_norm.weight`, x.headDim, i),
          // (F32 in every file: the converter forces it.)
          f32Tensor(`${p}.indexer.k_norm.bias`, [x.headDim], { kind: 'normal', std: 0.1 }, i),
          // (F32: the base converter rules keep INDEXER_PROJ so.)
          f32Tensor(`${p}.indexer.proj.weight`, [c.dim, x.nHead], linearInit(c.dim), i),
          linear(`${p}.indexer.attn_k.weight`, c.dim, x.headDim, 'attn_k', i),
          linear(`${p}.indexer.attn_q_b.weight`, m.qLora, x.nHead * x.headDim, 'attn_q', i),
        );
      }
      t.push(...hcTensors(`${p}.hc_attn`, d, 2 * d.hc.count, 2, i), ...hcTensors(`${p}.hc_ffn`, d, 2 * d.hc.count, 2, i));
      if (i < moe.nDense) t.push(...denseFfn(c, i));
      else {
        // The routed mix is scaled by wScale after renormalization: its writer at residualGain / wScale.
        const down = linearInit(c.expertFf, residualGain(c) / (moe.wScale || 1));
        t.push(...moeFfn(c, i, c.expertFf).map((x) => (x.role === 'ffn_down' ? { ...x, init: down } : x)));
        if (moe.probsBias) t.push({ name: `${p}.exp_probs_b.bias`, shape: [c.nExperts], init: { kind: 'normal', std: 0.05 }, role: 'norm', layer: i });
        t.push(...ungatedSharedExpert(c, i, c.expertFf * moe.nShared));
      }
    }
    return t;
  },
};
