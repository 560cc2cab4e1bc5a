#!/usr/bin/env node
// Prefix reuse benchmark: time to first token of a chat's second turn, whose prompt is the first
// turn's prompt, its answer and a few new tokens, on a BatchEngine with prefix reuse on and off
// (alternating, --reps times each), and whether both give the same tokens; then of another
// conversation that shares the first prompt's start but for its last --diverge tokens (a shared
// system prompt: its cache rows are copied from the first conversation's slot). Not a test: run
// by hand after a build,
//   node tools/dist/bench/prefix-bench.js --model FILE [--ctx 1000] [--extra 24] [--tg 16] [--threads 2] [--reps 2] [--diverge 100]
// Prompts are random token ids (seeded), decoding is greedy; prints a markdown table.
import os from 'node:os';
import path from 'node:path';

import { BatchEngine, EngineModel } from '@kailstream/engine';
import { benchArgs } from './args';

async function run(e: BatchEngine, prompt: number[], tg: number) {
  const t0 = performance.now();
  let tFirst = 0;
  let cached = 0;
  const tokens: number[] = [];
  for await (const c of e.generate({ id: `p${Math.random()}`, prompt, maxTokens: tg, sampling: { temperature: 0 }, ignoreEog: true })) {
    if (c.tokens.length && !tFirst) tFirst = performance.now();
    tokens.push(...c.tokens);
    if (c.finish) cached = c.finish.cachedPromptTokens;
  }
  return { ttftMs: tFirst - t0, tokens, cached };
}

async function main() {
  const values = benchArgs('prefix-bench', {
    model: { type: 'string' },
    ctx: { type: 'string', default: '1000' },
    extra: { type: 'string', default: '24' },
    tg: { type: 'string', default: '16' },
    threads: { type: 'string', default: '2' },
    reps: { type: 'string', default: '2' },
    diverge: { type: 'string', default: '100' },
  });
  if (!values.model) throw new Error('--model FILE is required');
  const [n1, extraN, tg, threads, reps] = [values.ctx, values.extra, values.tg, values.threads, values.reps].map(Number);
  const model = EngineModel.load(values.model, { threads, nCtx: n1 + tg + extraN + 64, nSeqMax: 2, kvType: 'f16' });
  let s = 11;
  const rnd = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) % model.nVocab;
  const turn1 = Array.from({ length: n1 }, rnd);
  const extra = Array.from({ length: extraN }, rnd);
  const rows: string[] = [];
  const otherRows: string[] = [];
  const answers = new Map<boolean, string>();
  const otherAnswers = new Map<boolean, string>();
  const diverge = Math.min(n1 - 1, Number(values.diverge));
  const other = [...turn1.slice(0, n1 - diverge), ...Array.from({ length: diverge + extraN }, rnd)];
  for (let r = 0; r < reps; r++) {
    for (const reuse of [true, false]) {
      const e = new BatchEngine(model, { reusePrefix: reuse });
      const a = await run(e, turn1, tg);
      const turn2 = [...turn1, ...a.tokens, ...extra];
      const b = await run(e, turn2, tg);
      // The turn-2 request left its slot; the other conversation takes the empty one.
      const o = await run(e, other, tg);
      await e.close();
      otherAnswers.set(reuse, o.tokens.join(','));
      otherRows.push(`| ${reuse ? 'on' : 'off'} | ${n1 - diverge} | ${other.length} | ${o.cached} | ${o.ttftMs.toFixed(0)} |`);
      for (let q = 0; q < model.nSeqMax; q++) model.truncate(q, 0);
      answers.set(reuse, b.tokens.join(','));
      rows.push(`| ${reuse ? 'on' : 'off'} | ${turn1.length} | ${a.ttftMs.toFixed(0)} | ${turn2.length} | ${b.cached} | ${b.ttftMs.toFixed(0)} |`);
    }
  }
  model.close();
  const same = answers.get(true) === answers.get(false) && otherAnswers.get(true) === otherAnswers.get(false);
  const cpu = os.cpus()[0]?.model.replace(/\s+/g, ' ').trim() ?? 'unknown CPU';
  process.stdout.write(
    [
      `Measured ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC on ${cpu}, ${os.cpus().length} logical CPUs, ${threads} threads; model ${path.basename(values.model)}, KV f16, greedy, ${tg} generated tokens per turn, random prompt tokens.`,
      `Second-turn and other-conversation answers with and without reuse: ${same ? 'identical' : 'DIFFERENT'}.`,
      '',
      '| prefix reuse | turn 1 prompt tokens | turn 1 TTFT ms | turn 2 prompt tokens | turn 2 cached tokens | turn 2 TTFT ms |',
      '|---|---|---|---|---|---|',
      ...rows,
      '',
      'Another conversation sharing the first prompt\'s start (copied from its slot with reuse on):',
      '',
      '| prefix reuse | shared start tokens | prompt tokens | cached tokens | TTFT ms |',
      '|---|---|---|---|---|',
      ...otherRows,
    ].join('\n') + '\n',
  );
  if (!same) process.exitCode = 1;
}

main().catch((e) => {
  process.stderr.write(`prefix-bench: ${(e as Error).stack ?? e}\n`);
  process.exit(1);
});
