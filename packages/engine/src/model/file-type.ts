// llama.cpp's file types (llama_ftype, include/llama.h) by the names llama-quantize takes and
// Ollama shows as a model's quantization level ("Q4_K_M"): for kail inspect, /api/show, and
// `kail quantize`'s types (tools/src/gguf/quantize.ts, which adds each type's tensor type).
export const LLAMA_FILE_TYPES: Readonly<Record<number, string>> = {
  0: 'F32', 1: 'F16', 2: 'Q4_0', 3: 'Q4_1', 4: 'Q4_1_SOME_F16', 7: 'Q8_0', 8: 'Q5_0', 9: 'Q5_1', 10: 'Q2_K', 11: 'Q3_K_S',
  12: 'Q3_K_M', 13: 'Q3_K_L', 14: 'Q4_K_S', 15: 'Q4_K_M', 16: 'Q5_K_S', 17: 'Q5_K_M', 18: 'Q6_K', 19: 'IQ2_XXS', 20: 'IQ2_XS',
  21: 'Q2_K_S', 22: 'IQ3_XS', 23: 'IQ3_XXS', 24: 'IQ1_S', 25: 'IQ4_NL', 26: 'IQ3_S', 27: 'IQ3_M', 28: 'IQ2_S', 29: 'IQ2_M',
  30: 'IQ4_XS', 31: 'IQ1_M', 32: 'BF16', 36: 'TQ1_0', 37: 'TQ2_0', 38: 'MXFP4_MOE', 39: 'NVFP4', 40: 'Q1_0', 41: 'Q2_0',
};

/** llama_model_loader marks a file type it guessed from the tensors (no general.file_type) with this bit. */
export const LLAMA_FTYPE_GUESSED = 1024;

/** A general.file_type value's name ("Q4_K_M"), "(guessed)" when so marked, "unknown (N)" otherwise. */
export function fileTypeName(ftype: number): string {
  const n = ftype & ~LLAMA_FTYPE_GUESSED;
  const name = LLAMA_FILE_TYPES[n] ?? `unknown (${n})`;
  return ftype & LLAMA_FTYPE_GUESSED ? `${name} (guessed)` : name;
}
