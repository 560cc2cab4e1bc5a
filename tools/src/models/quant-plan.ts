// Which ggml type each tensor gets for a requested file type. Single types are "pure" (every
// weight matrix in that type, like `llama-quantize --pure`), so tests cover exactly one kernel;
// Q4_K_M follows llama.cpp's mix (src/llama-quant.cpp, llama_tensor_get_type_impl).
import { GgmlType, ggmlTypeTraits, LlamaFileType } from '../gguf/constants';
import type { ModelConfig, TensorSpec } from './arch';

export const FILE_TYPES = [
  'F32', 'F16', 'BF16', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K', 'Q4_K_M', 'IQ4_NL', 'IQ4_XS',
  'IQ2_XXS', 'IQ2_XS', 'IQ2_S', 'IQ3_XXS', 'IQ3_S', 'IQ1_S', 'IQ1_M', 'MXFP4', 'TQ1_0', 'TQ2_0', 'NVFP4', 'Q1_0', 'Q2_0',
] as const;
export type FileTypeName = (typeof FILE_TYPES)[number];

const BASE_TYPE: Record<FileTypeName, GgmlType> = {
  F32: GgmlType.F32,
  F16: GgmlType.F16,
  BF16: GgmlType.BF16,
  Q4_0: GgmlType.Q4_0,
  Q4_1: GgmlType.Q4_1,
  Q5_0: GgmlType.Q5_0,
  Q5_1: GgmlType.Q5_1,
  Q8_0: GgmlType.Q8_0,
  Q2_K: GgmlType.Q2_K,
  Q3_K: GgmlType.Q3_K,
  Q4_K: GgmlType.Q4_K,
  Q5_K: GgmlType.Q5_K,
  Q6_K: GgmlType.Q6_K,
  Q4_K_M: GgmlType.Q4_K,
  IQ4_NL: GgmlType.IQ4_NL,
  IQ4_XS: GgmlType.IQ4_XS,
  IQ2_XXS: GgmlType.IQ2_XXS,
  IQ2_XS: GgmlType.IQ2_XS,
  IQ2_S: GgmlType.IQ2_S,
  IQ3_XXS: GgmlType.IQ3_XXS,
  IQ3_S: GgmlType.IQ3_S,
  IQ1_S: GgmlType.IQ1_S,
  IQ1_M: GgmlType.IQ1_M,
  MXFP4: GgmlType.MXFP4,
  TQ1_0: GgmlType.TQ1_0,
  TQ2_0: GgmlType.TQ2_0,
  NVFP4: GgmlType.NVFP4,
  Q1_0: GgmlType.Q1_0,
  Q2_0: GgmlType.Q2_0,
};

// general.file_type for each; pure K types have no exact llama_ftype, the nearest is used.
const LLAMA_FTYPE: Record<FileTypeName, LlamaFileType> = {
  F32: LlamaFileType.ALL_F32,
  F16: LlamaFileType.MOSTLY_F16,
  BF16: LlamaFileType.MOSTLY_BF16,
  Q4_0: LlamaFileType.MOSTLY_Q4_0,
  Q4_1: LlamaFileType.MOSTLY_Q4_1,
  Q5_0: LlamaFileType.MOSTLY_Q5_0,
  Q5_1: LlamaFileType.MOSTLY_Q5_1,
  Q8_0: LlamaFileType.MOSTLY_Q8_0,
  Q2_K: LlamaFileType.MOSTLY_Q2_K,
  Q3_K: LlamaFileType.MOSTLY_Q3_K_M,
  Q4_K: LlamaFileType.MOSTLY_Q4_K_S,
  Q5_K: LlamaFileType.MOSTLY_Q5_K_S,
  Q6_K: LlamaFileType.MOSTLY_Q6_K,
  Q4_K_M: LlamaFileType.MOSTLY_Q4_K_M,
  IQ4_NL: LlamaFileType.MOSTLY_IQ4_NL,
  IQ4_XS: LlamaFileType.MOSTLY_IQ4_XS,
  IQ2_XXS: LlamaFileType.MOSTLY_IQ2_XXS,
  IQ2_XS: LlamaFileType.MOSTLY_IQ2_XS,
  IQ2_S: LlamaFileType.MOSTLY_IQ2_S,
  IQ3_XXS: LlamaFileType.MOSTLY_IQ3_XXS,
  IQ3_S: LlamaFileType.MOSTLY_IQ3_S,
  IQ1_S: LlamaFileType.MOSTLY_IQ1_S,
  IQ1_M: LlamaFileType.MOSTLY_IQ1_M,
  // llama.cpp's MXFP4 file type puts only the experts in MXFP4; this one is pure.
  MXFP4: LlamaFileType.MOSTLY_MXFP4_MOE,
  // Pure as well (llama.cpp's TQ1_0 / TQ2_0 / Q2_0 files put token_embd in Q4_K, the output in Q6_K).
  TQ1_0: LlamaFileType.MOSTLY_TQ1_0,
  TQ2_0: LlamaFileType.MOSTLY_TQ2_0,
  NVFP4: LlamaFileType.MOSTLY_NVFP4,
  Q1_0: LlamaFileType.MOSTLY_Q1_0,
  Q2_0: LlamaFileType.MOSTLY_Q2_0,
};

export function parseFileType(s: string): FileTypeName {
  const u = s.toUpperCase();
  if (!(FILE_TYPES as readonly string[]).includes(u)) throw new Error(`unknown type '${s}'; known: ${FILE_TYPES.join(', ')}`);
  return u as FileTypeName;
}

export function llamaFileType(ft: FileTypeName): LlamaFileType {
  return LLAMA_FTYPE[ft];
}

/**
 * Tensors that stay F32 in every file: 1-D tensors (norms, biases, shared-expert gate), biases of
 * any shape and routers; and MiniMax-M3's indexer projections (llama-quant leaves them unquantized).
 */
export function keepsF32(spec: TensorSpec): boolean {
  return spec.shape.length < 2 || spec.role === 'router' || spec.role === 'bias' || /\.indexer\.[qk]_proj\.weight$/.test(spec.name);
}

// llama.cpp: a shape a quantized type cannot take falls back to a smaller block (tensor_type_fallback).
// (NVFP4 and Q1_0 have none there, llama-quantize refuses such a tensor; the test models write it F16.)
const FALLBACK: Partial<Record<GgmlType, GgmlType>> = {
  [GgmlType.Q2_0]: GgmlType.Q4_0,
  [GgmlType.TQ1_0]: GgmlType.Q4_0,
  [GgmlType.TQ2_0]: GgmlType.Q4_0,
  [GgmlType.Q2_K]: GgmlType.Q4_0,
  [GgmlType.Q3_K]: GgmlType.Q4_0,
  [GgmlType.Q4_K]: GgmlType.Q5_0,
  [GgmlType.Q5_K]: GgmlType.Q5_1,
  [GgmlType.Q6_K]: GgmlType.Q8_0,
  [GgmlType.IQ4_XS]: GgmlType.IQ4_NL,
  [GgmlType.IQ2_XXS]: GgmlType.IQ4_NL,
  [GgmlType.IQ2_XS]: GgmlType.IQ4_NL,
  [GgmlType.IQ2_S]: GgmlType.IQ4_NL,
  [GgmlType.IQ3_XXS]: GgmlType.IQ4_NL,
  [GgmlType.IQ3_S]: GgmlType.IQ4_NL,
  [GgmlType.IQ1_S]: GgmlType.IQ4_NL,
  [GgmlType.IQ1_M]: GgmlType.IQ4_NL,
};

export function fitType(type: GgmlType, rowLength: number): GgmlType {
  if (rowLength % ggmlTypeTraits(type).blockSize === 0) return type;
  const fb = FALLBACK[type];
  if (fb !== undefined && rowLength % ggmlTypeTraits(fb).blockSize === 0) return fb;
  return GgmlType.F16;
}

/** llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between. */
export function useMoreBits(layer: number, nLayers: number): boolean {
  const e = Math.floor(nLayers / 8);
  return layer < e || layer >= Math.floor((7 * nLayers) / 8) || (layer - e) % 3 === 2;
}

export function tensorType(ft: FileTypeName, spec: TensorSpec, c: ModelConfig): GgmlType {
  if (spec.role === 'index') return GgmlType.I32;
  if (spec.role === 'index64') return GgmlType.I64;
  if (keepsF32(spec)) return GgmlType.F32;
  let t = BASE_TYPE[ft];
  if (ft === 'Q4_K_M') t = q4kmType(spec, c);
  return fitType(t, spec.shape[0]);
}

// NextN (MTP) tensors sit at layer nLayers: eh_proj takes the default rule like any other linear
// (as llama-quant, which has no rule for it), its norms are 1-D so stay F32, and
// nextn.embed_tokens / nextn.shared_head_head carry the token_embd / output roles, since they
// replace exactly those matrices. useMoreBits(nLayers, nLayers) is true: the block gets the
// larger attn_v/ffn_down types, as llama.cpp's last layers do.
function q4kmType(spec: TensorSpec, c: ModelConfig): GgmlType {
  const layer = spec.layer ?? 0;
  const eightExperts = c.nExperts === 8;
  switch (spec.role) {
    case 'output':
      return GgmlType.Q6_K;
    case 'token_embd':
      return c.tiedEmbeddings ? GgmlType.Q6_K : GgmlType.Q4_K;
    case 'attn_v':
      if (eightExperts) return GgmlType.Q8_0;
      return useMoreBits(layer, c.nLayers) ? GgmlType.Q6_K : GgmlType.Q4_K;
    case 'attn_k':
      return eightExperts ? GgmlType.Q8_0 : GgmlType.Q4_K;
    case 'attn_output':
      return eightExperts ? GgmlType.Q5_K : GgmlType.Q4_K;
    case 'ffn_down':
      return useMoreBits(layer, c.nLayers) ? GgmlType.Q6_K : GgmlType.Q4_K;
    default:
      return GgmlType.Q4_K;
  }
}
