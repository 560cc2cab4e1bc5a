// jina-bert-v2 (Jina Embeddings v2), as llama.cpp's loader (src/models/jina-bert-v2.cpp) reads it
// and bert.cpp runs it: BERT's post-norm encoder (token types, token_embd_norm, attn_output_norm,
// layer_output_norm, every LayerNorm with its bias) without position embeddings (ALiBi, max bias
// 8 fixed by the loader); q/k/v with biases (split, or one attn_qkv with `fusedQkv`), optional
// q/k LayerNorms over the whole projections (`qkNorm`, weight and bias), attn_output with its
// bias, an optional attn_norm_2 (`attnNorm2`: the layer's input added again, then that LayerNorm),
// and the FFN: one ffn_up of twice the FFN (GEGLU, as the converter fuses gated_layers) or with
// `gatedFfn` a separate ffn_gate (GELU(gate) x up); ffn_up and ffn_down with biases.
// WordPiece vocabulary (jina-embeddings-v2-base-en's BertTokenizer); pooling_type from `pooling`.
//
// jina-bert-v3 (jina-embeddings-v3: XLM-RoBERTa with rotary positions), as llama.cpp's loader
// (src/models/jina-bert-v3.cpp) reads it and bert.cpp runs it: the same encoder with NeoX RoPE
// (rope.freq_base, the model's rotary_emb_base 20000) on q and k instead of ALiBi, always one
// attn_qkv with its bias (the converter's mixer.Wqkv), and a plain up -> GELU -> down FFN with
// biases (none of v2's options). The task LoRAs ship as separate adapter files (the converter
// splits lora_A/lora_B per task). WordPiece vocabulary here (the real model's is XLM-R's unigram,
// which changes only the tokens); mean pooling unless `pooling`.
import { checkHeads, headDim, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';

export type JinaBertConfig = ModelConfig & { fusedQkv?: boolean; qkNorm?: boolean; attnNorm2?: boolean; gatedFfn?: boolean };

const bias = (name: string, n: number, layer?: number): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std: 0.05 }, role: 'bias', layer });
const layerNorm = (name: string, n: number, layer?: number): TensorSpec[] => [norm(`${name}.weight`, n, layer), bias(`${name}.bias`, n, layer)];
/** jina-bert-v2, or with `v3` jina-bert-v3 (RoPE, fused qkv, plain GELU FFN). */
function jinaBert(A: string, v3: boolean): ArchDefinition {
  return {
    name: A,
    ggufArch: A,
    normalize(c: ModelConfig): ModelConfig {
      requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', ...(v3 ? (['ropeBase'] as const) : [])]);
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
        ...(v3 ? [[`${A}.rope.freq_base`, kv.f32(c.ropeBase)] as [string, GgufValue]] : []),
        [`${A}.pooling_type`, kv.u32(c.pooling ?? 1)],
      ];
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const x: JinaBertConfig = v3 ? { ...c, fusedQkv: true } : c;
      // v2: one ffn_up of twice the FFN (GEGLU) unless gatedFfn (a separate ffn_gate); v3: up -> GELU -> down.
      const up = v3 || x.gatedFfn ? c.ff : 2 * c.ff;
      const d = c.dim;
      const t: TensorSpec[] = [
        { name: 'token_embd.weight', shape: [d, c.vocabSize], init: { kind: 'normal', std: 1 }, role: 'token_embd' },
        { name: 'token_types.weight', shape: [d, 2], init: { kind: 'normal', std: 0.5 }, role: 'bias' },
        ...layerNorm('token_embd_norm', d),
      ];
      for (let i = 0; i < c.nLayers; i++) {
        const p = `blk.${i}`;
        if (x.fusedQkv) t.push(linear(`${p}.attn_qkv.weight`, d, 3 * d, 'attn_v', i), bias(`${p}.attn_qkv.bias`, 3 * d, i));
        else for (const w of ['attn_q', 'attn_k', 'attn_v'] as const) t.push(linear(`${p}.${w}.weight`, d, d, w, i), bias(`${p}.${w}.bias`, d, i));
        if (x.qkNorm) t.push(...layerNorm(`${p}.attn_q_norm`, d, i), ...layerNorm(`${p}.attn_k_norm`, d, i));
        t.push(linear(`${p}.attn_output.weight`, d, d, 'attn_output', i, residualGain(c)), bias(`${p}.attn_output.bias`, d, i));
        t.push(...layerNorm(`${p}.attn_output_norm`, d, i));
        if (x.attnNorm2) t.push(...layerNorm(`${p}.attn_norm_2`, d, i));
        t.push(linear(`${p}.ffn_up.weight`, d, up, 'ffn_up', i), bias(`${p}.ffn_up.bias`, up, i));
        if (x.gatedFfn) t.push(linear(`${p}.ffn_gate.weight`, d, c.ff, 'ffn_gate', i));
        t.push({ name: `${p}.ffn_down.weight`, shape: [c.ff, d], init: linearInit(c.ff, 2 * residualGain(c)), role: 'ffn_down', layer: i }, bias(`${p}.ffn_down.bias`, d, i));
        t.push(...layerNorm(`${p}.layer_output_norm`, d, i));
      }
      return t;
    },
  };
}

export const jinaBertV2 = jinaBert('jina-bert-v2', false);
export const jinaBertV3 = jinaBert('jina-bert-v3', true);
export type JinaBertV3Config = ModelConfig;
