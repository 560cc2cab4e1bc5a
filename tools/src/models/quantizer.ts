// Quantized tensor types come from the native core's quantizer (ggml's reference quantization),
// reached through the engine; nothing here reimplements a quantization format.
import os from 'node:os';
import { isMainThread } from 'node:worker_threads';

import { GgmlType, ggmlTypeTraits } from '../gguf/constants';

/** Quantizes whole rows of F32 values (length a multiple of the type's block size) to ggml blocks. */
export type QuantizeFn = (type: GgmlType, data: Float32Array) => Uint8Array;

/** Expands `n` values of a ggml type back to F32. */
export type DequantizeFn = (type: GgmlType, data: Uint8Array, n: number) => Float32Array;

interface NativeWithQuantize {
  quantize?: (typeId: number, data: Float32Array, threads?: number) => Uint8Array;
  dequantize?: (typeId: number, data: Uint8Array, n: number) => Float32Array;
}

let cached: QuantizeFn | undefined;

function nativeAddon(): NativeWithQuantize {
  try {
    // Loaded lazily: float files need neither the engine build nor the addon.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const engine = require('@kailstream/engine/core') as { native: () => unknown };
    return engine.native() as NativeWithQuantize;
  } catch (e) {
    throw new Error(`quantized types need the native addon through @kailstream/engine: ${(e as Error).message}`);
  }
}

/** The native dequantizer (to build F32 files holding exactly the values a quantized file decodes to). */
export function resolveDequantizer(): DequantizeFn {
  const addon = nativeAddon();
  const d = addon.dequantize;
  if (typeof d !== 'function') throw new Error('the native addon has no dequantize(); rebuild it');
  return (type, data, n) => d.call(addon, type, data, n);
}

/** The native quantizer; throws with what to do when the addon or its `quantize` is missing. */
export function resolveQuantizer(): QuantizeFn {
  if (cached) return cached;
  const addon = nativeAddon();
  const q = addon.quantize;
  if (typeof q !== 'function') {
    throw new Error('the native addon has no quantize(); rebuild it (cd packages/core-native && node scripts/build-native.js) or write F32/F16/BF16');
  }
  // On the main thread the addon quantizes on every core (the same bytes as on one); the parallel
  // writer's workers (models/parallel.ts) already run one unit per core, so each uses one.
  const threads = isMainThread ? os.availableParallelism() : 1;
  cached = (type, data) => {
    const t = ggmlTypeTraits(type);
    if (data.length % t.blockSize !== 0) throw new Error(`${t.name}: ${data.length} values is not a whole number of blocks`);
    const out = q.call(addon, type, data, threads);
    const expected = (data.length / t.blockSize) * t.typeSize;
    if (out.byteLength !== expected) throw new Error(`native quantize(${t.name}) returned ${out.byteLength} bytes, expected ${expected}`);
    return out;
  };
  return cached;
}
