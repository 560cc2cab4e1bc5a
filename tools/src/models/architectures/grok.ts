// xAI Grok-1 (314B) and Grok-2 (~270B) MoE (`grok`; llama.cpp src/models/grok.cpp, converted by
// conversion/grok.py GrokModel). One architecture name for both generations; the file says which.
//
// A block (llama.cpp's graph): attn_norm; q, k, v projections (q and attn_output n_embd wide: the
// loader sizes them so, so heads x head size must be n_embd), NeoX RoPE over the whole head (the
// graph asserts n_rot == head size; the converter writes no rope.dimension_count), and attention
// WITHOUT the 1/sqrt(head) scale: llama.cpp's build_attn (non-flash path only) takes the raw q.k,
// multiplies it by attention.output_scale (HF attn_output_multiplier, converter default
// head_dim^-0.5) and soft-caps it, kq = cap * tanh(kq * output_scale / cap) with
// cap = attn_logit_softcapping (loader default 30), before the softmax. The flash-attention path
// would apply neither, and llama_init_from_model forces flash attention off for grok ("not
// compatible"): a reference runs without it. attn_output, then the
// post-attention RMS norm attn_output_norm (HF rms_norm_1 / post_attn_norm) on the attention
// output before the residual add. The FFN: ffn_norm (HF rms_norm_2 / pre_moe_norm), then softmax
// routing over ffn_gate_inp, top-k weights renormalized (build_moe_ffn with norm_w true) and scaled
// by expert_weights_scale, which the grok loader never reads (so never applied; the converter
// writes none), GeGLU experts (gelu(gate) * up through ggml_geglu_split) of
// expert_feed_forward_length, or of feed_forward_length when the file has no such key (Grok-1: HF
// intermediate_size is the expert width, no moe_intermediate_size). Where the block has a dense
// ffn_up (Grok-2, HF residual MLP of intermediate_size beside the experts of
// moe_intermediate_size), a GeGLU MLP over the same normed input is added to the experts' output and
// the sum scaled by sqrt(2)/2. Then the post-FFN RMS norm, which the loader takes as
// layer_output_norm (Grok-1's converter: HF rms_norm_3 -> LLM_TENSOR_LAYER_OUT_NORM) or, failing
// that, post_ffw_norm (Grok-2's: HF post_moe_norm -> LLM_TENSOR_FFN_POST_NORM), and the residual.
// The input embedding is multiplied by embedding_scale (HF embedding_multiplier_scale; Grok-1
// 78.38 = sqrt(6144)), the head's output by logit_scale (HF output_multiplier_scale), then
// soft-capped by final_logit_softcapping when the file has it (Grok-2). output.weight is optional:
// Grok-1's in_out_embed is one matrix (tied), Grok-2 has an lm_head (as recalled). Grok-2's
// rope_type "original" is written as YaRN (type, factor, original context, yarn_ext_factor,
// yarn_attn_factor, beta_fast, beta_slow: the grok loader reads the four yarn_* keys; llama.cpp's
// context then recomputes the attention factor itself whenever ext_factor != 0, so
// yarn_attn_factor has no effect there, and ggml's YaRN RoPE multiplies q and k by
// 1 + 0.1 ln factor) and its attn_temperature_len as attention.temperature_length, which
// llama.cpp's graph does not use.
// router_logit_softcapping is written (default 30) and read but unused by the graph.
// Checked against the bundled llama.cpp sources (src/models/grok.cpp, src/llama-graph.cpp
// build_attn / build_moe_ffn / build_ffn, conversion/grok.py, gguf-py tensor_mapping.py); the real
// models' hyperparameters in the presets are as recalled.
import { checkFullWidthHeads, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec, WeightInit } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

/** HF rope_type "original" / "yarn" as the converter writes it (scaling_factor, original_max_position_embeddings, extrapolation_factor, attn_factor, beta_fast, beta_slow). */
export interface GrokYarn {
  factor: number;
  origCtx: number;
  extFactor: number;
  attnFactor: number;
  betaFast: number;
  betaSlow: number;
}

/** Names of the post-FFN norm the loader takes: Grok-1's converter writes the first, Grok-2's the second. */
export const GROK_POST_FFN_NORMS = ['layer_output_norm', 'post_ffw_norm'] as const;
export type GrokPostFfnNorm = (typeof GROK_POST_FFN_NORMS)[number];

/**
 * expertFf: expert_feed_forward_length (0: none written, the experts as wide as ff, Grok-1).
 * dense: a GeGLU MLP of ff beside the experts on every block (Grok-2). embeddingScale,
 * logitScale, attnOutScale: embedding_scale, logit_scale, attention.output_scale. attnSoftcap:
 * attn_logit_softcapping (> 0: the graph divides by it). routerSoftcap: router_logit_softcapping
 * (written, unused). softcap: final_logit_softcapping (0: none, not written). postFfnNorm: the
 * post-FFN norm's name. yarn: YaRN keys (absent: none). attnTempLength:
 * attention.temperature_length (0 or absent: not written).
 */
export type GrokConfig = ModelConfig & {
  dense: boolean;
  embeddingScale: number;
  logitScale: number;
  attnOutScale: number;
  attnSoftcap: number;
  routerSoftcap: number;
  softcap: number;
  postFfnNorm: GrokPostFfnNorm;
  yarn?: GrokYarn;
  attnTempLength?: number;
};

// Scales. Every sub-layer's output is RMS-normed (attn_output_norm, the post-FFN norm) before it
// joins the residual stream, and every reader of the stream RMS-norms it first, so the model is
// scale-equivariant: what sets the activations is the embedding's scale in the stream and the
// post-norm gains, as on gemma2 (architectures/gemma.ts). The file's multipliers are undone by the
// init, as granitehybrid's: the head (output, or token_embd when tied) is drawn at
// 2 / (sqrt(n_embd) x logit_scale), so logits over the normed final state have std ~2 (before the
// final soft cap); an untied token_embd at 2 / embedding_scale, so the embedding enters the stream
// at std 2; a tied one keeps the head's std and enters at embedding_scale times it (tiny-grok:
// 8 x 0.43 = 3.5). attn_output_norm's gain is the stream's std / sqrt(2L) (residualWrite, as
// gemma2's 2 x residualGain over its stream of std 2), the post-FFN norm's half of that: a top-k
// near-tie that quantization flips swaps part of the experts' mix, and with the FFN normed as a
// whole that moves the block's whole FFN write (as gemma4's post_ffw_norm_2 at 0.5). Measured in
// llama.cpp on tiny-grok (64 tokens, seeds 1-5 and 7), F32 vs Q8_0 logits NMSE: post-FFN gain at
// the full residualWrite 5.4e-4..1.3e-2 (median 4.7e-3), at half 2.5e-4..4.0e-3 (median 5.6e-4),
// every write at 1/100 (the floor) 7.5e-5; the layers' share (NMSE against that near-zero-write
// file) 0.58 at full, 0.42 at half; tiny-grok2 (whose dense half does not flip) 6.4e-4..4.6e-3 and
// 2.8e-4..1.0e-3. attn_output, ffn_down and ffn_down_exps write at unit gain: their scale is normed
// away, the dense MLP and the experts' mix meet at comparable scales before the sqrt(2)/2 sum
// (which the post-FFN norm removes too, up to eps). Routers at gain 2 over the normed input
// (logits of std ~2, as the other presets). q and k at unit gain: raw q.k of std ~sqrt(head) (4
// over heads of 16), so the scores are ~4 x attention.output_scale before the cap, and the presets
// pick output_scale and the cap so that the tanh bends the larger scores (see the presets).

/** Std of the head's rows (output, or token_embd when tied): logits of std ~2 after logit_scale. */
export const grokHeadStd = (c: GrokConfig) => 2 / (Math.sqrt(c.dim) * c.logitScale);
/** Std of token_embd's rows. */
export const grokEmbdStd = (c: GrokConfig) => (c.tiedEmbeddings ? grokHeadStd(c) : 2 / c.embeddingScale);
/** The embedding's std in the residual stream (token_embd x embedding_scale). */
export const grokStreamStd = (c: GrokConfig) => grokEmbdStd(c) * c.embeddingScale;
/** Gain of attn_output_norm (the post-FFN norm's is half of it): the stream's std / sqrt(2L). */
export const grokWriteGain = (c: GrokConfig) => grokStreamStd(c) * residualGain(c);

/** Norm gains around `mean` (std a tenth of it, as NORM_INIT around 1). */
const gainInit = (mean: number): WeightInit => ({ kind: 'normal', mean, std: 0.1 * mean });

const positive = (f: keyof GrokConfig, v: unknown) => {
  if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v)) throw new Error(`grok: ${String(f)} must be a positive number (use a preset), got ${String(v)}`);
};

export const grok: ArchDefinition = {
  name: 'grok',
  ggufArch: 'grok',
  normalize(c: ModelConfig): ModelConfig {
    const g = c as GrokConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    // The loader throws on a grok file without experts.
    checkExperts(c, true);
    checkFullWidthHeads(c, "attn_q and attn_output");
    if (!(c.ropeBase > 0)) throw new Error(`grok: ropeBase must be positive, got ${String(c.ropeBase)}`);
    if (!Number.isInteger(c.expertFf) || c.expertFf < 0) throw new Error(`grok: expertFf must be a non-negative integer (0: experts as wide as ff), got ${String(c.expertFf)}`);
    if (typeof g.dense !== 'boolean') throw new Error(`grok: dense must be a boolean (use a preset), got ${String(g.dense)}`);
    for (const f of ['embeddingScale', 'logitScale', 'attnOutScale', 'attnSoftcap', 'routerSoftcap'] as const) positive(f, g[f]);
    if (typeof g.softcap !== 'number' || !(g.softcap >= 0) || !Number.isFinite(g.softcap)) throw new Error(`grok: softcap must be a finite number >= 0 (0: none), got ${String(g.softcap)}`);
    if (!(GROK_POST_FFN_NORMS as readonly string[]).includes(g.postFfnNorm)) throw new Error(`grok: postFfnNorm must be one of ${GROK_POST_FFN_NORMS.join(', ')}, got ${String(g.postFfnNorm)}`);
    const t = g.attnTempLength ?? 0;
    if (!Number.isInteger(t) || t < 0) throw new Error(`grok: attnTempLength must be a non-negative integer (0: none), got ${String(g.attnTempLength)}`);
    const y = g.yarn ?? undefined;
    if (y !== undefined) {
      if (typeof y !== 'object') throw new Error(`grok: yarn must be an object of YaRN options (or absent), got ${String(y)}`);
      if (!(y.factor >= 1) || !Number.isFinite(y.factor)) throw new Error(`grok: yarn.factor must be >= 1, got ${String(y.factor)}`);
      if (!Number.isInteger(y.origCtx) || y.origCtx <= 0) throw new Error(`grok: yarn.origCtx must be a positive integer, got ${String(y.origCtx)}`);
      if (!(y.extFactor >= 0)) throw new Error(`grok: yarn.extFactor must be >= 0, got ${String(y.extFactor)}`);
      if (!(y.attnFactor > 0)) throw new Error(`grok: yarn.attnFactor must be positive, got ${String(y.attnFactor)}`);
      if (!(y.betaSlow > 0 && y.betaFast > y.betaSlow)) throw new Error(`grok: yarn needs 0 < betaSlow < betaFast, got ${String(y.betaSlow)} / ${String(y.betaFast)}`);
    }
    return { ...c, attnTempLength: t, yarn: y } as GrokConfig;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const g = c as GrokConfig;
    const a = 'grok';
    // No rope.dimension_count (the converter writes none: n_rot = the head size, which the graph asserts).
    const m: [string, GgufValue][] = baseMetadata(a, c).filter(([k]) => k !== `${a}.rope.dimension_count`);
    if (c.expertFf > 0) m.push([`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)]);
    m.push([`${a}.attn_logit_softcapping`, kv.f32(g.attnSoftcap)], [`${a}.router_logit_softcapping`, kv.f32(g.routerSoftcap)]);
    if (g.softcap > 0) m.push([`${a}.final_logit_softcapping`, kv.f32(g.softcap)]);
    const y = g.yarn;
    if (y) {
      m.push(
        [`${a}.rope.scaling.type`, kv.str('yarn')],
        [`${a}.rope.scaling.factor`, kv.f32(y.factor)],
        [`${a}.rope.scaling.original_context_length`, kv.u32(y.origCtx)],
        [`${a}.rope.scaling.yarn_ext_factor`, kv.f32(y.extFactor)],
        [`${a}.rope.scaling.yarn_attn_factor`, kv.f32(y.attnFactor)],
        [`${a}.rope.scaling.yarn_beta_fast`, kv.f32(y.betaFast)],
        [`${a}.rope.scaling.yarn_beta_slow`, kv.f32(y.betaSlow)],
      );
    }
    if (g.attnTempLength! > 0) m.push([`${a}.attention.temperature_length`, kv.u32(g.attnTempLength!)]);
    m.push(
      [`${a}.attention.output_scale`, kv.f32(g.attnOutScale)],
      [`${a}.embedding_scale`, kv.f32(g.embeddingScale)],
      [`${a}.logit_scale`, kv.f32(g.logitScale)],
    );
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const g = c as GrokConfig;
    const e = c.nExperts;
    const eff = c.expertFf > 0 ? c.expertFf : c.ff;
    const kvw = (c.dim / c.nHeads) * c.nKvHeads;
    const post = (name: string, i: number, gain: number): TensorSpec => ({ ...norm(name, c.dim, i), init: gainInit(gain) });
    const t: TensorSpec[] = [{ name: 'token_embd.weight', shape: [c.dim, c.vocabSize], init: { kind: 'normal', std: grokEmbdStd(g) }, role: 'token_embd' }, norm('output_norm.weight', c.dim)];
    if (!c.tiedEmbeddings) t.push({ name: 'output.weight', shape: [c.dim, c.vocabSize], init: { kind: 'normal', std: grokHeadStd(g) }, role: 'output' });
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(
        norm(`${p}.attn_norm.weight`, c.dim, i),
        linear(`${p}.attn_q.weight`, c.dim, c.dim, 'attn_q', i),
        linear(`${p}.attn_k.weight`, c.dim, kvw, 'attn_k', i),
        linear(`${p}.attn_v.weight`, c.dim, kvw, 'attn_v', i),
        linear(`${p}.attn_output.weight`, c.dim, c.dim, 'attn_output', i),
        post(`${p}.attn_output_norm.weight`, i, grokWriteGain(g)),
        norm(`${p}.ffn_norm.weight`, c.dim, i),
      );
      if (g.dense) {
        t.push(
          linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i),
          linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i),
          linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i),
        );
      }
      t.push(
        linear(`${p}.ffn_gate_inp.weight`, c.dim, e, 'router', i, 2),
        { name: `${p}.ffn_gate_exps.weight`, shape: [c.dim, eff, e], init: linearInit(c.dim), role: 'ffn_gate', layer: i },
        { name: `${p}.ffn_up_exps.weight`, shape: [c.dim, eff, e], init: linearInit(c.dim), role: 'ffn_up', layer: i },
        { name: `${p}.ffn_down_exps.weight`, shape: [eff, c.dim, e], init: linearInit(eff), role: 'ffn_down', layer: i },
        post(`${p}.${g.postFfnNorm}.weight`, i, grokWriteGain(g) / 2),
      );
    }
    return t;
  },
};
