#!/usr/bin/env node
// Speculative decoding benchmark: generation tokens/s, acceptance, tokens per target pass and
// expert bytes read per token for k = 2, 4, 8, greedy and sampled, in RAM and under a streaming
// cap, with (a) the target itself as draft (upper bound: every greedy draft is accepted) and
// (b) a realistic same-vocabulary draft (the target's first 2 of 8 layers: weights are seeded per
// tensor name, so those layers are the target's own), plus prompt lookup. Not a test: run by hand,
//   node tools/dist/bench/spec-bench.js [--tg 64] [--threads 2] [--models DIR] [--no-write]
// Prints a markdown table and writes it into docs/benchmarks.md between the spec-bench markers.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { EngineModel, SpeculativeDecoder, benchmarkSpeculative, formatBytes, planModel, type SamplerParams, type SpecBenchResult } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { benchArgs } from './args';

const ROOT = path.resolve(__dirname, '../../..');

/** The benchmark MoE: qwen3moe, 8 layers of d 512, 32 experts (top 4) of FFN 512, vocab 1024, Q4_K (~0.1 GiB). */
const TARGET = { nLayers: 8, dim: 512, ff: 1024, nHeads: 8, nKvHeads: 4, headDim: 64, nExperts: 32, nExpertsUsed: 4, expertFf: 512 };
const DRAFT_LAYERS = 2;
const TYPE = 'Q4_K' as const;

function ensureModel(dir: string, name: string, layers: number): string {
  const file = path.join(dir, `${name}.gguf`);
  if (fs.existsSync(file)) return file;
  const config = { ...getPreset('tiny-qwen3moe').config, ...TARGET, nLayers: layers, name };
  process.stderr.write(`writing ${file} ...\n`);
  writeModel({ config, fileType: TYPE, seed: 1, out: `${file}.partial` });
  fs.renameSync(`${file}.partial`, file);
  return file;
}

interface Row {
  memory: string;
  drafter: string;
  sampling: string;
  k: string;
  r: SpecBenchResult;
  base: SpecBenchResult;
}

async function main() {
  const values = benchArgs('spec-bench', {
    tg: { type: 'string', default: '64' },
    reps: { type: 'string', default: '3' },
    pp: { type: 'string', default: '32' },
    threads: { type: 'string', default: '2' },
    models: { type: 'string', default: path.join(os.homedir(), '.kailstream/bench-models') },
    'no-write': { type: 'boolean', default: false },
  });
  const tg = Number(values.tg);
  const threads = Number(values.threads);
  fs.mkdirSync(values.models!, { recursive: true });
  const targetFile = ensureModel(values.models!, `spec-bench-qwen3moe-L8-${TYPE}`, TARGET.nLayers);
  const draftFile = ensureModel(values.models!, `spec-bench-qwen3moe-L${DRAFT_LAYERS}-${TYPE}`, DRAFT_LAYERS);
  const nCtx = Number(values.pp) + tg + 16;
  // The streaming cap: an expert cache of 8 of 32 experts per MoE layer.
  const p0 = planModel(targetFile, { nCtx, ramBytes: 2 ** 40, ramReserveBytes: 0 });
  const cap = p0.fixedBytes + 8 * p0.nMoeLayers * p0.expertEntryBytes;

  let s = 7;
  const prompt = Array.from({ length: Number(values.pp) }, () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) % 1024);
  const SAMPLINGS: [string, SamplerParams][] = [
    ['greedy', { temperature: 0 }],
    ['T=0.7 top-k 40', { temperature: 0.7, topK: 40, seed: 3 }],
  ];
  const rows: Row[] = [];
  const reps = Number(values.reps);
  const selfDraft = EngineModel.load(targetFile, { threads, nCtx });
  const smallDraft = EngineModel.load(draftFile, { threads, nCtx });
  type Make = ((target: EngineModel) => SpeculativeDecoder) | null;
  /**
   * Median tokens/s of `reps` runs; each run loads the target afresh, so every configuration
   * starts from the same cold expert cache (bytes/token are comparable), and drafts from a clean
   * draft cache. Counts (acceptance, passes, bytes) are the first run's: they repeat exactly.
   */
  const measure = async (streaming: boolean, sampling: SamplerParams, make: Make): Promise<SpecBenchResult> => {
    const runs: SpecBenchResult[] = [];
    for (let i = 0; i < reps; i++) {
      const target = EngineModel.load(targetFile, { threads, nCtx, ...(streaming ? { ramBytes: cap, ramReserveBytes: 0 } : {}) });
      try {
        runs.push(await benchmarkSpeculative(target, { prompt, genTokens: tg, sampling, speculative: make?.(target) }));
      } finally {
        target.close();
      }
    }
    const tps = runs.map((r) => r.tokensPerSecond).sort((a, b) => a - b)[Math.floor(reps / 2)];
    return { ...runs[0], tokensPerSecond: tps };
  };
  try {
    for (const streaming of [false, true]) {
      const memory = streaming ? `streaming, cap ${formatBytes(cap)}` : 'RAM';
      for (const [sName, sampling] of SAMPLINGS) {
        const base = await measure(streaming, sampling, null);
        rows.push({ memory, drafter: 'none (baseline)', sampling: sName, k: '-', r: base, base });
        process.stderr.write(`${memory} ${sName} baseline ${base.tokensPerSecond.toFixed(1)} t/s\n`);
        const drafters: [string, (target: EngineModel, k: number, adaptive: boolean) => SpeculativeDecoder][] = [
          ['(a) target as draft, upper bound', (t, k, adaptive) => new SpeculativeDecoder(t, { draft: selfDraft, k, adaptive })],
          [`(b) ${DRAFT_LAYERS}-layer draft`, (t, k, adaptive) => new SpeculativeDecoder(t, { draft: smallDraft, k, adaptive })],
          ['prompt lookup', (t, k, adaptive) => new SpeculativeDecoder(t, { lookup: true, k, adaptive })],
        ];
        for (const [dName, make] of drafters) {
          for (const k of [2, 4, 8, 0]) {
            const r = await measure(streaming, sampling, (t) => make(t, k || 4, k === 0));
            rows.push({ memory, drafter: dName, sampling: sName, k: k ? String(k) : `adaptive from 4 (ended at ${r.speculative!.currentK})`, r, base });
            process.stderr.write(`${memory} ${sName} ${dName} k=${k || 'adaptive'}: ${r.tokensPerSecond.toFixed(1)} t/s, acceptance ${(100 * r.speculative!.acceptanceRate).toFixed(0)}%\n`);
          }
        }
      }
    }
  } finally {
    selfDraft.close();
    smallDraft.close();
  }

  const fmtB = (x: number | null) => (x === null ? '-' : formatBytes(x));
  const lines = [
    '| memory | sampling | drafter | k | tokens/s | vs baseline | acceptance | tokens/pass | expert reads/token | same tokens as baseline |',
    '|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map(({ memory, drafter, sampling, k, r, base }) => {
      const st = r.speculative;
      const diff = r.tokens.findIndex((t, i) => t !== base.tokens[i]);
      const same = !st ? '' : sampling !== 'greedy' ? 'n/a (sampled)' : diff < 0 ? 'yes' : `no, from token ${diff}`;
      return (
        `| ${memory} | ${sampling} | ${drafter} | ${k} | ${r.tokensPerSecond.toFixed(1)} | ${(r.tokensPerSecond / base.tokensPerSecond).toFixed(2)}x | ` +
        `${st ? `${(100 * st.acceptanceRate).toFixed(0)}%` : '-'} | ${st ? st.tokensPerPass.toFixed(2) : '1.00'} | ${fmtB(r.bytesReadPerToken)} | ${same} |`
      );
    }),
  ];
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const section =
    `Measured ${new Date().toISOString().slice(0, 10)} on ${cpu}, ${os.cpus().length} logical CPUs, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB RAM, node ${process.version}, ` +
    `${threads} compute threads, load average ${os.loadavg()[0].toFixed(1)} at the end (speeds vary run to run; ` +
    `acceptance, tokens/pass and bytes/token do not depend on load).\n` +
    `Target: random-weight qwen3moe, ${TARGET.nLayers} layers, d ${TARGET.dim}, ${TARGET.nExperts} experts (top ${TARGET.nExpertsUsed}) of FFN ${TARGET.expertFf}, vocab 1024, ${TYPE} ` +
    `(${formatBytes(fs.statSync(targetFile).size)}); draft (b): the same with its first ${DRAFT_LAYERS} layers (${formatBytes(fs.statSync(draftFile).size)}), in RAM. ` +
    `Prompt ${values.pp} random tokens, ${tg} generated tokens timed alone; tokens/s is the median of ${reps} runs, each on a freshly loaded target (cold expert cache). Streaming: the target under a RAM cap whose expert cache holds 8 of 32 experts per layer, ` +
    `O_DIRECT reads; drafts in RAM, so "expert reads/token" is the target's storage traffic per committed token. Random weights make greedy text loop, which flatters ` +
    `prompt lookup and draft acceptance compared with real text. \"same tokens as baseline\": the greedy run's tokens compared one by one with the baseline's ` +
    `(the native kernels are batch-invariant, so the verification pass chooses what one-token decoding chooses). Tokens/s on this 2-core VM swing between runs; ` +
    `acceptance, tokens/pass and bytes/token do not.\n\n` +
    lines.join('\n') +
    '\n';
  process.stdout.write(section);
  if (!values['no-write']) writeSection(section);
}

function writeSection(section: string) {
  const doc = path.join(ROOT, 'docs/benchmarks.md');
  const begin = '<!-- spec-bench:begin -->';
  const end = '<!-- spec-bench:end -->';
  let text = fs.existsSync(doc) ? fs.readFileSync(doc, 'utf8') : '# Benchmarks\n';
  const block = `${begin}\n${section}${end}`;
  if (text.includes(begin)) text = text.replace(new RegExp(`${begin}[\\s\\S]*?${end}`), block);
  else text += `\n## Speculative decoding\n\nWritten by \`node tools/dist/bench/spec-bench.js\` (tools/src/bench/spec-bench.ts).\n\n${block}\n`;
  fs.writeFileSync(doc, text);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
