// Google Gemma 3n (`gemma3n`: Gemma-3n-E2B / E4B text decoders; llama.cpp src/models/gemma3n.cpp,
// converted by conversion/gemma.py Gemma3NModel). The embedding (times sqrt(n_embd)) is the first
// of `altup.num_inputs` AltUp streams; altup_proj.weight {n_embd, n_embd, n - 1} makes the others
// (rescaled to the embedding's magnitude) and altup_unembd_proj.weight maps them back at the end.
// Per block: altup_router / altup_router_norm give n modalities (tanh) from the active stream
// (`altup.active_idx`), altup_predict_coef {n, n x n} mixes the streams into predictions,
// altup_correct_coef {n, n} corrects them after the block; the block itself is Gemma 3's (attn_norm,
// q/k norms, V RMS-normed, NeoX RoPE, attention scale 1, post_attention_norm, GeGLU FFN between
// ffn_norm and post_ffw_norm) with LAuReL beside attention (laurel_l {n_embd, rank}, laurel_r,
// laurel_post_norm) and gaussian top-k sparsity of the FFN gate on blocks whose
// `activation_sparsity_scale` is positive; then the per-layer input (per_layer_token_embd
// {256 x n_layer, n_vocab} and per_layer_model_proj as Gemma 4 E2B) gated by inp_gate from the
// corrected active stream times altup_correct_scale, through proj and post_norm, is added to streams
// 1..n-1. Sliding windows per the BOOL `attention.sliding_window_pattern`; the last
// `attention.shared_kv_layers` blocks have no attn_k / attn_v / attn_k_norm and read the cache of
// block n_layer - s - 2 (sliding) or - 1 (full). Tied head, logits soft-capped at 30.
//
// llama.cpp hard-codes what the converter writes for the real models: 4 streams, active stream 0,
// 256 per-layer inputs, LAuReL of rank 64, KV from block 20 on shared (has_kv: il < 20) and sparsity with
// normal icdf(0.95) = 1.6448533535003662 on blocks 0-9 only. A file it reads the same way must
// agree, so normalize() refuses other values (kail itself reads them from the file).
import { f32Tensor, linear, linearInit, norm, NORM_INIT, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec, WeightInit } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';

/**
 * headDim: the head size; swaPattern: true = a sliding window of `window` positions; laurelRank:
 * LAuReL's rank; sharedKvLayers: trailing blocks that reuse earlier caches (nLayers - 20 when
 * nLayers > 20, else 0, as llama.cpp); ropeBaseSwa: the sliding blocks' RoPE base.
 */
export type Gemma3nConfig = ModelConfig & {
  headDim: number;
  swaPattern: boolean[];
  window: number;
  ropeBaseSwa: number;
  laurelRank: number;
  sharedKvLayers: number;
};

/** What llama.cpp's gemma3n graph hard-codes (llama-hparams.h, models.h, gemma3n.cpp). */
export const GEMMA3N_FIXED = { nAltup: 4, laurelRank: 64, altupActive: 0, nEmbdPerLayer: 256, kvFromStart: 20, nSparse: 10, stdMul: 1.6448533535003662, softcap: 30 } as const;

const gainInit = (mean: number): WeightInit => ({ kind: 'normal', mean, std: 0.1 * mean });

// Scales (every sub-layer is RMS-normed before it joins a stream, so the norm gains set them):
// router weights of std 8 over rms_norm(x) / n_embd (norm 1 / sqrt(n_embd) = 1/8) give tanh inputs
// of std ~1; the predict / correct coefficients std ~0.1 (streams mixed by a tenth of each other);
// post_attention_norm, post_ffw_norm and laurel_post_norm at residualGain (1/sqrt(2L)), the
// per-layer input's post_norm at 0.03. Measured against llama.cpp over 64 tokens (tiny-gemma3n,
// F32): with post_ffw_norm and post_norm gains ~1 the NMSE was 6e-8, as ggml's F16 GELU table
// turns a last-bit difference of a gate input into a step of 2^-11 that the 22 blocks amplify;
// post_ffw_norm at residualGain 1.2e-9, and post_norm at 0.03 4.6e-11 (kept). Q4_K_M: llama.cpp's
// own spread (F16 KV vs F32) 1.3e-4, so one flipped choice does not swamp the comparison.
export const gemma3n: ArchDefinition = {
  name: 'gemma3n',
  ggufArch: 'gemma3n',
  normalize(c: ModelConfig): ModelConfig {
    const g = c as Gemma3nConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    for (const f of ['headDim', 'window', 'laurelRank'] as const) {
      if (!Number.isInteger(g[f]) || g[f] <= 0) throw new Error(`gemma3n: ${f} must be a positive integer (use a preset), got ${String(g[f])}`);
    }
    if (c.nExperts > 0) throw new Error('gemma3n: no experts');
    if (g.laurelRank !== GEMMA3N_FIXED.laurelRank) throw new Error(`gemma3n: llama.cpp's loader takes LAuReL of rank ${GEMMA3N_FIXED.laurelRank} only, got ${g.laurelRank}`);
    if (c.nHeads % c.nKvHeads !== 0) throw new Error(`gemma3n: heads ${c.nHeads} not divisible by kv heads ${c.nKvHeads}`);
    if (g.headDim % 2 !== 0) throw new Error(`gemma3n: head size ${g.headDim} must be even for RoPE`);
    let pattern = g.swaPattern;
    if (!Array.isArray(pattern) || pattern.length === 0) throw new Error('gemma3n: swaPattern needs one entry per block (use a preset)');
    if (pattern.length !== c.nLayers) pattern = Array.from({ length: c.nLayers }, (_, i) => g.swaPattern[i % g.swaPattern.length]);
    const s = c.nLayers > GEMMA3N_FIXED.kvFromStart ? c.nLayers - GEMMA3N_FIXED.kvFromStart : 0;
    if (s > 0 && (!pattern[c.nLayers - s - 2] || pattern[c.nLayers - s - 1]))
      throw new Error(`gemma3n: blocks ${c.nLayers - s - 2} and ${c.nLayers - s - 1} must be sliding and full (the caches the last ${s} blocks reuse)`);
    if (!(g.ropeBaseSwa > 0)) throw new Error('gemma3n: ropeBaseSwa must be positive');
    return { ...c, tiedEmbeddings: true, swaPattern: pattern, sharedKvLayers: s } as Gemma3nConfig;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const g = c as Gemma3nConfig;
    const a = 'gemma3n';
    const F = GEMMA3N_FIXED;
    const layers = g.swaPattern.map((_, i) => i);
    return [
      [`${a}.vocab_size`, kv.u32(c.vocabSize)],
      [`${a}.context_length`, kv.u32(c.ctx)],
      [`${a}.embedding_length`, kv.u32(c.dim)],
      [`${a}.block_count`, kv.u32(c.nLayers)],
      [`${a}.feed_forward_length`, kv.arr(GgufType.INT32, layers.map(() => c.ff))],
      [`${a}.attention.head_count`, kv.u32(c.nHeads)],
      [`${a}.attention.head_count_kv`, kv.u32(c.nKvHeads)],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${a}.attention.key_length`, kv.u32(g.headDim)],
      [`${a}.attention.value_length`, kv.u32(g.headDim)],
      [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${a}.rope.freq_base_swa`, kv.f32(g.ropeBaseSwa)],
      [`${a}.attention.sliding_window`, kv.u32(g.window)],
      [`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, g.swaPattern)],
      [`${a}.attention.shared_kv_layers`, kv.u32(g.sharedKvLayers)],
      [`${a}.altup.active_idx`, kv.u32(F.altupActive)],
      [`${a}.altup.num_inputs`, kv.u32(F.nAltup)],
      [`${a}.embedding_length_per_layer_input`, kv.u32(F.nEmbdPerLayer)],
      [`${a}.activation_sparsity_scale`, kv.arr(GgufType.FLOAT32, layers.map((i) => (i < F.nSparse ? F.stdMul : 0)))],
      [`${a}.final_logit_softcapping`, kv.f32(F.softcap)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const g = c as Gemma3nConfig;
    const L = c.nLayers;
    const d = c.dim;
    const { nAltup: n, nEmbdPerLayer: epl } = GEMMA3N_FIXED;
    const r = g.laurelRank;
    const nQ = g.headDim * c.nHeads;
    const nKv = g.headDim * c.nKvHeads;
    const t: TensorSpec[] = [
      { name: 'token_embd.weight', shape: [d, c.vocabSize], init: linearInit(d, 2), role: 'token_embd' },
      // Scaled by sqrt(256) in the graph: unit scale.
      { name: 'per_layer_token_embd.weight', shape: [epl * L, c.vocabSize], init: linearInit(epl), role: 'token_embd' },
      f32Tensor('per_layer_model_proj.weight', [d, epl * L], linearInit(d)),
      norm('per_layer_proj_norm.weight', epl),
      f32Tensor('altup_proj.weight', [d, d, n - 1], linearInit(d)),
      f32Tensor('altup_unembd_proj.weight', [d, d, n - 1], linearInit(d)),
      norm('output_norm.weight', d),
    ];
    for (let i = 0; i < L; i++) {
      const p = `blk.${i}`;
      // (Shared-KV blocks keep attn_k / attn_v / attn_k_norm, unused, as the real files and llama.cpp's loader do.)
      t.push(
        norm(`${p}.attn_norm.weight`, d, i),
        linear(`${p}.attn_q.weight`, d, nQ, 'attn_q', i),
        linear(`${p}.attn_k.weight`, d, nKv, 'attn_k', i),
        linear(`${p}.attn_v.weight`, d, nKv, 'attn_v', i),
        linear(`${p}.attn_output.weight`, nQ, d, 'attn_output', i),
        { ...norm(`${p}.attn_q_norm.weight`, g.headDim, i), init: gainInit(g.headDim ** -0.25) },
        { ...norm(`${p}.attn_k_norm.weight`, g.headDim, i), init: gainInit(g.headDim ** -0.25) },
        { ...norm(`${p}.post_attention_norm.weight`, d, i), init: gainInit(residualGain(c)) },
        norm(`${p}.ffn_norm.weight`, d, i),
        linear(`${p}.ffn_gate.weight`, d, c.ff, 'ffn_gate', i),
        linear(`${p}.ffn_up.weight`, d, c.ff, 'ffn_up', i),
        linear(`${p}.ffn_down.weight`, c.ff, d, 'ffn_down', i),
        { ...norm(`${p}.post_ffw_norm.weight`, d, i), init: gainInit(residualGain(c)) },
        linear(`${p}.inp_gate.weight`, d, epl, 'ffn_gate', i),
        linear(`${p}.proj.weight`, epl, d, 'ffn_up', i),
        { ...norm(`${p}.post_norm.weight`, d, i), init: gainInit(0.03) },
        f32Tensor(`${p}.altup_correct_coef.weight`, [n, n], { kind: 'normal', std: 0.1 }, i),
        { name: `${p}.altup_correct_scale.weight`, shape: [d], init: NORM_INIT, role: 'norm', layer: i },
        f32Tensor(`${p}.altup_predict_coef.weight`, [n, n * n], { kind: 'normal', std: 0.1 }, i),
        f32Tensor(`${p}.altup_router.weight`, [d, n], { kind: 'normal', std: 8 }, i),
        norm(`${p}.altup_router_norm.weight`, d, i),
        linear(`${p}.laurel_l.weight`, d, r, 'ffn_gate', i),
        linear(`${p}.laurel_r.weight`, r, d, 'ffn_up', i),
        { ...norm(`${p}.laurel_post_norm.weight`, d, i), init: gainInit(residualGain(c)) },
      );
    }
    return t;
  },
};
