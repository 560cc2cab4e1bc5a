// JetBrains Mellum2 (`mellum`; llama.cpp src/models/mellum.cpp, converted by conversion/mellum.py
// MellumModel, e.g. Mellum2-12B-A2.5B: 28 blocks, LLM_TYPE_12B_A2_5B) and deepgrove Maple
// (`maple`; src/models/maple.cpp, conversion/maple.py MapleModel, maple-preview: 24 blocks,
// LLM_TYPE_20B). Both have Qwen3-MoE-shaped blocks: attn_norm; q, k, v without biases (q of
// n_head x head, k and v of n_head_kv x head; key_length / value_length when the head is not
// n_embd / n_head, as the converter writes HF head_dim); per-head RMS attn_q_norm / attn_k_norm
// [head]; NeoX RoPE; attention with scale 1/sqrt(head); attn_output; then ffn_norm and softmax
// routing over ffn_gate_inp, the top-k weights renormalized, SwiGLU experts of
// expert_feed_forward_length (which both loaders require); no shared expert, no dense blocks.
// output_norm, and `output.weight` is required by both loaders (no tied head).
//
// mellum: attention.sliding_window is optional. Without it (or 0) every block attends everything
// (llama.cpp's graph<false>, one plain KV cache). With it the converter also writes
// attention.sliding_window_pattern (BOOL per block from HF layer_types, true = sliding); llama.cpp
// (load_swa_pattern(ml, 4)) would take a file without the array as every 4th block full (il % 4
// == 3), which is what `swaPattern` omitted writes. rope.freq_base_swa is read only when there is a
// window (the converter writes it from rope_parameters.sliding_attention.rope_theta, when HF has
// one). NOTE, llama.cpp's graph: a sliding block rotates with the context's freq_base (the global
// rope.freq_base; freq_scale 1, ext_factor 0, attn_factor 1), NOT rope.freq_base_swa: the loader
// stores the SWA base but only the KV cache's K-shift (llama_model::get_rope_freq_base) uses it
// (tiny-mellum with freq_base_swa 1e4, 1e6 or none: identical llama.cpp logits). So a reader
// matching llama.cpp's forward pass ignores it, and a context shift re-rotates the sliding blocks'
// keys by a base their queries never used.
// RoPE covers the whole head (the graph asserts n_rot == head): rope.dimension_count is the head.
//
// maple: attention.sliding_window and the BOOL sliding_window_pattern are both required (always
// the iSWA cache). Only the sliding blocks get RoPE, over rope.dimension_count dims of each head
// (the converter writes head x partial_rotary_factor) with rope.freq_base_swa (llama.cpp's
// get_rope_freq_base: the SWA base, which defaults to rope.freq_base when absent); the full blocks
// are NoPE (HF nope_on_global_attention, which the converter asserts). swiglu_clamp_exp (FLOAT32
// per block, required, length n_layer; the converter writes 7.0 everywhere): where > 1e-6 the
// experts' SwiGLU is ggml_swiglu_clamp: silu(min(gate, limit)) * clamp(up, -limit, limit) (the gate
// PRE-activation capped, unlike step35's limits, which cap silu(gate)); 0: plain SwiGLU.
// The routed mix is not scaled (expert_weights_scale 1).
//
// Scales: as qwen3moe (moeFfn: router logits of std ~2 over the normed input, writers at
// residualGain). The clamp acts after ffn_norm, where every expert's gate and up pre-activations are
// ~N(0, 1) whatever the stream's scale (RMS-normed input of unit RMS, gains ~1, rows of std
// 1/sqrt(n_embd)): a limit of 1 clips about a third of the up values (|up| > 1) and caps a sixth of
// the gates (gate > 1); the real 7 is never reached by these random weights.
import { attention, checkHeads, embeddings, headDim, moeFfn, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

/**
 * window: attention.sliding_window (0: none, and then no sliding keys at all: every block full).
 * swaPattern: attention.sliding_window_pattern, one flag per block (true = sliding); with a window
 * and no pattern no key is written (llama.cpp: every 4th block full). ropeBaseSwa:
 * rope.freq_base_swa (absent: not written; see above for what llama.cpp's graph does with it).
 */
export type MellumConfig = ModelConfig & { window: number; swaPattern?: boolean[]; ropeBaseSwa?: number };

/**
 * window: attention.sliding_window (required, positive). swaPattern: one flag per block (true =
 * sliding with RoPE, false = full NoPE). ropeDims: rope.dimension_count (even, at most the head).
 * ropeBaseSwa: rope.freq_base_swa (absent: not written; the sliding blocks then use ropeBase).
 * swigluLimit: swiglu_clamp_exp, one limit >= 0 per block (0: no clamp).
 */
export type MapleConfig = ModelConfig & { window: number; swaPattern: boolean[]; ropeDims: number; ropeBaseSwa?: number; swigluLimit: number[] };

/** The checks both share: heads, experts (both loaders throw without them), the untied head. */
function checkCommon(c: ModelConfig): void {
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
  checkHeads(c);
  checkExperts(c, true);
  if (!(c.ropeBase > 0)) throw new Error(`${c.arch}: ropeBase must be positive, got ${String(c.ropeBase)}`);
  if (!(c.normEps > 0)) throw new Error(`${c.arch}: normEps must be positive, got ${String(c.normEps)}`);
  if (c.tiedEmbeddings) throw new Error(`${c.arch}: tiedEmbeddings must be false (the loader requires output.weight)`);
}

function checkPattern(c: ModelConfig, pattern: unknown): void {
  if (!Array.isArray(pattern) || pattern.length !== c.nLayers || !pattern.every((x) => typeof x === 'boolean')) {
    const len = Array.isArray(pattern) ? `${pattern.length} entries` : String(pattern);
    throw new Error(`${c.arch}: swaPattern needs one boolean per block (${c.nLayers}), got ${len} (use a preset)`);
  }
}

function checkRopeBaseSwa(c: ModelConfig, v: number | undefined): void {
  if (v !== undefined && !(Number.isFinite(v) && v > 0)) throw new Error(`${c.arch}: ropeBaseSwa must be positive, got ${String(v)}`);
}

/** attention (with per-head q/k norms) and the routed FFN of every block. */
function tensors(c: ModelConfig): TensorSpec[] {
  const t = embeddings(c);
  for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i, { qkNorm: true }), ...moeFfn(c, i, c.expertFf));
  return t;
}

export const mellum: ArchDefinition = {
  name: 'mellum',
  ggufArch: 'mellum',
  normalize(c: ModelConfig): ModelConfig {
    const m = c as MellumConfig;
    checkCommon(c);
    if (!(Number.isInteger(m.window) && m.window >= 0)) throw new Error(`mellum: window must be a non-negative integer (0: none), got ${String(m.window)} (use a preset)`);
    if (m.window === 0) {
      // The converter writes neither without a window, and llama.cpp reads neither.
      if (m.swaPattern !== undefined) throw new Error('mellum: swaPattern needs a window (window 0: every block full, no sliding keys)');
      if (m.ropeBaseSwa !== undefined) throw new Error('mellum: ropeBaseSwa needs a window (llama.cpp reads rope.freq_base_swa only with attention.sliding_window)');
    } else if (m.swaPattern !== undefined) checkPattern(c, m.swaPattern);
    checkRopeBaseSwa(c, m.ropeBaseSwa);
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const m = c as MellumConfig;
    const a = 'mellum';
    const out: [string, GgufValue][] = [...baseMetadata(a, c), [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)]];
    if (m.window > 0) {
      out.push([`${a}.attention.sliding_window`, kv.u32(m.window)]);
      if (m.swaPattern) out.push([`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, m.swaPattern)]);
      if (m.ropeBaseSwa !== undefined) out.push([`${a}.rope.freq_base_swa`, kv.f32(m.ropeBaseSwa)]);
    }
    return out;
  },
  tensors,
};

export const maple: ArchDefinition = {
  name: 'maple',
  ggufArch: 'maple',
  normalize(c: ModelConfig): ModelConfig {
    const m = c as MapleConfig;
    checkCommon(c);
    if (!(Number.isInteger(m.window) && m.window > 0)) throw new Error(`maple: window must be a positive integer (attention.sliding_window is required), got ${String(m.window)} (use a preset)`);
    checkPattern(c, m.swaPattern);
    if (!(Number.isInteger(m.ropeDims) && m.ropeDims > 0 && m.ropeDims % 2 === 0 && m.ropeDims <= headDim(c))) {
      throw new Error(`maple: ropeDims must be even, positive and at most the head size ${headDim(c)}, got ${String(m.ropeDims)} (use a preset)`);
    }
    checkRopeBaseSwa(c, m.ropeBaseSwa);
    if (!Array.isArray(m.swigluLimit) || m.swigluLimit.length !== c.nLayers) {
      const len = Array.isArray(m.swigluLimit) ? `${m.swigluLimit.length} entries` : String(m.swigluLimit);
      throw new Error(`maple: swigluLimit needs one limit per block (${c.nLayers}; swiglu_clamp_exp is required), got ${len} (use a preset)`);
    }
    m.swigluLimit.forEach((x, i) => {
      if (!(typeof x === 'number' && Number.isFinite(x) && x >= 0)) throw new Error(`maple: swigluLimit[${i}] must be a finite limit >= 0 (0: none), got ${String(x)}`);
    });
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const m = c as MapleConfig;
    const a = 'maple';
    const out: [string, GgufValue][] = [
      ...baseMetadata(a, c).filter(([k]) => k !== `${a}.rope.dimension_count`),
      [`${a}.rope.dimension_count`, kv.u32(m.ropeDims)],
      [`${a}.attention.sliding_window`, kv.u32(m.window)],
      [`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, m.swaPattern)],
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.swiglu_clamp_exp`, kv.arr(GgufType.FLOAT32, m.swigluLimit)],
    ];
    if (m.ropeBaseSwa !== undefined) out.push([`${a}.rope.freq_base_swa`, kv.f32(m.ropeBaseSwa)]);
    return out;
  },
  tensors,
};
