import type { BenchResult, ModelSummary } from '@kailstream/engine/core';

import { benchCsv, benchJsonl, benchMarkdown, benchTests, intRangeList, pgPairs } from './commands/bench-output';

function row(p: number, n: number, depth: number, tps: [number, number], sd: [number, number] = [0, 0]): BenchResult {
  return {
    prompt_tokens: p, gen_tokens: n, prompt_tps: tps[0], gen_tps: tps[1], prompt_ms: 0, gen_ms: 0, prompt_tps_stddev: sd[0], gen_tps_stddev: sd[1], pg_tps: 33, pg_tps_stddev: 1.25,
    depth, feed: 'random', reps: 3, threads: 2, arch: 'qwen3moe', model: '/m/q.gguf', stream: null,
  };
}
const summary = { architecture: 'qwen3moe', fileType: 'Q4_K_M', fileBytes: 17.5 * 2 ** 30, parameterCount: 30.5e9 } as ModelSummary;

describe("kail bench's lists and output formats (llama-bench's)", () => {
  it('parses lists and ranges as llama-bench does, a repeated flag adding to the list', () => {
    const p = intRangeList('--n-prompt', 0, 1 << 20);
    expect(p('512', undefined)).toEqual([512]);
    expect(p('128,512', undefined)).toEqual([128, 512]);
    expect(p('64-512*2', undefined)).toEqual([64, 128, 256, 512]);
    expect(p('0-48+16', undefined)).toEqual([0, 16, 32, 48]);
    expect(p('1-3', undefined)).toEqual([1, 2, 3]);
    expect(p('7', p('1,2', undefined))).toEqual([1, 2, 7]);
    expect(() => p('8-4', undefined)).toThrow("--n-prompt: '8-4' ends before it starts");
    expect(() => p('0-8*2', undefined)).toThrow("'0-8*2' does not advance");
    expect(() => p('12x', undefined)).toThrow("'12x' is not a number or range");
    expect(() => p('', undefined)).toThrow("'' is not a number or range");
    expect(() => p('2000000', undefined)).toThrow("'2000000' is out of range");
    expect(() => p('1-1000000', undefined)).toThrow('more than 10000 values');
  });

  it("names each test as llama-bench does, the generation's depth counting the row's prompt; a prompt test measured twice is shown once", () => {
    const rows = [row(512, 0, 0, [100, 0]), row(512, 128, 0, [101, 9]), row(0, 128, 4096, [0, 8])];
    expect(benchTests(rows).map((t) => [t.test, t.n_depth, t.ts])).toEqual([
      ['pp512', 0, 100],
      ['tg128 @ d512', 512, 9],
      // (Without a prompt, one untimed token comes first.)
      ['tg128 @ d4097', 4097, 8],
    ]);
  });

  it("names a -pg row as llama-bench does, one test timed as one: pp512+tg128", () => {
    expect(pgPairs('512,128')).toEqual([[512, 128]]);
    expect(pgPairs('0, 16', [[512, 128]])).toEqual([[512, 128], [0, 16]]);
    expect(() => pgPairs('512')).toThrow("-pg takes PP,TG (prompt and generated tokens, not both 0), got '512'");
    expect(() => pgPairs('0,0')).toThrow('not both 0');
    const rows = [row(512, 128, 0, [100, 9]), { ...row(512, 128, 4096, [100, 9]), combined: true }];
    expect(benchTests(rows).map((t) => [t.test, t.ts, t.stddev_ts])).toEqual([
      ['pp512', 100, 0],
      ['tg128 @ d512', 9, 0],
      ['pp512+tg128 @ d4096', 33, 1.25],
    ]);
  });

  it('prints md, csv and jsonl a test per line', () => {
    const rows = [row(512, 128, 0, [150.123, 20.5], [1.5, 0.25])];
    const ctx = { summary, backend: 'CPU, experts streamed' };
    expect(benchMarkdown(rows, ctx)).toBe(
      '| model | size | params | backend | threads | feed | test | t/s |\n' +
        '| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |\n' +
        '| qwen3moe Q4_K_M | 17.50 GiB | 30.50 B | CPU, experts streamed | 2 |  | pp512 | 150.12 ± 1.50 |\n' +
        '| qwen3moe Q4_K_M | 17.50 GiB | 30.50 B | CPU, experts streamed | 2 | random | tg128 @ d512 | 20.50 ± 0.25 |\n',
    );
    const csv = benchCsv(rows, ctx).trim().split('\n');
    expect(csv[0]).toBe('model_filename,model_type,model_size,model_n_params,backend,n_threads,feed,reps,n_prompt,n_gen,n_depth,test,ts,stddev_ts');
    expect(csv[2]).toBe(`"q.gguf","qwen3moe Q4_K_M",${17.5 * 2 ** 30},30500000000,"CPU, experts streamed",2,"random",3,0,128,512,"tg128 @ d512",20.5,0.25`);
    const jl = benchJsonl(rows, ctx).trim().split('\n').map((l) => JSON.parse(l));
    expect(jl.map((x) => [x.test, x.n_prompt, x.n_gen, x.ts])).toEqual([['pp512', 512, 0, 150.123], ['tg128 @ d512', 0, 128, 20.5]]);
  });
});
