// jina-bert-v3 (jina-embeddings-v3: XLM-RoBERTa with rotary positions), as llama.cpp's loader
// (src/models/jina-bert-v3.cpp) reads it and bert.cpp runs it: BERT's post-norm encoder (token
// types, token_embd_norm, attn_output_norm, layer_output_norm, LayerNorms with biases) without
// position embeddings, NeoX RoPE (rope.freq_base, the model's rotary_emb_base 20000) on q and k,
// one attn_qkv with its bias (the converter's mixer.Wqkv), attn_output with its bias, and
// up -> GELU -> down with biases. The task LoRAs ship as separate adapter files (the converter
// splits lora_A/lora_B per task). WordPiece vocabulary here (the real model's is XLM-R's unigram,
// which changes only the tokens); mean pooling unless `pooling`.
import { checkHeads, headDim, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';

export type JinaBertV3Config = ModelConfig;

const bias = (name: string, n: number, layer?: number): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std: 0.05 }, role: 'bias', layer });
const layerNorm = (name: string, n: number, layer?: number): TensorSpec[] => [norm(`${name}.weight`, n, layer), bias(`${name}.bias`, n, layer)];

const A = 'jina-bert-v3';

export const jinaBertV3: ArchDefinition = {
  name: A,
  ggufArch: A,
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'ropeBase']);
    checkHeads(c);
    if (c.nKvHeads !== c.nHeads) throw new Error(`${A}: kv heads must equal heads (${c.nHeads})`);
    if (headDim(c) * c.nHeads !== c.dim) throw new Error(`${A}: heads x head must be ${c.dim}`);
    if (c.nExperts > 0) throw new Error(`${A}: a dense encoder (no experts)`);
    if (c.vocabKind !== 'bert') throw new Error(`${A}: needs the bert (WordPiece) vocabulary`);
    if (c.causal !== undefined) throw new Error(`${A}: the encoder never attends causally (no causal)`);
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    return [
      [`${A}.context_length`, kv.u32(c.ctx)],
      [`${A}.embedding_length`, kv.u32(c.dim)],
      [`${A}.block_count`, kv.u32(c.nLayers)],
      [`${A}.feed_forward_length`, kv.u32(c.ff)],
      [`${A}.attention.head_count`, kv.u32(c.nHeads)],
      [`${A}.attention.layer_norm_epsilon`, kv.f32(c.normEps)],
      [`${A}.attention.causal`, kv.bool(false)],
      [`${A}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${A}.pooling_type`, kv.u32(c.pooling ?? 1)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const d = c.dim;
    const t: TensorSpec[] = [
      { name: 'token_embd.weight', shape: [d, c.vocabSize], init: { kind: 'normal', std: 1 }, role: 'token_embd' },
      { name: 'token_types.weight', shape: [d, 2], init: { kind: 'normal', std: 0.5 }, role: 'bias' },
      ...layerNorm('token_embd_norm', d),
    ];
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(linear(`${p}.attn_qkv.weight`, d, 3 * d, 'attn_v', i), bias(`${p}.attn_qkv.bias`, 3 * d, i));
      t.push(linear(`${p}.attn_output.weight`, d, d, 'attn_output', i, residualGain(c)), bias(`${p}.attn_output.bias`, d, i));
      t.push(...layerNorm(`${p}.attn_output_norm`, d, i));
      t.push(linear(`${p}.ffn_up.weight`, d, c.ff, 'ffn_up', i), bias(`${p}.ffn_up.bias`, c.ff, i));
      t.push({ name: `${p}.ffn_down.weight`, shape: [c.ff, d], init: linearInit(c.ff, 2 * residualGain(c)), role: 'ffn_down', layer: i }, bias(`${p}.ffn_down.bias`, d, i));
      t.push(...layerNorm(`${p}.layer_output_norm`, d, i));
    }
    return t;
  },
};
