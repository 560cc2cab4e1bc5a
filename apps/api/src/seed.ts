// A request's sampling seed, on every route. OpenAI's `seed` is any 64-bit integer (clients send
// random ones); llama-server and Ollama read theirs as a uint32, so -1 (0xFFFFFFFF) asks for a
// random seed and -2 is 0xFFFFFFFE. The routes take any integer and give the engine:
//   - nothing (it draws a random seed) for an absent seed or -1;
//   - 0 .. 2^53-1 as they are (the engine folds values above 2^32 into its 32-bit generator; below
//     2^32 the draws are llama.cpp's for that seed);
//   - any other integer reduced modulo 2^32 as llama-server reads it: -2 samples as 4294967294.
// Integers past 2^53 arrive as the nearest double (JSON's numbers), the same one for the same text.
import { z } from 'zod';

const TWO_POW_32 = 2 ** 32;

/** The `seed` field of a request body (zod's `.int()` would refuse what is outside +-2^53). */
export const seedField = z
  .number()
  .refine(Number.isInteger, { message: 'Invalid input: expected an integer' })
  .optional()
  .nullable();

/** The engine's seed for a request's `seed` (undefined: a random one). */
export function requestSeed(seed: number | null | undefined): number | undefined {
  if (seed == null || seed === -1) return undefined;
  if (seed >= 0 && seed <= Number.MAX_SAFE_INTEGER) return seed;
  return ((seed % TWO_POW_32) + TWO_POW_32) % TWO_POW_32;
}

/** SamplingParams' seed and has_seed for a request's `seed`. */
export function seedParams(seed: number | null | undefined): { seed: number; hasSeed: boolean } {
  const s = requestSeed(seed);
  return { seed: s ?? 0, hasSeed: s !== undefined };
}
