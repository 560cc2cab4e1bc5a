// Qwen3.8-Flash-Next (`qwen4exp`; llama.cpp src/models/qwen4exp.cpp, converted by
// conversion/qwen4exp.py Qwen4ExpTextModel on top of Qwen3.5's gated delta net and interleaved
// M-RoPE). The converter writes Qwen3-Next's keys (ssm.conv_kernel / state_size / group_count /
// time_step_rank / inner_size, attention.recurrent_layers from layer_types and
// full_attention_interval, rope.dimension_count and rope.dimension_sections, expert_feed_forward_length
// and expert_shared_feed_forward_length) plus hyper_connection.count and hyper_connection.low_rank,
// attention.indexer.head_count / key_length / top_k and attention.compress_ratios (the indexer's
// block size on full-attention blocks, 0 on the others); PLE keys only when the checkpoint has an
// n-gram embedding layer: ple.layers (one block, a linear-attention one), ple.ngram_size,
// ple.heads_per_ngram, ple.conv_kernel, ple.eos_token_id, embedding_length_per_layer_input (the
// table's row size) and the UINT64 arrays ple.layer_multipliers, ple.head_offsets and
// ple.head_vocab_sizes (the converter reads them exact from the checkpoint's int64 constants).
//
// Tensors: token_embd, output (untied), output_hc_norm [n_embd, hc] (no output_norm: the final
// hyper-connection mixer is the output norm), output_hc_down [hc*n_embd, low_rank], output_hc_up
// [low_rank, hc*n_embd]; per block hc_attn_* and hc_ffn_* (norm, down, up as the head's, inject
// [hc*n_embd, hc]); recurrent blocks attn_qkv, attn_gate, ssm_conv1d, ssm_dt.bias, ssm_a, ssm_beta,
// ssm_alpha, ssm_norm, ssm_out (Qwen3.5's); full-attention blocks attn_q ([q|gate] per head),
// attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm and the indexer's q/k projections
// (indexer.q_proj, indexer.k_proj: the converter splits index_qk_proj) and norms (indexer.q_norm,
// indexer.k_norm); every
// block routed experts (softmax, top-k renormalized) and a sigmoid-gated shared expert. There are no
// attention or FFN norms: each block's mixers read the hyper-connection mix. With PLE:
// per_layer_token_embd [row size, rows] (typed as token_embd), and on its block ple_key [n_embd,
// hc*n_embd], ple_value [n_embd, n_embd], ple_norm_key / _query / _conv (1-D hc*n_embd gammas, F32)
// and ple_conv1d [kernel, hc*n_embd] (the converter squeezes HF's conv; llama-quantize's rules do
// not exempt it, so a quantized file keeps it in the fallback type of its 4-wide rows, F16).
// The hyper-connection gammas are 1-D [hc*n_embd] as well (llama.cpp loads them reshaped).
import { checkHeads, headDim, linear, linearInit, moeFfn, requirePositive, residualGain, sharedExpert } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';
import { gatedAttentionTensors, linearAttentionMetadata, linearAttentionTensors, type Qwen35LinearAttention } from './qwen35';

/**
 * hc: hyper-connection streams and the rank of their gate projection. indexer: the QSA indexer (heads,
 * key length, budget top_k, the block size `ratio` written in attention.compress_ratios on
 * full-attention blocks). recurrentLayers: written as attention.recurrent_layers when given, else
 * the blocks with (i + 1) % fullAttentionInterval != 0 are recurrent (llama.cpp's default).
 */
export type Qwen4ExpConfig = ModelConfig & {
  headDim: number;
  ropeDims: number;
  ropeSections: number[];
  fullAttentionInterval: number;
  recurrentLayers?: boolean[];
  linearAttn: Qwen35LinearAttention;
  hc: { count: number; lowRank: number };
  indexer: { nHead: number; headDim: number; topK: number; ratio: number };
  /**
   * PLE n-gram hash embeddings on one linear-attention block: ngram (2..8), headsPerNgram, a
   * depthwise conv of convKernel taps (ngram apart), the EOS that resets the n-grams, headDim x
   * heads = n_embd, per head its vocabulary (rows) and a gap before it in the table, the ngram
   * 64-bit multipliers.
   */
  ple?: { layer: number; ngram: number; headsPerNgram: number; convKernel: number; eos: number; headDim: number; vocab: number[]; gap: number[]; multipliers: bigint[] };
};

/** PLE heads' table offsets (each after the previous head's rows and its own gap) and the table's rows. */
export function pleLayout(p: NonNullable<Qwen4ExpConfig['ple']>): { offsets: number[]; rows: number } {
  const offsets: number[] = [];
  let at = 0;
  for (let h = 0; h < p.vocab.length; h++) {
    at += p.gap[h];
    offsets.push(at);
    at += p.vocab[h];
  }
  return { offsets, rows: at };
}

export const qwen4expRecurrent = (c: Qwen4ExpConfig, i: number): boolean => (c.recurrentLayers ? c.recurrentLayers[i] : (i + 1) % c.fullAttentionInterval !== 0);

/** A grouped norm's gammas (1-D hc*n_embd: one n_embd row per stream), near 1 as the converter's folded (1 + w). */
const hcNorm = (name: string, c: Qwen4ExpConfig, layer?: number): TensorSpec => ({ name, shape: [c.dim * c.hc.count], init: { kind: 'normal', mean: 1, std: 0.1 }, role: 'norm', layer });

/** One hyper-connection module: grouped norm, the low-rank gate (down, up) and, in blocks, the [hc*n_embd, hc] inject. */
function hcModule(prefix: string, c: Qwen4ExpConfig, layer?: number): TensorSpec[] {
  const W = c.hc.count * c.dim;
  const out: TensorSpec[] = [
    hcNorm(`${prefix}_norm.weight`, c, layer),
    linear(`${prefix}_down.weight`, W, c.hc.lowRank, 'attn_q', layer),
    linear(`${prefix}_up.weight`, c.hc.lowRank, W, 'attn_q', layer),
  ];
  if (layer !== undefined) out.push({ name: `${prefix}_inject.weight`, shape: [W, c.hc.count], init: linearInit(W), role: 'attn_q', layer });
  return out;
}

export const qwen4exp: ArchDefinition = {
  name: 'qwen4exp',
  ggufArch: 'qwen4exp',
  normalize(c: ModelConfig): ModelConfig {
    const q = c as Qwen4ExpConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'sharedFf']);
    checkHeads(c);
    checkExperts(c, true);
    const la = q.linearAttn;
    if (!la || ![la.kHeads, la.vHeads, la.headDim, la.convKernel].every((v) => Number.isInteger(v) && v > 0)) throw new Error('qwen4exp: linearAttn needs positive kHeads, vHeads, headDim and convKernel (use a preset)');
    if (la.vHeads % la.kHeads !== 0) throw new Error(`qwen4exp: linear value heads ${la.vHeads} must be a multiple of key heads ${la.kHeads}`);
    const hd = headDim(c);
    const interval = q.fullAttentionInterval ?? 4;
    if (!Number.isInteger(interval) || interval <= 0) throw new Error('qwen4exp: fullAttentionInterval must be a positive integer');
    if (q.recurrentLayers && q.recurrentLayers.length !== c.nLayers) throw new Error('qwen4exp: recurrentLayers needs one flag per block');
    if (!Number.isInteger(q.ropeDims) || q.ropeDims <= 0 || q.ropeDims % 2 !== 0 || q.ropeDims > hd) throw new Error(`qwen4exp: ropeDims must be even, positive and at most the head size ${hd}`);
    const s = q.ropeSections;
    if (!Array.isArray(s) || s.length !== 4 || s.some((x) => !Number.isInteger(x) || x < 0) || s.reduce((a, b) => a + b, 0) !== q.ropeDims / 2) throw new Error(`qwen4exp: ropeSections must be 4 non-negative integers summing to ropeDims / 2 = ${q.ropeDims / 2}`);
    const h = q.hc;
    if (!h || !Number.isInteger(h.count) || h.count < 2 || !Number.isInteger(h.lowRank) || h.lowRank < 1) throw new Error('qwen4exp: hc needs a count of at least 2 streams and a positive lowRank');
    const x = q.indexer;
    if (!x || ![x.nHead, x.headDim, x.topK, x.ratio].every((v) => Number.isInteger(v) && v > 0) || x.ratio > 64 || x.headDim < q.ropeDims) throw new Error('qwen4exp: indexer needs positive nHead, headDim (at least ropeDims), topK and a ratio in 1..64');
    const e = q.ple;
    if (e) {
      const nh = (e.ngram - 1) * e.headsPerNgram;
      if (!(e.ngram >= 2 && e.ngram <= 8) || e.headsPerNgram < 1 || nh > 64 || e.convKernel < 2 || e.headDim * nh !== c.dim) throw new Error('qwen4exp: ple needs ngram in 2..8, headsPerNgram >= 1 (at most 64 heads), convKernel >= 2 and headDim x heads = dim');
      if (e.vocab.length !== nh || e.gap.length !== nh || e.multipliers.length !== e.ngram) throw new Error('qwen4exp: ple needs a vocab and a gap per head and a multiplier per n-gram position');
      if (!Number.isInteger(e.layer) || e.layer < 0 || e.layer >= c.nLayers || !qwen4expRecurrent({ ...q, fullAttentionInterval: interval }, e.layer)) throw new Error('qwen4exp: the PLE layer must be a linear-attention block');
    }
    return { ...c, headDim: hd, fullAttentionInterval: interval } as Qwen4ExpConfig;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const q = c as Qwen4ExpConfig;
    const a = 'qwen4exp';
    const m: [string, GgufValue][] = [
      ...baseMetadata(a, c).filter(([k]) => k !== `${a}.rope.dimension_count`),
      [`${a}.rope.dimension_count`, kv.u32(q.ropeDims)],
      // As the converter (gguf-py add_array of Python ints): INT32 arrays; the layer flags BOOL.
      [`${a}.rope.dimension_sections`, kv.arr(GgufType.INT32, q.ropeSections)],
      ...linearAttentionMetadata(a, q.linearAttn),
      [`${a}.full_attention_interval`, kv.u32(q.fullAttentionInterval)],
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)],
      [`${a}.hyper_connection.count`, kv.u32(q.hc.count)],
      [`${a}.hyper_connection.low_rank`, kv.u32(q.hc.lowRank)],
      [`${a}.attention.indexer.head_count`, kv.u32(q.indexer.nHead)],
      [`${a}.attention.indexer.key_length`, kv.u32(q.indexer.headDim)],
      [`${a}.attention.indexer.top_k`, kv.u32(q.indexer.topK)],
      [`${a}.attention.compress_ratios`, kv.arr(GgufType.INT32, Array.from({ length: c.nLayers }, (_, i) => (qwen4expRecurrent(q, i) ? 0 : q.indexer.ratio)))],
    ];
    if (q.recurrentLayers) m.push([`${a}.attention.recurrent_layers`, kv.arr(GgufType.BOOL, q.recurrentLayers)]);
    const e = q.ple;
    if (e) {
      const { offsets } = pleLayout(e);
      m.push(
        [`${a}.ple.layers`, kv.arr(GgufType.INT32, [e.layer])],
        [`${a}.ple.ngram_size`, kv.u32(e.ngram)],
        [`${a}.ple.heads_per_ngram`, kv.u32(e.headsPerNgram)],
        [`${a}.ple.conv_kernel`, kv.u32(e.convKernel)],
        [`${a}.ple.eos_token_id`, kv.u32(e.eos)],
        [`${a}.embedding_length_per_layer_input`, kv.u32(e.headDim)],
        [`${a}.ple.layer_multipliers`, kv.arr(GgufType.UINT64, e.multipliers)],
        [`${a}.ple.head_offsets`, kv.arr(GgufType.UINT64, offsets.map((v) => BigInt(v)))],
        [`${a}.ple.head_vocab_sizes`, kv.arr(GgufType.UINT64, e.vocab.map((v) => BigInt(v)))],
      );
    }
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const q = c as Qwen4ExpConfig;
    const t: TensorSpec[] = [
      { name: 'token_embd.weight', shape: [c.dim, c.vocabSize], init: { kind: 'normal', std: 1 }, role: 'token_embd' },
      linear('output.weight', c.dim, c.vocabSize, 'output', undefined, 2),
      ...hcModule('output_hc', q),
    ];
    const e = q.ple;
    if (e) t.push({ name: 'per_layer_token_embd.weight', shape: [e.headDim, pleLayout(e).rows], init: { kind: 'normal', std: 1 }, role: 'token_embd' });
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(...hcModule(`${p}.hc_attn`, q, i), ...hcModule(`${p}.hc_ffn`, q, i));
      if (qwen4expRecurrent(q, i)) {
        t.push(...linearAttentionTensors(c, q.linearAttn, i));
      } else {
        const x = q.indexer;
        t.push(
          ...gatedAttentionTensors(c, q.headDim, i),
          // (F32 in every file: llama-quantize skips indexer.q_proj / k_proj.)
          { name: `${p}.indexer.q_proj.weight`, shape: [c.dim, x.nHead * x.headDim], init: linearInit(c.dim), role: 'bias', layer: i },
          { name: `${p}.indexer.k_proj.weight`, shape: [c.dim, x.headDim], init: linearInit(c.dim), role: 'bias', layer: i },
          { name: `${p}.indexer.q_norm.weight`, shape: [x.headDim], init: { kind: 'normal', mean: 1, std: 0.1 }, role: 'norm', layer: i },
          { name: `${p}.indexer.k_norm.weight`, shape: [x.headDim], init: { kind: 'normal', mean: 1, std: 0.1 }, role: 'norm', layer: i },
        );
      }
      if (e && e.layer === i) {
        const W = q.hc.count * c.dim;
        const gam = (n: string): TensorSpec => ({ name: `${p}.${n}.weight`, shape: [W], init: { kind: 'normal', mean: 1, std: 0.1 }, role: 'norm', layer: i });
        t.push(
          linear(`${p}.ple_key.weight`, c.dim, W, 'attn_k', i),
          linear(`${p}.ple_value.weight`, c.dim, c.dim, 'attn_v', i, residualGain(c)),
          gam('ple_norm_key'),
          gam('ple_norm_query'),
          gam('ple_norm_conv'),
          // (Quantized like any 2-D weight; its convKernel-wide rows fall back to F16.)
          { name: `${p}.ple_conv1d.weight`, shape: [e.convKernel, W], init: { kind: 'normal', std: 0.3 }, role: 'attn_q', layer: i },
        );
      }
      // (moeFfn writes an ffn_norm the blocks do not have: the FFN reads the hyper-connection mix.)
      t.push(...moeFfn(c, i, c.expertFf).filter((s) => !s.name.endsWith('.ffn_norm.weight')), ...sharedExpert(c, i));
    }
    return t;
  },
};
