// `kail bench`'s lists and output formats, as llama-bench's: `-p`, `-n` and `-d` take
// comma-separated values and ranges (first-last, first-last+step, first-last*step), each flag
// repeatable, a row per combination; `-pg PP,TG` adds a row timed as one test; `-o
// md|csv|json|jsonl` prints the results in llama-bench's shapes, a test (pp, tg or pp+tg) per line.
import path from 'node:path';

import type { BenchResult, ModelSummary } from '@kailstream/engine/core';

export const BENCH_OUTPUTS = ['text', 'md', 'csv', 'json', 'jsonl'] as const;
export type BenchOutput = (typeof BENCH_OUTPUTS)[number];

/**
 * A commander parser for llama-bench's int lists (tools/llama-bench parse_int_range): "512",
 * "128,512", "64-512*2" (64,128,256,512), "0-48+16"; a repeated flag adds to the list.
 */
export function intRangeList(name: string, min: number, max: number) {
  return (v: string, previous?: number[]): number[] => {
    const out = [...(previous ?? [])];
    const bad = (why: string) => new Error(`${name}: ${why} in '${v}'; expected N, FIRST-LAST, FIRST-LAST+STEP or FIRST-LAST*STEP, comma-separated, each in ${min}..${max}`);
    for (const item of v.split(',')) {
      const m = /^\s*(\d+)(?:-(\d+)(?:([+*])(\d+))?)?\s*$/.exec(item);
      if (!m) throw bad(`'${item}' is not a number or range`);
      const first = Number(m[1]);
      const last = m[2] === undefined ? first : Number(m[2]);
      const op = m[3] ?? '+';
      const step = m[4] === undefined ? 1 : Number(m[4]);
      if (first < min || last > max) throw bad(`'${item}' is out of range`);
      if (last < first) throw bad(`'${item}' ends before it starts`);
      for (let i = first; i <= last; ) {
        out.push(i);
        const next = op === '+' ? i + step : i * step;
        if (next <= i) throw bad(`'${item}' does not advance`);
        if (out.length > 10_000) throw bad('more than 10000 values');
        i = next;
      }
    }
    return out;
  };
}

/** A row of kail bench: with `combined`, llama-bench's -pg test (prompt and generation timed as one). */
export type BenchRow = BenchResult & { combined?: boolean };

/** llama-bench's -pg PP,TG, repeatable: pairs of prompt and generated tokens. */
export function pgPairs(v: string, previous?: [number, number][]): [number, number][] {
  const m = /^\s*(\d+)\s*,\s*(\d+)\s*$/.exec(v);
  if (!m || Number(m[1]) > 1 << 20 || Number(m[2]) > 1 << 20 || Number(m[1]) + Number(m[2]) === 0) throw new Error(`-pg takes PP,TG (prompt and generated tokens, not both 0), got '${v}'`);
  return [...(previous ?? []), [Number(m[1]), Number(m[2])]];
}

/** One line of llama-bench's output: a prompt-processing or a generation test of a row. */
export interface BenchTest {
  /** llama-bench's test name: pp512, tg128, with " @ d4096" at a depth. */
  test: string;
  n_prompt: number;
  n_gen: number;
  /** Tokens in the cache before the test: a row's depth, and for its generation the prompt too. */
  n_depth: number;
  /** Median tokens/s of the reps, and their standard deviation. */
  ts: number;
  stddev_ts: number;
}

/**
 * The tests rows measured, each once: a row's prompt (when it had one), then its generation (when
 * it had one) after it. Rows that differ only in -n measured the same prompt test: the first is kept.
 */
export function benchTests(rows: readonly BenchRow[]): (BenchTest & { row: BenchResult })[] {
  const seen = new Set<string>();
  return rows.flatMap((r) =>
    rowTests(r)
      .filter((t) => !seen.has(t.test) && !!seen.add(t.test))
      .map((t) => ({ ...t, row: r })),
  );
}

/** The tests of one row, named as llama-bench names them (every output format, text too, uses these names). */
export function rowTests(r: BenchRow): BenchTest[] {
  const at = (d: number) => (d ? ` @ d${d}` : '');
  if (r.combined) return [{ test: `pp${r.prompt_tokens}+tg${r.gen_tokens}${at(r.depth)}`, n_prompt: r.prompt_tokens, n_gen: r.gen_tokens, n_depth: r.depth, ts: r.pg_tps, stddev_ts: r.pg_tps_stddev }];
  const out: BenchTest[] = [];
  if (r.prompt_tokens) out.push({ test: `pp${r.prompt_tokens}${at(r.depth)}`, n_prompt: r.prompt_tokens, n_gen: 0, n_depth: r.depth, ts: r.prompt_tps, stddev_ts: r.prompt_tps_stddev });
  if (r.gen_tokens) {
    // (A row without a prompt evaluated one untimed token first.)
    const d = r.depth + Math.max(1, r.prompt_tokens);
    out.push({ test: `tg${r.gen_tokens}${at(d)}`, n_prompt: 0, n_gen: r.gen_tokens, n_depth: d, ts: r.gen_tps, stddev_ts: r.gen_tps_stddev });
  }
  return out;
}

/** What every line says about the model and the run. */
export interface BenchContext {
  summary: ModelSummary;
  /** 'CPU', or 'CPU, experts streamed' under a RAM budget. */
  backend: string;
}

const size = (b: number) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / 2 ** 20).toFixed(2)} MiB`);
const params = (n: number) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : `${(n / 1e6).toFixed(2)} M`);
const modelName = (s: ModelSummary) => [s.architecture, s.fileType].filter(Boolean).join(' ');

/** llama-bench's -o md: a table, a test per line, t/s as median ± stddev. */
export function benchMarkdown(rows: BenchRow[], ctx: BenchContext): string {
  const head = ['model', 'size', 'params', 'backend', 'threads', 'feed', 'test', 't/s'];
  const lines = [`| ${head.join(' | ')} |`, `| ${head.map((h) => (['size', 'params', 'threads', 'test', 't/s'].includes(h) ? '---:' : '---')).join(' | ')} |`];
  for (const { row: r, ...t } of benchTests(rows))
    lines.push(
      `| ${[modelName(ctx.summary), size(ctx.summary.fileBytes), params(ctx.summary.parameterCount), ctx.backend, r.threads, t.n_gen ? r.feed : '', t.test, `${t.ts.toFixed(2)} ± ${t.stddev_ts.toFixed(2)}`].join(' | ')} |`,
    );
  return lines.join('\n') + '\n';
}

const CSV_FIELDS = ['model_filename', 'model_type', 'model_size', 'model_n_params', 'backend', 'n_threads', 'feed', 'reps', 'n_prompt', 'n_gen', 'n_depth', 'test', 'ts', 'stddev_ts'] as const;

function testRecords(rows: BenchRow[], ctx: BenchContext): Record<(typeof CSV_FIELDS)[number], string | number>[] {
  return benchTests(rows).map(({ row: r, ...t }) => ({
      model_filename: path.basename(r.model),
      model_type: modelName(ctx.summary),
      model_size: ctx.summary.fileBytes,
      model_n_params: ctx.summary.parameterCount,
      backend: ctx.backend,
      n_threads: r.threads,
      feed: r.feed,
      reps: r.reps,
      n_prompt: t.n_prompt,
      n_gen: t.n_gen,
      n_depth: t.n_depth,
      test: t.test,
      ts: t.ts,
      stddev_ts: t.stddev_ts,
    }));
}

/** llama-bench's -o csv: a header line, then a test per line (strings quoted). */
export function benchCsv(rows: BenchRow[], ctx: BenchContext): string {
  const cell = (v: string | number) => (typeof v === 'number' ? String(v) : `"${v.replace(/"/g, '""')}"`);
  return [CSV_FIELDS.join(','), ...testRecords(rows, ctx).map((rec) => CSV_FIELDS.map((f) => cell(rec[f])).join(','))].join('\n') + '\n';
}

/** llama-bench's -o jsonl: a JSON object per test and line. */
export function benchJsonl(rows: BenchRow[], ctx: BenchContext): string {
  return testRecords(rows, ctx).map((rec) => JSON.stringify(rec) + '\n').join('');
}
