#!/usr/bin/env node
// Speed benchmark, kail against llama.cpp (node-llama-cpp) on the same file, same threads, in one
// run: prompt (pp) and generation (tg) tokens/s and their ratio. Not a test: run by hand,
//   node tools/dist/bench/run-bench.js [--pp 512] [--tg 128] [--threads 2] [--reps 3] [--models DIR] [--only NAME]
// Models are written by the project's own writer into --models (default ~/.kailstream/bench-models).
// Prints a markdown table (with the machine and settings) and writes it to docs/benchmarks.md
// between the markers of the "speed vs llama.cpp" section.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { rereadIntoPageCache } from '@kailstream/engine';
import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { benchArgs } from './args';
import { noRepackShim } from '../parity/llama-ref';

const ROOT = path.resolve(__dirname, '../../..');
const KAIL = path.join(ROOT, 'apps/cli/bin/kail.js');
const LLAMA_BENCH = path.join(ROOT, 'tools/src/bench/llama-bench.mjs');

interface Row {
  name: string;
  preset: string;
  type: FileTypeName;
  layers?: number;
}

const ROWS: Row[] = [
  { name: 'llama-1B-shaped Q4_0', preset: 'bench-llama-1b', type: 'Q4_0' },
  { name: 'llama-1B-shaped Q8_0', preset: 'bench-llama-1b', type: 'Q8_0' },
  { name: 'qwen3-30B-A3B-shaped (8 of 48 layers) Q4_K', preset: 'bench-qwen3-30b-a3b-shaped', type: 'Q4_K', layers: 8 },
  { name: 'deepseek-V2-Lite-shaped (all 27 layers) Q4_K', preset: 'bench-deepseek-v2-lite-shaped', type: 'Q4_K' },
];

interface Result {
  prompt_tps: number;
  gen_tps: number;
}

function run(cmd: string[], env: NodeJS.ProcessEnv = {}): Result {
  const out = execFileSync(process.execPath, cmd, { env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true', ...env }, maxBuffer: 1 << 26 }).toString();
  const line = out.trim().split('\n').filter((l) => l.startsWith('{')).pop();
  if (!line) throw new Error(`no JSON from ${cmd.join(' ')}:\n${out}`);
  return JSON.parse(line) as Result;
}

function machine(): string {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  let simd = '';
  try {
    simd = execFileSync(process.execPath, [KAIL, 'version', '--json']).toString();
    const j = JSON.parse(simd);
    simd = `kail kernels ${j.native.kernelLevel}`;
  } catch {
    simd = '';
  }
  return `${cpu}, ${os.cpus().length} logical CPUs, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB RAM, ${os.platform()} ${os.release()}, node ${process.version}${simd ? `, ${simd}` : ''}`;
}

async function main() {
  const values = benchArgs('run-bench', {
    pp: { type: 'string', default: '512' },
    tg: { type: 'string', default: '128' },
    threads: { type: 'string', default: '2' },
    reps: { type: 'string', default: '3' },
    models: { type: 'string', default: path.join(os.homedir(), '.kailstream/bench-models') },
    only: { type: 'string' },
    feed: { type: 'string', default: 'greedy' },
    'no-write': { type: 'boolean', default: false },
    /** Run llama.cpp with its extra (repacked / AMX) weight buffers off in every row. */
    'llama-no-repack': { type: 'boolean', default: false },
  });
  const notes: string[] = [];
  fs.mkdirSync(values.models!, { recursive: true });
  const lines: string[] = [];
  const header = `| model | file | kail pp${values.pp} t/s | llama.cpp pp${values.pp} t/s | pp ratio | kail tg${values.tg} t/s | llama.cpp tg${values.tg} t/s | tg ratio |`;
  lines.push(header, '|---|---|---|---|---|---|---|---|');
  for (const row of ROWS) {
    if (values.only && !row.name.includes(values.only)) continue;
    const file = path.join(values.models!, `${row.preset}${row.layers ? `-L${row.layers}` : ''}-${row.type}.gguf`);
    if (!fs.existsSync(file)) {
      const config = { ...getPreset(row.preset).config, ...(row.layers ? { nLayers: row.layers } : {}) };
      process.stderr.write(`writing ${file} ...\n`);
      writeModel({ config, fileType: row.type, seed: 1, out: `${file}.partial` });
      fs.renameSync(`${file}.partial`, file);
    }
    // Both engines then map pages cached as a read leaves them, not as the writer left them.
    rereadIntoPageCache(file);
    const common = ['--threads', values.threads!, '--feed', values.feed!];
    process.stderr.write(`${row.name}: kail ...\n`);
    const k = run([KAIL, 'bench', '-m', file, '-p', values.pp!, '-n', values.tg!, '--reps', values.reps!, '--json', ...common]);
    process.stderr.write(`${row.name}: llama.cpp ...\n`);
    const llamaCmd = [LLAMA_BENCH, '--model', file, '--pp', values.pp!, '--tg', values.tg!, '--reps', values.reps!, ...common];
    // llama.cpp's defaults abort some MoE graphs on AMX CPUs (GGML_ASSERT cur_backend_id != -1):
    // then the row is llama.cpp with its extra weight buffers off, and says so.
    let l: Result | null = null;
    let name = row.name;
    const noRepack = async () => {
      const shim = await noRepackShim();
      if (!shim) throw new Error('the no-repack shim could not be built');
      return run(llamaCmd, { LD_PRELOAD: shim });
    };
    try {
      l = values['llama-no-repack'] ? await noRepack() : run(llamaCmd);
    } catch (e) {
      const why = String((e as Error).message).split('\n').find((x) => /GGML_ASSERT|error|failed/i.test(x)) ?? String(e);
      process.stderr.write(`${row.name}: llama.cpp failed (${why.trim()})${values['llama-no-repack'] ? '' : '; again with its extra weight buffers off'}\n`);
      if (!values['llama-no-repack'])
        try {
          l = await noRepack();
          name += ' ¹';
          notes.push(`¹ llama.cpp's defaults failed on this file (${why.trim()}); its column is llama.cpp with its extra (repacked / AMX) weight buffers off.`);
        } catch (e2) {
          notes.push(`${row.name}: llama.cpp failed: ${why.trim()}; with its extra weight buffers off: ${String((e2 as Error).message).split('\n')[0]}`);
        }
    }
    const size = `${(fs.statSync(file).size / 2 ** 30).toFixed(2)} GiB`;
    const ratio = (a: number, b: number | undefined) => (b ? (a / b).toFixed(2) : '-');
    lines.push(
      `| ${name} | ${size} | ${k.prompt_tps.toFixed(1)} | ${l ? l.prompt_tps.toFixed(1) : 'failed'} | ${ratio(k.prompt_tps, l?.prompt_tps)} | ` +
        `${k.gen_tps.toFixed(2)} | ${l ? l.gen_tps.toFixed(2) : 'failed'} | ${ratio(k.gen_tps, l?.gen_tps)} |`,
    );
    process.stderr.write(lines.at(-1) + '\n');
  }
  const section =
    `Measured ${new Date().toISOString().slice(0, 10)} on ${machine()}.\n` +
    `Settings: ${values.threads} threads for both engines, prompt ${values.pp} random tokens, ${values.tg} decode steps feeding the ${values.feed} token, ` +
    `median of ${values.reps}; weights mmapped from a warm page cache (the file evicted and read back before its row); kail KV cache f16, llama.cpp ${values['llama-no-repack'] ? 'with its extra weight buffers off (no-repack shim)' : 'defaults'} (through node-llama-cpp 3.22.1, CPU build).\n\n` +
    lines.join('\n') + '\n' + (notes.length ? `\n${notes.join('\n')}\n` : '');
  process.stdout.write(section);
  if (!values['no-write']) writeSection(section);
}

function writeSection(section: string) {
  const doc = path.join(ROOT, 'docs/benchmarks.md');
  const begin = '<!-- speed-vs-llama:begin -->';
  const end = '<!-- speed-vs-llama:end -->';
  let text = fs.existsSync(doc) ? fs.readFileSync(doc, 'utf8') : '# Benchmarks\n';
  const block = `${begin}\n${section}${end}`;
  if (text.includes(begin)) text = text.replace(new RegExp(`${begin}[\\s\\S]*?${end}`), block);
  else text += `\n## Speed vs llama.cpp (CPU)\n\n${block}\n`;
  fs.writeFileSync(doc, text);
}

main().catch((e: unknown) => {
  process.stderr.write(`run-bench: ${(e as Error).message}\n`);
  process.exit(1);
});
