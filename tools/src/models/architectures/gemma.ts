// Google Gemma 1, 2 and 3, dense (`gemma`, `gemma2`, `gemma3`; llama.cpp src/models/gemma.cpp,
// gemma2.cpp, gemma3.cpp, converted by conversion/gemma.py GemmaModel, Gemma2Model, Gemma3Model).
//
// All three: token_embd scaled by sqrt(n_embd) in the graph; per block attn_norm, q/k/v/o
// (attention width heads x key_length, which real Gemmas set apart from n_embd / n_head: 2B is 8
// heads of 256 over n_embd 2048), NeoX RoPE over the whole head, q scaled by 1/sqrt(key_length)
// (gemma2 / gemma3 at 46 / 62 blocks, their 27B: by 1/sqrt(n_embd / n_head)), then ffn_norm and a
// GELU-gated MLP (ffn_gate, ffn_up, ffn_down). RMS norm weights are used as stored: the converters
// add HF's +1 (Gemma's RMSNorm scales by 1 + w), so gains here sit near 1 as elsewhere.
// - gemma: pre-norm residual blocks as llama. No output.weight: the head is token_embd.
// - gemma2: post_attention_norm on the attention output and post_ffw_norm on the MLP output before
//   each residual add; attention scores soft-capped by attn_logit_softcapping and the logits by
//   final_logit_softcapping (both tanh caps, always applied: the loader defaults them to 50 / 30);
//   blocks alternate sliding window (even blocks, the loader's default pattern period 2) and full
//   attention. No output.weight.
// - gemma3: gemma2's block with per-head RMS attn_q_norm / attn_k_norm [key_length] before RoPE and
//   no attention soft cap; with attention.sliding_window > 0 blocks 0-4 of every 6 slide (default
//   pattern period 6), rotating with base 10000 (no rope.freq_base_swa in these files) and scale 1,
//   the full blocks with rope.freq_base (1e6) and rope.scaling (linear factor 8 on Gemma 3 4B and up);
//   without the key every block is full and rotates as the full ones. final_logit_softcapping only
//   when the file has it. output.weight optional (tied when absent).
// Keys as the converters write them: no rope.dimension_count (n_rot = key_length) and, on gemma /
// gemma2, no rope.freq_base unless it differs from the loader's 10000.
import { attention, denseFfn, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec, WeightInit } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';

/**
 * headDim: key_length = value_length (required: Gemma's is not n_embd / n_head). window:
 * attention.sliding_window (gemma2: > 0; gemma3: 0 = no sliding blocks, the key not written).
 * attnSoftcap (gemma2): attn_logit_softcapping. softcap: final_logit_softcapping (gemma2: > 0;
 * gemma3: 0 = none, not written). ropeScale (gemma3): linear RoPE scaling factor of the full blocks
 * (0 or 1: none, not written).
 */
export type GemmaConfig = ModelConfig & {
  headDim: number;
  window?: number;
  attnSoftcap?: number;
  softcap?: number;
  ropeScale?: number;
  /** gemma-embedding: rope.freq_base_swa (absent: not written, the loader's 10000). */
  ropeBaseSwa?: number;
  /** gemma-embedding: the sentence-transformers projections dense_2 [dim, denseWidth] and dense_3 [denseWidth, dim] (with the dense_*_feat_* keys). */
  denseWidth?: number;
};

/** llama.cpp's rope.freq_base when the file has none (gemma / gemma2 files never do). */
const DEFAULT_ROPE_BASE = 10000;

// Scales. The input embedding is token_embd times sqrt(n_embd): token_embd of std 2/sqrt(n_embd)
// puts the token's embedding into the stream at std 2 and, as the (tied) head, gives logits of std
// ~2 over the normed final state. Each of the 2L sub-layers then writes into the stream at
// residualWrite = 2/sqrt(2L): together about the embedding's variance (4) at any depth. gemma:
// attn_output / ffn_down of that gain (what they write is a little smaller: softmax averages of v,
// GELU-gated products). gemma2 / gemma3: every sub-layer's output is RMS-normed before the residual
// add, so the projections' scale does not matter there and post_attention_norm / post_ffw_norm
// gains of residualWrite set it exactly. gemma3's q/k norm gains stay ~1: with the 1/sqrt(head)
// query scale, scores over RMS-normed heads have std ~1 (Gemma 4's scale of 1 needed smaller
// gains). Measured in llama.cpp over 64 tokens (tiny-gemma / -gemma2 / -gemma3; the layers' share:
// the NMSE between the logits and those of the same file with every residual write near zero):
// - residualGain (1/sqrt(2L)) writes: F32 vs Q8_0 logits NMSE 9.5e-5 / 1.3e-4 / 1.3e-4, but the
//   layers' share only 0.06 / 0.21 / 0.21: the logits are mostly the embedding through the head.
// - unit post-norm gains (gemma: attn_output / ffn_down gain 1): 2.0e-4 / 4.0e-4 / 5.3e-4, share
//   0.40 / 0.85 / 0.99, but the stream's variance grows with depth (4 + 2L) and its layers' part
//   turns to a direction shared by all tokens (mean cosine of the centred logit rows 0.04 / 0.10 /
//   0.07, against residualGain's 0.01 / 0.03 / 0.01).
// - residualWrite (kept): 1.4e-4 / 2.8e-4 / 2.7e-4 (Q8_0 picking F32's top-1 at every position),
//   share 0.23 / 0.58 / 0.58, mean cosine 0.02 / 0.07 / 0.03; Q4_K_M 1.3e-3 / 4.4e-3 / 4.5e-3.
//   Alike at seed 7 (Q8_0 1.4e-4 / 2.9e-4 / 3.1e-4) and with --layers 26 (1.5e-4 / 2.9e-4 /
//   3.0e-4). Through the tied head the input token's own logit still leads at nearly every position.

/** Gain of every sub-layer's write into the residual stream: twice residualGain (see above). */
const residualWrite = (c: ModelConfig) => 2 * residualGain(c);

/** Norm gains around `mean` (std a tenth of it, as NORM_INIT around 1). */
const gainInit = (mean: number): WeightInit => ({ kind: 'normal', mean, std: 0.1 * mean });

/** attn_output and ffn_down at residualWrite (on gemma2 / gemma3 their scale is normed away). */
function writer(c: ModelConfig, x: TensorSpec): TensorSpec {
  return x.role === 'attn_output' || x.role === 'ffn_down' ? { ...x, init: linearInit(x.shape[0], residualWrite(c)) } : x;
}

function postNorm(c: ModelConfig, name: string, i: number): TensorSpec {
  return { ...norm(name, c.dim, i), init: gainInit(residualWrite(c)) };
}

function normalize(c: ModelConfig): ModelConfig {
  const g = c as GemmaConfig;
  const a = c.arch;
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  if (!Number.isInteger(g.headDim) || g.headDim <= 0) throw new Error(`${a}: headDim (key_length) must be a positive integer (use a preset), got ${String(g.headDim)}`);
  if (g.headDim % 2 !== 0) throw new Error(`${a}: head size ${g.headDim} must be even for RoPE`);
  if (c.nHeads % c.nKvHeads !== 0) throw new Error(`${a}: heads ${c.nHeads} not divisible by kv heads ${c.nKvHeads}`);
  if (c.nExperts > 0) throw new Error(`${a}: a dense architecture (no experts)`);
  if (!(c.ropeBase > 0)) throw new Error(`${a}: ropeBase must be positive`);
  const window = g.window ?? 0;
  const softcap = g.softcap ?? 0;
  if (!Number.isInteger(window) || window < 0) throw new Error(`${a}: window must be a non-negative integer, got ${String(g.window)}`);
  if (!(softcap >= 0)) throw new Error(`${a}: softcap must be non-negative`);
  if (a === 'gemma2') {
    // The graph divides by both caps whatever the file says (defaults 50 / 30): they must be set.
    if (!(window > 0) || !((g.attnSoftcap ?? 0) > 0) || !(softcap > 0)) throw new Error('gemma2: window, attnSoftcap and softcap must be positive (use a preset)');
  }
  if (a === 'gemma3' && !((g.ropeScale ?? 0) >= 0)) throw new Error('gemma3: ropeScale must be non-negative');
  // EmbeddingGemma: the loader requires attention.sliding_window; an encoder has no head.
  if (a === 'gemma-embedding' && (!(window > 0) || !c.tiedEmbeddings)) throw new Error('gemma-embedding: window must be positive and tiedEmbeddings true (no output.weight)');
  if ((g.ropeBaseSwa !== undefined || g.denseWidth !== undefined) && a !== 'gemma-embedding') throw new Error(`${a}: ropeBaseSwa / denseWidth are gemma-embedding's`);
  if (g.denseWidth !== undefined && !(Number.isInteger(g.denseWidth) && g.denseWidth > 0)) throw new Error(`${a}: denseWidth must be a positive integer`);
  // gemma / gemma2 always read the head from token_embd; gemma3 may have output.weight.
  return { ...c, window, softcap, tiedEmbeddings: a === 'gemma3' ? c.tiedEmbeddings : true } as GemmaConfig;
}

function metadata(c: ModelConfig): [string, GgufValue][] {
  const g = c as GemmaConfig;
  const a = c.arch;
  const m: [string, GgufValue][] = [
    [`${a}.vocab_size`, kv.u32(c.vocabSize)],
    [`${a}.context_length`, kv.u32(c.ctx)],
    [`${a}.embedding_length`, kv.u32(c.dim)],
    [`${a}.block_count`, kv.u32(c.nLayers)],
    [`${a}.feed_forward_length`, kv.u32(c.ff)],
    [`${a}.attention.head_count`, kv.u32(c.nHeads)],
    [`${a}.attention.head_count_kv`, kv.u32(c.nKvHeads)],
    [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
    [`${a}.attention.key_length`, kv.u32(g.headDim)],
    [`${a}.attention.value_length`, kv.u32(g.headDim)],
  ];
  if (a === 'gemma-embedding') {
    m.push([`${a}.pooling_type`, kv.u32(c.pooling ?? 1)]);
    if (g.ropeBaseSwa !== undefined) m.push([`${a}.rope.freq_base_swa`, kv.f32(g.ropeBaseSwa)]);
    if (g.denseWidth !== undefined)
      m.push([`${a}.dense_2_feat_in`, kv.u32(c.dim)], [`${a}.dense_2_feat_out`, kv.u32(g.denseWidth)], [`${a}.dense_3_feat_in`, kv.u32(g.denseWidth)], [`${a}.dense_3_feat_out`, kv.u32(c.dim)]);
  }
  if (a === 'gemma3' || a === 'gemma-embedding') {
    m.push([`${a}.rope.freq_base`, kv.f32(c.ropeBase)]);
    if ((g.ropeScale ?? 0) > 0 && g.ropeScale !== 1) m.push([`${a}.rope.scaling.type`, kv.str('linear')], [`${a}.rope.scaling.factor`, kv.f32(g.ropeScale!)]);
    if (g.softcap! > 0) m.push([`${a}.final_logit_softcapping`, kv.f32(g.softcap!)]);
    if (g.window! > 0) m.push([`${a}.attention.sliding_window`, kv.u32(g.window!)]);
    return m;
  }
  if (c.ropeBase !== DEFAULT_ROPE_BASE) m.push([`${a}.rope.freq_base`, kv.f32(c.ropeBase)]);
  if (a === 'gemma2') {
    m.push(
      [`${a}.attn_logit_softcapping`, kv.f32(g.attnSoftcap!)],
      [`${a}.final_logit_softcapping`, kv.f32(g.softcap!)],
      [`${a}.attention.sliding_window`, kv.u32(g.window!)],
    );
  }
  return m;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const post = c.arch !== 'gemma';
  // token_embd: std 2/sqrt(dim) whether or not it is the head (see the scales above).
  const t: TensorSpec[] = [{ name: 'token_embd.weight', shape: [c.dim, c.vocabSize], init: linearInit(c.dim, 2), role: 'token_embd' }, norm('output_norm.weight', c.dim)];
  if (!c.tiedEmbeddings) t.push({ name: 'output.weight', shape: [c.dim, c.vocabSize], init: linearInit(c.dim, 2), role: 'output' });
  for (let i = 0; i < c.nLayers; i++) {
    const p = `blk.${i}`;
    t.push(...attention(c, i, { qkNorm: c.arch === 'gemma3' || c.arch === 'gemma-embedding' }).map((x) => writer(c, x)));
    if (post) t.push(postNorm(c, `${p}.post_attention_norm.weight`, i));
    t.push(...denseFfn(c, i).map((x) => writer(c, x)));
    if (post) t.push(postNorm(c, `${p}.post_ffw_norm.weight`, i));
  }
  const dw = (c as GemmaConfig).denseWidth;
  if (dw !== undefined) t.push(linear('dense_2.weight', c.dim, dw, 'attn_q'), linear('dense_3.weight', dw, c.dim, 'attn_q'));
  return t;
}

const def = (name: 'gemma' | 'gemma2' | 'gemma3' | 'gemma-embedding'): ArchDefinition => ({ name, ggufArch: name, normalize, metadata, tensors });

export const gemma = def('gemma');
export const gemma2 = def('gemma2');
export const gemma3 = def('gemma3');
export const gemmaEmbedding = def('gemma-embedding');
