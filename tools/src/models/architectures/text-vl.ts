// The language models of vision-language architectures (text tokens only), as llama.cpp's loaders
// (src/models/<arch>.cpp load_arch_hparams / load_arch_tensors) read them; the engine runs them with
// buildLlamaFamily's DenseLayout (packages/engine/src/model/architectures/llama-family.ts). Every
// one: token_embd, RMS norms (attention.layer_norm_rms_epsilon), attn_output, a SwiGLU FFN, output_norm.
// - paddleocr (PaddleOCR-VL's ERNIE 4.5 language model): Llama's block, q/k/v biases (`qkvBias`),
//   attn_output.bias (`outBias`), M-RoPE sections (rope.dimension_sections, INT32 x 4, required).
// - cogvlm (CogVLM's language model): one attn_qkv (no bias, q|k|v of n_head heads each), and the
//   vision expert's vis_attn_qkv / vis_attn_output / vis_gate / vis_up / vis_down per block (its
//   loader requires them; image embeddings run through them, text tokens never do).
// - chameleon (Chameleon): per-head LayerNorms of q and k (weight [head, n_head], `qkNormBias`: their
//   biases), `swinNorm` (chameleon.swin_norm: the norms after attention and FFN instead of before).
//   llama.cpp suppresses the image tokens 4..8195 in the logits: the vocabulary must pass 8196.
// Scales: attn_output / ffn_down at residualGain as llama.ts.
import { checkHeads, embeddings, f32Tensor, headDim, linear, norm, NORM_INIT, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

export type TextVlConfig = ModelConfig & {
  qkvBias?: boolean;
  outBias?: boolean;
  ropeSections?: number[];
  qkNormBias?: boolean;
  swinNorm?: boolean;
};

const TEXT_VL_ARCHS = ['paddleocr', 'cogvlm', 'chameleon'] as const;

const bias = (name: string, n: number, i?: number, std = 0.1): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std }, role: 'attn_bias', layer: i });

function normalize(c: ModelConfig): ModelConfig {
  const x = c as TextVlConfig;
  const a = c.arch;
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  if (c.nExperts !== 0 || c.nExpertsUsed !== 0) throw new Error(`${a}: a dense architecture (nExperts / nExpertsUsed must be 0)`);
  checkHeads(c);
  if (!(c.ropeBase > 0)) throw new Error(`${a}: ropeBase must be positive`);
  if ((x.qkvBias || x.outBias || x.ropeSections !== undefined) && a !== 'paddleocr') throw new Error(`${a}: qkvBias / outBias / ropeSections are paddleocr's`);
  if (a === 'paddleocr' && x.ropeSections === undefined) throw new Error('paddleocr: ropeSections are required (M-RoPE)');
  if (x.ropeSections !== undefined && (x.ropeSections.length !== 4 || !x.ropeSections.every((v) => Number.isInteger(v) && v >= 0) || x.ropeSections.reduce((s, v) => s + v, 0) > headDim(c) / 2))
    throw new Error(`${a}: ropeSections must be 4 non-negative integers covering at most the head's ${headDim(c) / 2} rotated pairs`);
  if ((x.qkNormBias || x.swinNorm !== undefined) && a !== 'chameleon') throw new Error(`${a}: qkNormBias / swinNorm are chameleon's`);
  if (a === 'cogvlm' && (c.nKvHeads !== c.nHeads || headDim(c) * c.nHeads !== c.dim)) throw new Error('cogvlm: its graph splits attn_qkv into three n_embd thirds (nKvHeads = nHeads, heads covering dim)');
  if (a === 'chameleon' && c.vocabSize <= 8196) throw new Error('chameleon: llama.cpp suppresses the image tokens 4..8195 in the logits: vocabSize must pass 8196');
  return c;
}

function metadata(c: ModelConfig): [string, GgufValue][] {
  const x = c as TextVlConfig;
  const a = c.arch;
  const m = baseMetadata(a, c);
  if (x.ropeSections !== undefined) m.push([`${a}.rope.dimension_sections`, kv.arr(GgufType.INT32, x.ropeSections)]);
  if (x.swinNorm !== undefined) m.push([`${a}.swin_norm`, kv.bool(x.swinNorm)]);
  return m;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const x = c as TextVlConfig;
  const a = c.arch;
  const hd = headDim(c);
  const t = embeddings(c);
  for (let i = 0; i < c.nLayers; i++) {
    const p = `blk.${i}`;
    const [nQ, nKv] = [hd * c.nHeads, hd * c.nKvHeads];
    t.push(norm(`${p}.attn_norm.weight`, c.dim, i));
    // llama-quant types attn_qkv as attn_v.
    if (a === 'cogvlm') t.push(linear(`${p}.attn_qkv.weight`, c.dim, nQ + 2 * nKv, 'attn_v', i));
    else t.push(linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i), linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i), linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i));
    if (x.qkvBias) t.push(bias(`${p}.attn_q.bias`, nQ, i), bias(`${p}.attn_k.bias`, nKv, i), bias(`${p}.attn_v.bias`, nKv, i));
    if (a === 'chameleon') {
      // One LayerNorm row per head (llama.cpp's {n_embd_head_k, n_head}).
      // (2-D: role 'bias' keeps them F32 in quantized files, as llama-quant keeps norms.)
      t.push(f32Tensor(`${p}.attn_q_norm.weight`, [hd, c.nHeads], NORM_INIT, i), f32Tensor(`${p}.attn_k_norm.weight`, [hd, c.nKvHeads], NORM_INIT, i));
      if (x.qkNormBias) t.push(f32Tensor(`${p}.attn_q_norm.bias`, [hd, c.nHeads], { kind: 'normal', std: 0.1 }, i), f32Tensor(`${p}.attn_k_norm.bias`, [hd, c.nKvHeads], { kind: 'normal', std: 0.1 }, i));
    }
    t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, residualGain(c)));
    if (x.outBias) t.push(bias(`${p}.attn_output.bias`, c.dim, i, 0.5));
    t.push(norm(`${p}.ffn_norm.weight`, c.dim, i));
    t.push(linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i), linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i));
    t.push(linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, residualGain(c)));
    if (a === 'cogvlm')
      t.push(
        linear(`${p}.vis_attn_qkv.weight`, c.dim, nQ + 2 * nKv, 'attn_v', i),
        linear(`${p}.vis_attn_output.weight`, nQ, c.dim, 'attn_output', i, residualGain(c)),
        linear(`${p}.vis_gate.weight`, c.dim, c.ff, 'ffn_gate', i),
        linear(`${p}.vis_up.weight`, c.dim, c.ff, 'ffn_up', i),
        linear(`${p}.vis_down.weight`, c.ff, c.dim, 'ffn_down', i, residualGain(c)),
      );
  }
  return t;
}

const def = (name: (typeof TEXT_VL_ARCHS)[number]): ArchDefinition => ({ name, ggufArch: name, normalize, metadata, tensors });

export const paddleocr = def('paddleocr');
export const cogvlm = def('cogvlm');
export const chameleon = def('chameleon');
