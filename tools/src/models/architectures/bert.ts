// Encoder-only embedding models (llama.cpp's src/models/bert.cpp): bert (learned absolute
// positions, q/k/v and every projection with a bias, GELU FFN) and nomic-bert (NeoX RoPE, one
// fused attn_qkv, SwiGLU FFN, no projection biases). Post-norm layer norms with biases, token type
// embeddings, non-causal attention, no output head; pooling_type says how the engine pools. With
// `clsLabels`, a reranker's classification head (cls, cls.output; pooling rank).
import { checkHeads, headDim, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';

/** A bias of n values near 0 (always F32, as llama.cpp's quantizer keeps 1-D tensors). */
function bias(name: string, n: number, layer?: number): TensorSpec {
  return { name, shape: [n], init: { kind: 'normal', std: 0.05 }, role: 'bias', layer };
}

/** A layer norm's gain and bias. */
function layerNorm(name: string, n: number, layer?: number): TensorSpec[] {
  return [norm(`${name}.weight`, n, layer), bias(`${name}.bias`, n, layer)];
}

function encoder(name: 'bert' | 'nomic-bert'): ArchDefinition {
  const nomic = name === 'nomic-bert';
  return {
    name,
    ggufArch: name,
    normalize(c: ModelConfig): ModelConfig {
      requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
      checkHeads(c);
      if (c.nKvHeads !== c.nHeads) throw new Error(`${name}: kv heads must equal heads (${c.nHeads})`);
      if (c.nExperts > 0) throw new Error(`${name}: a dense encoder (no experts)`);
      if (c.vocabKind !== 'bert') throw new Error(`${name}: needs the bert (WordPiece) vocabulary`);
      return c;
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const m: [string, GgufValue][] = [
        [`${name}.context_length`, kv.u32(c.ctx)],
        [`${name}.embedding_length`, kv.u32(c.dim)],
        [`${name}.block_count`, kv.u32(c.nLayers)],
        [`${name}.feed_forward_length`, kv.u32(c.ff)],
        [`${name}.attention.head_count`, kv.u32(c.nHeads)],
        [`${name}.attention.layer_norm_epsilon`, kv.f32(c.normEps)],
        [`${name}.attention.causal`, kv.bool(c.causal ?? false)],
        // 1 mean (sentence-transformers' MiniLM / nomic-embed), 2 CLS (bge), 4 rank (a reranker head).
        [`${name}.pooling_type`, kv.u32(c.clsLabels ? 4 : (c.pooling ?? 1))],
      ];
      if (nomic) m.push([`${name}.rope.freq_base`, kv.f32(c.ropeBase)]);
      return m;
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const d = c.dim;
      const hd = headDim(c);
      const t: TensorSpec[] = [
        { name: 'token_embd.weight', shape: [d, c.vocabSize], init: { kind: 'normal', std: 1 }, role: 'token_embd' },
        // Token types and positions stay F32, as llama-quantize leaves them.
        { name: 'token_types.weight', shape: [d, 2], init: { kind: 'normal', std: 0.5 }, role: 'bias' },
      ];
      if (!nomic) t.push({ name: 'position_embd.weight', shape: [d, c.ctx], init: { kind: 'normal', std: 0.5 }, role: 'bias' });
      t.push(...layerNorm('token_embd_norm', d));
      for (let i = 0; i < c.nLayers; i++) {
        const p = `blk.${i}`;
        if (nomic) t.push(linear(`${p}.attn_qkv.weight`, d, 3 * hd * c.nHeads, 'attn_v', i));
        else
          for (const w of ['attn_q', 'attn_k', 'attn_v'] as const)
            t.push(linear(`${p}.${w}.weight`, d, hd * c.nHeads, w, i), bias(`${p}.${w}.bias`, hd * c.nHeads, i));
        t.push(linear(`${p}.attn_output.weight`, hd * c.nHeads, d, 'attn_output', i, residualGain(c)));
        if (!nomic) t.push(bias(`${p}.attn_output.bias`, d, i));
        t.push(...layerNorm(`${p}.attn_output_norm`, d, i));
        t.push(linear(`${p}.ffn_up.weight`, d, c.ff, 'ffn_up', i));
        if (nomic) t.push(linear(`${p}.ffn_gate.weight`, d, c.ff, 'ffn_gate', i));
        else t.push(bias(`${p}.ffn_up.bias`, c.ff, i));
        t.push({ name: `${p}.ffn_down.weight`, shape: [c.ff, d], init: linearInit(c.ff, 2 * residualGain(c)), role: 'ffn_down', layer: i });
        if (!nomic) t.push(bias(`${p}.ffn_down.bias`, d, i));
        t.push(...layerNorm(`${p}.layer_output_norm`, d, i));
      }
      if (c.clsLabels) {
        // A cross-encoder reranker's head (bge-reranker): dense + tanh over the [CLS] row, then
        // one output per label (the relevance score for one).
        t.push(linear('cls.weight', d, d, 'output'), bias('cls.bias', d));
        t.push(linear('cls.output.weight', d, c.clsLabels.length, 'output', undefined, 2), bias('cls.output.bias', c.clsLabels.length));
      }
      return t;
    },
  };
}

export const bert = encoder('bert');
export const nomicBert = encoder('nomic-bert');
