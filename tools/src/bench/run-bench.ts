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

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { benchArgs } from './args';

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

function main() {
  const values = benchArgs('run-bench', {
    pp: { type: 'string', default: '512' },
    tg: { type: 'string', default: '128' },
    threads: { type: 'string', default: '2' },
    reps: { type: 'string', default: '3' },
    models: { type: 'string', default: path.join(os.homedir(), '.kailstream/bench-models') },
    only: { type: 'string' },
    feed: { type: 'string', default: 'greedy' },
    'no-write': { type: 'boolean', default: false },
  });
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
    const common = ['--threads', values.threads!, '--feed', values.feed!];
    process.stderr.write(`${row.name}: kail ...\n`);
    const k = run([KAIL, 'bench', '-m', file, '-p', values.pp!, '-n', values.tg!, '--reps', values.reps!, '--json', ...common]);
    process.stderr.write(`${row.name}: llama.cpp ...\n`);
    const l = run([LLAMA_BENCH, '--model', file, '--pp', values.pp!, '--tg', values.tg!, '--reps', values.reps!, ...common]);
    const size = `${(fs.statSync(file).size / 2 ** 30).toFixed(2)} GiB`;
    lines.push(
      `| ${row.name} | ${size} | ${k.prompt_tps.toFixed(1)} | ${l.prompt_tps.toFixed(1)} | ${(k.prompt_tps / l.prompt_tps).toFixed(2)} | ` +
        `${k.gen_tps.toFixed(2)} | ${l.gen_tps.toFixed(2)} | ${(k.gen_tps / l.gen_tps).toFixed(2)} |`,
    );
    process.stderr.write(lines.at(-1) + '\n');
  }
  const section =
    `Measured ${new Date().toISOString().slice(0, 10)} on ${machine()}.\n` +
    `Settings: ${values.threads} threads for both engines, prompt ${values.pp} random tokens, ${values.tg} decode steps feeding the ${values.feed} token, ` +
    `median of ${values.reps}; weights mmapped from a warm page cache; kail KV cache f16, llama.cpp defaults (through node-llama-cpp 3.22.1, CPU build).\n\n` +
    lines.join('\n') + '\n';
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

main();
