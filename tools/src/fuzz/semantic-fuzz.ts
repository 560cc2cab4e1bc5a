// Semantic fuzzing of model loading: tiny models of every architecture, each mutated one way at a
// time (semantic-mutations.ts), each mutated file served by a child process (fuzz-worker.ts) under
// a memory limit and a time limit, and each outcome classified:
//   clean-error      an EngineError (KAIL_E_*, not KAIL_E_INTERNAL) whose message names the problem
//   success          loaded and served with finite logits (acceptable when llama.cpp also accepts)
//   unclear-error    a thrown error without a KAIL_E code, or KAIL_E_INTERNAL (a TypeError, a RangeError...)
//   nan              loaded and served, but with NaN/Inf logits
//   unchecked-alloc  an allocation trusted a huge number (bad_alloc, length_error, a peak RSS over the limit)
//   crash            the worker died (signal, abort, uncaught exception)
//   hang             no answer within the time limit
//
//   node --conditions=@kailstream/source -r ./tools/src/fuzz/ts-register.cjs tools/src/fuzz/semantic-fuzz.ts \
//     [--presets tiny-llama,tiny-deepseek3] [--filter REGEX] [--limit N] [--out report.json] [--llama]
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { SUPPORTED_ARCHITECTURES } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import type { FuzzJob, FuzzJobResult } from './fuzz-worker';
import { cloneImage, mutationsFor, readImage, SkipMutation, writeImage } from './semantic-mutations';
import type { Mutation } from './semantic-mutations';

export type Outcome = 'clean-error' | 'success' | 'unclear-error' | 'nan' | 'unchecked-alloc' | 'crash' | 'hang';

/** Outcomes that are bugs: the engine must answer a bad file with a clean error, or serve it correctly. */
export const BAD_OUTCOMES: readonly Outcome[] = ['unclear-error', 'nan', 'unchecked-alloc', 'crash', 'hang'];

export interface FuzzResult extends Partial<FuzzJobResult> {
  model: string;
  mutation: string;
  group: string;
  outcome: Outcome;
  /** llama.cpp's verdict on a file kail served (--llama): true it loads and evaluates it. */
  llamaAccepts?: boolean;
}

export interface WorkerOptions {
  /** Per-job time limit. Default 20 s. */
  timeoutMs?: number;
  /** Address-space limit of the worker (ulimit -v), bytes. Default 8 GiB. */
  addressSpaceBytes?: number;
  /** Peak RSS above which a job counts as an unchecked allocation. Default 1.5 GiB. */
  peakRssLimitMb?: number;
}

const HERE = __dirname;
const REGISTER = path.join(HERE, 'ts-register.cjs');
const WORKER = path.join(HERE, 'fuzz-worker.ts');
const ALLOC_MESSAGE = /bad_alloc|length_error|vector::_M|cannot create std::|Array buffer allocation failed|Invalid array length|Invalid typed array length|heap out of memory|ENOMEM/i;

/** One worker process at a time, restarted after a crash or a hang. */
export class FuzzWorker {
  private child: ChildProcess | null = null;
  private ready: Promise<void> | null = null;
  private stderr = '';
  private readonly timeoutMs: number;
  private readonly asBytes: number;
  readonly peakRssLimitMb: number;

  constructor(opts: WorkerOptions = {}) {
    this.timeoutMs = opts.timeoutMs ?? 20_000;
    this.asBytes = opts.addressSpaceBytes ?? 8 * 2 ** 30;
    this.peakRssLimitMb = opts.peakRssLimitMb ?? 1536;
  }

  private start(): Promise<void> {
    if (this.ready) return this.ready;
    const kb = Math.floor(this.asBytes / 1024);
    // Through bash for `ulimit -v`: an allocation that trusts a huge number fails instead of
    // taking the machine's memory; exec keeps the IPC channel.
    const child = spawn('bash', ['-c', `ulimit -v ${kb}; exec "$0" --conditions=@kailstream/source -r "$1" "$2"`, process.execPath, REGISTER, WORKER], {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      env: { ...process.env, UV_THREADPOOL_SIZE: '2' },
    });
    this.child = child;
    this.stderr = '';
    child.stderr!.on('data', (d: Buffer) => (this.stderr = (this.stderr + d.toString()).slice(-4000)));
    this.ready = new Promise((resolve, reject) => {
      const onMsg = (m: { ready?: boolean }) => {
        if (m.ready) {
          child.off('message', onMsg);
          resolve();
        }
      };
      child.on('message', onMsg);
      child.once('exit', (code, sig) => reject(new Error(`fuzz worker exited before it was ready (${sig ?? code}): ${this.stderr}`)));
    });
    return this.ready;
  }

  private kill(): void {
    if (this.child && this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    this.child = null;
    this.ready = null;
  }

  /** Runs one job; a dead or silent worker is reported as a crash or a hang and replaced. */
  async run(job: FuzzJob): Promise<{ outcome: Outcome; result: Partial<FuzzJobResult> }> {
    await this.start();
    const child = this.child!;
    const r = await new Promise<{ kind: 'result'; r: FuzzJobResult } | { kind: 'exit'; why: string } | { kind: 'timeout' }>((resolve) => {
      const timer = setTimeout(() => done({ kind: 'timeout' }), this.timeoutMs);
      const onMsg = (m: FuzzJobResult) => m.id === job.id && done({ kind: 'result', r: m });
      const onExit = (code: number | null, sig: string | null) => done({ kind: 'exit', why: sig ? `signal ${sig}` : `exit code ${code}` });
      const done = (v: Parameters<typeof resolve>[0]) => {
        clearTimeout(timer);
        child.off('message', onMsg);
        child.off('exit', onExit);
        resolve(v);
      };
      child.on('message', onMsg);
      child.on('exit', onExit);
      child.send(job);
    });
    if (r.kind === 'timeout') {
      this.kill();
      return { outcome: 'hang', result: { message: `no answer in ${this.timeoutMs / 1000} s` } };
    }
    if (r.kind === 'exit') {
      // Give stderr a moment to drain.
      await new Promise((res) => setTimeout(res, 50));
      const tail = this.stderr.trim().split('\n').slice(-6).join(' | ');
      this.kill();
      const alloc = ALLOC_MESSAGE.test(tail);
      return { outcome: alloc ? 'unchecked-alloc' : 'crash', result: { message: `worker died (${r.why}): ${tail}` } };
    }
    return { outcome: classify(r.r, this.peakRssLimitMb), result: r.r };
  }

  close(): void {
    this.kill();
  }
}

export function classify(r: FuzzJobResult, peakRssLimitMb = 1536): Outcome {
  if (r.peakRssMb > peakRssLimitMb || (!r.ok && ALLOC_MESSAGE.test(r.message ?? ''))) return 'unchecked-alloc';
  if (r.ok) return r.finite ? 'success' : 'nan';
  if (r.code && r.code.startsWith('KAIL_E_') && r.code !== 'KAIL_E_INTERNAL' && (r.message ?? '').length > 10) return 'clean-error';
  return 'unclear-error';
}

/**
 * The base models: a tiny model of each architecture (and MLA layout), F32, and two quantized ones.
 * mtp: each file is also served with its MTP block as a draft (the fuzz worker's mtp stages).
 */
export const BASE_MODELS: { preset: string; type: FileTypeName; layers?: number; mtp?: boolean; target?: string; hiddenTarget?: string }[] = [
  { preset: 'tiny-llama', type: 'F32', layers: 2 },
  { preset: 'tiny-llama-eagle3-d2t', type: 'F32' },
  { preset: 'tiny-mixtral', type: 'F32' },
  { preset: 'tiny-qwen2moe', type: 'F32' },
  { preset: 'tiny-qwen3moe', type: 'F32' },
  { preset: 'tiny-olmoe', type: 'F32' },
  { preset: 'tiny-deepseek2-lite', type: 'F32' },
  { preset: 'tiny-deepseek3', type: 'F32' },
  { preset: 'tiny-glm4moe-qknorm', type: 'F32' },
  { preset: 'tiny-gpt-oss', type: 'F32' },
  { preset: 'tiny-deepseek-moe', type: 'F32' },
  { preset: 'tiny-dots1', type: 'F32' },
  { preset: 'tiny-ernie4_5-moe', type: 'F32' },
  { preset: 'tiny-minimax-m2', type: 'F32' },
  { preset: 'tiny-llama4', type: 'F32' },
  { preset: 'tiny-hunyuan-moe', type: 'F32' },
  { preset: 'tiny-bailingmoe2', type: 'F32' },
  { preset: 'tiny-qwen3vlmoe', type: 'F32' },
  { preset: 'tiny-granitemoe', type: 'F32' },
  { preset: 'tiny-phimoe', type: 'F32' },
  { preset: 'tiny-deepseek32', type: 'F32' },
  { preset: 'tiny-glm-dsa', type: 'F32' },
  { preset: 'tiny-dots3note', type: 'F32' },
  { preset: 'tiny-hy-v4', type: 'F32' },
  { preset: 'tiny-qwen4exp', type: 'F32' },
  { preset: 'tiny-qwen4exp-layers', type: 'Q4_K_M' },
  { preset: 'tiny-qwen4exp-qsa', type: 'F32' },
  { preset: 'tiny-deepseek4', type: 'F32', mtp: true },
  { preset: 'tiny-deepseek4', type: 'Q4_K_M', mtp: true },
  { preset: 'tiny-mimo2', type: 'F32' },
  { preset: 'tiny-qwen35moe', type: 'Q4_K_M' },
  { preset: 'tiny-qwen35', type: 'F32' },
  { preset: 'tiny-qwen3next-ssm-in', type: 'Q8_0' },
  { preset: 'tiny-lfm2moe', type: 'Q4_K_M' },
  { preset: 'tiny-nemotron-h-moe', type: 'Q4_K_M' },
  { preset: 'tiny-granitehybrid', type: 'Q4_K_M' },
  { preset: 'tiny-granite-swa-moe', type: 'Q4_K_M' },
  { preset: 'tiny-granite-swa', type: 'F32' },
  { preset: 'tiny-graniteswitch', type: 'Q4_K_M' },
  { preset: 'tiny-graniteswitch-2', type: 'F32' },
  { preset: 'tiny-deepseek2-ocr', type: 'F32' },
  { preset: 'tiny-deepseek2-ocr-sig', type: 'Q8_0' },
  { preset: 'tiny-jamba', type: 'Q4_K_M' },
  { preset: 'tiny-mamba', type: 'F32' },
  { preset: 'tiny-falcon-mamba', type: 'Q4_K_M' },
  { preset: 'tiny-mamba2', type: 'F32' },
  { preset: 'tiny-falcon-h1', type: 'Q4_K_M' },
  { preset: 'tiny-falcon-h1-plain', type: 'F32' },
  { preset: 'tiny-plamo2', type: 'F32' },
  { preset: 'tiny-plamo2', type: 'Q4_K_M' },
  { preset: 'tiny-rwkv7', type: 'F32' },
  { preset: 'tiny-arwkv7', type: 'Q4_K_M' },
  { preset: 'tiny-rwkv6', type: 'F32' },
  { preset: 'tiny-rwkv6', type: 'Q4_K_M' },
  { preset: 'tiny-rwkv6qwen2', type: 'F32' },
  { preset: 'tiny-minimax-01-interval', type: 'Q4_K_M' },
  { preset: 'tiny-minimax-m3', type: 'F32' },
  { preset: 'tiny-minimax-m3-sparse', type: 'Q4_K_M' },
  { preset: 'tiny-kimi-linear-fused', type: 'Q8_0' },
  { preset: 'tiny-kimi-linear-kvb', type: 'F32' },
  { preset: 'tiny-bailingmoe3', type: 'Q8_0' },
  { preset: 'tiny-bailingmoe3-tied', type: 'F32' },
  { preset: 'tiny-kimi-k3', type: 'Q8_0' },
  { preset: 'tiny-kimi-k3-plain', type: 'F32' },
  { preset: 'tiny-gemma4', type: 'Q8_0' },
  { preset: 'tiny-gemma4-e', type: 'F32' },
  // (A draft over tiny-gemma4's KV cache: served bound to that target, the fuzz worker's kvTarget.)
  { preset: 'tiny-gemma4-assistant', type: 'F32', target: 'tiny-gemma4' },
  // (A DFlash draft reading tiny-qwen3's hidden states: served bound to that target, the fuzz worker's hiddenTarget.)
  { preset: 'tiny-dflash', type: 'F32', hiddenTarget: 'tiny-qwen3' },
  { preset: 'tiny-gemma3n', type: 'Q8_0' },
  { preset: 'tiny-gemma2', type: 'F32' },
  { preset: 'tiny-gemma3', type: 'Q4_K_M' },
  { preset: 'tiny-smallthinker-swa', type: 'F32' },
  { preset: 'tiny-step35-clamp', type: 'F32' },
  { preset: 'tiny-grok2', type: 'F32' },
  { preset: 'tiny-dbrx', type: 'F32' },
  { preset: 'tiny-arctic', type: 'F32' },
  { preset: 'tiny-bailingmoe', type: 'F32' },
  { preset: 'tiny-mellum', type: 'F32' },
  { preset: 'tiny-maple', type: 'F32' },
  { preset: 'tiny-grovemoe', type: 'Q4_K_M' },
  { preset: 'tiny-laguna', type: 'F32' },
  { preset: 'tiny-cohere2moe-rms', type: 'F32' },
  { preset: 'tiny-cohere2-pattern', type: 'F32' },
  { preset: 'tiny-command-r', type: 'Q8_0' },
  { preset: 'tiny-olmo2-swa', type: 'F32' },
  { preset: 'tiny-seed-oss', type: 'Q4_K_M' },
  { preset: 'tiny-smollm3', type: 'F32' },
  { preset: 'tiny-exaone4', type: 'F32' },
  { preset: 'tiny-exaone4-swa', type: 'F32' },
  { preset: 'tiny-ernie4_5', type: 'F32' },
  { preset: 'tiny-hunyuan-dense', type: 'F32' },
  { preset: 'tiny-glm4', type: 'Q8_0' },
  { preset: 'tiny-qwen2vl', type: 'F32' },
  { preset: 'tiny-hunyuan-vl', type: 'Q8_0' },
  { preset: 'tiny-plamo', type: 'F32' },
  { preset: 'tiny-plamo3-pattern', type: 'Q4_K_M' },
  { preset: 'tiny-pangu-embedded', type: 'F32' },
  { preset: 'tiny-openelm', type: 'F32' },
  { preset: 'tiny-paddleocr', type: 'Q4_K_M' },
  { preset: 'tiny-cogvlm', type: 'F32' },
  { preset: 'tiny-chameleon', type: 'F32' },
  { preset: 'tiny-chameleon-swin', type: 'Q8_0' },
  { preset: 'tiny-muse-glimmer', type: 'F32' },
  { preset: 'tiny-muse-glimmer-pattern', type: 'Q4_K_M' },
  { preset: 'tiny-hrm-text', type: 'F32' },
  { preset: 'tiny-hrm-text-tied', type: 'Q4_K_M' },
  { preset: 'tiny-spark2-5', type: 'F32' },
  { preset: 'tiny-talkie', type: 'F32' },
  { preset: 'tiny-talkie-fused', type: 'Q4_K_M' },
  { preset: 'tiny-apertus', type: 'F32' },
  { preset: 'tiny-llada', type: 'F32' },
  { preset: 'tiny-dream', type: 'Q8_0' },
  { preset: 'tiny-llada-moe', type: 'Q4_K_M' },
  { preset: 'tiny-rnd1', type: 'F32' },
  { preset: 'tiny-minicpm3', type: 'F32' },
  { preset: 'tiny-minicpm3-long', type: 'Q8_0' },
  { preset: 'tiny-plm', type: 'Q4_K_M' },
  { preset: 'tiny-deci', type: 'F32' },
  { preset: 'tiny-deci-noffn', type: 'Q4_K_M' },
  { preset: 'tiny-internlm2', type: 'F32' },
  { preset: 'tiny-exaone', type: 'F32' },
  { preset: 'tiny-xverse', type: 'Q8_0' },
  { preset: 'tiny-nanbeige', type: 'F32' },
  { preset: 'tiny-arcee', type: 'F32' },
  { preset: 'tiny-maincoder', type: 'F32' },
  { preset: 'tiny-orion', type: 'F32' },
  { preset: 'tiny-olmo', type: 'F32' },
  { preset: 'tiny-starcoder2', type: 'Q4_K_M' },
  { preset: 'tiny-minicpm-default', type: 'F32' },
  { preset: 'tiny-stablelm-12b', type: 'F32' },
  { preset: 'tiny-nemotron', type: 'Q8_0' },
  { preset: 'tiny-gptneox', type: 'F32' },
  { preset: 'tiny-phi2-fused', type: 'Q8_0' },
  { preset: 'tiny-falcon-40b', type: 'F32' },
  { preset: 'tiny-chatglm', type: 'Q4_K_M' },
  { preset: 'tiny-gpt2', type: 'F32' },
  { preset: 'tiny-starcoder', type: 'Q8_0' },
  { preset: 'tiny-codeshell-split', type: 'F32' },
  { preset: 'tiny-qwen', type: 'Q4_K_M' },
  { preset: 'tiny-bloom', type: 'F32' },
  { preset: 'tiny-mpt', type: 'Q8_0' },
  { preset: 'tiny-refact', type: 'Q4_K_M' },
  { preset: 'tiny-baichuan-13b', type: 'F32' },
  { preset: 'tiny-jais', type: 'Q4_K_M' },
  { preset: 'tiny-jais2', type: 'F32' },
  { preset: 'tiny-bitnet', type: 'TQ2_0' },
  { preset: 'tiny-exaone-moe', type: 'F32' },
  { preset: 'tiny-afmoe', type: 'F32' },
  { preset: 'tiny-mistral4', type: 'F32' },
  { preset: 'tiny-mistral3', type: 'F32' },
  { preset: 'tiny-hy-v3', type: 'F32' },
  { preset: 'tiny-phi3', type: 'F32' },
  { preset: 'tiny-mixtral', type: 'Q4_K_M' },
  { preset: 'tiny-qwen3moe', type: 'Q8_0' },
  { preset: 'tiny-bert', type: 'F32' },
  { preset: 'tiny-nomic-bert', type: 'Q8_0' },
  { preset: 'tiny-nomic-bert-moe', type: 'F32' },
  { preset: 'tiny-jina-bert-v2', type: 'F32' },
  { preset: 'tiny-jina-bert-v3', type: 'F32' },
  { preset: 'tiny-t5encoder', type: 'F32' },
  { preset: 'tiny-t5encoder-relu', type: 'Q8_0' },
  { preset: 'tiny-t5', type: 'F32' },
  { preset: 'tiny-modern-bert', type: 'Q8_0' },
  { preset: 'tiny-gemma-embedding', type: 'F32' },
  { preset: 'tiny-eurobert', type: 'Q4_K_M' },
  { preset: 'tiny-neo-bert', type: 'F32' },
  { preset: 'tiny-llama-embed', type: 'F32' },
];

export function baseModelName(b: { preset: string; type: string }): string {
  return `${b.preset}-${b.type}`;
}

/** Writes a base model into dir (once) and returns its path. */
export function writeBaseModel(dir: string, b: (typeof BASE_MODELS)[number]): string {
  const out = path.join(dir, `${baseModelName(b)}.gguf`);
  if (fs.existsSync(out)) return out;
  const config = { ...getPreset(b.preset).config };
  if (b.layers) config.nLayers = b.layers;
  writeModel({ config, fileType: b.type, seed: 1, out });
  return out;
}

/** Applies a mutation to a copy of the model and writes it; null when it does not apply. */
export function writeMutation(base: string, m: Mutation, out: string): string | null {
  const img = cloneImage(readImage(base));
  try {
    m.apply(img);
    writeImage(img, out);
    return out;
  } catch (e) {
    if (e instanceof SkipMutation) return null;
    // Shapes a type's blocks cannot hold are byte-level errors (the GGUF parser's domain).
    if (/not a multiple|block size|blockSize|incomplete|out of range/i.test((e as Error).message)) return null;
    throw e;
  }
}

function pad(s: string, n: number): string {
  return s.length >= n ? s : s + ' '.repeat(n - s.length);
}

/** Outcome counts per row key, as a text table. */
export function summaryTable(results: FuzzResult[], key: (r: FuzzResult) => string): string {
  const outcomes: Outcome[] = ['clean-error', 'success', 'unclear-error', 'nan', 'unchecked-alloc', 'crash', 'hang'];
  const rows = new Map<string, Record<string, number>>();
  for (const r of results) {
    const k = key(r);
    const row = rows.get(k) ?? Object.fromEntries(outcomes.map((o) => [o, 0]));
    row[r.outcome]++;
    rows.set(k, row);
  }
  const total = Object.fromEntries(outcomes.map((o) => [o, results.filter((r) => r.outcome === o).length]));
  const lines = [[pad('', 28), ...outcomes.map((o) => pad(o, 15))].join(' ')];
  for (const [k, row] of [...rows.entries(), ['TOTAL', total] as [string, Record<string, number>]]) lines.push([pad(k, 28), ...outcomes.map((o) => pad(String(row[o]), 15))].join(' '));
  return lines.join('\n');
}

async function llamaAccepts(file: string): Promise<boolean> {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { llamaRefScript } = require('../parity/llama-ref') as typeof import('../parity/llama-ref');
  return new Promise((resolve) => {
    const out = path.join(os.tmpdir(), `kail-fuzz-llama-${process.pid}`);
    const c = spawn(process.execPath, [llamaRefScript(), 'logits', '--model', file, '--tokens', '1,2', '--out', out, '--ctx', '256'], {
      stdio: 'ignore',
      env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true' },
    });
    const timer = setTimeout(() => c.kill('SIGKILL'), 60_000);
    c.on('exit', (code) => {
      clearTimeout(timer);
      resolve(code === 0);
    });
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      presets: { type: 'string' },
      filter: { type: 'string' },
      limit: { type: 'string' },
      out: { type: 'string', default: 'semantic-fuzz-report.json' },
      dir: { type: 'string' },
      llama: { type: 'boolean', default: false },
      'keep-files': { type: 'boolean', default: false },
    },
  });
  const dir = values.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'kail-fuzz-'));
  fs.mkdirSync(dir, { recursive: true });
  const wanted = values.presets?.split(',');
  const filter = values.filter ? new RegExp(values.filter) : null;
  const limit = values.limit ? Number(values.limit) : Infinity;
  const bases = BASE_MODELS.filter((b) => !wanted || wanted.includes(b.preset) || wanted.includes(baseModelName(b)));
  const worker = new FuzzWorker();
  const results: FuzzResult[] = [];
  const t0 = Date.now();
  try {
    for (const b of bases) {
      const base = writeBaseModel(dir, b);
      const name = baseModelName(b);
      // The unmutated model must serve cleanly, or nothing below means anything.
      const kvTarget = b.target ? writeBaseModel(dir, { preset: b.target, type: b.type }) : undefined;
      const hiddenTarget = b.hiddenTarget ? writeBaseModel(dir, { preset: b.hiddenTarget, type: b.type }) : undefined;
      const ref = await worker.run({ id: `${name}:base`, path: base, mtp: b.mtp, kvTarget, hiddenTarget });
      if (ref.outcome !== 'success') throw new Error(`${name}: the unmutated model does not serve: ${JSON.stringify(ref)}`);
      // Quantized bases: the tensor mutations only (the metadata is the same as the F32 file's).
      const all = mutationsFor(readImage(base), SUPPORTED_ARCHITECTURES).filter((m) => (b.type === 'F32' || m.id.startsWith('tensor:')) && (!filter || filter.test(m.id)));
      let n = 0;
      for (const m of all) {
        if (n >= limit) break;
        const file = path.join(dir, `mut-${process.pid}.gguf`);
        if (!writeMutation(base, m, file)) continue;
        n++;
        const r = await worker.run({ id: `${name}:${m.id}`, path: file, mtp: b.mtp, kvTarget, hiddenTarget });
        const res: FuzzResult = { model: name, mutation: m.id, group: m.group, outcome: r.outcome, ...r.result };
        if (values.llama && r.outcome === 'success') res.llamaAccepts = await llamaAccepts(file);
        if (BAD_OUTCOMES.includes(r.outcome)) {
          process.stderr.write(`${r.outcome.toUpperCase()} ${name} ${m.id} [${res.stage ?? ''}] ${res.code ?? ''} ${(res.message ?? '').slice(0, 300)}\n`);
          if (values['keep-files']) fs.copyFileSync(file, path.join(dir, `${name}--${m.id.replace(/[^\w.-]+/g, '_')}.gguf`));
        }
        results.push(res);
      }
      process.stderr.write(`${name}: ${n} mutations, ${((Date.now() - t0) / 1000).toFixed(0)} s so far\n`);
    }
  } finally {
    worker.close();
  }
  fs.writeFileSync(values.out!, JSON.stringify(results, null, 1));
  console.log(summaryTable(results, (r) => r.model));
  console.log();
  console.log(summaryTable(results, (r) => r.group));
  const succ = results.filter((r) => r.llamaAccepts !== undefined);
  if (succ.length) console.log(`\nsuccesses checked with llama.cpp: ${succ.length}, llama.cpp refuses ${succ.filter((r) => !r.llamaAccepts).length}`);
  console.log(`\n${results.length} mutated files in ${((Date.now() - t0) / 1000).toFixed(0)} s; report: ${values.out}`);
}

if (require.main === module) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
