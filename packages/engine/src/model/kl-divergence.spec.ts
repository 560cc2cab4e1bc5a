// llama-perplexity's KL-divergence arithmetic against plain float64 math: the u16 log-probability
// rows of the base file, each position's KLD, Δp and top token, the summary statistics, and the
// file's layout and the errors for a file that is not one.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { BaseLogitsWriter, KldAccumulator, decodeLogProb, encodeLogProbs, kldStats, logProbWords, openBaseLogits, readBaseChunk, scoredPerChunk } from './kl-divergence';

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

function logSoftmax64(row: Float32Array): Float64Array {
  let max = -Infinity;
  for (const x of row) max = Math.max(max, x);
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  const lse = max + Math.log(sum);
  return Float64Array.from(row, (x) => x - lse);
}

function randomRow(n: number, rand: () => number, spread = 8): Float32Array {
  return Float32Array.from({ length: n }, () => (rand() - 0.5) * spread + (rand() < 0.01 ? 6 : 0));
}

describe('KL divergence arithmetic (llama-perplexity --kl-divergence)', () => {
  it('stores each log-probability within half a step of the exact one; the bottom of the 16-nat range as its floor', () => {
    const rand = rng(1);
    for (const n of [1000, 1001]) {
      const row = randomRow(n, rand, 40);
      const words = new Uint16Array(logProbWords(n));
      expect(words.length).toBe(2 * Math.floor((n + 1) / 2) + 4);
      const nll = encodeLogProbs(row, 7, words);
      const exact = logSoftmax64(row);
      expect(nll).toBeCloseTo(-exact[7], 4);
      const scale = new Float32Array(words.buffer, 0, 2)[0];
      const top = Math.max(...exact);
      for (let i = 0; i < n; i++) {
        const got = decodeLogProb(words, i);
        if (exact[i] > top - 16) expect(Math.abs(got - exact[i])).toBeLessThanOrEqual(scale / 2 + 1e-4);
        else expect(got).toBeCloseTo(top - 16, 3);
      }
    }
    // A flat row: scale 0, every word 0, every log-probability -log(n).
    const flat = new Float32Array(64).fill(3);
    const w = new Uint16Array(logProbWords(64));
    encodeLogProbs(flat, 0, w);
    expect(new Float32Array(w.buffer, 0, 2)[0]).toBe(0);
    expect(decodeLogProb(w, 5)).toBeCloseTo(-Math.log(64), 5);
  });

  it("gives each position's KLD, Δp and top token as float64 math does from the stored base", () => {
    const rand = rng(2);
    const n = 2000;
    const acc = new KldAccumulator();
    let sameTop = 0;
    for (let k = 0; k < 40; k++) {
      const base = randomRow(n, rand);
      const model = Float32Array.from(base, (x) => x + (rand() - 0.5) * 0.6);
      const words = new Uint16Array(logProbWords(n));
      const tok = Math.floor(rand() * n);
      encodeLogProbs(base, tok, words);
      acc.add(model, words, tok);
      const q = logSoftmax64(model);
      let kld = 0;
      let pb = 0;
      let argBase = 0;
      for (let i = 0; i < n; i++) {
        const lb = decodeLogProb(words, i);
        if (lb > -16) kld += Math.exp(lb) * (lb - q[i]);
        if (lb > decodeLogProb(words, argBase)) argBase = i;
        if (i === tok) pb = Math.exp(lb);
      }
      const argModel = model.indexOf(Math.max(...model));
      if (argModel === argBase) sameTop++;
      expect(acc.kld[k]).toBeCloseTo(kld, 5);
      expect(acc.pDiff[k]).toBeCloseTo(Math.exp(q[tok]) - pb, 6);
    }
    expect(acc.count).toBe(40);
    expect(acc.nSameTop).toBe(sameTop);
    const s = kldStats(acc);
    const mean = acc.kld.reduce((a, b) => a + b, 0) / 40;
    expect(s.kld.value).toBeCloseTo(mean, 6);
    expect(s.kld.error).toBeGreaterThan(0);
    expect(s.sameTop.value).toBe(sameTop / 40);
    const sorted = [...acc.kld].sort((a, b) => a - b);
    expect(s.kldPercentiles.max).toBe(sorted[39]);
    expect(s.kldPercentiles.min).toBe(sorted[0]);
    expect(s.kldPercentiles.median).toBeCloseTo((sorted[19] + sorted[20]) / 2, 6);
    // llama.cpp's percentile: linear between the neighbours of fraction x (count - 1).
    expect(s.kldPercentiles['90.0%']).toBeCloseTo(sorted[35] + 0.1 * (sorted[36] - sorted[35]), 5);
    expect(s.pplRatio.value).toBeCloseTo(Math.exp(s.lnPplRatio.value), 9);
  });

  it('a model against its own base: KLD within rounding of 0, the same top token everywhere', () => {
    const rand = rng(3);
    const acc = new KldAccumulator();
    for (let k = 0; k < 20; k++) {
      const row = randomRow(500, rand);
      const words = new Uint16Array(logProbWords(500));
      encodeLogProbs(row, k, words);
      acc.add(row, words, k);
    }
    const s = kldStats(acc);
    expect(Math.abs(s.kld.value)).toBeLessThan(1e-5);
    expect(s.sameTop.value).toBe(1);
    expect(Math.abs(s.ppl.value / s.pplBase.value - 1)).toBeLessThan(1e-4);
  });

  it('writes the file as llama.cpp lays it out and reads it back; refuses files that are not one', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-kld-'));
    try {
      const file = path.join(dir, 'base.kld');
      const nCtx = 16;
      const nVocab = 33;
      const tokens = Array.from({ length: 40 }, (_, i) => i % nVocab);
      const w = new BaseLogitsWriter(file, nCtx, nVocab, 2, tokens);
      const rand = rng(4);
      const rows = scoredPerChunk(nCtx);
      expect(rows).toBe(7);
      const logits = [0, 1].map(() => Float32Array.from({ length: (rows + 1) * nVocab }, () => rand() * 4));
      for (const l of logits) w.addChunk(l, tokens.slice(0, rows));
      w.close();
      expect(w.complete).toBe(true);
      const buf = fs.readFileSync(file);
      expect(buf.toString('latin1', 0, 8)).toBe('_logits_');
      expect([buf.readUInt32LE(8), buf.readInt32LE(12), buf.readInt32LE(16)]).toEqual([16, 33, 2]);
      expect(buf.readInt32LE(20 + 4 * 17)).toBe(17);
      const words = logProbWords(nVocab);
      expect(buf.length).toBe(20 + 4 * 32 + 2 * rows * words * 2);
      const f = openBaseLogits(file);
      expect(f).toMatchObject({ nCtx: 16, nVocab: 33, nChunk: 2 });
      expect(Array.from(f.tokens)).toEqual(tokens.slice(0, 32));
      const fd = fs.openSync(file, 'r');
      const chunk1 = readBaseChunk(f, fd, 1);
      fs.closeSync(fd);
      const want = new Uint16Array(words);
      encodeLogProbs(logits[1].subarray(2 * nVocab, 3 * nVocab), tokens[2], want);
      expect(chunk1.subarray(2 * words, 3 * words)).toEqual(want);
      // Damaged or foreign files.
      const bad = path.join(dir, 'bad.kld');
      fs.writeFileSync(bad, buf.subarray(0, buf.length - 3));
      expect(() => openBaseLogits(bad)).toThrow(/bad\.kld is \d+ bytes; 2 chunks of 16 tokens over a vocabulary of 33 make \d+ \(cut short\)/);
      fs.writeFileSync(bad, Buffer.concat([buf, Buffer.alloc(2)]));
      expect(() => openBaseLogits(bad)).toThrow(/extra bytes/);
      fs.writeFileSync(bad, Buffer.from('GGUF and then some bytes of a model'));
      expect(() => openBaseLogits(bad)).toThrow(/does not look like a file of base log-probabilities/);
      const zero = Buffer.from(buf);
      zero.writeInt32LE(0, 16);
      fs.writeFileSync(bad, zero);
      expect(() => openBaseLogits(bad)).toThrow(/impossible header \(n_ctx 16, n_vocab 33, n_chunk 0\)/);
      expect(() => openBaseLogits(path.join(dir, 'none.kld'))).toThrow(/cannot open the base logits/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
