import {
  bf16BitsToF32,
  decodeBf16,
  decodeF16,
  encodeBf16,
  encodeF16,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
} from './float-encode';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const bitsOf = (x: number) => ((f32[0] = x), u32[0]);
const fromBits = (b: number) => ((u32[0] = b >>> 0), f32[0]);
const isNanF16 = (h: number) => (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;

describe('f32 -> f16 (round to nearest, ties to even)', () => {
  // Failures are collected and compared once: an expect() per value would take most of a minute.
  it('round-trips every finite f16 value and both infinities', () => {
    const bad: number[] = [];
    for (let h = 0; h < 0x10000; h++) {
      if (isNanF16(h)) continue;
      if (f32ToF16Bits(f16BitsToF32(h)) !== h) bad.push(h);
    }
    expect(bad).toEqual([]);
  });

  it('rounds midpoints to even and everything else to nearest, subnormals included', () => {
    const bad: string[] = [];
    // Each pair of consecutive positive finite values; 65504 (0x7bff) and its rounding to inf are below.
    for (let h = 0; h < 0x7bff; h++) {
      const lo = f16BitsToF32(h);
      const hi = f16BitsToF32(h + 1);
      const mid = (lo + hi) / 2; // exact in f32: one more bit than f16
      const even = (h & 1) === 0 ? h : h + 1;
      const midBits = bitsOf(mid);
      if (f32ToF16Bits(mid) !== even) bad.push(`mid ${h}`);
      if (f32ToF16Bits(-mid) !== (even | 0x8000)) bad.push(`-mid ${h}`);
      if (f32ToF16Bits(fromBits(midBits - 1)) !== h) bad.push(`below ${h}`);
      if (f32ToF16Bits(fromBits(midBits + 1)) !== h + 1) bad.push(`above ${h}`);
    }
    expect(bad).toEqual([]);
  });

  it('handles overflow, underflow, signed zero and NaN like ggml', () => {
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToF16Bits(65519.996)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00);
    expect(f32ToF16Bits(1e30)).toBe(0x7c00);
    expect(f32ToF16Bits(-1e30)).toBe(0xfc00);
    expect(f32ToF16Bits(2 ** -25)).toBe(0); // half the smallest subnormal: tie to even (0)
    expect(f32ToF16Bits(fromBits(bitsOf(2 ** -25) + 1))).toBe(1);
    expect(f32ToF16Bits(1e-30)).toBe(0);
    expect(f32ToF16Bits(-0)).toBe(0x8000);
    expect(f32ToF16Bits(NaN)).toBe(0x7e00);
    expect(f32ToF16Bits(fromBits(0xffc00001))).toBe(0xfe00);
    expect(f32ToF16Bits(1)).toBe(0x3c00);
    expect(f32ToF16Bits(-2)).toBe(0xc000);
    expect(f32ToF16Bits(0.1)).toBe(0x2e66);
  });

  it('encodes arrays like the scalar path', () => {
    const src = new Float32Array(4096);
    for (let i = 0; i < src.length; i++) src[i] = Math.sin(i * 12.9898) * 10 ** ((i % 14) - 7);
    const enc = encodeF16(src);
    const dv = new DataView(enc.buffer, enc.byteOffset, enc.byteLength);
    const dec = decodeF16(enc);
    const bad: number[] = [];
    for (let i = 0; i < src.length; i++) {
      if (dv.getUint16(i * 2, true) !== f32ToF16Bits(src[i])) bad.push(i);
      if (dec[i] !== f16BitsToF32(f32ToF16Bits(src[i]))) bad.push(-i);
    }
    expect(bad).toEqual([]);
  });
});

describe('f32 -> bf16', () => {
  it('round-trips every bf16 value that is not NaN', () => {
    const bad: number[] = [];
    for (let h = 0; h < 0x10000; h++) {
      const x = bf16BitsToF32(h);
      if (!Number.isNaN(x) && f32ToBf16Bits(x) !== h) bad.push(h);
    }
    expect(bad).toEqual([]);
  });

  it('rounds ties to even and quiets NaN', () => {
    expect(f32ToBf16Bits(fromBits(0x3f808000))).toBe(0x3f80); // tie, even below
    expect(f32ToBf16Bits(fromBits(0x3f818000))).toBe(0x3f82); // tie, even above
    expect(f32ToBf16Bits(fromBits(0x3f808001))).toBe(0x3f81);
    expect(f32ToBf16Bits(fromBits(0x3f807fff))).toBe(0x3f80);
    expect(f32ToBf16Bits(fromBits(0x7f800001))).toBe(0x7fc0);
    expect(f32ToBf16Bits(fromBits(0x7f7fffff))).toBe(0x7f80); // rounds up to inf, as ggml
  });

  it('encodes arrays like the scalar path', () => {
    const src = new Float32Array(4096);
    for (let i = 0; i < src.length; i++) src[i] = Math.cos(i * 7.77) * 10 ** ((i % 20) - 10);
    src[5] = NaN;
    const enc = encodeBf16(src);
    const dv = new DataView(enc.buffer, enc.byteOffset, enc.byteLength);
    const bad: number[] = [];
    for (let i = 0; i < src.length; i++) if (dv.getUint16(i * 2, true) !== f32ToBf16Bits(src[i])) bad.push(i);
    expect(bad).toEqual([]);
    const dec = decodeBf16(enc);
    expect(Number.isNaN(dec[5])).toBe(true);
    expect(dec[6]).toBe(bf16BitsToF32(f32ToBf16Bits(src[6])));
  });
});
