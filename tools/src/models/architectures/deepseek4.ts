// DeepSeek-V4 (`deepseek4`; llama.cpp src/models/deepseek4.cpp, converted by conversion/deepseek.py
// DeepseekV4Model). Keys: the base converter's (context/embedding length, block_count with the MTP
// blocks, head_count, head_count_kv 1, key_length = value_length = the head size, rms epsilon,
// rope.freq_base, expert counts) and DeepseekV4Model's: rope.dimension_count (qk_rope_head_dim),
// attention.q_lora_rank, attention.sliding_window, expert_feed_forward_length,
// expert_shared_count, expert_weights_scale / _norm, expert_gating_func 4 (sqrtsoftplus),
// swiglu_clamp_exp and swiglu_clamp_shexp (FLOAT32 per block), attention.indexer.head_count /
// key_length / top_k, attention.output_group_count / output_lora_rank, attention.compress_ratios
// (per block: 0 none, 4 CSA with the lightning indexer, 128 HCA), compress_rope_freq_base,
// hyper_connection.count / sinkhorn_iterations / epsilon, hash_layer_count, embedding_length_out
// (hc x n_embd) and nextn_predict_layers.
//
// Tensors: token_embd, output_norm, output, output_hc_fn [hc*n_embd, hc], output_hc_base [hc],
// output_hc_scale [1]; per block attn_norm, attn_sinks [n_head], attn_q_a / attn_q_a_norm /
// attn_q_b, attn_kv [n_embd, head] / attn_kv_a_norm, attn_output_a [n_head*head/groups,
// o_lora*groups], attn_output_b [groups*o_lora, n_embd], hc_{attn,ffn}_fn [hc*n_embd, (2+hc)*hc],
// hc_*_base [(2+hc)*hc], hc_*_scale [3]; compressing blocks attn_compressor_kv / _gate [n_embd,
// coff*head] (coff 2 for ratio 4), attn_compressor_ape [coff*head, ratio], attn_compressor_norm
// [head]; CSA blocks also indexer.proj [n_embd, idx_heads], indexer.attn_q_b [q_lora,
// idx_heads*idx_head], indexer_compressor_kv / _gate [n_embd, 2*idx_head], indexer_compressor_ape
// [2*idx_head, 4], indexer_compressor_norm [idx_head]; ffn_norm, ffn_gate_inp, on the first
// hash_layer_count blocks ffn_gate_tid2eid (I32 [n_expert_used, n_vocab]: each token's experts),
// on the others exp_probs_b.bias, the routed ffn_{gate,up,down}_exps and shared
// ffn_{gate,up,down}_shexp. An MTP block (index n_layer) adds nextn.eh_proj / enorm / hnorm /
// shared_head_norm.
import { embeddings, f32Tensor, linear, linearInit, moeFfn, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { ungatedSharedExpert } from './deepseek2';

/**
 * head: the attention head size (queries, the shared key/value row), rope its rotary tail.
 * ratios: per trunk block 0, 4 or 128 (the MTP block is written with 0). window: the raw
 * sliding window. oGroups / oLora: the grouped output LoRA. indexer: the CSA blocks' lightning
 * indexer. hc: hyper-connections (streams, Sinkhorn iterations, epsilon). hashLayers: leading
 * blocks routed by the token id table. mtp: the number of MTP blocks written after the trunk.
 */
export type Deepseek4Config = ModelConfig & {
  head: number;
  rope: number;
  qLora: number;
  oGroups: number;
  oLora: number;
  window: number;
  ratios: number[];
  compressRopeBase: number;
  indexer: { nHead: number; headDim: number; topK: number };
  hc: { count: number; iters: number; eps: number };
  hashLayers: number;
  nShared: number;
  normW: boolean;
  wScale: number;
  swigluLimit: number;
  swigluLimitShexp?: number;
  mtp: number;
  /** YaRN (rope.scaling.type yarn, factor, original_context_length): the compressing blocks' RoPE only. */
  yarn?: { factor: number; origCtx: number };
};

function hcTensors(prefix: string, c: Deepseek4Config, nOut: number, nScale: number, layer?: number): TensorSpec[] {
  const W = c.hc.count * c.dim;
  return [
    f32Tensor(`${prefix}_fn.weight`, [W, nOut], linearInit(W), layer),
    f32Tensor(`${prefix}_base.weight`, [nOut], { kind: 'normal', std: 0.5 }, layer),
    f32Tensor(`${prefix}_scale.weight`, [nScale], { kind: 'normal', mean: 1, std: 0.3 }, layer),
  ];
}

export const deepseek4: ArchDefinition = {
  name: 'deepseek4',
  ggufArch: 'deepseek4',
  normalize(c: ModelConfig): ModelConfig {
    const d = c as Deepseek4Config;
    requirePositive(c, ['nLayers', 'dim', 'nHeads', 'vocabSize', 'ctx', 'expertFf', 'nExperts', 'nExpertsUsed']);
    for (const k of ['head', 'rope', 'qLora', 'oGroups', 'oLora', 'window'] as const)
      if (!Number.isInteger(d[k]) || d[k] < 1) throw new Error(`deepseek4: ${k} must be a positive integer (use a preset)`);
    if (d.rope % 2 !== 0 || d.rope > d.head) throw new Error(`deepseek4: rope ${d.rope} must be even and within the head ${d.head}`);
    if (c.nHeads % d.oGroups !== 0) throw new Error(`deepseek4: ${c.nHeads} heads do not split into ${d.oGroups} output groups`);
    if (!Array.isArray(d.ratios) || d.ratios.length !== c.nLayers || d.ratios.some((r) => r !== 0 && r !== 4 && r !== 128))
      throw new Error('deepseek4: ratios needs one of 0, 4, 128 per block');
    if (d.hc.count !== 4) throw new Error('deepseek4: llama.cpp runs 4 hyper-connection streams only');
    if (!(d.hc.iters >= 1) || !(d.hc.eps >= 0)) throw new Error('deepseek4: hc needs iters >= 1 and eps >= 0');
    const x = d.indexer;
    if (x.nHead < 1 || x.topK < 1 || x.headDim < 64 || (x.headDim & (x.headDim - 1)) !== 0 || x.headDim < d.rope) throw new Error('deepseek4: the indexer needs heads, top_k and a power-of-two key of at least 64 that holds the rotary dims');
    if (d.hashLayers < 0 || d.hashLayers > c.nLayers) throw new Error(`deepseek4: hashLayers ${d.hashLayers} out of range`);
    if (c.nExpertsUsed > c.nExperts) throw new Error('deepseek4: more experts used than there are');
    if (d.mtp !== 0 && d.mtp !== 1) throw new Error('deepseek4: mtp is 0 or 1 (llama.cpp runs one MTP block)');
    if (d.yarn && !(d.yarn.factor > 1 && Number.isInteger(d.yarn.origCtx) && d.yarn.origCtx > 0)) throw new Error('deepseek4: yarn needs a factor > 1 and a positive original context');
    return { ...c, nKvHeads: 1 } as Deepseek4Config;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const d = c as Deepseek4Config;
    const a = 'deepseek4';
    const nAll = c.nLayers + d.mtp;
    const perBlock = (v: number) => kv.arr(GgufType.FLOAT32, new Array<number>(nAll).fill(v));
    return [
      [`${a}.vocab_size`, kv.u32(c.vocabSize)],
      [`${a}.context_length`, kv.u32(c.ctx)],
      [`${a}.embedding_length`, kv.u32(c.dim)],
      [`${a}.embedding_length_out`, kv.u32(c.dim * d.hc.count)],
      [`${a}.block_count`, kv.u32(nAll)],
      [`${a}.feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.attention.head_count`, kv.u32(c.nHeads)],
      [`${a}.attention.head_count_kv`, kv.u32(1)],
      [`${a}.attention.key_length`, kv.u32(d.head)],
      [`${a}.attention.value_length`, kv.u32(d.head)],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${a}.attention.q_lora_rank`, kv.u32(d.qLora)],
      [`${a}.attention.sliding_window`, kv.u32(d.window)],
      [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${a}.rope.dimension_count`, kv.u32(d.rope)],
      [`${a}.expert_count`, kv.u32(c.nExperts)],
      [`${a}.expert_used_count`, kv.u32(c.nExpertsUsed)],
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.expert_shared_count`, kv.u32(d.nShared)],
      [`${a}.expert_weights_scale`, kv.f32(d.wScale)],
      [`${a}.expert_weights_norm`, kv.bool(d.normW)],
      [`${a}.expert_gating_func`, kv.u32(4)],
      [`${a}.swiglu_clamp_exp`, perBlock(d.swigluLimit)],
      [`${a}.swiglu_clamp_shexp`, perBlock(d.swigluLimitShexp ?? d.swigluLimit)],
      [`${a}.attention.indexer.head_count`, kv.u32(d.indexer.nHead)],
      [`${a}.attention.indexer.key_length`, kv.u32(d.indexer.headDim)],
      [`${a}.attention.indexer.top_k`, kv.u32(d.indexer.topK)],
      [`${a}.attention.output_group_count`, kv.u32(d.oGroups)],
      [`${a}.attention.output_lora_rank`, kv.u32(d.oLora)],
      [`${a}.attention.compress_ratios`, kv.arr(GgufType.UINT32, [...d.ratios, ...new Array<number>(d.mtp).fill(0)])],
      [`${a}.attention.compress_rope_freq_base`, kv.f32(d.compressRopeBase)],
      [`${a}.hyper_connection.count`, kv.u32(d.hc.count)],
      [`${a}.hyper_connection.sinkhorn_iterations`, kv.u32(d.hc.iters)],
      [`${a}.hyper_connection.epsilon`, kv.f32(d.hc.eps)],
      [`${a}.hash_layer_count`, kv.u32(d.hashLayers)],
      [`${a}.nextn_predict_layers`, kv.u32(d.mtp)],
      ...(d.yarn
        ? ([
            [`${a}.rope.scaling.type`, kv.str('yarn')],
            [`${a}.rope.scaling.factor`, kv.f32(d.yarn.factor)],
            [`${a}.rope.scaling.original_context_length`, kv.u32(d.yarn.origCtx)],
          ] as [string, GgufValue][])
        : []),
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const d = c as Deepseek4Config;
    const H = c.nHeads;
    const D = d.head;
    const hc = d.hc.count;
    const mix = (2 + hc) * hc;
    const t = embeddings(c);
    t.push(...hcTensors('output_hc', d, hc, 1));
    for (let i = 0; i < c.nLayers + d.mtp; i++) {
      const p = `blk.${i}`;
      const ratio = i < c.nLayers ? d.ratios[i] : 0;
      t.push(
        norm(`${p}.attn_norm.weight`, c.dim, i),
        f32Tensor(`${p}.attn_sinks.weight`, [H], { kind: 'normal', std: 1 }, i),
        linear(`${p}.attn_q_a.weight`, c.dim, d.qLora, 'attn_q', i),
        norm(`${p}.attn_q_a_norm.weight`, d.qLora, i),
        linear(`${p}.attn_q_b.weight`, d.qLora, H * D, 'attn_q', i),
        linear(`${p}.attn_kv.weight`, c.dim, D, 'attn_k', i),
        norm(`${p}.attn_kv_a_norm.weight`, D, i),
        linear(`${p}.attn_output_a.weight`, (H * D) / d.oGroups, d.oLora * d.oGroups, 'attn_output', i),
        linear(`${p}.attn_output_b.weight`, d.oGroups * d.oLora, c.dim, 'attn_output', i, residualGain(c)),
        ...hcTensors(`${p}.hc_attn`, d, mix, 3, i),
        ...hcTensors(`${p}.hc_ffn`, d, mix, 3, i),
      );
      if (ratio !== 0) {
        const coff = ratio === 4 ? 2 : 1;
        t.push(
          linear(`${p}.attn_compressor_kv.weight`, c.dim, coff * D, 'attn_k', i),
          linear(`${p}.attn_compressor_gate.weight`, c.dim, coff * D, 'attn_k', i),
          f32Tensor(`${p}.attn_compressor_ape.weight`, [coff * D, ratio], { kind: 'normal', std: 0.5 }, i),
          norm(`${p}.attn_compressor_norm.weight`, D, i),
        );
        if (ratio === 4) {
          const x = d.indexer;
          t.push(
            f32Tensor(`${p}.indexer.proj.weight`, [c.dim, x.nHead], linearInit(c.dim), i),
            linear(`${p}.indexer.attn_q_b.weight`, d.qLora, x.nHead * x.headDim, 'attn_q', i),
            linear(`${p}.indexer_compressor_kv.weight`, c.dim, 2 * x.headDim, 'attn_k', i),
            linear(`${p}.indexer_compressor_gate.weight`, c.dim, 2 * x.headDim, 'attn_k', i),
            f32Tensor(`${p}.indexer_compressor_ape.weight`, [2 * x.headDim, ratio], { kind: 'normal', std: 0.5 }, i),
            norm(`${p}.indexer_compressor_norm.weight`, x.headDim, i),
          );
        }
      }
      // The routed mix is scaled by wScale after renormalization: its writer at residualGain / wScale.
      const down = linearInit(c.expertFf, residualGain(c) / (d.wScale || 1));
      t.push(...moeFfn(c, i, c.expertFf).map((x) => (x.role === 'ffn_down' ? { ...x, init: down } : x)));
      if (i < d.hashLayers) t.push({ name: `${p}.ffn_gate_tid2eid.weight`, shape: [c.nExpertsUsed, c.vocabSize], init: { kind: 'expert_ids', nExpert: c.nExperts }, role: 'index', layer: i });
      else t.push({ name: `${p}.exp_probs_b.bias`, shape: [c.nExperts], init: { kind: 'normal', std: 0.05 }, role: 'norm', layer: i });
      t.push(...ungatedSharedExpert(c, i, c.expertFf * d.nShared));
      if (i >= c.nLayers) {
        t.push(
          linear(`${p}.nextn.eh_proj.weight`, 2 * c.dim, c.dim, 'nextn_eh_proj', i),
          norm(`${p}.nextn.enorm.weight`, c.dim, i),
          norm(`${p}.nextn.hnorm.weight`, c.dim, i),
          norm(`${p}.nextn.shared_head_norm.weight`, c.dim, i),
        );
      }
    }
    return t;
  },
};
