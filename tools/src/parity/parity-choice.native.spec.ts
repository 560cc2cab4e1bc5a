// `kail perplexity --hellaswag / --winogrande` against llama.cpp: the scores llama-perplexity gives
// each candidate come from the logits of the candidate's tokens. kail computes a task's shared start
// once and copies it into each candidate's sequence, several tasks a pass; llama.cpp here computes
// each candidate alone. The same scoring (choice-scores.ts) on both engines' logits must give the
// same picks and scores that agree to float rounding.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';
import { evaluateChoiceTasks, hellaswagPick, sharedStart, winograndePick, type ChoiceRows } from '@kailstream/engine/core';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaLogitsBatch } from './llama-ref';
import { tokenIds } from './metrics';

const PRESETS = ['tiny-qwen3moe', 'tiny-deepseek2-lite'];

describe("multiple-choice scores (llama-perplexity's HellaSwag and Winogrande) against llama.cpp's logits", () => {
  let dir: string;
  const table: string[] = [];
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-choice-'));
  });
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nMultiple-choice scores, kail vs llama.cpp (measured; 12 HellaSwag-shaped and 12 Winogrande-shaped tasks of random tokens):\n${table.join('\n')}\n`);
  });

  it.each(PRESETS)('%s: the same picks, scores within float rounding', async (p) => {
    const file = path.join(dir, `${p}.gguf`);
    writeModel({ config: getPreset(p).config, fileType: 'F16', seed: 4, out: file });
    const m = EngineModel.load(file, { threads: 2, nCtx: 64, nSeqMax: 8 });
    try {
      const nv = m.nVocab;
      const bosId = m.tokenizer.vocab.special.bos;
      const bos: number[] = m.tokenizer.vocab.addBos && bosId !== null ? [bosId] : [];
      let seed = 100;
      const toks = (n: number) => tokenIds(n, nv, seed++, 3);
      // HellaSwag-shaped: a context, four endings of 1-8 tokens.
      const hs = Array.from({ length: 12 }, (_, t) => {
        const ctx = [...bos, ...toks(6 + (t % 7))];
        return [0, 1, 2, 3].map((e) => [...ctx, ...toks(1 + ((t + 3 * e) % 8))]);
      });
      // Winogrande-shaped: a start, an option of 1-2 tokens, then a common end of 1-6 tokens
      // (short ends keep the option in the score, long ones leave it out).
      const wgBases: number[][] = [];
      const wg = Array.from({ length: 12 }, (_, t) => {
        const start = [...bos, ...toks(5)];
        const end = toks(1 + (t % 6));
        const opts = [toks(1 + (t % 2)), toks(2 - (t % 2))];
        wgBases.push(opts.map((o) => start.length + o.length));
        return opts.map((o) => [...start, ...o, ...end]);
      });
      const kailRows = async (tasks: number[][][]) => {
        const out: { prefix: number; rows: Float32Array[][] }[] = [];
        await evaluateChoiceTasks(m, tasks, {
          tokensPerPass: 512,
          onTask: (i, r) => out.push({ prefix: r.prefix, rows: tasks[i].map((c, ci) => c.map((_, pos) => (pos >= r.prefix - 1 ? r.row(ci, pos).slice() : new Float32Array(0)))) }),
        });
        return out.map((o): ChoiceRows => ({ prefix: o.prefix, row: (c, pos) => o.rows[c][pos] }));
      };
      const ours = { hs: await kailRows(hs), wg: await kailRows(wg) };
      const jobs = [...hs.flat(), ...wg.flat()].map((tokens) => ({ model: file, tokens }));
      const runs = await llamaLogitsBatch(jobs, { ctx: 64, timeoutMs: 240_000 });
      let k = 0;
      const refRows = (tasks: number[][][]): ChoiceRows[] =>
        tasks.map((t) => {
          const logits = t.map(() => runs[k++].logits);
          return { prefix: sharedStart(t), row: (c, pos) => logits[c].subarray(pos * nv, (pos + 1) * nv) };
        });
      const ref = { hs: refRows(hs), wg: refRows(wg) };
      let maxDiff = 0;
      const hsPicks = hs.map((t, i) => {
        const a = hellaswagPick(t, ours.hs[i]);
        const b = hellaswagPick(t, ref.hs[i]);
        a.scores.forEach((x, j) => (maxDiff = Math.max(maxDiff, Math.abs(x - b.scores[j]))));
        return [a.pick, b.pick];
      });
      const wgPicks = wg.map((t, i) => {
        const a = winograndePick(t, wgBases[i], ours.wg[i]);
        const b = winograndePick(t, wgBases[i], ref.wg[i]);
        maxDiff = Math.max(maxDiff, Math.abs(a.score1 - b.score1), Math.abs(a.score2 - b.score2));
        return [a.result, b.result];
      });
      table.push(`  ${p.padEnd(22)} HellaSwag picks equal ${hsPicks.filter(([a, b]) => a === b).length}/12, Winogrande ${wgPicks.filter(([a, b]) => a === b).length}/12, largest score difference ${maxDiff.toExponential(2)}`);
      expect(hsPicks.map(([a]) => a)).toEqual(hsPicks.map(([, b]) => b));
      expect(wgPicks.map(([a]) => a)).toEqual(wgPicks.map(([, b]) => b));
      expect(maxDiff).toBeLessThan(5e-3);
      // The picks are not all one answer: the scores decide.
      expect(new Set(hsPicks.map(([a]) => a)).size).toBeGreaterThan(1);
    } finally {
      m.close();
    }
  }, 300_000);
});
