// F32 -> F16 / BF16 encoders with the rounding ggml uses (round to nearest, ties to even), so a
// file written here holds the same bits `llama-quantize`/`convert_hf_to_gguf` would write.
import os from 'node:os';

if (os.endianness() !== 'LE') throw new Error('the GGUF writer assumes a little-endian host');

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** IEEE binary16 bits of `x` (as a float32), ties to even; NaN -> sign|0x7e00 like ggml. */
export function f32ToF16Bits(x: number): number {
  f32[0] = x;
  return f32BitsToF16Bits(u32[0]);
}

export function f32BitsToF16Bits(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | (mant !== 0 ? 0x7e00 : 0x7c00);
  const e = exp - 112; // rebias 127 -> 15
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    if (rem > half || (rem === half && (h & 1) !== 0)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  // A carry out of the mantissa bumps the exponent, and from the largest finite value gives inf: both right.
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) !== 0)) h++;
  return sign | h;
}

export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** bfloat16 bits of `x`, as ggml_compute_fp32_to_bf16 (ties to even, NaN forced quiet). */
export function f32BitsToBf16Bits(x: number): number {
  if ((x & 0x7fffffff) >>> 0 > 0x7f800000) return ((x >>> 16) | 64) & 0xffff;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

export function f32ToBf16Bits(x: number): number {
  f32[0] = x;
  return f32BitsToBf16Bits(u32[0]);
}

export function bf16BitsToF32(h: number): number {
  u32[0] = (h << 16) >>> 0;
  return f32[0];
}

function outBytes(n: number, out?: Uint8Array): Uint8Array {
  if (out) {
    if (out.byteLength < n) throw new Error(`output buffer too small: ${out.byteLength} < ${n}`);
    if (out.byteOffset % 2 !== 0) throw new Error('output buffer must be 2-byte aligned');
    return out.subarray(0, n);
  }
  return new Uint8Array(n);
}

/** Encodes to little-endian F16; writes into `out` when given (must hold 2 bytes per value). */
export function encodeF16(src: Float32Array, out?: Uint8Array): Uint8Array {
  const bytes = outBytes(src.length * 2, out);
  const dst = new Uint16Array(bytes.buffer, bytes.byteOffset, src.length);
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < bits.length; i++) dst[i] = f32BitsToF16Bits(bits[i]);
  return bytes;
}

export function encodeBf16(src: Float32Array, out?: Uint8Array): Uint8Array {
  const bytes = outBytes(src.length * 2, out);
  const dst = new Uint16Array(bytes.buffer, bytes.byteOffset, src.length);
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < bits.length; i++) {
    const x = bits[i];
    dst[i] = (x & 0x7fffffff) >>> 0 > 0x7f800000 ? (x >>> 16) | 64 : (x + 0x7fff + ((x >>> 16) & 1)) >>> 16;
  }
  return bytes;
}

export function encodeF32(src: Float32Array): Uint8Array {
  return new Uint8Array(src.buffer, src.byteOffset, src.byteLength);
}

export function decodeF16(bytes: Uint8Array): Float32Array {
  const n = bytes.byteLength >> 1;
  const out = new Float32Array(n);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < n; i++) out[i] = f16BitsToF32(dv.getUint16(i * 2, true));
  return out;
}

export function decodeBf16(bytes: Uint8Array): Float32Array {
  const n = bytes.byteLength >> 1;
  const out = new Float32Array(n);
  const o32 = new Uint32Array(out.buffer);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < n; i++) o32[i] = dv.getUint16(i * 2, true) << 16;
  return out;
}
