// GGUF value types and ggml tensor types, numbered as in ggml/include/gguf.h and ggml.h.

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;

export enum GgufType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

export enum GgmlType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
}

export interface GgmlTypeTraits {
  name: string;
  /** Elements per block. */
  blockSize: number;
  /** Bytes per block. */
  typeSize: number;
  quantized: boolean;
}

// Block layouts from ggml-common.h (QK4_0 = 32, QK_K = 256, ...).
const TRAITS: Partial<Record<GgmlType, GgmlTypeTraits>> = {
  [GgmlType.F32]: { name: 'F32', blockSize: 1, typeSize: 4, quantized: false },
  [GgmlType.F16]: { name: 'F16', blockSize: 1, typeSize: 2, quantized: false },
  [GgmlType.BF16]: { name: 'BF16', blockSize: 1, typeSize: 2, quantized: false },
  [GgmlType.F64]: { name: 'F64', blockSize: 1, typeSize: 8, quantized: false },
  [GgmlType.I8]: { name: 'I8', blockSize: 1, typeSize: 1, quantized: false },
  [GgmlType.I16]: { name: 'I16', blockSize: 1, typeSize: 2, quantized: false },
  [GgmlType.I32]: { name: 'I32', blockSize: 1, typeSize: 4, quantized: false },
  [GgmlType.I64]: { name: 'I64', blockSize: 1, typeSize: 8, quantized: false },
  [GgmlType.Q4_0]: { name: 'Q4_0', blockSize: 32, typeSize: 18, quantized: true },
  [GgmlType.Q4_1]: { name: 'Q4_1', blockSize: 32, typeSize: 20, quantized: true },
  [GgmlType.Q5_0]: { name: 'Q5_0', blockSize: 32, typeSize: 22, quantized: true },
  [GgmlType.Q5_1]: { name: 'Q5_1', blockSize: 32, typeSize: 24, quantized: true },
  [GgmlType.Q8_0]: { name: 'Q8_0', blockSize: 32, typeSize: 34, quantized: true },
  [GgmlType.Q8_1]: { name: 'Q8_1', blockSize: 32, typeSize: 36, quantized: true },
  [GgmlType.Q2_K]: { name: 'Q2_K', blockSize: 256, typeSize: 84, quantized: true },
  [GgmlType.Q3_K]: { name: 'Q3_K', blockSize: 256, typeSize: 110, quantized: true },
  [GgmlType.Q4_K]: { name: 'Q4_K', blockSize: 256, typeSize: 144, quantized: true },
  [GgmlType.Q5_K]: { name: 'Q5_K', blockSize: 256, typeSize: 176, quantized: true },
  [GgmlType.Q6_K]: { name: 'Q6_K', blockSize: 256, typeSize: 210, quantized: true },
  [GgmlType.Q8_K]: { name: 'Q8_K', blockSize: 256, typeSize: 292, quantized: true },
  [GgmlType.IQ4_NL]: { name: 'IQ4_NL', blockSize: 32, typeSize: 18, quantized: true },
  [GgmlType.IQ4_XS]: { name: 'IQ4_XS', blockSize: 256, typeSize: 136, quantized: true },
  [GgmlType.IQ2_XXS]: { name: 'IQ2_XXS', blockSize: 256, typeSize: 66, quantized: true },
  [GgmlType.IQ2_XS]: { name: 'IQ2_XS', blockSize: 256, typeSize: 74, quantized: true },
  [GgmlType.IQ2_S]: { name: 'IQ2_S', blockSize: 256, typeSize: 82, quantized: true },
  [GgmlType.IQ3_XXS]: { name: 'IQ3_XXS', blockSize: 256, typeSize: 98, quantized: true },
  [GgmlType.IQ3_S]: { name: 'IQ3_S', blockSize: 256, typeSize: 110, quantized: true },
  [GgmlType.IQ1_S]: { name: 'IQ1_S', blockSize: 256, typeSize: 50, quantized: true },
  [GgmlType.IQ1_M]: { name: 'IQ1_M', blockSize: 256, typeSize: 56, quantized: true },
  [GgmlType.MXFP4]: { name: 'MXFP4', blockSize: 32, typeSize: 17, quantized: true },
  [GgmlType.TQ1_0]: { name: 'TQ1_0', blockSize: 256, typeSize: 54, quantized: true },
  [GgmlType.TQ2_0]: { name: 'TQ2_0', blockSize: 256, typeSize: 66, quantized: true },
  [GgmlType.NVFP4]: { name: 'NVFP4', blockSize: 64, typeSize: 36, quantized: true },
  [GgmlType.Q1_0]: { name: 'Q1_0', blockSize: 128, typeSize: 18, quantized: true },
  [GgmlType.Q2_0]: { name: 'Q2_0', blockSize: 64, typeSize: 18, quantized: true },
};

export function ggmlTypeTraits(type: GgmlType): GgmlTypeTraits {
  const t = TRAITS[type];
  if (!t) throw new Error(`unsupported ggml type id ${type}`);
  return t;
}

export function ggmlTypeFromName(name: string): GgmlType {
  for (const [id, t] of Object.entries(TRAITS)) if (t.name === name.toUpperCase()) return Number(id) as GgmlType;
  throw new Error(`unknown ggml type '${name}'`);
}

/** Bytes a tensor of this shape takes (ggml_nbytes for a contiguous tensor). */
export function ggmlTensorBytes(type: GgmlType, shape: readonly number[]): number {
  const t = ggmlTypeTraits(type);
  const ne0 = shape[0] ?? 1;
  if (ne0 % t.blockSize !== 0) {
    throw new Error(`row length ${ne0} is not a multiple of the ${t.name} block size ${t.blockSize}`);
  }
  let rows = 1;
  for (let i = 1; i < shape.length; i++) rows *= shape[i];
  return (ne0 / t.blockSize) * t.typeSize * rows;
}

/** llama_ftype values (include/llama.h) for `general.file_type`. */
export enum LlamaFileType {
  ALL_F32 = 0,
  MOSTLY_F16 = 1,
  MOSTLY_Q4_0 = 2,
  MOSTLY_Q4_1 = 3,
  MOSTLY_Q8_0 = 7,
  MOSTLY_Q5_0 = 8,
  MOSTLY_Q5_1 = 9,
  MOSTLY_Q2_K = 10,
  MOSTLY_Q3_K_S = 11,
  MOSTLY_Q3_K_M = 12,
  MOSTLY_Q3_K_L = 13,
  MOSTLY_Q4_K_S = 14,
  MOSTLY_Q4_K_M = 15,
  MOSTLY_Q5_K_S = 16,
  MOSTLY_Q5_K_M = 17,
  MOSTLY_Q6_K = 18,
  MOSTLY_IQ2_XXS = 19,
  MOSTLY_IQ2_XS = 20,
  MOSTLY_Q2_K_S = 21,
  MOSTLY_IQ3_XS = 22,
  MOSTLY_IQ3_XXS = 23,
  MOSTLY_IQ1_S = 24,
  MOSTLY_IQ4_NL = 25,
  MOSTLY_IQ3_S = 26,
  MOSTLY_IQ3_M = 27,
  MOSTLY_IQ2_S = 28,
  MOSTLY_IQ2_M = 29,
  MOSTLY_IQ4_XS = 30,
  MOSTLY_IQ1_M = 31,
  MOSTLY_TQ1_0 = 36,
  MOSTLY_TQ2_0 = 37,
  MOSTLY_MXFP4_MOE = 38,
  MOSTLY_NVFP4 = 39,
  MOSTLY_Q1_0 = 40,
  MOSTLY_Q2_0 = 41,
  MOSTLY_BF16 = 32,
}

export function alignUp(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}
