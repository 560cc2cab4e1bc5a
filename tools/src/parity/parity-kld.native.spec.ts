// `kail perplexity --kl-divergence` against llama.cpp: a base file saved by kail from an F16 model,
// then the KL divergence of its Q4_K_M quantization, must give what llama-perplexity's arithmetic
// gives on llama.cpp's own logits of both models over the same chunks (the first token replaced by
// BOS where the vocabulary adds one, the second half compared). The two engines' logits differ by
// float rounding, so the statistics agree closely, not bit for bit.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';
import { encodeLogProbs, KldAccumulator, klDivergence, kldStats, logProbWords, perplexity, scoredPerChunk } from '@kailstream/engine/core';

import { quantizeModel } from '../gguf/quantize';
import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaLogitsBatch } from './llama-ref';
import { tokenIds } from './metrics';

// Routed experts (top-k softmax) and MLA with shared experts.
const PRESETS = ['tiny-qwen3moe', 'tiny-deepseek2-lite'];

describe("kail's KL divergence against llama-perplexity's arithmetic on llama.cpp's logits", () => {
  let dir: string;
  const table: string[] = [];
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-kld-'));
  });
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nKL divergence of Q4_K_M from F16 (measured; 3 chunks of 64 random tokens, 93 positions):\n${table.join('\n')}\n`);
  });

  it.each(PRESETS)('%s: KLD, same-top share and PPL ratio agree with llama.cpp\'s', async (p) => {
    const base = path.join(dir, `${p}-f16.gguf`);
    const quant = path.join(dir, `${p}-q4_k_m.gguf`);
    writeModel({ config: getPreset(p).config, fileType: 'F16', seed: 4, out: base });
    quantizeModel(base, quant, { type: 'Q4_K_M', threads: 2 });
    const nCtx = 64;
    const nChunk = 3;
    const kld = path.join(dir, `${p}.kld`);
    const opts = { threads: 2, kvType: 'f32' as const, nCtx };
    const mb = EngineModel.load(base, opts);
    let tokens: number[];
    let bos: number | null;
    try {
      tokens = tokenIds(nChunk * nCtx, mb.nVocab, 11, 3);
      bos = mb.tokenizer.vocab.addBos ? mb.tokenizer.vocab.special.bos : null;
      await perplexity(mb, tokens, { nCtx, saveLogits: kld });
    } finally {
      mb.close();
    }
    const mq = EngineModel.load(quant, opts);
    let ours: Awaited<ReturnType<typeof klDivergence>>;
    try {
      ours = await klDivergence(mq, kld);
    } finally {
      mq.close();
    }

    // llama.cpp: both models' logits on the same chunks, through the same arithmetic.
    const chunks = Array.from({ length: nChunk }, (_, i) => {
      const c = tokens.slice(i * nCtx, (i + 1) * nCtx);
      if (bos !== null) c[0] = bos;
      return c;
    });
    const runs = await llamaLogitsBatch([...chunks.map((c) => ({ model: base, tokens: c })), ...chunks.map((c) => ({ model: quant, tokens: c }))], { ctx: nCtx, timeoutMs: 240_000 });
    const nVocab = runs[0].nVocab;
    const words = new Uint16Array(logProbWords(nVocab));
    const acc = new KldAccumulator();
    const first = nCtx / 2;
    for (let c = 0; c < nChunk; c++) {
      const lb = runs[c].logits;
      const lq = runs[nChunk + c].logits;
      for (let j = first; j < first + scoredPerChunk(nCtx); j++) {
        encodeLogProbs(lb.subarray(j * nVocab, (j + 1) * nVocab), chunks[c][j + 1], words);
        acc.add(lq.subarray(j * nVocab, (j + 1) * nVocab), words, chunks[c][j + 1]);
      }
    }
    const ref = kldStats(acc);
    const s = ours.stats;
    table.push(
      `  ${p.padEnd(22)} mean KLD kail ${s.kld.value.toFixed(6)} llama.cpp ${ref.kld.value.toFixed(6)} | same top ${(100 * s.sameTop.value).toFixed(2)}% vs ${(100 * ref.sameTop.value).toFixed(2)}%` +
        ` | PPL(Q)/PPL(base) ${s.pplRatio.value.toFixed(5)} vs ${ref.pplRatio.value.toFixed(5)} | 99% KLD ${s.kldPercentiles['99.0%'].toFixed(5)} vs ${ref.kldPercentiles['99.0%'].toFixed(5)}`,
    );
    expect(s.positions).toBe(nChunk * scoredPerChunk(nCtx));
    expect(ref.positions).toBe(s.positions);
    // Quantization moved the distributions: this is a difference worth measuring, not rounding.
    expect(ref.kld.value).toBeGreaterThan(1e-3);
    expect(Math.abs(s.kld.value / ref.kld.value - 1)).toBeLessThan(0.02);
    expect(Math.abs(s.kldPercentiles['99.0%'] / ref.kldPercentiles['99.0%'] - 1)).toBeLessThan(0.08);
    expect(Math.abs(s.sameTop.value - ref.sameTop.value) * s.positions).toBeLessThanOrEqual(2);
    expect(Math.abs(s.pplRatio.value / ref.pplRatio.value - 1)).toBeLessThan(5e-3);
    expect(Math.abs(s.pplBase.value / ref.pplBase.value - 1)).toBeLessThan(5e-3);
    expect(Math.abs(s.rmsDp.value / ref.rmsDp.value - 1)).toBeLessThan(0.05);
  }, 300_000);
});
