// Gemma 4 assistant drafts (llama.cpp's `gemma4-assistant`: src/models/gemma4-assistant.cpp, written
// by conversion/gemma.py Gemma4AssistantModel from Gemma4AssistantForCausalLM). The draft has no
// KV projections: each of its blocks attends over its TARGET's cache (llama.cpp's ctx_other): a
// sliding block over the target's block n_layer - 2, a full block over n_layer - 1, so its heads
// per block (key_length[_swa], head_count_kv per block) are the target's there. Its input row is
// nextn.pre_projection([target token_embd[token] * sqrt(target n_embd); h]) where h (the target's
// n_embd, `embedding_length_out`) is the target's post-output-norm hidden state or the draft's own
// previous h_next; a block: attn_norm, q, per-head RMS q_norm, RoPE (full blocks with rope_freqs),
// attention (scale 1), post_attention_norm, residual; ffn_norm, GeGLU, post_ffw_norm, residual;
// times layer_output_scale. Then output_norm, logits through its own token_embd (tied), and h_next =
// nextn.post_projection(normed). block_count = nextn_predict_layers (every block is a draft block).
// masked_embd_centroids / masked_embd_ordering (the E2B assistant's sparse head) are optional in
// llama.cpp's loader and unused by its graph: not written.
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { f32Tensor, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';

/**
 * targetDim: the target's n_embd (embedding_length_out). headDim / nKvHeads: the sliding blocks'
 * head size and KV heads, headDimFull / nKvHeadsFull the full blocks' (both must be the target's
 * cache blocks' they read). swaPattern: per block, true = sliding window of `window` positions.
 */
export type Gemma4AssistantConfig = ModelConfig & {
  targetDim: number;
  headDim: number;
  headDimFull: number;
  nKvHeadsFull: number;
  swaPattern: boolean[];
  window: number;
  ropeBaseSwa: number;
};

const A = 'gemma4-assistant';
// As gemma4's writer: a quarter of the full head's dims rotate (rope_freqs 1 there, 1e30 after).
const FULL_ROTARY_FRACTION = 0.25;

function normalize(c: ModelConfig): ModelConfig {
  const g = c as Gemma4AssistantConfig;
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  for (const f of ['targetDim', 'headDim', 'headDimFull', 'nKvHeadsFull', 'window'] as const) {
    if (!Number.isInteger(g[f]) || g[f] <= 0) throw new Error(`${A}: ${f} must be a positive integer (use a preset), got ${String(g[f])}`);
  }
  // llama.cpp's loader: "requires embedding_length_out to carry the target hidden size".
  if (g.targetDim === c.dim) throw new Error(`${A}: targetDim must differ from dim (llama.cpp reads embedding_length_out == embedding_length as no target width)`);
  if (c.nHeads % c.nKvHeads !== 0 || c.nHeads % g.nKvHeadsFull !== 0) throw new Error(`${A}: heads ${c.nHeads} not divisible by kv heads ${c.nKvHeads} / ${g.nKvHeadsFull}`);
  if (g.headDim % 2 !== 0 || (g.headDimFull * FULL_ROTARY_FRACTION) % 2 !== 0) throw new Error(`${A}: head sizes must be even (the full one a multiple of 8)`);
  if (!Array.isArray(g.swaPattern) || g.swaPattern.length !== c.nLayers) throw new Error(`${A}: swaPattern needs one entry per block (use a preset)`);
  if (!(g.ropeBaseSwa > 0)) throw new Error(`${A}: ropeBaseSwa must be positive`);
  return { ...c, tiedEmbeddings: true };
}

export const gemma4Assistant: ArchDefinition = {
  name: A,
  ggufArch: A,
  normalize,
  metadata(c: ModelConfig): [string, GgufValue][] {
    const g = c as Gemma4AssistantConfig;
    return [
      [`${A}.vocab_size`, kv.u32(c.vocabSize)],
      [`${A}.context_length`, kv.u32(c.ctx)],
      [`${A}.embedding_length`, kv.u32(c.dim)],
      [`${A}.embedding_length_out`, kv.u32(g.targetDim)],
      [`${A}.block_count`, kv.u32(c.nLayers)],
      [`${A}.nextn_predict_layers`, kv.u32(c.nLayers)],
      [`${A}.feed_forward_length`, kv.u32(c.ff)],
      [`${A}.attention.head_count`, kv.u32(c.nHeads)],
      [`${A}.attention.head_count_kv`, kv.arr(GgufType.INT32, g.swaPattern.map((s) => (s ? c.nKvHeads : g.nKvHeadsFull)))],
      [`${A}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${A}.attention.key_length`, kv.u32(g.headDimFull)],
      [`${A}.attention.value_length`, kv.u32(g.headDimFull)],
      [`${A}.attention.key_length_swa`, kv.u32(g.headDim)],
      [`${A}.attention.value_length_swa`, kv.u32(g.headDim)],
      [`${A}.rope.dimension_count`, kv.u32(g.headDimFull)],
      [`${A}.rope.dimension_count_swa`, kv.u32(g.headDim)],
      [`${A}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${A}.rope.freq_base_swa`, kv.f32(g.ropeBaseSwa)],
      [`${A}.attention.sliding_window`, kv.u32(g.window)],
      [`${A}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, g.swaPattern)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const g = c as Gemma4AssistantConfig;
    const d = c.dim;
    const T = g.targetDim;
    // The tied head: logits of std ~2 over the normed state (as gemma4's writer).
    const t: TensorSpec[] = [
      { name: 'token_embd.weight', shape: [d, c.vocabSize], init: linearInit(d, 2), role: 'token_embd' },
      norm('output_norm.weight', d),
      // [scaled target embedding; h] (2 x target width) into the draft's width, and back.
      linear('nextn.pre_projection.weight', 2 * T, d, 'attn_q'),
      linear('nextn.post_projection.weight', d, T, 'attn_q'),
    ];
    if (g.swaPattern.includes(false)) {
      const nRot = (g.headDimFull * FULL_ROTARY_FRACTION) / 2;
      t.push(f32Tensor('rope_freqs.weight', [g.headDimFull / 2], { kind: 'step', n: nRot, head: 1, tail: 1e30 }));
    }
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      const h = g.swaPattern[i] ? g.headDim : g.headDimFull;
      const nQ = h * c.nHeads;
      t.push(
        norm(`${p}.attn_norm.weight`, d, i),
        linear(`${p}.attn_q.weight`, d, nQ, 'attn_q', i),
        norm(`${p}.attn_q_norm.weight`, h, i),
        linear(`${p}.attn_output.weight`, nQ, d, 'attn_output', i, residualGain(c)),
        norm(`${p}.post_attention_norm.weight`, d, i),
        norm(`${p}.ffn_norm.weight`, d, i),
        linear(`${p}.ffn_gate.weight`, d, c.ff, 'ffn_gate', i),
        linear(`${p}.ffn_up.weight`, d, c.ff, 'ffn_up', i),
        linear(`${p}.ffn_down.weight`, c.ff, d, 'ffn_down', i, residualGain(c)),
        norm(`${p}.post_ffw_norm.weight`, d, i),
        // HF layer_scalar: a fixed value per block in [0.75, 1) (as gemma4's writer).
        f32Tensor(`${p}.layer_output_scale.weight`, [1], { kind: 'const', value: 0.75 + 0.25 * (((i + 1) * 0.6180339887498949) % 1) }, i),
      );
    }
    return t;
  },
};
