// The llama.cpp T5 oracle (t5-ref: llama_encode over the prompt, greedy llama_decode steps from the
// decoder start token) on the t5 writer's files (tools/src/models/architectures/t5.ts): llama.cpp
// loads them and runs them, and its decoder logits equal a from-scratch float64 forward of T5 over
// the same tensors (T5's encoder with the bidirectional bucket bias, the decoder's causal
// self-attention with its own bias, cross-attention over enc.output_norm's rows, scale 1 throughout,
// the head), teacher-forced with the oracle's own decoder tokens. This pins both the files' meaning
// and the oracle's contract (t5-ref.cpp) before an engine is checked against it.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { ModelConfig } from '../models/arch';
import type { T5Config } from '../models/architectures/t5';
import { generateTensorF32, writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { nmse } from './metrics';
import { llamaT5Ref, type T5Ref } from './t5-ref';

const SEED = 7;
const N_PROMPT = 40;
const STEPS = 32;
const PROMPT = Array.from({ length: N_PROMPT }, (_, i) => (i * 389 + 17) % 1024);
const OTHER = Array.from({ length: N_PROMPT }, (_, i) => (i * 577 + 101) % 1024);

// llama.cpp's llama_relative_position_bucket (src/llama-graph.cpp), its float and double steps kept.
function bucket(x: number, y: number, nBuckets: number, bidirectional: boolean): number {
  const maxDistance = 128;
  let nb = nBuckets;
  if (bidirectional) nb >>= 1;
  const maxExact = nb >> 1;
  let rp = x - y;
  let b = 0;
  if (bidirectional) {
    b += rp > 0 ? nb : 0;
    rp = Math.abs(rp);
  } else rp = -Math.min(rp, 0);
  if (rp < maxExact) return b + rp;
  const lf = Math.fround(Math.log(Math.fround(rp / maxExact)));
  const large = Math.floor(Math.fround(maxExact + Math.fround(lf * (nb - maxExact)) / Math.log(maxDistance / maxExact)));
  return b + Math.min(large, nb - 1);
}

// Round to the nearest IEEE half (ties to even; subnormals below 2^-14).
function f16(x: number): number {
  const v = Math.fround(x);
  if (v === 0 || !Number.isFinite(v)) return v;
  const e = Math.max(Math.floor(Math.log2(Math.abs(v))), -14);
  const q = 2 ** (e - 10);
  const r = v / q;
  let n = Math.round(r);
  if (Math.abs(r - Math.trunc(r)) === 0.5) n = 2 * Math.round(r / 2);
  return n * q;
}

/** A float64 forward of T5 (encoder over `prompt`, decoder over `dec`): [dec.length][vocab] logits. */
function t5Forward(cfg: T5Config, prompt: number[], dec: number[]): Float64Array {
  const c = cfg as T5Config & ModelConfig;
  const W = (name: string) => Float64Array.from(generateTensorF32(c, SEED, name));
  const has = (name: string) => {
    try {
      generateTensorF32(c, SEED, name);
      return true;
    } catch {
      return false;
    }
  };
  const d = c.dim, H = c.nHeads, hd = c.headDim ?? d / H, inner = H * hd, nb = c.relBuckets ?? 32, eps = c.normEps;
  const mat = (w: Float64Array, nIn: number, nOut: number, x: Float64Array[]) =>
    x.map((r) => {
      const y = new Float64Array(nOut);
      for (let o = 0; o < nOut; o++) {
        let s = 0;
        for (let i = 0; i < nIn; i++) s += w[o * nIn + i] * r[i];
        y[o] = s;
      }
      return y;
    });
  const rms = (g: Float64Array, x: Float64Array[]) =>
    x.map((r) => {
      let s = 0;
      for (const v of r) s += v * v;
      const k = 1 / Math.sqrt(s / r.length + eps);
      return r.map((v, i) => v * k * g[i]);
    });
  const add = (a: Float64Array[], b: Float64Array[]) => a.map((r, i) => r.map((v, j) => v + b[i][j]));
  // ggml's CPU GELU (ggml_vec_geglu_f32): the F16 table of GELU at the input rounded to F16, 0 at
  // or below -10 and the input itself from 10.
  const gelu = (x: number) => (x <= -10 ? 0 : x >= 10 ? x : f16(0.5 * f16(x) * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * f16(x) * (1 + 0.044715 * f16(x) * f16(x))))));
  // q rows attend k/v rows; bias(i, j) per head or none; causal limits key j <= query i.
  const attend = (q: Float64Array[], k: Float64Array[], v: Float64Array[], bias: ((i: number, j: number, h: number) => number) | null, causal: boolean) =>
    q.map((qr, i) => {
      const out = new Float64Array(inner);
      for (let h = 0; h < H; h++) {
        const n = causal ? i + 1 : k.length;
        const s = new Float64Array(n);
        let mx = -Infinity;
        for (let j = 0; j < n; j++) {
          let t = 0;
          for (let e = 0; e < hd; e++) t += qr[h * hd + e] * k[j][h * hd + e];
          s[j] = t + (bias ? bias(i, j, h) : 0);
          mx = Math.max(mx, s[j]);
        }
        let z = 0;
        for (let j = 0; j < n; j++) z += (s[j] = Math.exp(s[j] - mx));
        for (let j = 0; j < n; j++) for (let e = 0; e < hd; e++) out[h * hd + e] += (s[j] / z) * v[j][h * hd + e];
      }
      return out;
    });
  const ffn = (p: string, x: Float64Array[]) => {
    const up = mat(W(`${p}.ffn_up.weight`), d, c.ff, x);
    const act = cfg.reluFfn ? up.map((r) => r.map((v) => Math.max(v, 0))) : mat(W(`${p}.ffn_gate.weight`), d, c.ff, x).map((g, i) => g.map((v, j) => gelu(v) * up[i][j]));
    return mat(W(`${p}.ffn_down.weight`), c.ff, d, act);
  };
  const emb = W('token_embd.weight');
  const embed = (ts: number[]) => ts.map((t) => emb.slice(t * d, (t + 1) * d));
  const relTable = (stack: string, il: number) => W(has(`${stack}.blk.${il}.attn_rel_b.weight`) ? `${stack}.blk.${il}.attn_rel_b.weight` : `${stack}.blk.0.attn_rel_b.weight`);

  let x = embed(prompt);
  for (let il = 0; il < c.nLayers; il++) {
    const p = `enc.blk.${il}`;
    const n = rms(W(`${p}.attn_norm.weight`), x);
    const rb = relTable('enc', il);
    const a = attend(mat(W(`${p}.attn_q.weight`), d, inner, n), mat(W(`${p}.attn_k.weight`), d, inner, n), mat(W(`${p}.attn_v.weight`), d, inner, n), (i, j, h) => rb[bucket(j, i, nb, true) * H + h], false);
    x = add(x, mat(W(`${p}.attn_o.weight`), inner, d, a));
    x = add(x, ffn(p, rms(W(`${p}.ffn_norm.weight`), x)));
  }
  const enc = rms(W('enc.output_norm.weight'), x);

  let y = embed(dec);
  for (let il = 0; il < (cfg.decLayers ?? c.nLayers); il++) {
    const p = `dec.blk.${il}`;
    const n = rms(W(`${p}.attn_norm.weight`), y);
    const rb = relTable('dec', il);
    const a = attend(mat(W(`${p}.attn_q.weight`), d, inner, n), mat(W(`${p}.attn_k.weight`), d, inner, n), mat(W(`${p}.attn_v.weight`), d, inner, n), (i, j, h) => rb[bucket(j, i, nb, false) * H + h], true);
    y = add(y, mat(W(`${p}.attn_o.weight`), inner, d, a));
    const nc = rms(W(`${p}.cross_attn_norm.weight`), y);
    const ca = attend(mat(W(`${p}.cross_attn_q.weight`), d, inner, nc), mat(W(`${p}.cross_attn_k.weight`), d, inner, enc), mat(W(`${p}.cross_attn_v.weight`), d, inner, enc), null, false);
    y = add(y, mat(W(`${p}.cross_attn_o.weight`), inner, d, ca));
    y = add(y, ffn(p, rms(W(`${p}.ffn_norm.weight`), y)));
  }
  const out = mat(W(c.tiedEmbeddings ? 'token_embd.weight' : 'output.weight'), d, c.vocabSize, rms(W('dec.output_norm.weight'), y));
  const flat = new Float64Array(out.length * c.vocabSize);
  out.forEach((r, i) => flat.set(r, i * c.vocabSize));
  return flat;
}

const argmax = (a: ArrayLike<number>, off: number, n: number) => {
  let b = 0;
  for (let v = 1; v < n; v++) if (a[off + v] > a[off + b]) b = v;
  return b;
};

describe("llama.cpp's T5 generation (t5-ref) on the t5 writer's files", () => {
  let dir: string;
  const file = (n: string) => path.join(dir, `${n}.gguf`);
  const refs: Record<string, T5Ref> = {};
  const lines: string[] = [];

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-t5-ref-'));
    writeModel({ config: getPreset('tiny-t5').config, fileType: 'F32', seed: SEED, out: file('t5') });
    writeModel({ config: getPreset('tiny-t5-relu').config, fileType: 'F32', seed: SEED, out: file('relu') });
    refs.t5 = await llamaT5Ref(file('t5'), PROMPT, STEPS);
    refs.relu = await llamaT5Ref(file('relu'), PROMPT, STEPS);
  }, 120_000);

  afterAll(() => {
    if (lines.length) console.log(lines.join('\n'));
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    // GELU: this forward's F16 rounding of the gate is of float64 inputs, llama.cpp's of float32
    // ones: an input at an F16 rounding boundary takes the neighbouring table entry (1.9e-8 here,
    // 7.5e-8 with an exact GELU), as parity-t5encoder bounds its GELU encoder; ReLU has no table.
    ['tiny-t5', 't5', 0, 5e-8],
    ['tiny-t5-relu', 'relu', 3, 1e-11],
  ])("%s: llama.cpp's decoder logits over 32 greedy steps equal a float64 T5 forward", (preset, key, start, bound) => {
    const r = refs[key];
    const cfg = getPreset(preset).config as T5Config;
    const V = r.nVocab;
    expect([V, r.tokens, r.decoderStart, r.decoderTokens.length, r.decoderTokens[0]]).toEqual([1024, PROMPT, start, STEPS, start]);
    // The greedy chain: each input is the argmax of the row before.
    for (let j = 0; j + 1 < STEPS; j++) expect(r.decoderTokens[j + 1]).toBe(argmax(r.logits, j * V, V));
    expect(r.nextToken).toBe(argmax(r.logits, (STEPS - 1) * V, V));
    const ours = t5Forward(cfg, PROMPT, r.decoderTokens);
    const errs = Array.from({ length: STEPS }, (_, j) => nmse(r.logits.subarray(j * V, (j + 1) * V), Float32Array.from(ours.subarray(j * V, (j + 1) * V))));
    const top1 = errs.filter((_, j) => argmax(r.logits, j * V, V) === argmax(ours, j * V, V)).length;
    lines.push(`${preset}: llama.cpp vs float64 T5 over ${STEPS} steps: NMSE max ${Math.max(...errs).toExponential(2)}, top-1 ${top1}/${STEPS}; decoder tokens ${r.decoderTokens.slice(0, 8).join(',')}...`);
    expect(Math.max(...errs)).toBeLessThan(bound);
    expect(top1).toBe(STEPS);
  }, 120_000);

  it('cross-attention reads the prompt; a shorter run is the longer run\'s prefix; a Q8_0 file runs within its rounding', async () => {
    const V = refs.t5.nVocab;
    const other = await llamaT5Ref(file('t5'), OTHER, 1);
    const short = await llamaT5Ref(file('t5'), PROMPT, 8);
    writeModel({ config: getPreset('tiny-t5').config, fileType: 'Q8_0', seed: SEED, out: file('q8') });
    const q8 = await llamaT5Ref(file('q8'), PROMPT, 4);
    const moved = nmse(refs.t5.logits.subarray(0, V), other.logits.subarray(0, V));
    const q8err = nmse(refs.t5.logits.subarray(0, 4 * V), q8.logits);
    lines.push(`tiny-t5: another prompt moves step 0's logits by NMSE ${moved.toExponential(2)}; Q8_0 vs F32 over 4 steps ${q8err.toExponential(2)} (tokens ${q8.decoderTokens.join(',')})`);
    expect(moved).toBeGreaterThan(1e-3);
    expect(short.logits).toEqual(refs.t5.logits.subarray(0, 8 * V));
    expect(q8err).toBeLessThan(1e-2);
  }, 120_000);

  it('refusals: an encoder-only file, a token outside the vocabulary, no steps', async () => {
    writeModel({ config: getPreset('tiny-t5encoder').config, fileType: 'F32', seed: SEED, out: file('enc') });
    await expect(llamaT5Ref(file('enc'), PROMPT, 2)).rejects.toThrow(/is not an encoder-decoder model/);
    await expect(llamaT5Ref(file('t5'), [1, 1024], 2)).rejects.toThrow(/token 1024 at index 1 out of range \[0, 1024\)/);
    await expect(llamaT5Ref(file('t5'), [1], 0)).rejects.toThrow(/--steps must be >= 1/);
    await expect(llamaT5Ref(file('t5'), [], 2)).rejects.toThrow(/needs at least one prompt token/);
  }, 120_000);
});
