// Talkie (`talkie`, lewtun/talkie-1930-13b), as llama.cpp's loader (src/models/talkie.cpp) reads it:
// token_embd and output.weight (both required; no norm weights anywhere: every RMS norm is
// unweighted), per block attn_q / attn_k / attn_v or one fused attn_qkv (`fusedQkv`;
// create_tensor_qkv takes either), attn_output, the per-head q gain attn_q_norm {1, n_head} (no k
// gain), a SwiGLU FFN and the block's out_scale `layer_output_scale` {1} (times the normed
// embedding, added to every block's output). Converted files also carry attn_output.scale and
// ffn_down.scale {1} (the checkpoint's attn_gain / mlp_gain; llama.cpp's generic per-tensor scale
// pass multiplies the products by them): `outScales` writes them. Keys: logit_scale (required;
// the converter's lm_head_gain). The converter writes layer_norm_rms_epsilon as float32's epsilon
// and tokenizer.ggml.pre `talkie` (the gpt-4o pre-tokenizer); the presets keep the llama3 vocabulary.
// The engine runs it with buildTalkie (packages/engine/src/model/architectures/talkie.ts).
import { checkHeads, embeddings, f32Tensor, headDim, linear, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

export type TalkieConfig = ModelConfig & {
  logitScale: number;
  fusedQkv?: boolean;
  outScales?: boolean;
};

function normalize(c: ModelConfig): ModelConfig {
  const x = c as TalkieConfig;
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  if (c.nExperts !== 0 || c.nExpertsUsed !== 0) throw new Error('talkie: a dense architecture (nExperts / nExpertsUsed must be 0)');
  checkHeads(c);
  if (c.tiedEmbeddings) throw new Error('talkie: the loader requires output.weight (tiedEmbeddings must be false)');
  if (!Number.isFinite(x.logitScale)) throw new Error('talkie: logitScale (logit_scale) is required');
  return c;
}

function metadata(c: ModelConfig): [string, GgufValue][] {
  const x = c as TalkieConfig;
  const m = baseMetadata('talkie', c);
  m.push(['talkie.logit_scale', kv.f32(x.logitScale)]);
  return m;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const x = c as TalkieConfig;
  const hd = headDim(c);
  // (No output_norm: llama.cpp's final norm is unweighted.)
  const t = embeddings(c).filter((s) => s.name !== 'output_norm.weight');
  const gain = (name: string, shape: number[], mean: number, i: number) => f32Tensor(name, shape, { kind: 'normal', mean, std: 0.1 * Math.abs(mean) }, i);
  for (let i = 0; i < c.nLayers; i++) {
    const p = `blk.${i}`;
    const [nQ, nKv] = [hd * c.nHeads, hd * c.nKvHeads];
    if (x.fusedQkv) t.push(linear(`${p}.attn_qkv.weight`, c.dim, nQ + 2 * nKv, 'attn_v', i));
    else t.push(linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i), linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i), linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i));
    t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, residualGain(c)));
    // The q gain per head (the checkpoint's head_g, unsqueezed to {1, n_head}).
    t.push(gain(`${p}.attn_q_norm.weight`, [1, c.nHeads], 1.5, i));
    t.push(linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i), linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i), linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, residualGain(c)));
    t.push(gain(`${p}.layer_output_scale.weight`, [1], 0.3, i));
    if (x.outScales) t.push(gain(`${p}.attn_output.scale`, [1], 1.2, i), gain(`${p}.ffn_down.scale`, [1], 0.8, i));
  }
  return t;
}

export const talkie: ArchDefinition = { name: 'talkie', ggufArch: 'talkie', normalize, metadata, tensors };
