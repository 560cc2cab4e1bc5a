// Reranking (llama.cpp's pooling rank, llama-server's /rerank) against llama.cpp's ranking
// context: a Qwen3-Reranker-shaped file (qwen3 with cls.output over the labels yes/no, pooling
// type 4) written by the project's writer, in F32 and Q8_0. kail's score of each prompt (the
// engine's rerank request: llama-server's format_prompt_rerank from a query and a document, the
// last token's final hidden state, the classification head, a softmax over the labels) is
// llama.cpp's for the same tokens. The same for a BERT cross-encoder (bge-reranker's form).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { LocalModelHost } from '@kailstream/engine';
import { engine as pb } from '@kailstream/proto';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaRankScores } from './llama-ref';

const PAIRS: [string, string][] = [
  ['what routes tokens to experts?', 'A router picks the top experts for each token.'],
  ['what routes tokens to experts?', 'The weather is mild in the spring.'],
  ['capital of France', 'Paris is the capital and largest city of France.'],
  ['capital of France', ''],
  ['', 'an empty query still scores'],
];

describe("reranking against llama.cpp's ranking context", () => {
  let dir: string;
  afterAll(() => dir && fs.rmSync(dir, { recursive: true, force: true }));

  async function kailScores(file: string, host: LocalModelHost, id: string): Promise<{ scores: number[][]; prompts: number[][] }> {
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id, threads: 2, contextLength: 256 }));
    const scores: number[][] = [];
    const prompts: number[][] = [];
    for (const [query, document] of PAIRS) {
      const req = pb.GenerateRequest.fromPartial({ requestId: `${id}-${scores.length}`, model: id, rerank: { query, document } });
      let emb: number[] = [];
      for await (const r of host.generate(req, new AbortController().signal)) if (r.embedding.length) emb = r.embedding;
      scores.push(emb);
      // The prompt the engine made (format_prompt_rerank): qwen2's vocabulary adds no BOS, EOS or SEP.
      const ids = (text: string) => host.tokenize(pb.TokenizeRequest.fromPartial({ model: id, text })).tokens;
      prompts.push([...ids(query), ...ids(document)]);
    }
    return { scores, prompts };
  }

  it.each(['F32', 'Q8_0'] as const)('%s: each pair scores as llama.cpp scores its tokens (softmax over yes/no, the first)', async (type) => {
    dir ??= fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-rerank-'));
    const file = path.join(dir, `rr-${type}.gguf`);
    writeModel({ config: getPreset('tiny-qwen3-reranker').config, fileType: type, seed: 11, out: file });
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256, loadOptions: { kvType: 'f32' } });
    try {
      const ours = await kailScores(file, host, 'rr');
      // (An empty query and document would be an empty prompt: llama.cpp scores those 0.)
      const ref = await llamaRankScores(file, ours.prompts, { timeoutMs: 120_000 });
      expect(ref.normalized).toBe(true);
      const lines: string[] = [];
      ours.scores.forEach((s, i) => {
        expect(s).toHaveLength(2);
        expect(s[0] + s[1]).toBeCloseTo(1, 6);
        lines.push(`${JSON.stringify(PAIRS[i])}: kail ${s[0].toFixed(6)}, llama.cpp ${ref.scores[i].toFixed(6)}`);
      });
      process.stdout.write(`\nRerank parity, ${type} (measured):\n${lines.join('\n')}\n`);
      ours.scores.forEach((s, i) => expect(Math.abs(s[0] - ref.scores[i])).toBeLessThan(1e-6));
      // The scores differ between pairs (the head reads the pair, not a constant).
      expect(new Set(ours.scores.map((s) => s[0].toFixed(4))).size).toBeGreaterThan(3);
    } finally {
      await host.close();
    }
  }, 300_000);

  // A cross-encoder (bge-reranker's form): the bert encoder, its [CLS] row through cls + tanh and
  // cls.output; llama-server answers the raw score, node-llama-cpp its sigmoid.
  it.each(['F32', 'Q8_0'] as const)('bert reranker %s: each pair scores as llama.cpp scores [CLS] query [SEP] document', async (type) => {
    dir ??= fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-rerank-'));
    const file = path.join(dir, `bert-rr-${type}.gguf`);
    writeModel({ config: getPreset('tiny-bert-reranker').config, fileType: type, seed: 11, out: file });
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256 });
    try {
      const ours = await kailScores(file, host, 'brr');
      // format_prompt_rerank for a WordPiece vocabulary: BOS ([CLS]) query SEP document.
      const prompts = ours.prompts.map((_, i) => {
        const ids = (text: string) => host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'brr', text, addSpecial: false })).tokens;
        return [2, ...ids(PAIRS[i][0]), 3, ...ids(PAIRS[i][1])];
      });
      const ref = await llamaRankScores(file, prompts, { timeoutMs: 120_000 });
      expect(ref.normalized).toBe(false);
      const lines: string[] = [];
      const diffs = ours.scores.map((s, i) => {
        expect(s).toHaveLength(1);
        const p = 1 / (1 + Math.exp(-s[0]));
        lines.push(`${JSON.stringify(PAIRS[i])}: kail ${s[0].toFixed(6)} (sigmoid ${p.toFixed(6)}), llama.cpp ${ref.scores[i].toFixed(6)}`);
        return Math.abs(p - ref.scores[i]);
      });
      process.stdout.write(`\nBERT rerank parity, ${type} (measured):\n${lines.join('\n')}\n`);
      // Pairs score to about 1e-6; where one of llama.cpp's last-bit differences from ours (F32
      // sums in another order, which depends on the CPU's SIMD width) flips a GELU table entry
      // or, in Q8_0, an activation's 8-bit rounding, a pair moves by up to 2.3e-5 (F32) / 2.9e-3
      // (Q8_0) (measured, seed 11: with AVX-512 3 of 5 F32 pairs under 1e-6, with AVX2 only 2,
      // the median 1e-6).
      const sorted = [...diffs].sort((a, b) => a - b);
      expect(sorted[Math.floor(sorted.length / 2)]).toBeLessThan(5e-6);
      for (const d of diffs) expect(d).toBeLessThan(type === 'F32' ? 1e-4 : 1e-2);
      expect(new Set(ours.scores.map((s) => s[0].toFixed(4))).size).toBeGreaterThan(3);
    } finally {
      await host.close();
    }
  }, 300_000);
});
