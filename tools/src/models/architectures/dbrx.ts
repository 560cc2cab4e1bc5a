// Databricks DBRX (132B, 16 experts top-4; `dbrx`; llama.cpp src/models/dbrx.cpp, converted by
// conversion/dbrx.py DbrxModel).
//
// A block (llama.cpp's graph): attn_norm as a LayerNorm (LLM_NORM: mean-subtracted, divided by
// the std with eps attention.layer_norm_epsilon, times the weight; no bias anywhere in the model);
// one fused projection attn_qkv (HF norm_attn_norm.attn.Wqkv) of n_embd + 2 x n_embd_gqa rows (Q,
// then K, then V), and llama.cpp's build_qkv clamps the whole product, Q, K and V alike, to
// +-attention.clamp_kqv (HF clip_qkv) when that is positive; NeoX RoPE over the whole head (the
// graph asserts n_rot == head size; the converter writes no rope.dimension_count), attention with
// scale 1/sqrt(head), attn_output (n_embd x n_embd: the loader sizes it so, so heads x head size
// must be n_embd) and the residual. The FFN has no ffn_norm: the residual stream is LayerNormed by
// attn_output_norm (HF norm_attn_norm.norm_2) and fed to softmax routing over ffn_gate_inp, top-k
// weights renormalized (build_moe_ffn with norm_w true; the loader reads no gating function,
// renormalization flag or scale, and expert_weights_scale stays 0: no scaling), SwiGLU experts of
// feed_forward_length (HF ffn_config.ffn_hidden_size: DBRX has no dense FFN and no shared
// expert), and the residual. output_norm is a LayerNorm too, and output.weight is required (the
// loader has no tied fallback).
//
// Keys as the converter writes them (DbrxModel.set_gguf_parameters does not call the base class):
// block_count, context_length, embedding_length, feed_forward_length, attention.head_count,
// attention.head_count_kv, rope.freq_base, attention.clamp_kqv, expert_count, expert_used_count
// and attention.layer_norm_epsilon (always 1e-5 there; normEps here). The loader requires
// layer_norm_epsilon and clamp_kqv (get_key without the optional flag). No
// layer_norm_rms_epsilon, rope.dimension_count, key_length or value_length (the writer adds the
// last two only for an explicit headDim, which must then be dim / nHeads); vocab_size is written
// as for every other architecture here, though the converter does not (llama.cpp reads it only
// as an optional key).
// Checked against the bundled llama.cpp sources (src/models/dbrx.cpp, src/llama-graph.cpp
// build_qkv / build_moe_ffn, src/llama-model.cpp rope type NEOX, conversion/dbrx.py, gguf-py
// constants.py / tensor_mapping.py, src/llama-quant.cpp: attn_qkv is categorized with attn_v);
// the real model's hyperparameters in the presets are as recalled.
import { checkFullWidthHeads, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

/**
 * clampKqv: attention.clamp_kqv (HF attn_config.clip_qkv), the limit on the fused q|k|v product;
 * 0: no clamp (the key is still written: the loader requires it). The experts' width is `ff`
 * (feed_forward_length); expertFf must be 0 or ff and is normalized to ff.
 */
export type DbrxConfig = ModelConfig & { clampKqv: number };

// Scales. Every reader of the stream LayerNorms it first (attn_norm, attn_output_norm,
// output_norm with weights ~1): per token zero mean and unit variance, which for these init scales
// is what an RMS norm gives the other architectures, so the shared rules apply: token_embd at std
// 1, attn_output and ffn_down_exps at residualGain (1/sqrt(2L)), routers at gain 2 (router logits
// of std ~2 over 16 experts: the top-4 varies from token to token), output at gain 2 (logits of
// std ~2). attn_qkv at unit gain: q, k and v come out ~N(0, 1) element-wise before the clamp, so a
// clamp_kqv of c clips a fraction 2(1 - Phi(c)) of them (1: 32%, 1.5: 13%, 2: 4.6%) at every
// block, the stream being normed first whatever its scale. The real clip of 8 would never be
// reached by these weights (see the tiny-dbrx preset for the value used and its measured effect).

/** Row width of the fused attn_qkv: Q of n_embd, then K and V of n_embd_gqa each. */
export const dbrxQkvWidth = (c: ModelConfig) => c.dim + 2 * (c.dim / c.nHeads) * c.nKvHeads;

export const dbrx: ArchDefinition = {
  name: 'dbrx',
  ggufArch: 'dbrx',
  normalize(c: ModelConfig): ModelConfig {
    const d = c as DbrxConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    // The loader throws on a dbrx file without experts.
    checkExperts(c, true);
    checkFullWidthHeads(c, "attn_qkv's Q and attn_output");
    if (!(c.ropeBase > 0)) throw new Error(`dbrx: ropeBase must be positive, got ${String(c.ropeBase)}`);
    if (!(c.normEps > 0)) throw new Error(`dbrx: normEps must be positive (attention.layer_norm_epsilon), got ${String(c.normEps)}`);
    if (c.tiedEmbeddings) throw new Error('dbrx: tiedEmbeddings must be false (the loader requires output.weight)');
    const ef = c.expertFf ?? 0;
    if (ef !== 0 && ef !== c.ff) throw new Error(`dbrx: expertFf ${String(ef)} must be 0 or ff ${c.ff} (feed_forward_length is the experts' width; use --ff)`);
    if (typeof d.clampKqv !== 'number' || !Number.isFinite(d.clampKqv) || d.clampKqv < 0) {
      throw new Error(`dbrx: clampKqv must be a finite number >= 0 (0: no clamp; attention.clamp_kqv is always written), got ${String(d.clampKqv)}`);
    }
    return { ...c, expertFf: c.ff } as DbrxConfig;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const d = c as DbrxConfig;
    const a = 'dbrx';
    // No rope.dimension_count (n_rot = the head size, which the graph asserts) and a LayerNorm eps instead of the RMS one.
    const drop = new Set([`${a}.rope.dimension_count`, `${a}.attention.layer_norm_rms_epsilon`]);
    return [
      ...baseMetadata(a, c).filter(([k]) => !drop.has(k)),
      [`${a}.attention.layer_norm_epsilon`, kv.f32(c.normEps)],
      [`${a}.attention.clamp_kqv`, kv.f32(d.clampKqv)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const e = c.nExperts;
    const t: TensorSpec[] = [
      { name: 'token_embd.weight', shape: [c.dim, c.vocabSize], init: { kind: 'normal', std: 1 }, role: 'token_embd' },
      norm('output_norm.weight', c.dim),
      linear('output.weight', c.dim, c.vocabSize, 'output', undefined, 2),
    ];
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(
        norm(`${p}.attn_norm.weight`, c.dim, i),
        // llama-quant types attn_qkv as attn_v (category_is_attn_v).
        linear(`${p}.attn_qkv.weight`, c.dim, dbrxQkvWidth(c), 'attn_v', i),
        linear(`${p}.attn_output.weight`, c.dim, c.dim, 'attn_output', i, residualGain(c)),
        norm(`${p}.attn_output_norm.weight`, c.dim, i),
        linear(`${p}.ffn_gate_inp.weight`, c.dim, e, 'router', i, 2),
        { name: `${p}.ffn_gate_exps.weight`, shape: [c.dim, c.ff, e], init: linearInit(c.dim), role: 'ffn_gate', layer: i },
        { name: `${p}.ffn_up_exps.weight`, shape: [c.dim, c.ff, e], init: linearInit(c.dim), role: 'ffn_up', layer: i },
        { name: `${p}.ffn_down_exps.weight`, shape: [c.ff, c.dim, e], init: linearInit(c.ff, residualGain(c)), role: 'ffn_down', layer: i },
      );
    }
    return t;
  },
};
