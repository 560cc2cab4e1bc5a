// Encoder-only embedding models (llama.cpp's src/models/bert.cpp): bert (learned absolute
// positions, q/k/v and every projection with a bias, GELU FFN) and nomic-bert (NeoX RoPE, one
// fused attn_qkv, SwiGLU FFN, no projection biases) and nomic-bert-moe (nomic-bert's attention,
// GELU FFNs with biases, every second layer routed to gate-less GELU experts). Post-norm layer norms with biases, token type
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

/** nomic-bert-moe: every second layer (index 1 mod 2) routes to experts, as nomic-embed-text-v2-moe. */
const MOE_EVERY = 2;

function encoder(name: 'bert' | 'nomic-bert' | 'nomic-bert-moe'): ArchDefinition {
  const nomic = name !== 'bert';
  const moe = name === 'nomic-bert-moe';
  return {
    name,
    ggufArch: name,
    normalize(c: ModelConfig): ModelConfig {
      requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
      checkHeads(c);
      if (c.nKvHeads !== c.nHeads) throw new Error(`${name}: kv heads must equal heads (${c.nHeads})`);
      if (!moe && c.nExperts > 0) throw new Error(`${name}: a dense encoder (no experts)`);
      if (moe && (c.nExperts < 1 || c.nExpertsUsed < 1 || c.nExpertsUsed > c.nExperts)) throw new Error(`${name}: needs experts (--experts, --experts-used)`);
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
      if (moe)
        m.push([`${name}.moe_every_n_layers`, kv.u32(MOE_EVERY)], [`${name}.expert_count`, kv.u32(c.nExperts)], [`${name}.expert_used_count`, kv.u32(c.nExpertsUsed)]);
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
        if (moe && i % MOE_EVERY === 1) {
          // Routed experts: up and down only (GELU between), no biases.
          const e = c.nExperts;
          t.push(linear(`${p}.ffn_gate_inp.weight`, d, e, 'router', i, 2));
          t.push({ name: `${p}.ffn_up_exps.weight`, shape: [d, c.ff, e], init: linearInit(d), role: 'ffn_up', layer: i });
          t.push({ name: `${p}.ffn_down_exps.weight`, shape: [c.ff, d, e], init: linearInit(c.ff, 2 * residualGain(c)), role: 'ffn_down', layer: i });
        } else {
          // nomic-bert: SwiGLU without biases; bert and nomic-bert-moe's dense layers: GELU with biases.
          const swiglu = nomic && !moe;
          t.push(linear(`${p}.ffn_up.weight`, d, c.ff, 'ffn_up', i));
          if (swiglu) t.push(linear(`${p}.ffn_gate.weight`, d, c.ff, 'ffn_gate', i));
          else t.push(bias(`${p}.ffn_up.bias`, c.ff, i));
          t.push({ name: `${p}.ffn_down.weight`, shape: [c.ff, d], init: linearInit(c.ff, 2 * residualGain(c)), role: 'ffn_down', layer: i });
          if (!swiglu) t.push(bias(`${p}.ffn_down.bias`, d, i));
        }
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
export const nomicBertMoe = encoder('nomic-bert-moe');
