// T5's encoder as llama.cpp's t5encoder loader reads it (src/models/t5encoder.cpp) and t5.cpp's
// encoder graph runs it: token_embd (no scaling, no positions), per block RMS attn_norm -> q/k/v
// (no biases, d_kv per head: heads x d_kv need not be the model width) -> attention with scale 1
// plus the relative position bias (enc.blk.N.attn_rel_b, [n_head, relative_buckets_count]; blocks
// without one use block 0's, as Hugging Face's T5 keeps it in block 0 only) -> attn_o -> residual,
// RMS ffn_norm -> FFN (flan-T5's GELU-gated ffn_gate x ffn_up, or T5's ReLU over ffn_up) ->
// residual; enc.output_norm last. No head is read; pooling_type from `pooling`.
// `relBiasEveryBlock` writes a table in every block (each its own); `causal: false` writes
// attention.causal false, which converted files lack (llama.cpp's llama_decode then attends causally).
//
// `t5` (llama.cpp's src/models/t5.cpp, the whole encoder-decoder): the same enc.* tensors, then
// decoder_block_count dec.blk.N blocks: RMS attn_norm -> causal self-attention q/k/v/o with its own
// relative position bias (dec.blk.N.attn_rel_b, block 0's shared as in the encoder; the causal
// bucket function) -> residual, RMS cross_attn_norm -> cross-attention (cross_attn_q over the
// decoder row, cross_attn_k/v over the encoder output, no bias, scale 1) -> cross_attn_o ->
// residual, RMS ffn_norm -> FFN -> residual; dec.output_norm, then `output` (llama.cpp multiplies a
// tied token_embd unscaled where Hugging Face scales a tied head by d_model^-0.5: converted flan-T5
// files carry their own untied output, and tiedEmbeddings writes none). decoder_start_token_id
// (T5's pad id 0 unless decoderStart says otherwise) starts every generation.
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
  /** t5: decoder blocks (decoder_block_count; default nLayers, as llama.cpp assumes without the key). */
  decLayers?: number;
  /** t5: decoder_start_token_id (default 0, T5's pad). */
  decoderStart?: number;
};

const A = 't5encoder';

export const t5Encoder: ArchDefinition = {
  name: A,
  ggufArch: A,
  normalize(c: ModelConfig): ModelConfig {
    checkEncoder(c, A);
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
    return encoderTensors(c);
  },
};

function checkEncoder(c: ModelConfig, a: string): T5Config {
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  checkHeads(c);
  const x = c as T5Config;
  if (c.nKvHeads !== c.nHeads) throw new Error(`${a}: kv heads must equal heads (${c.nHeads})`);
  if (c.nExperts > 0) throw new Error(`${a}: a dense encoder (no experts)`);
  if (!Number.isInteger(x.relBuckets ?? 32) || (x.relBuckets ?? 32) < 4) throw new Error(`${a}: relBuckets must be an integer of at least 4`);
  return x;
}

/** token_embd, the enc.blk.N blocks and enc.output_norm (gains scaled for `layers` residual writes). */
function encoderTensors(c: ModelConfig): TensorSpec[] {
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
    t.push(...ffnTensors(p, c, i));
  }
  t.push(norm('enc.output_norm.weight', d));
  return t;
}

function ffnTensors(p: string, c: ModelConfig, i: number): TensorSpec[] {
  const x = c as T5Config;
  const t: TensorSpec[] = [norm(`${p}.ffn_norm.weight`, c.dim, i)];
  if (!x.reluFfn) t.push(linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i));
  t.push(linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i));
  t.push({ name: `${p}.ffn_down.weight`, shape: [c.ff, c.dim], init: linearInit(c.ff, 2 * residualGain(c)), role: 'ffn_down', layer: i });
  return t;
}

const T = 't5';

export const t5: ArchDefinition = {
  name: T,
  ggufArch: T,
  normalize(c: ModelConfig): ModelConfig {
    const x = checkEncoder(c, T);
    if (c.causal !== undefined) throw new Error(`${T}: causal is not a t5 setting (the encoder attends both ways, the decoder causally)`);
    if (x.decLayers !== undefined && !(Number.isInteger(x.decLayers) && x.decLayers >= 1)) throw new Error(`${T}: decLayers must be a positive integer`);
    const start = x.decoderStart ?? 0;
    if (!Number.isInteger(start) || start < 0 || start >= c.vocabSize) throw new Error(`${T}: decoderStart ${start} must be a token id below the vocabulary size ${c.vocabSize}`);
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const x = c as T5Config;
    return [
      [`${T}.context_length`, kv.u32(c.ctx)],
      [`${T}.embedding_length`, kv.u32(c.dim)],
      [`${T}.feed_forward_length`, kv.u32(c.ff)],
      [`${T}.block_count`, kv.u32(c.nLayers)],
      [`${T}.decoder_block_count`, kv.u32(x.decLayers ?? c.nLayers)],
      [`${T}.decoder_start_token_id`, kv.u32(x.decoderStart ?? 0)],
      [`${T}.attention.head_count`, kv.u32(c.nHeads)],
      [`${T}.attention.key_length`, kv.u32(headDim(c))],
      [`${T}.attention.value_length`, kv.u32(headDim(c))],
      [`${T}.attention.layer_norm_epsilon`, kv.f32(c.normEps)],
      [`${T}.attention.relative_buckets_count`, kv.u32(x.relBuckets ?? 32)],
      [`${T}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const x = c as T5Config;
    const d = c.dim;
    const hd = headDim(c);
    const inner = hd * c.nHeads;
    const t = encoderTensors(c);
    // A tied head multiplies token_embd itself: at std 2/sqrt(dim) its logits keep std ~2.
    if (c.tiedEmbeddings) t[0] = { ...t[0], init: linearInit(d, 2) };
    const nDec = x.decLayers ?? c.nLayers;
    for (let i = 0; i < nDec; i++) {
      const p = `dec.blk.${i}`;
      t.push(norm(`${p}.attn_norm.weight`, d, i));
      t.push(linear(`${p}.attn_q.weight`, d, inner, 'attn_q', i, 1 / Math.sqrt(hd)), linear(`${p}.attn_k.weight`, d, inner, 'attn_k', i), linear(`${p}.attn_v.weight`, d, inner, 'attn_v', i));
      if (i === 0 || x.relBiasEveryBlock) t.push({ name: `${p}.attn_rel_b.weight`, shape: [c.nHeads, x.relBuckets ?? 32], init: { kind: 'normal', std: 1 }, role: 'bias', layer: i });
      t.push(linear(`${p}.attn_o.weight`, inner, d, 'attn_output', i, residualGain(c)));
      t.push(norm(`${p}.cross_attn_norm.weight`, d, i));
      t.push(linear(`${p}.cross_attn_q.weight`, d, inner, 'attn_q', i, 1 / Math.sqrt(hd)), linear(`${p}.cross_attn_k.weight`, d, inner, 'attn_k', i), linear(`${p}.cross_attn_v.weight`, d, inner, 'attn_v', i));
      t.push(linear(`${p}.cross_attn_o.weight`, inner, d, 'attn_output', i, residualGain(c)));
      t.push(...ffnTensors(p, c, i));
    }
    t.push(norm('dec.output_norm.weight', d));
    // Logits with std ~2 (as embeddings() writes them): peaked enough for stable greedy choices.
    if (!c.tiedEmbeddings) t.push(linear('output.weight', d, c.vocabSize, 'output', undefined, 2));
    return t;
  },
};
