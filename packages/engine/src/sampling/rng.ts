import { randomInt } from 'node:crypto';

const N = 624;
const M = 397;
const TWO_POW_32 = 4294967296;
const TWO_POW_64 = 18446744073709551616;
/** nextafter(1, 0): the largest double below 1. */
const BELOW_ONE = 1 - 2 ** -53;
const FLOAT_BELOW_ONE = 1 - 2 ** -24;

/**
 * The 32-bit Mersenne Twister (std::mt19937), the generator llama.cpp's samplers own.
 *
 * mt19937 rather than a smaller generator so that a seed means the same stream of draws here as
 * in llama.cpp: `nextDouble()` is exactly what `std::uniform_real_distribution<double>(0, 1)`
 * returns from a `std::mt19937` with the same seed (libstdc++ and libc++ both build the double
 * from two 32-bit outputs), which is what llama.cpp's `dist` sampler draws once per token.
 * Pure integer arithmetic plus one exact double division, so it is the same on every machine.
 */
export class Mt19937 {
  private readonly mt = new Uint32Array(N);
  private index = N;

  /** @param seed an unsigned 32-bit integer (see `foldSeed` for wider seeds). Default 5489, as std::mt19937. */
  constructor(seed = 5489) {
    this.seed(seed);
  }

  /** Restarts the stream from `seed`. */
  seed(seed: number): void {
    const mt = this.mt;
    mt[0] = seed >>> 0;
    for (let i = 1; i < N; i++) {
      const prev = mt[i - 1] ^ (mt[i - 1] >>> 30);
      mt[i] = (Math.imul(1812433253, prev) + i) >>> 0;
    }
    this.index = N;
  }

  /** The next output, an unsigned 32-bit integer. */
  nextUint32(): number {
    if (this.index >= N) this.twist();
    let y = this.mt[this.index++];
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  }

  /** A uniform double in [0, 1), bit-identical to `std::uniform_real_distribution<double>(0, 1)(mt19937)`. */
  nextDouble(): number {
    const lo = this.nextUint32();
    const hi = this.nextUint32();
    const r = (lo + hi * TWO_POW_32) / TWO_POW_64;
    return r >= 1 ? BELOW_ONE : r;
  }

  /**
   * A uniform float in [0, 1), bit-identical to `std::uniform_real_distribution<float>(0, 1)(mt19937)`
   * in libstdc++ (one 32-bit output rounded to float, over 2^32), which llama.cpp's XTC sampler draws.
   */
  nextFloat(): number {
    const r = Math.fround(this.nextUint32()) / TWO_POW_32;
    return r >= 1 ? FLOAT_BELOW_ONE : r;
  }

  /**
   * A uniform integer in [0, n), as `std::uniform_int_distribution<size_t>(0, n - 1)(mt19937)` draws
   * it in libstdc++ (GCC 11 and later: Lemire's nearly divisionless method over one 32-bit output,
   * redrawn below the threshold), which llama-perplexity's HellaSwag task selection uses. n in 1..2^32.
   */
  nextBelow(n: number): number {
    if (!Number.isInteger(n) || n < 1 || n > TWO_POW_32) throw new RangeError(`nextBelow: n must be an integer in 1..2^32, got ${n}`);
    if (n === TWO_POW_32) return this.nextUint32();
    const range = BigInt(n);
    let product = BigInt(this.nextUint32()) * range;
    let low = Number(product & 0xffffffffn);
    if (low < n) {
      const threshold = (TWO_POW_32 - n) % n;
      while (low < threshold) {
        product = BigInt(this.nextUint32()) * range;
        low = Number(product & 0xffffffffn);
      }
    }
    return Number(product >> 32n);
  }

  private twist(): void {
    const mt = this.mt;
    for (let i = 0; i < N; i++) {
      const y = (mt[i] & 0x80000000) | (mt[(i + 1) % N] & 0x7fffffff);
      mt[i] = mt[(i + M) % N] ^ (y >>> 1) ^ (y & 1 ? 0x9908b0df : 0);
    }
    this.index = 0;
  }
}

/**
 * Maps any safe integer seed (the API's seeds are signed 64-bit) to the 32-bit seed mt19937 takes.
 * Seeds in [0, 2^32) map to themselves, so they draw the same stream as llama.cpp with that seed;
 * wider or negative ones mix their high word in, so that seeds differing only there still differ.
 */
export function foldSeed(seed: number): number {
  const lo = seed >>> 0;
  const hi = Math.floor(seed / TWO_POW_32);
  return hi === 0 ? lo : (lo ^ Math.imul(hi | 0, 0x9e3779b9) ^ (hi >>> 16)) >>> 0;
}

/** A fresh seed from the OS's entropy source, for requests that give none. */
export function randomSeed(): number {
  return randomInt(0, 2 ** 32 - 1);
}
