// Multiple-choice evaluation (llama-perplexity's --hellaswag and --winogrande): a task's shared
// start computed once and copied into each candidate's sequence, several tasks per pass, must give
// each candidate the same logits bits as computing it alone from an empty cache; and the scores
// built on them are llama-perplexity's.
import fs from 'node:fs';

import { evaluateChoiceTasks, sharedStart, type ChoiceRows } from './choice-eval';
import { hellaswagPick, hellaswagScore, multipleChoiceScore, parseHellaswag, parseWinogrande, selectHellaswag, winograndePick, winograndeScore } from './choice-scores';
import { EngineModel, planModel } from './model';
import { tempDir, writeTestModel } from '../testing';

const dir = tempDir('kail-choice-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const WORDS = 'the a man woman dog cat runs jumps over under quickly slowly red blue house river then and after before expert router token cache'.split(' ');
function words(rand: () => number, n: number): string {
  return Array.from({ length: n }, () => WORDS[rand() % WORDS.length]).join(' ');
}
function lcg(seed: number): () => number {
  let s = seed;
  return () => (s = (s * 1103515245 + 12345) >>> 0) >>> 8;
}

/** Rows from each candidate computed alone, all positions: what the shared evaluation must equal. */
async function aloneRows(m: EngineModel, cands: readonly (readonly number[])[]): Promise<ChoiceRows> {
  const all: Float32Array[] = [];
  for (const c of cands) {
    m.truncate(0, 0);
    all.push(await m.evaluate(0, c, 'all'));
    m.truncate(0, 0);
  }
  const nv = m.nVocab;
  return { prefix: sharedStart(cands), row: (c, pos) => all[c].subarray(pos * nv, (pos + 1) * nv) };
}

function sameBits(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

describe.each([
  ['tiny-qwen3moe', 'Q8_0'],
  ['tiny-deepseek2-lite', 'Q4_K'],
  ['tiny-gpt-oss', 'MXFP4'],
])('%s %s: candidates sharing their start', (preset, type) => {
  it('get the bits each computes alone, one task a pass or several, in memory or streamed', async () => {
    const file = writeTestModel(dir, preset, type);
    const rand = lcg(3);
    const probe = EngineModel.load(file, { threads: 2, nCtx: 64 });
    const tasks = Array.from({ length: 5 }, () => {
      const ctx = words(rand, 6 + (rand() % 5));
      return Array.from({ length: 4 }, () => probe.tokenizer.tokenize(`${ctx} ${words(rand, 1 + (rand() % 4))}`, { addSpecial: true }));
    });
    const want: ChoiceRows[] = [];
    try {
      for (const t of tasks) want.push(await aloneRows(probe, t));
    } finally {
      probe.close();
    }
    const check = async (opts: { nSeqMax: number; ramBytes?: number }, tokensPerPass: number) => {
      const m = EngineModel.load(file, { threads: 2, nCtx: 64, ...opts, ...(opts.ramBytes ? { ramReserveBytes: 0 } : {}) });
      try {
        const seen: number[] = [];
        const r = await evaluateChoiceTasks(m, tasks, {
          tokensPerPass,
          onTask: (i, rows) => {
            seen.push(i);
            expect(rows.prefix).toBe(want[i].prefix);
            tasks[i].forEach((cand, c) => {
              for (let pos = rows.prefix - 1; pos < cand.length; pos++) if (!sameBits(rows.row(c, pos), want[i].row(c, pos))) throw new Error(`task ${i} candidate ${c} position ${pos} differs`);
            });
          },
        });
        expect(seen).toEqual([0, 1, 2, 3, 4]);
        return r.groups;
      } finally {
        m.close();
      }
    };
    expect(await check({ nSeqMax: 4 }, 512)).toBe(5);
    // Twelve sequences: three tasks a pass.
    expect(await check({ nSeqMax: 12 }, 512)).toBe(2);
    // The token bound: a pass of the largest task's tokens holds one task.
    const need = Math.max(...tasks.map((t) => sharedStart(t) + t.reduce((a, c) => a + c.length - sharedStart(t), 0)));
    expect(await check({ nSeqMax: 12 }, need)).toBe(5);
    if (preset === 'tiny-qwen3moe') {
      const plan = planModel(file, { threads: 2, nCtx: 64, nSeqMax: 12, ramBytes: 2 ** 40, ramReserveBytes: 0 });
      expect(await check({ nSeqMax: 12, ramBytes: plan.fixedBytes + 3 * plan.nMoeLayers * plan.expertEntryBytes }, 512)).toBe(2);
    }
  }, 180_000);
});

describe("llama-perplexity's HellaSwag and Winogrande scores", () => {
  it('score a HellaSwag file: the picks are those of each ending computed alone, the run repeats', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0');
    const rand = lcg(11);
    const lines: string[] = [];
    for (let t = 0; t < 9; t++) lines.push(`Activity: ${words(rand, 8)}`, String(rand() % 4), ...Array.from({ length: 4 }, () => words(rand, 2 + (rand() % 6))));
    const all = parseHellaswag(lines.join('\n') + '\n');
    expect(all).toHaveLength(9);
    const m = EngineModel.load(file, { threads: 2, nCtx: 64, nSeqMax: 8 });
    try {
      const printed: string[] = [];
      const r = await hellaswagScore(m, all, 6, { tokensPerPass: 256, onTask: (_d, _n, line) => printed.push(line) });
      expect(r.tasks).toBe(6);
      expect(printed).toHaveLength(6);
      expect(printed[5]).toMatch(/^6\t\d+\.\d{8}%\t\[\d+\.\d{4}%, \d+\.\d{4}%\]$/);
      // The same tasks scored one by one, each ending alone.
      let correct = 0;
      for (const t of selectHellaswag(all, 6)) {
        const cands = t.endings.map((e) => m.tokenizer.tokenize(`${t.context} ${e}`, { addSpecial: true }));
        if (hellaswagPick(cands, await aloneRows(m, cands)).pick === t.gold) correct++;
      }
      expect(r.correct).toBe(correct);
      expect((await hellaswagScore(m, all, 6, { tokensPerPass: 64 })).correct).toBe(correct);
    } finally {
      m.close();
    }
  }, 120_000);

  it('score a Winogrande CSV: the picks are those of each option computed alone; lines it cannot read are counted', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0');
    const rand = lcg(5);
    const rows = ['index,sentence,option1,option2,answer'];
    for (let t = 0; t < 8; t++) {
      const s = t % 3 === 0 ? `"${words(rand, 4)}, _ ${words(rand, t % 2 ? 2 : 6)}."` : `${words(rand, 5)} _ ${words(rand, t % 2 ? 1 : 5)}.`;
      rows.push(`${t},${s},${WORDS[rand() % WORDS.length]},${WORDS[rand() % WORDS.length]} ${WORDS[rand() % WORDS.length]},${1 + (rand() % 2)}`);
    }
    rows.push('99,no blank here,a,b,1', '100,a _ b,x,y,3', 'broken line');
    const parsed = parseWinogrande(rows.join('\n') + '\n');
    expect(parsed.tasks).toHaveLength(8);
    expect(parsed.skipped.map((s) => s.line)).toEqual([1, 10, 11, 12]);
    expect(parsed.tasks[0].first).not.toContain('"');
    const m = EngineModel.load(file, { threads: 2, nCtx: 64, nSeqMax: 6 });
    try {
      const r = await winograndeScore(m, parsed, 0, { tokensPerPass: 256 });
      expect(r).toMatchObject({ tasks: 8, skippedLines: 4 });
      let correct = 0;
      for (const t of parsed.tasks) {
        const tok = (s: string) => m.tokenizer.tokenize(s, { addSpecial: true });
        const cands = [tok(t.first + t.choices[0] + t.second), tok(t.first + t.choices[1] + t.second)];
        const { result } = winograndePick(cands, [tok(t.first + t.choices[0]).length, tok(t.first + t.choices[1]).length], await aloneRows(m, cands));
        if (result === t.answer) correct++;
      }
      expect(r.correct).toBe(correct);
    } finally {
      m.close();
    }
  }, 120_000);

  it('score multiple-choice tasks of 2 to 6 answers: the picks are those of each answer computed alone; a task with more answers than sequences is named', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0');
    const rand = lcg(9);
    const tasks = Array.from({ length: 7 }, (_, i) => {
      const n = 2 + (i % 5);
      return { question: words(rand, 7), answers: Array.from({ length: n }, () => words(rand, 1 + (rand() % 5))), labels: Array.from({ length: n }, (_, a) => (a === i % n ? 1 : 0)) };
    });
    const m = EngineModel.load(file, { threads: 2, nCtx: 64, nSeqMax: 6 });
    try {
      const lines: string[] = [];
      const r = await multipleChoiceScore(m, tasks, { tokensPerPass: 6 * 64, onTask: (_d, _n, l) => lines.push(l) });
      expect(lines[6]).toMatch(/^7\t\d+\.\d{8}$/);
      let correct = 0;
      for (const t of tasks) {
        const cands = t.answers.map((a) => m.tokenizer.tokenize(`${t.question} ${a}`, { addSpecial: true }));
        if (t.labels[hellaswagPick(cands, await aloneRows(m, cands)).pick] === 1) correct++;
      }
      expect(r.correct).toBe(correct);
      expect(r.chance).toBeCloseTo(7 / tasks.reduce((a, t) => a + t.answers.length, 0), 12);
      const seven = { question: 'q', answers: Array.from({ length: 7 }, (_, a) => `a${a}`), labels: [1, 0, 0, 0, 0, 0, 0] };
      await expect(multipleChoiceScore(m, [seven], { tokensPerPass: 384 })).rejects.toThrow('task 1: 7 candidates need as many sequences; the model was loaded with 6 (-np)');
    } finally {
      m.close();
    }
  }, 120_000);
});
