// The lightning_attn op (MiniMax-01's linear attention) against a straightforward reference in
// double precision: per head a head_dim x head_dim state S, per token S = exp(-slope_h x
// slope_scale) S + k^T v and out = q S, with llama.cpp's slopes (start = 2^(-2^-(log2 H - 3)),
// slope_h = start^(h + 1)) and q, k, v through SiLU first. A program of its own feeds the op rows
// given with the batch (the input op) and returns its output as the hidden buffer; one pass of a
// prompt, token by token, and two sequences in one pass must each give the reference.
import fs from 'node:fs';

import type { ModelProgram } from '@kailstream/core-native';

import { native } from '../native';
import { tempDir, writeTestModel } from '../testing';

const dir = tempDir('kail-lightning-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const H = 8;
const D = 64;
const SCALE = 0.37;

function program(silu: boolean, withState = H * D * D): ModelProgram {
  // (The logits come from attn_output of the file, [H D, n_embd]: any matrix H D wide would do.)
  return {
    buffers: [
      { name: 'in', width: 3 * H * D, outRows: false },
      { name: 'la', width: H * D, outRows: false },
      { name: 'last', width: H * D, outRows: true },
      { name: 'logits', width: 256, outRows: true },
    ],
    ops: [
      { op: 'input', out: 0 },
      { op: 'lightning_attn', out: 1, a: 0, params: { layer: 0, n_head: H, head_dim: D, slope_scale: SCALE, silu: silu ? 1 : 0 } },
      { op: 'gather_out', out: 2, a: 1 },
      { op: 'matmul', out: 3, a: 2, weights: { weight: 'blk.0.attn_output.weight' } },
    ],
    logits: 3,
    hidden: 1,
    kvKWidth: [],
    kvVWidth: [],
    rsWidth: [withState],
    nMoeLayers: 0,
    nExpert: 0,
  };
}

/** Reference outputs (H D per token) of one sequence's rows. */
function reference(rows: Float32Array[], silu: boolean): Float64Array[] {
  const start = Math.pow(2, -Math.pow(2, -(Math.log2(H) - 3)));
  const S = Array.from({ length: H }, () => new Float64Array(D * D)); // [k dim i][v dim j]
  const f = (x: number) => (silu ? x / (1 + Math.exp(-x)) : x);
  return rows.map((a) => {
    const out = new Float64Array(H * D);
    for (let h = 0; h < H; h++) {
      const decay = Math.exp(-Math.pow(start, h + 1) * SCALE);
      const q = (i: number) => f(a[h * 3 * D + i]);
      const k = (i: number) => f(a[h * 3 * D + D + i]);
      const v = (j: number) => f(a[h * 3 * D + 2 * D + j]);
      const s = S[h];
      for (let i = 0; i < D; i++) for (let j = 0; j < D; j++) s[i * D + j] = decay * s[i * D + j] + k(i) * v(j);
      for (let j = 0; j < D; j++) {
        let sum = 0;
        for (let i = 0; i < D; i++) sum += q(i) * s[i * D + j];
        out[h * D + j] = sum;
      }
    }
    return out;
  });
}

function rowsOf(n: number, seed: number): Float32Array[] {
  let x = seed >>> 0;
  const rnd = () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return (x / 2 ** 32) * 4 - 2;
  };
  return Array.from({ length: n }, () => Float32Array.from({ length: 3 * H * D }, rnd));
}

/** Largest difference relative to the reference's largest magnitude. */
function relErr(got: Float32Array, want: Float64Array): number {
  let d = 0;
  let m = 0;
  for (let i = 0; i < want.length; i++) {
    d = Math.max(d, Math.abs(got[i] - want[i]));
    m = Math.max(m, Math.abs(want[i]));
  }
  return d / m;
}

describe('lightning_attn', () => {
  let file: string;
  beforeAll(() => {
    file = writeTestModel(dir, 'tiny-minimax-01-interval', 'F32');
  }, 60_000);

  it.each([true, false])('matches the reference in one pass, token by token and beside another sequence (silu %s)', async (silu) => {
    const rt = new (native().Model)(file, program(silu), { threads: 2, nCtx: 64, nSeqMax: 2, kvType: 0, kvTypeV: 0 });
    try {
      const n = 12;
      const a = rowsOf(n, 1);
      const b = rowsOf(5, 2);
      const want = reference(a, silu);
      const pass = async (rows: Float32Array[], pos: number[], seq: number[]) => {
        const embd = new Float32Array(rows.length * 3 * H * D);
        rows.forEach((r, i) => embd.set(r, i * 3 * H * D));
        const r = await rt.forward({ tokens: new Int32Array(rows.length), pos: Int32Array.from(pos), seq: Int32Array.from(seq), output: new Uint8Array(rows.length).fill(1), embd, hidden: true });
        return Array.from({ length: rows.length }, (_, i) => r.hidden.subarray(i * H * D, (i + 1) * H * D));
      };
      const whole = await pass(a, [...Array(n).keys()], new Array(n).fill(0));
      for (let t = 0; t < n; t++) expect(relErr(whole[t], want[t])).toBeLessThan(1e-5);
      // The state grows with the prompt (no normalization): its outputs are not all alike.
      expect(relErr(whole[0], want[n - 1])).toBeGreaterThan(0.1);
      rt.seqTruncate(0, 0);
      for (let t = 0; t < n; t++) expect(Array.from((await pass([a[t]], [t], [0]))[0])).toEqual(Array.from(whole[t]));
      // Sequence 1's rows between sequence 0's: each keeps its own state.
      rt.seqTruncate(0, 0);
      const wantB = reference(b, silu);
      const mixed = await pass([a[0], b[0], a[1], b[1], b[2]], [0, 0, 1, 1, 2], [0, 1, 0, 1, 1]);
      expect(relErr(mixed[0], want[0])).toBeLessThan(1e-5);
      expect(relErr(mixed[2], want[1])).toBeLessThan(1e-5);
      for (const [i, t] of [[1, 0], [3, 1], [4, 2]]) expect(relErr(mixed[i], wantB[t])).toBeLessThan(1e-5);
    } finally {
      rt.close();
    }
  }, 60_000);

  it('refuses a state or an input that is not of its heads', () => {
    const load = (p: ModelProgram) => new (native().Model)(file, p, { threads: 1, nCtx: 16 }).close();
    expect(() => load(program(true, H * D * D + 1))).toThrow(/lightning_attn\): the recurrent layer's width is not n_head x head_dim\^2/);
    const narrow = program(true);
    narrow.ops[1].params!.head_dim = 32;
    expect(() => load(narrow)).toThrow(/q\|k\|v input is 1536 wide, expected 768/);
    const nan = program(true);
    nan.ops[1].params!.slope_scale = -1;
    expect(() => load(nan)).toThrow(/slope_scale -1\.0+ is not a finite non-negative number/);
  });
});
