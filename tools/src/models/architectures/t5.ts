// T5's encoder as llama.cpp's t5encoder loader reads it (src/models/t5encoder.cpp) and t5.cpp's
// encoder graph runs it: token_embd (no scaling, no positions), per block RMS attn_norm -> q/k/v
// (no biases, d_kv per head: heads x d_kv need not be the model width) -> attention with scale 1
// plus the relative position bias (enc.blk.N.attn_rel_b, [n_head, relative_buckets_count]; blocks
// without one use block 0's, as Hugging Face's T5 keeps it in block 0 only) -> attn_o -> residual,
// RMS ffn_norm -> FFN (flan-T5's GELU-gated ffn_gate x ffn_up, or T5's ReLU over ffn_up) ->
// residual; enc.output_norm last. No head is read; pooling_type from `pooling`.
// `relBiasEveryBlock` writes a table in every block (each its own); `causal: false` writes
// attention.causal false, which converted files lack (llama.cpp's llama_decode then attends causally).
import { checkHeads, headDim, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';

export type T5Config = ModelConfig & {
  /** relative_attention_num_buckets (T5's 32). */
  relBuckets?: number;
  /** T5's ReLU FFN (no ffn_gate) instead of flan-T5's gated GELU. */
  reluFfn?: boolean;
  /** A bias table in every block, not block 0's alone. */
  relBiasEveryBlock?: boolean;
};

const A = 't5encoder';

export const t5Encoder: ArchDefinition = {
  name: A,
  ggufArch: A,
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    const x = c as T5Config;
    if (c.nKvHeads !== c.nHeads) throw new Error(`${A}: kv heads must equal heads (${c.nHeads})`);
    if (c.nExperts > 0) throw new Error(`${A}: a dense encoder (no experts)`);
    if (!Number.isInteger(x.relBuckets ?? 32) || (x.relBuckets ?? 32) < 4) throw new Error(`${A}: relBuckets must be an integer of at least 4`);
    if (c.causal === true) throw new Error(`${A}: the encoder never attends causally (causal may only be false, written as attention.causal)`);
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const x = c as T5Config;
    return [
      [`${A}.context_length`, kv.u32(c.ctx)],
      [`${A}.embedding_length`, kv.u32(c.dim)],
      [`${A}.feed_forward_length`, kv.u32(c.ff)],
      [`${A}.block_count`, kv.u32(c.nLayers)],
      [`${A}.attention.head_count`, kv.u32(c.nHeads)],
      [`${A}.attention.key_length`, kv.u32(headDim(c))],
      [`${A}.attention.value_length`, kv.u32(headDim(c))],
      [`${A}.attention.layer_norm_epsilon`, kv.f32(c.normEps)],
      [`${A}.attention.relative_buckets_count`, kv.u32(x.relBuckets ?? 32)],
      [`${A}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${A}.pooling_type`, kv.u32(c.pooling ?? 1)],
      ...(c.causal === false ? ([[`${A}.attention.causal`, kv.bool(false)]] as [string, GgufValue][]) : []),
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const x = c as T5Config;
    const d = c.dim;
    const hd = headDim(c);
    const inner = hd * c.nHeads;
    const t: TensorSpec[] = [{ name: 'token_embd.weight', shape: [d, c.vocabSize], init: { kind: 'normal', std: 1 }, role: 'token_embd' }];
    for (let i = 0; i < c.nLayers; i++) {
      const p = `enc.blk.${i}`;
      t.push(norm(`${p}.attn_norm.weight`, d, i));
      // (Scores are unscaled: q at 1/sqrt(head) keeps them near unit scale, as T5's initialization does.)
      t.push(linear(`${p}.attn_q.weight`, d, inner, 'attn_q', i, 1 / Math.sqrt(hd)), linear(`${p}.attn_k.weight`, d, inner, 'attn_k', i), linear(`${p}.attn_v.weight`, d, inner, 'attn_v', i));
      if (i === 0 || x.relBiasEveryBlock) t.push({ name: `${p}.attn_rel_b.weight`, shape: [c.nHeads, x.relBuckets ?? 32], init: { kind: 'normal', std: 1 }, role: 'bias', layer: i });
      t.push(linear(`${p}.attn_o.weight`, inner, d, 'attn_output', i, residualGain(c)));
      t.push(norm(`${p}.ffn_norm.weight`, d, i));
      if (!x.reluFfn) t.push(linear(`${p}.ffn_gate.weight`, d, c.ff, 'ffn_gate', i));
      t.push(linear(`${p}.ffn_up.weight`, d, c.ff, 'ffn_up', i));
      t.push({ name: `${p}.ffn_down.weight`, shape: [c.ff, d], init: linearInit(c.ff, 2 * residualGain(c)), role: 'ffn_down', layer: i });
    }
    t.push(norm('enc.output_norm.weight', d));
    return t;
  },
};
