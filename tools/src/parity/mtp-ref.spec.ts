// The llama.cpp MTP oracle (mtp-ref) on tiny-deepseek3-mtp: llama.cpp loads the NextN block we
// write, runs it, and the oracle's outputs hold the contract documented in mtp-ref.cpp. This is
// what the engine's MTP forward is checked against, so its own numbers are checked here first.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { Deepseek2Config } from '../models/architectures/deepseek2';
import { generateTensorF32, writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaLogitsBatch } from './llama-ref';
import type { LlamaLogits } from './llama-ref';
import { nmse } from './metrics';
import { llamaMtpRef } from './mtp-ref';
import type { MtpRef } from './mtp-ref';

const SEED = 7;
const cfg = getPreset('tiny-deepseek3-mtp').config as Deepseek2Config;
const ownCfg: Deepseek2Config = { ...cfg, name: 'tiny-deepseek3-mtp-own', nextnOwnEmbeddings: true };
const N = 24;
const PREFIX = 13;
const TOKENS = Array.from({ length: N }, (_, i) => (i * 389 + 17) % cfg.vocabSize);

let dir: string;
const file = (name: string) => path.join(dir, `${name}.gguf`);
let full: MtpRef;
let prefix: MtpRef;
let own: MtpRef;
let chain: MtpRef;
const K = 3;
let ref: LlamaLogits;
let refBase: LlamaLogits;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-mtp-ref-'));
  writeModel({ config: cfg, fileType: 'F32', seed: SEED, out: file('mtp') });
  writeModel({ config: ownCfg, fileType: 'F32', seed: SEED, out: file('own') });
  writeModel({ config: getPreset('tiny-deepseek3').config, fileType: 'F32', seed: SEED, out: file('base') });
  full = await llamaMtpRef(file('mtp'), TOKENS);
  prefix = await llamaMtpRef(file('mtp'), TOKENS.slice(0, PREFIX));
  chain = await llamaMtpRef(file('mtp'), TOKENS, { draftSteps: K });
  own = await llamaMtpRef(file('own'), TOKENS);
  // node-llama-cpp loads without MTP (load_mtp false): the trunk alone.
  [ref, refBase] = await llamaLogitsBatch([{ model: file('mtp'), tokens: TOKENS }, { model: file('base'), tokens: TOKENS }], { kv: 'f32', flashAttention: 'off', threads: 2 });
}, 120_000);
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** y[r][v] = Σ_i W[v][i] x[r][i] for a ggml {nIn, nOut} weight. */
function matmulRows(w: Float32Array, nIn: number, x: Float32Array): Float32Array {
  const nOut = w.length / nIn;
  const rows = x.length / nIn;
  const y = new Float32Array(rows * nOut);
  for (let r = 0; r < rows; r++) {
    for (let v = 0; v < nOut; v++) {
      let s = 0;
      for (let i = 0; i < nIn; i++) s += w[v * nIn + i] * x[r * nIn + i];
      y[r * nOut + v] = s;
    }
  }
  return y;
}

const rows = (a: Float32Array, width: number, from: number, to: number) => a.subarray(from * width, to * width);
const rms = (a: Float32Array) => Math.sqrt(a.reduce((s, x) => s + x * x, 0) / a.length);
const argmax = (a: Float32Array) => a.reduce((b, x, i) => (x > a[b] ? i : b), 0);

describe('mtp-ref (llama.cpp MTP oracle) on tiny-deepseek3-mtp', () => {
  it('reports the model and writes finite rows of the documented sizes', () => {
    expect([full.nTokens, full.nVocab, full.nEmbd, full.nLayer, full.nLayerNextn]).toEqual([N, cfg.vocabSize, cfg.dim, cfg.nLayers, 1]);
    expect(full.tokens).toEqual(TOKENS);
    for (const [name, a, n] of [
      ['targetLogits', full.targetLogits, N * cfg.vocabSize], ['targetH', full.targetH, N * cfg.dim],
      ['mtpLogits', full.mtpLogits, N * cfg.vocabSize], ['mtpH', full.mtpH, N * cfg.dim],
      ['draftLogits', full.draftLogits, cfg.vocabSize], ['draftH', full.draftH, cfg.dim],
    ] as const) {
      expect([name, a.length, a.every(Number.isFinite)]).toEqual([name, n, true]);
    }
  });

  it("target logits are llama.cpp's plain logits for the same tokens, and the trunk is tiny-deepseek3's", () => {
    const e = nmse(full.targetLogits, ref.logits);
    process.stdout.write(`mtp-ref target logits vs llama-ref: NMSE ${e.toExponential(2)}\n`);
    expect(e).toBeLessThan(1e-10);
    // The same seed writes the same trunk, and llama.cpp (without MTP) skips the NextN block.
    expect(nmse(ref.logits, refBase.logits)).toBe(0);
  });

  it('h rows are what the LM head multiplies: logits = output.weight · h, for the target, every MTP row and the draft step', () => {
    const out = generateTensorF32(cfg, SEED, 'output.weight');
    const errs = [
      nmse(matmulRows(out, cfg.dim, full.targetH), full.targetLogits),
      nmse(matmulRows(out, cfg.dim, full.mtpH), full.mtpLogits),
      nmse(matmulRows(out, cfg.dim, full.draftH), full.draftLogits),
    ];
    process.stdout.write(`mtp-ref logits vs output·h: NMSE ${errs.map((x) => x.toExponential(2)).join(' ')}\n`);
    for (const e of errs) expect(e).toBeLessThan(1e-10);
  });

  it("the MTP block's outputs are well scaled, and they are its own (not the trunk's)", () => {
    // h rows come out of RMS norms with gains ~1; logits like the trunk's (std ~2).
    for (const h of [full.targetH, full.mtpH, full.draftH]) {
      expect(rms(h)).toBeGreaterThan(0.7);
      expect(rms(h)).toBeLessThan(1.4);
    }
    const ratio = rms(full.mtpLogits) / rms(full.targetLogits);
    expect(ratio).toBeGreaterThan(0.5);
    expect(ratio).toBeLessThan(2);
    expect(nmse(full.mtpLogits, full.targetLogits)).toBeGreaterThan(0.1);
    expect(nmse(full.draftLogits, rows(full.mtpLogits, cfg.vocabSize, N - 1, N))).toBeGreaterThan(0.1);
    expect(full.draftTokens).toEqual([argmax(rows(full.mtpLogits, cfg.vocabSize, N - 1, N))]);
    expect(full.draftPos).toBe(N);
  });

  it('is causal: a prefix run gives the same target and MTP rows', () => {
    const V = cfg.vocabSize;
    const D = cfg.dim;
    const diffs = [
      nmse(prefix.targetLogits, rows(full.targetLogits, V, 0, PREFIX)),
      nmse(prefix.targetH, rows(full.targetH, D, 0, PREFIX)),
      nmse(prefix.mtpLogits, rows(full.mtpLogits, V, 0, PREFIX)),
      nmse(prefix.mtpH, rows(full.mtpH, D, 0, PREFIX)),
    ];
    process.stdout.write(`mtp-ref prefix ${PREFIX}/${N} vs full: NMSE ${diffs.map((x) => x.toExponential(2)).join(' ')}\n`);
    for (const d of diffs) expect(d).toBeLessThan(1e-12);
    expect(prefix.draftTokens).toEqual([argmax(rows(full.mtpLogits, V, PREFIX - 1, PREFIX))]);
    expect(prefix.draftPos).toBe(PREFIX);
  });

  it('chained draft steps: each takes the argmax of the step before; step 0 is the single-step run', () => {
    const V = cfg.vocabSize;
    expect(chain.draftLogits.length).toBe(K * V);
    expect(chain.draftH.length).toBe(K * cfg.dim);
    expect(nmse(rows(chain.draftLogits, V, 0, 1), full.draftLogits)).toBe(0);
    expect(chain.draftTokens[0]).toBe(full.draftTokens[0]);
    for (let j = 1; j < K; j++) {
      expect(chain.draftTokens[j]).toBe(argmax(rows(chain.draftLogits, V, j - 1, j)));
      expect(nmse(rows(chain.draftLogits, V, j, j + 1), rows(chain.draftLogits, V, j - 1, j))).toBeGreaterThan(0.1);
    }
    expect(chain.draftLogits.every(Number.isFinite)).toBe(true);
    expect(nmse(chain.mtpLogits, full.mtpLogits)).toBe(0);
  });

  it('a block with its own nextn.embed_tokens and nextn.shared_head_head uses them', () => {
    const head = generateTensorF32(ownCfg, SEED, `blk.${cfg.nLayers}.nextn.shared_head_head.weight`);
    expect(nmse(matmulRows(head, cfg.dim, own.mtpH), own.mtpLogits)).toBeLessThan(1e-10);
    // Same trunk, different MTP inputs (own embedding) and head.
    expect(nmse(own.targetLogits, full.targetLogits)).toBe(0);
    expect(nmse(own.mtpLogits, full.mtpLogits)).toBeGreaterThan(0.1);
  });

  it('refuses files without MTP layers, trunk-only NextN files and missing paths, naming the problem', async () => {
    await expect(llamaMtpRef(file('base'), [1, 2])).rejects.toThrow(/has no MTP layers \(deepseek2\.nextn_predict_layers is absent\)/);
    // glm4moe-qknorm counts one NextN block in block_count but carries no tensors for it.
    writeModel({ config: getPreset('tiny-glm4moe-qknorm').config, fileType: 'F32', seed: SEED, out: file('trunk-only') });
    await expect(llamaMtpRef(file('trunk-only'), [1, 2])).rejects.toThrow(/does not carry them \(no blk\.3\.nextn\.eh_proj\.weight\)/);
    await expect(llamaMtpRef(path.join(dir, 'missing.gguf'), [1, 2])).rejects.toThrow(/cannot open model .*missing\.gguf/);
    await expect(llamaMtpRef(file('mtp'), [cfg.vocabSize])).rejects.toThrow(/token 1024 at index 0 out of range \[0, 1024\)/);
    await expect(llamaMtpRef(file('mtp'), [1], { draftSteps: 0 })).rejects.toThrow(/--draft-steps must be >= 1/);
  });
});
