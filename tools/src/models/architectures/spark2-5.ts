// Spark-X2.5 (`spark2_5`, Spark2_5ForCausalLM; llama.cpp src/models/spark2-5.cpp, converted by
// conversion/spark2_5.py). Blocks are sliding-window or full attention (HF layer_types, written as
// `attention.sliding_window_pattern`, BOOL per block, true = sliding over `attention.sliding_window`
// positions), all with the file's head counts and one head size (HF head_dim: key_length =
// value_length). Each kind rotates its own share of the head with NeoX RoPE: full blocks
// `rope.dimension_count` (head_dim x the full_attention partial_rotary_factor), sliding ones
// `rope.dimension_count_swa` (the sliding one's); sliding blocks take `rope.freq_base_swa` when the
// file has it, else the full blocks' base and scale (llama.cpp's loader; the converter writes none).
//
// A block: attn_norm (RMS); the fused attn_qkv (HF q_k_v_proj: Q, K, V rows in that order) or, as
// llama.cpp's create_tensor_qkv also reads, attn_q / attn_k / attn_v; RoPE; attention scaled by
// 1/sqrt(head); a head-wise gate: attn_gate (HF g_proj, [n_embd, n_head]) over the attn_norm
// output, head h's output times sigmoid(gate_h); attn_output; residual. ffn_norm (RMS), then a
// GELU-gated FFN gelu(ffn_gate x) * ffn_up x → ffn_down; residual. output_norm and the head
// (output.weight, else the tied token_embd). The engine runs it with buildSpark25
// (packages/engine/src/model/architectures/spark2-5.ts).
import { embeddings, linear, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

/**
 * headDim: every block's head size. window: the sliding blocks' window; fullInterval: block i is
 * full attention when i % fullInterval === fullInterval - 1, the others slide (--layers N keeps the
 * rule). ropeDims / ropeDimsSwa: rotated dims of full / sliding blocks (even, at most headDim).
 * ropeBaseSwa: written as rope.freq_base_swa when set. fusedQkv: one attn_qkv per block (what the
 * converter writes), else attn_q / attn_k / attn_v.
 */
export type Spark25Config = ModelConfig & {
  headDim: number;
  window: number;
  fullInterval: number;
  ropeDims: number;
  ropeDimsSwa: number;
  ropeBaseSwa?: number;
  fusedQkv: boolean;
};

const isSwa = (c: Spark25Config, i: number) => i % c.fullInterval !== c.fullInterval - 1;

export const spark25: ArchDefinition = {
  name: 'spark2_5',
  ggufArch: 'spark2_5',
  normalize(c: ModelConfig): ModelConfig {
    const s = c as Spark25Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    if (c.nExperts !== 0 || c.nExpertsUsed !== 0) throw new Error('spark2_5: a dense architecture (nExperts / nExpertsUsed must be 0)');
    for (const f of ['headDim', 'window', 'fullInterval'] as const)
      if (!Number.isInteger(s[f]) || s[f] <= 0) throw new Error(`spark2_5: ${f} must be a positive integer (use a preset), got ${String(s[f])}`);
    if (c.nHeads % c.nKvHeads !== 0) throw new Error(`spark2_5: heads ${c.nHeads} not divisible by kv heads ${c.nKvHeads}`);
    for (const f of ['ropeDims', 'ropeDimsSwa'] as const)
      if (!Number.isInteger(s[f]) || s[f] <= 0 || s[f] % 2 !== 0 || s[f] > s.headDim) throw new Error(`spark2_5: ${f} must be an even count of at most headDim ${s.headDim}, got ${String(s[f])}`);
    if (s.ropeBaseSwa !== undefined && !(s.ropeBaseSwa > 0)) throw new Error(`spark2_5: ropeBaseSwa must be positive, got ${String(s.ropeBaseSwa)}`);
    if (typeof s.fusedQkv !== 'boolean') throw new Error('spark2_5: fusedQkv must be a boolean (use a preset)');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const s = c as Spark25Config;
    const a = 'spark2_5';
    const m = baseMetadata(a, c).map(([k, v]): [string, GgufValue] => (k === `${a}.rope.dimension_count` ? [k, kv.u32(s.ropeDims)] : [k, v]));
    m.push(
      [`${a}.rope.dimension_count_swa`, kv.u32(s.ropeDimsSwa)],
      [`${a}.attention.sliding_window`, kv.u32(s.window)],
      [`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, Array.from({ length: c.nLayers }, (_, i) => isSwa(s, i)))],
    );
    if (s.ropeBaseSwa !== undefined) m.push([`${a}.rope.freq_base_swa`, kv.f32(s.ropeBaseSwa)]);
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const s = c as Spark25Config;
    const [nQ, nKv] = [s.headDim * c.nHeads, s.headDim * c.nKvHeads];
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(norm(`${p}.attn_norm.weight`, c.dim, i));
      if (s.fusedQkv) t.push(linear(`${p}.attn_qkv.weight`, c.dim, nQ + 2 * nKv, 'attn_v', i));
      else t.push(linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i), linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i), linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i));
      // The gate's logits at std ~1 over the normed input: sigmoid ~0.5 +- 0.2 per head.
      t.push(linear(`${p}.attn_gate.weight`, c.dim, c.nHeads, 'attn_q', i));
      t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, residualGain(c)));
      t.push(
        norm(`${p}.ffn_norm.weight`, c.dim, i),
        linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i),
        linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i),
        linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, residualGain(c)),
      );
    }
    return t;
  },
};
