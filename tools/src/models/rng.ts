// Seeded xoshiro128** and the fills the model builders use. Each tensor gets its own stream,
// seeded from (model seed, tensor name), so a tensor's values do not depend on which other tensors
// exist, on their order, or on the chunk size used to generate it.

// Hot loops use module-level aliases: a global lookup (`Math`) per element is slow inside
// vm contexts such as jest's test environment.
const imul = Math.imul;

/** FNV-1a over the UTF-8 bytes of `s`, mixed with `seed`. */
export function hashSeed(seed: number, s: string): number {
  let h = (0x811c9dc5 ^ (seed >>> 0)) >>> 0;
  h = imul(h ^ (seed >>> 16), 0x01000193) >>> 0;
  for (const b of Buffer.from(s, 'utf8')) h = imul(h ^ b, 0x01000193) >>> 0;
  return h;
}

function splitmix32(state: { s: number }): number {
  state.s = (state.s + 0x9e3779b9) | 0;
  let z = state.s;
  z = imul(z ^ (z >>> 16), 0x85ebca6b);
  z = imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

export class Xoshiro128 {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number) {
    const st = { s: seed | 0 };
    this.a = splitmix32(st);
    this.b = splitmix32(st);
    this.c = splitmix32(st);
    this.d = splitmix32(st);
    if ((this.a | this.b | this.c | this.d) === 0) this.d = 1;
  }

  /** Next 32 random bits as an unsigned integer. */
  nextU32(): number {
    const r = imul(rotl(imul(this.b, 5), 7), 9);
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return r >>> 0;
  }

  /** Skips `n` 32-bit outputs, one step at a time. */
  discard(n: number): void {
    for (let i = 0; i < n; i++) this.nextU32();
  }

  /**
   * Skips `n` 32-bit outputs in O(log n): the state update is linear over GF(2), so n steps are
   * the matrix M^n, applied as products of precomputed M^(2^k). Lets any range of a stream be
   * generated on its own (parallel writers) with the same values as one sequential pass.
   */
  jump(n: number): void {
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`jump: bad step count ${n}`);
    const powers = stepPowers();
    const s = new Uint32Array([this.a, this.b, this.c, this.d]);
    for (let k = 0; n > 0; k++, n = Math.floor(n / 2)) {
      if (n % 2 === 1) applyMatrix(powers[k], s);
    }
    this.a = s[0] | 0; this.b = s[1] | 0; this.c = s[2] | 0; this.d = s[3] | 0;
  }

  /** Uniform in [0, 1) with 24 bits of resolution. */
  nextFloat(): number {
    return (this.nextU32() >>> 8) * 5.9604644775390625e-8;
  }

  /**
   * Fills `out` with approximately normal values (Irwin-Hall sum of four 16-bit uniforms, bounded at
   * about ±3.46σ): fast, and no heavy tails to blow up a tiny random model.
   */
  fillNormal(out: Float32Array, mean: number, std: number): void {
    // sum of 4 U[0,65536) has mean 131070 and variance 4·(65536²-1)/12.
    const scale = std / Math.sqrt((4 * (65536 * 65536 - 1)) / 12);
    const center = 2 * 65535;
    let a = this.a, b = this.b, c = this.c, d = this.d;
    for (let i = 0; i < out.length; i++) {
      // two inlined xoshiro128** steps
      let r1 = imul(rotl(imul(b, 5), 7), 9);
      let t = b << 9;
      c ^= a; d ^= b; b ^= c; a ^= d; c ^= t; d = rotl(d, 11);
      let r2 = imul(rotl(imul(b, 5), 7), 9);
      t = b << 9;
      c ^= a; d ^= b; b ^= c; a ^= d; c ^= t; d = rotl(d, 11);
      r1 >>>= 0;
      r2 >>>= 0;
      const s = (r1 & 0xffff) + (r1 >>> 16) + (r2 & 0xffff) + (r2 >>> 16);
      out[i] = mean + (s - center) * scale;
    }
    this.a = a; this.b = b; this.c = c; this.d = d;
  }

  /** Uniform in [lo, hi). */
  fillUniform(out: Float32Array, lo: number, hi: number): void {
    const span = hi - lo;
    for (let i = 0; i < out.length; i++) out[i] = lo + span * this.nextFloat();
  }
}

/** A 128x128 GF(2) matrix as 128 columns of 4 words: column j is the image of state bit j. */
type BitMatrix = Uint32Array;

function stepState(s: Uint32Array): void {
  const t = s[1] << 9;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 11);
}

/** s <- m s */
function applyMatrix(m: BitMatrix, s: Uint32Array): void {
  let r0 = 0, r1 = 0, r2 = 0, r3 = 0;
  for (let j = 0; j < 128; j++) {
    if ((s[j >>> 5] >>> (j & 31)) & 1) {
      const o = j * 4;
      r0 ^= m[o]; r1 ^= m[o + 1]; r2 ^= m[o + 2]; r3 ^= m[o + 3];
    }
  }
  s[0] = r0; s[1] = r1; s[2] = r2; s[3] = r3;
}

let powersCache: BitMatrix[] | undefined;

/** M^(2^k) for k = 0..52 (enough for any safe-integer jump). */
function stepPowers(): BitMatrix[] {
  if (powersCache) return powersCache;
  const m = new Uint32Array(128 * 4);
  const col = new Uint32Array(4);
  for (let j = 0; j < 128; j++) {
    col.fill(0);
    col[j >>> 5] = (1 << (j & 31)) >>> 0;
    stepState(col);
    m.set(col, j * 4);
  }
  const powers = [m];
  for (let k = 1; k < 53; k++) {
    const prev = powers[k - 1];
    const sq = new Uint32Array(128 * 4);
    for (let j = 0; j < 128; j++) {
      const c = prev.slice(j * 4, j * 4 + 4);
      applyMatrix(prev, c);
      sq.set(c, j * 4);
    }
    powers.push(sq);
  }
  powersCache = powers;
  return powers;
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}
