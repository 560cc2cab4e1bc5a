// inclusionAI GroveMoE (GroveMoE-Inst / GroveMoE-Base, 33B-A3B, up-cycled from Qwen3-30B-A3B;
// `grovemoe`; llama.cpp src/models/grovemoe.cpp, converted by conversion/grovemoe.py
// GroveMoeModel).
//
// A block is a Qwen3-MoE block (attn_norm; q/k/v; per-head RMS q_norm / k_norm; NeoX RoPE over the
// whole head; attention with scale 1/sqrt(head); attn_output and the residual; ffn_norm; softmax
// routing over ffn_gate_inp, top-k weights renormalized; SwiGLU experts ffn_{gate,up,down}_exps of
// expert_feed_forward_length) plus "adjugate" chunk experts ffn_{gate,up,down}_chexps: one per
// group of experts_per_group experts, so expert_count / experts_per_group of them, each a SwiGLU
// of expert_chunk_feed_forward_length. llama.cpp's graph runs them as a second build_moe_ffn with
// the same router logits: its top-min(n_expert_used, n_chunk) over all n_expert sigmoid scores
// (the same order as the softmax's; but it then sums n_expert_used outputs, so a file with fewer
// chunk experts than experts used fails there, and normalize() refuses one), each chosen expert id
// divided by experts_per_group (a float scale cast back to int) to name its chunk expert (two
// chosen experts of one group name it twice), whose weight is then read from the softmax
// probabilities at that chunk index (get_rows with the divided ids: chunk expert c weighs
// probs[c], the probability of routed expert c, not of the expert that chose it) and renormalized
// over the chosen ones. The chunk experts' input is the routed experts' output (the graph sets
// cur = moe_out before the second call), not the normed block input. Their mix is multiplied by
// expert_group_scale and added to the routed output, then the residual. output.weight is optional
// (tied to token_embd when absent).
//
// Keys as the converter writes them: TextModel's (block_count, context_length, embedding_length,
// feed_forward_length, attention.head_count / head_count_kv, rope.freq_base,
// attention.layer_norm_rms_epsilon, expert_count, expert_used_count, attention.key_length /
// value_length from HF head_dim), then expert_feed_forward_length (HF moe_intermediate_size),
// expert_chunk_feed_forward_length (UINT32; hardcoded there to HF head_dim or 128),
// experts_per_group (UINT32; hardcoded 2) and expert_group_scale (FLOAT32; hardcoded 0.05). The
// loader reads expert_chunk_feed_forward_length as optional (default: the head size) and requires
// experts_per_group and expert_group_scale. vocab_size and rope.dimension_count (= head size, which
// the graph asserts) are written as for qwen3moe here.
//
// Quantization: llama-quant has no rule of its own for chexps; tensor_get_category matches
// "ffn_up" / "ffn_gate" / "ffn_down" by substring, so they take the routed experts' types (roles
// ffn_up / ffn_gate / ffn_down here: ffn_down_chexps gets Q4_K_M's use_more_bits Q6_K, the layer
// parsed from the name as for any tensor of an n_expert > 1 model), and its fallbacks by row
// length (ffn_down_chexps' rows are expert_chunk_feed_forward_length wide).
// Checked against the bundled llama.cpp sources (src/models/grovemoe.cpp, src/llama-graph.cpp
// build_moe_ffn, conversion/grovemoe.py, gguf-py gguf_writer.py, src/llama-quant.cpp) and
// node-llama-cpp's llama.cpp (the same grovemoe.cpp).
import { attention, checkHeads, embeddings, linearInit, moeFfn, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

/**
 * chunkFf: expert_chunk_feed_forward_length (the chunk experts' width; the converter writes HF
 * head_dim or 128). expertsPerGroup: experts_per_group (routed experts per chunk expert; must divide
 * nExperts: nExperts / expertsPerGroup chunk experts). expertGroupScale: expert_group_scale (the
 * chunk mix's factor; the converter's 0.05; 0: the chunk experts add nothing, still written).
 */
export type GroveMoeConfig = ModelConfig & { chunkFf: number; expertsPerGroup: number; expertGroupScale: number };

/** How many chunk (adjugate) experts a block has: expert_count / experts_per_group. */
export const groveChunkExperts = (c: GroveMoeConfig) => c.nExperts / c.expertsPerGroup;

/**
 * How many chunk experts llama.cpp's graph picks per token: min(n_expert_used, n_chunk), which
 * normalize() keeps at n_expert_used (llama.cpp cannot run a file with fewer chunk experts).
 */
export const groveChunkExpertsUsed = (c: GroveMoeConfig) => Math.min(c.nExpertsUsed, groveChunkExperts(c));

// Scales. The attention and the routed experts as qwen3moe (moeFfn: router logits of std ~2 over the
// normed input, writers at residualGain), relative to the stream's scale: the token embedding's std,
// 1 with an untied head, 2/sqrt(dim) with a tied one (embeddings(): the same matrix makes the
// logits). With a tied head every residual writer is scaled down with it, so the stream stays
// dominated by the token's embedding as with an untied one (the blocks read it through RMS norms,
// so the model is the untied one rescaled). At the shared helpers' unit-scale writers the blocks
// would outweigh an embedding of 0.125 and the logits become ~10x as sensitive to quantization:
// measured in llama.cpp on tiny-grovemoe-g4 (64 tokens, seeds 1-3), F32 vs Q8_0 NMSE 6e-3..2e-2
// and Q4_K_M 8.9e-2..9.7e-2; with the writers scaled, 2.0e-4..6.6e-4 and 3.3e-3..3.8e-3.
// The chunk experts read the routed mix, not a normed input, and it comes out at about half of
// residualGain x the stream's scale (unit-scale SwiGLU activations through ffn_down_exps, averaged
// over the top-k; 0.48 x residualGain measured on tiny-grovemoe's block 0): their gate / up get
// gain 2 / (residualGain x stream scale) so that their SwiGLU runs at the routed experts' O(1)
// pre-activations (0.95 measured) instead of its near-quadratic small-input regime, where the chunk
// mix would be a few percent of the routed one whatever expert_group_scale. ffn_down_chexps writes
// at residualGain x the stream's scale like every other writer, so the chunk mix joins the stream
// at that scale times expert_group_scale: the tiny presets take a scale far above the real 0.05 so
// that the chunk experts visibly move the logits (presets-grovemoe.ts).
export const groveStreamStd = (c: ModelConfig) => (c.tiedEmbeddings ? 2 / Math.sqrt(c.dim) : 1);

export const grovemoe: ArchDefinition = {
  name: 'grovemoe',
  ggufArch: 'grovemoe',
  normalize(c: ModelConfig): ModelConfig {
    const g = c as GroveMoeConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkHeads(c);
    // The loader asserts n_expert > 0 and n_expert_used > 0.
    checkExperts(c, true);
    if (!Number.isInteger(g.chunkFf) || g.chunkFf < 1) {
      throw new Error(`grovemoe: chunkFf must be a positive integer (expert_chunk_feed_forward_length; use a preset), got ${String(g.chunkFf)}`);
    }
    if (!Number.isInteger(g.expertsPerGroup) || g.expertsPerGroup < 1) {
      throw new Error(`grovemoe: expertsPerGroup must be a positive integer (experts_per_group; use a preset), got ${String(g.expertsPerGroup)}`);
    }
    if (c.nExperts % g.expertsPerGroup !== 0) {
      throw new Error(`grovemoe: expertsPerGroup ${g.expertsPerGroup} must divide the expert count ${c.nExperts} (one chunk expert per group)`);
    }
    // llama.cpp's graph asks the chunk call for top-min(n_expert_used, n_chunk), but build_moe_ffn
    // then sums hparams.n_expert_used views of its output: with fewer chunk experts than that it
    // fails (GGML_ASSERT in ggml_view, seen with 8 experts in groups of 4 under top-3).
    if (c.nExpertsUsed > c.nExperts / g.expertsPerGroup) {
      throw new Error(
        `grovemoe: experts-used ${c.nExpertsUsed} must be <= the chunk expert count ${c.nExperts / g.expertsPerGroup} (nExperts / expertsPerGroup; llama.cpp's graph fails with fewer chunk experts than experts used)`,
      );
    }
    if (typeof g.expertGroupScale !== 'number' || !Number.isFinite(g.expertGroupScale) || g.expertGroupScale < 0) {
      throw new Error(`grovemoe: expertGroupScale must be a finite number >= 0 (expert_group_scale; the converter writes 0.05), got ${String(g.expertGroupScale)}`);
    }
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const g = c as GroveMoeConfig;
    const a = 'grovemoe';
    return [
      ...baseMetadata(a, c),
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.expert_chunk_feed_forward_length`, kv.u32(g.chunkFf)],
      [`${a}.experts_per_group`, kv.u32(g.expertsPerGroup)],
      [`${a}.expert_group_scale`, kv.f32(g.expertGroupScale)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const g = c as GroveMoeConfig;
    const n = groveChunkExperts(g);
    const s = groveStreamStd(c);
    // The residual writers (attn_output, ffn_down_exps) at residualGain x the stream's scale.
    const writer = (x: TensorSpec): TensorSpec =>
      s !== 1 && (x.role === 'attn_output' || x.role === 'ffn_down') && x.init.kind === 'normal' ? { ...x, init: { ...x.init, std: x.init.std * s } } : x;
    const inGain = 2 / (residualGain(c) * s);
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(...attention(c, i, { qkNorm: true }).map(writer));
      t.push(...moeFfn(c, i, c.expertFf).map(writer));
      t.push(
        { name: `${p}.ffn_gate_chexps.weight`, shape: [c.dim, g.chunkFf, n], init: linearInit(c.dim, inGain), role: 'ffn_gate', layer: i },
        { name: `${p}.ffn_up_chexps.weight`, shape: [c.dim, g.chunkFf, n], init: linearInit(c.dim, inGain), role: 'ffn_up', layer: i },
        { name: `${p}.ffn_down_chexps.weight`, shape: [g.chunkFf, c.dim, n], init: linearInit(g.chunkFf, residualGain(c) * s), role: 'ffn_down', layer: i },
      );
    }
    return t;
  },
};
