// Snowflake Arctic (480B: a 10B dense transformer with a residual MoE of 128 experts top-2 in every
// block; `arctic`; llama.cpp src/models/arctic.cpp, converted by conversion/arctic.py ArcticModel).
//
// A block (llama.cpp's graph), x being the block input: attn_norm (RMS); q, k, v projections (q
// and attn_output n_embd wide: the loader sizes them so, so heads x head size must be n_embd),
// normal RoPE (adjacent pairs: LLM_ARCH_ARCTIC is in llama_model_rope_type's NORM list; the
// converter permutes HF's q_proj / k_proj as for llama) over the whole head (the graph asserts
// n_rot == head size), attention with scale 1/sqrt(head), attn_output and the residual:
// ffn_inp = x + attn. Then two branches add into the stream:
// - the dense residual MLP (HF residual_mlp, normed by residual_layernorm -> ffn_norm): RMS norm of
//   ffn_inp, a SwiGLU MLP whose hidden width is n_embd (the loader sizes ffn_gate / ffn_up /
//   ffn_down as n_embd x n_embd: HF's residual MLP is hidden_size wide), added to ffn_inp;
// - the MoE (HF block_sparse_moe, normed by post_attention_layernorm -> ffn_norm_exps): RMS norm of
//   the BLOCK INPUT x (not of ffn_inp: the parallel residual), softmax routing over ffn_gate_inp,
//   top-k weights renormalized (build_moe_ffn with norm_w true; the loader reads no gating function
//   and expert_weights_scale stays 0: no scaling), SwiGLU experts of feed_forward_length (HF
//   intermediate_size, the experts' width), added on top:
//   out = x + attn + MLP(ffn_norm(x + attn)) + MoE(ffn_norm_exps(x)).
// output_norm (RMS) and output.weight, which is optional (the loader falls back to token_embd;
// HF Arctic has an lm_head, tie_word_embeddings false, as recalled, so the presets write it).
//
// Keys as the converter writes them (ArcticModel.set_gguf_parameters calls the base class, then
// adds vocab_size and rope.dimension_count = hidden_size / num_attention_heads): block_count,
// context_length, embedding_length, feed_forward_length (the experts' width), attention.head_count,
// attention.head_count_kv, rope.freq_base, attention.layer_norm_rms_epsilon (the only key the
// arctic loader itself requires), expert_count, expert_used_count: exactly baseMetadata's keys.
// No key_length / value_length (HF Arctic has no head_dim; the writer adds them only for an
// explicit headDim, which must then be dim / nHeads). The vocabulary is Llama's SentencePiece
// (tokenizer.ggml.model llama; the converter also writes tokenizer.ggml.pre "default", which this
// writer's spm vocabulary leaves out: llama.cpp reads the pre-tokenizer only for BPE models).
// Checked against the bundled llama.cpp sources (src/models/arctic.cpp, src/llama-model.cpp rope
// type NORM, src/llama-graph.cpp build_moe_ffn, conversion/arctic.py and conversion/base.py,
// gguf-py constants.py / tensor_mapping.py: FFN_NORM_EXP is blk.N.ffn_norm_exps); the real model's
// hyperparameters in the presets are as recalled.
import { attention, checkFullWidthHeads, embeddings, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

/**
 * Arctic has no fields of its own. `ff` is feed_forward_length, the experts' width (expertFf
 * must be 0 or ff and is normalized to ff); the dense residual MLP is always dim wide, so no field
 * sets it. sharedFf is ignored.
 */
export type ArcticConfig = ModelConfig;

// Scales. Every reader of the stream RMS-norms it first (attn_norm, ffn_norm, ffn_norm_exps,
// output_norm, gains ~1), so the shared rules apply: token_embd at std 1, routers at gain 2 (router
// logits of std ~2 over the normed block input: the top-2 of 16 varies from token to token), the
// head at gain 2 (logits of std ~2), q/k/v and the gate/up projections at unit gain. A block has
// THREE writers into the residual stream instead of the usual two: attn_output at residualGain
// (1/sqrt(2L)) as everywhere, and the two FFN branches (the dense MLP and the experts' mix) share
// what one FFN would write: each at residualGain / sqrt(2), so the stream's variance grows by about
// as much per block as on a llama-style block and stays dominated by the token embedding.

/** Gain of ffn_down and ffn_down_exps: the dense MLP and the MoE each write half an FFN's variance. */
export const arcticFfnGain = (c: ModelConfig) => residualGain(c) / Math.SQRT2;

export const arctic: ArchDefinition = {
  name: 'arctic',
  ggufArch: 'arctic',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    // The graph routes every block (build_moe_ffn unconditionally): an arctic file needs experts.
    checkExperts(c, true);
    checkFullWidthHeads(c, "attn_q and attn_output");
    if (!(c.ropeBase > 0)) throw new Error(`arctic: ropeBase must be positive, got ${String(c.ropeBase)}`);
    if (!(c.normEps > 0)) throw new Error(`arctic: normEps must be positive (attention.layer_norm_rms_epsilon), got ${String(c.normEps)}`);
    const ef = c.expertFf ?? 0;
    if (ef !== 0 && ef !== c.ff) throw new Error(`arctic: expertFf ${String(ef)} must be 0 or ff ${c.ff} (feed_forward_length is the experts' width; the dense MLP is dim wide; use --ff)`);
    return { ...c, expertFf: c.ff };
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    return baseMetadata('arctic', c);
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const e = c.nExperts;
    const g = arcticFfnGain(c);
    const t: TensorSpec[] = [...embeddings(c)];
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(
        ...attention(c, i),
        // The dense residual MLP, n_embd wide.
        norm(`${p}.ffn_norm.weight`, c.dim, i),
        linear(`${p}.ffn_gate.weight`, c.dim, c.dim, 'ffn_gate', i),
        linear(`${p}.ffn_down.weight`, c.dim, c.dim, 'ffn_down', i, g),
        linear(`${p}.ffn_up.weight`, c.dim, c.dim, 'ffn_up', i),
        // The MoE over the block input.
        linear(`${p}.ffn_gate_inp.weight`, c.dim, e, 'router', i, 2),
        norm(`${p}.ffn_norm_exps.weight`, c.dim, i),
        { name: `${p}.ffn_gate_exps.weight`, shape: [c.dim, c.ff, e], init: linearInit(c.dim), role: 'ffn_gate', layer: i },
        { name: `${p}.ffn_down_exps.weight`, shape: [c.ff, c.dim, e], init: linearInit(c.ff, g), role: 'ffn_down', layer: i },
        { name: `${p}.ffn_up_exps.weight`, shape: [c.dim, c.ff, e], init: linearInit(c.dim), role: 'ffn_up', layer: i },
      );
    }
    return t;
  },
};
