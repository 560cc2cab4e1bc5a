// Quantized files are judged against llama.cpp's own spread: kail's logits are compared with
// llama.cpp's exact run (F32 KV, flash attention off), and that distance with the one between
// llama.cpp's default run (F16 KV, flash attention auto) and its exact run. The parity specs share
// the reference runs and the two distances; each spec keeps its own assertion.
import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse, tokenIds } from './metrics';

export interface QuantSpreadRefs {
  /** Per case: the 128 input tokens, llama.cpp's exact logits and its default run's. */
  tokens: number[][];
  exact: LlamaLogits[];
  runtime: LlamaLogits[];
}

/** Writes each (preset, type) file at file(preset, type) and runs llama.cpp's two references on it. */
export async function quantSpreadRefs(cases: readonly [string, FileTypeName][], file: (preset: string, type: string) => string, timeoutMs: number): Promise<QuantSpreadRefs> {
  const tokens = cases.map(([p, t]) => {
    const config = getPreset(p).config;
    writeModel({ config, fileType: t, seed: 7, out: file(p, t) });
    return tokenIds(128, config.vocabSize, 5);
  });
  // Both runs of a file one after the other, on one load of it (two contexts).
  const jobs = cases.flatMap(([p, t], i) => [
    { model: file(p, t), tokens: tokens[i], kv: 'f32' as const, flashAttention: 'off' as const },
    { model: file(p, t), tokens: tokens[i], kv: 'f16' as const, flashAttention: 'auto' as const },
  ]);
  const runs = await llamaLogitsBatch(jobs, { timeoutMs: 2 * timeoutMs });
  return { tokens, exact: runs.filter((_, j) => j % 2 === 0), runtime: runs.filter((_, j) => j % 2 === 1) };
}

/** Case i's distances: kail's logits to llama.cpp's exact ones, and llama.cpp's default run to its exact one. */
export function quantSpread(ours: Float32Array, refs: QuantSpreadRefs, i: number): { kail: number; llama: number } {
  return { kail: nmse(ours, refs.exact[i].logits), llama: nmse(refs.runtime[i].logits, refs.exact[i].logits) };
}
