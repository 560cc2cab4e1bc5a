// DeciLM / Llama-3.1-Nemotron-51B (`deci`), as conversion/deci.py writes a block_configs model and
// src/models/deci.cpp loads it: per-block arrays attention.head_count (0: no attention),
// attention.head_count_kv (0 with heads: the attention replaced by a linear map attn_output
// [n_embd, n_embd]) and feed_forward_length (0: no FFN); key_length = value_length =
// rope.dimension_count = n_embd / num_attention_heads; RoPE over adjacent pairs with llama3's
// rope_freqs factors (`ropeFreqs`); optional attn_output / FFN biases (the loader's optional
// tensors); an untied head or token_embd.
// `zeroFfnDown` writes an all-zero ffn_down in the blocks listed: the twin of a block without FFN
// (llama.cpp drops the attention of an FFN-free block, so such a block is checked by equivalence).
import { embeddings, f32Tensor, linear, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';

/** One block: query heads (0: no attention), KV heads (0 with heads: a linear map), FFN width (0: none). */
export interface DeciBlock {
  heads: number;
  kvHeads: number;
  ff: number;
}

export type DeciConfig = ModelConfig & {
  blocks: DeciBlock[];
  attnOutBias?: boolean;
  ffnBias?: boolean;
  ropeFreqs?: boolean;
  zeroFfnDown?: number[];
};

export const deci: ArchDefinition = {
  name: 'deci',
  ggufArch: 'deci',
  normalize(c: ModelConfig): ModelConfig {
    const d = c as DeciConfig;
    requirePositive(c, ['nLayers', 'dim', 'nHeads', 'vocabSize', 'ctx']);
    if (!d.blocks || d.blocks.length !== c.nLayers) throw new Error('deci: needs blocks, one per layer (use a preset)');
    if (c.nExperts !== 0) throw new Error('deci: a dense model (no experts)');
    const hd = c.dim / c.nHeads;
    if (!Number.isInteger(hd) || hd % 2 !== 0) throw new Error('deci: dim / nHeads must be an even head size');
    d.blocks.forEach((b, i) => {
      if (b.heads !== 0 && b.heads !== c.nHeads) throw new Error(`deci: block ${i} has ${b.heads} heads; the converter writes nHeads (${c.nHeads}) or 0`);
      if (b.kvHeads < 0 || (b.kvHeads > 0 && (b.heads === 0 || b.heads % b.kvHeads !== 0))) throw new Error(`deci: block ${i}'s kvHeads ${b.kvHeads} must divide its heads (0: a linear map)`);
      if (b.ff < 0) throw new Error(`deci: block ${i}'s ff must be >= 0`);
    });
    for (const i of d.zeroFfnDown ?? []) if (!(d.blocks[i]?.ff > 0)) throw new Error(`deci: zeroFfnDown names block ${i}, which has no FFN`);
    if (d.zeroFfnDown?.length && d.ffnBias) throw new Error('deci: zeroFfnDown with ffnBias would add ffn_down.bias (the twin of an FFN-free block has none)');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const d = c as DeciConfig;
    const a = 'deci';
    const hd = c.dim / c.nHeads;
    return [
      [`${a}.vocab_size`, kv.u32(c.vocabSize)],
      [`${a}.context_length`, kv.u32(c.ctx)],
      [`${a}.embedding_length`, kv.u32(c.dim)],
      [`${a}.block_count`, kv.u32(c.nLayers)],
      [`${a}.feed_forward_length`, kv.arr(GgufType.INT32, d.blocks.map((b) => b.ff))],
      [`${a}.attention.head_count`, kv.arr(GgufType.INT32, d.blocks.map((b) => b.heads))],
      [`${a}.attention.head_count_kv`, kv.arr(GgufType.INT32, d.blocks.map((b) => b.kvHeads))],
      [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${a}.attention.key_length`, kv.u32(hd)],
      [`${a}.attention.value_length`, kv.u32(hd)],
      [`${a}.rope.dimension_count`, kv.u32(hd)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const d = c as DeciConfig;
    const hd = c.dim / c.nHeads;
    const t = embeddings(c);
    // llama3-style factors: 1 on the high frequencies, up to 8 on the low ones.
    if (d.ropeFreqs) t.push(f32Tensor('rope_freqs.weight', [hd / 2], { kind: 'ramp', start: 1, step: 7 / (hd / 2 - 1) }));
    const bias = (name: string, n: number, i: number): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i });
    d.blocks.forEach((b, i) => {
      const p = `blk.${i}`;
      if (b.heads > 0) t.push(norm(`${p}.attn_norm.weight`, c.dim, i));
      if (b.heads > 0 && b.kvHeads === 0) t.push(linear(`${p}.attn_output.weight`, c.dim, c.dim, 'attn_output', i, residualGain(c)));
      if (b.heads > 0 && b.kvHeads > 0) {
        t.push(
          linear(`${p}.attn_q.weight`, c.dim, b.heads * hd, 'attn_q', i),
          linear(`${p}.attn_k.weight`, c.dim, b.kvHeads * hd, 'attn_k', i),
          linear(`${p}.attn_v.weight`, c.dim, b.kvHeads * hd, 'attn_v', i),
          linear(`${p}.attn_output.weight`, b.heads * hd, c.dim, 'attn_output', i, residualGain(c)),
        );
        if (d.attnOutBias) t.push(bias(`${p}.attn_output.bias`, c.dim, i));
      }
      if (b.ff > 0) {
        const down = linear(`${p}.ffn_down.weight`, b.ff, c.dim, 'ffn_down', i, residualGain(c));
        t.push(
          norm(`${p}.ffn_norm.weight`, c.dim, i),
          linear(`${p}.ffn_gate.weight`, c.dim, b.ff, 'ffn_gate', i),
          linear(`${p}.ffn_up.weight`, c.dim, b.ff, 'ffn_up', i),
          d.zeroFfnDown?.includes(i) ? { ...down, init: { kind: 'const', value: 0 } } : down,
        );
        if (d.ffnBias) t.push(bias(`${p}.ffn_gate.bias`, b.ff, i), bias(`${p}.ffn_up.bias`, b.ff, i), bias(`${p}.ffn_down.bias`, c.dim, i));
      }
    });
    return t;
  },
};
