// Typed access to the llama.cpp reference harness (llama-ref.mjs), run as a child process so
// node-llama-cpp's native library never shares a process with our addon or with jest.
import { execFile, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';

import { buildCached } from './cached-build';

export type LlamaKvType = 'f32' | 'f16' | 'bf16' | 'q8_0' | 'q4_0' | 'q4_1' | 'iq4_nl' | 'q5_0' | 'q5_1';

export interface LlamaRefOptions {
  /** CPU threads. Default 2. */
  threads?: number;
  /** KV cache type: 'f32' (default; the exact reference), 'f16' (llama.cpp's default) or 'q8_0' (with flash attention). */
  kv?: LlamaKvType;
  /** V's cache type apart (-ctv); default kv. */
  kvV?: LlamaKvType;
  /** llama.cpp's --swa-full (node-llama-cpp's swaFullCache): sliding-window layers cache every position. */
  swaFull?: boolean;
  /** Flash attention: 'off' (default; the exact reference), 'on' or 'auto' (llama.cpp's default). */
  flashAttention?: 'off' | 'on' | 'auto';
  /** Context size. Default: 512, or more for long inputs. */
  ctx?: number;
  /** Logical batch size. Default min(512, ctx). */
  batch?: number;
  /** Kill the child after this long. Default 120 s. */
  timeoutMs?: number;
}

export interface LlamaLogits {
  nTokens: number;
  nVocab: number;
  /** Row-major [nTokens][nVocab]; row i holds the logits after tokens[0..i]. */
  logits: Float32Array;
  meta: Record<string, unknown>;
}

/** Path of the harness script (it stays a source file: it is plain ESM and is not compiled). */
export function llamaRefScript(): string {
  const candidates = [path.join(__dirname, 'llama-ref.mjs'), path.resolve(__dirname, '../../src/parity/llama-ref.mjs')];
  const found = candidates.find((p) => fs.existsSync(p));
  if (!found) throw new Error(`llama-ref.mjs not found; looked in ${candidates.join(', ')}`);
  return found;
}

function optionArgs(o: LlamaRefOptions): string[] {
  const a: string[] = [];
  if (o.threads !== undefined) a.push('--threads', String(o.threads));
  if (o.kv !== undefined) a.push('--kv', o.kv);
  if (o.kvV !== undefined) a.push('--kv-v', o.kvV);
  if (o.swaFull) a.push('--swa-full');
  if (o.flashAttention !== undefined) a.push('--flash-attention', o.flashAttention);
  if (o.ctx !== undefined) a.push('--ctx', String(o.ctx));
  if (o.batch !== undefined) a.push('--batch', String(o.batch));
  return a;
}

let shim: Promise<string | null> | undefined;

/**
 * The no-repack shim (tools/src/bench/no-repack: llama.cpp with use_extra_bufts off, as
 * llama-cli's --no-repack), built once. The reference computes from the file's own layout; and on
 * CPUs with AMX, llama.cpp's extra weight buffers fail MoE graphs outright (GGML_ASSERT
 * cur_backend_id != -1 in ggml-backend.cpp, seen for deepseek2, glm4moe and olmoe files). Null
 * (with a warning) where it cannot be built: then llama.cpp runs with its defaults.
 */
export function noRepackShim(): Promise<string | null> {
  shim ??= (async () => {
    if (process.platform !== 'linux') return null;
    const here = [path.join(__dirname, '../bench/no-repack'), path.resolve(__dirname, '../../src/bench/no-repack')].find((p) => fs.existsSync(path.join(p, 'build.sh')));
    const root = path.resolve(__dirname, '../../..');
    const bundle = path.join(root, 'node_modules/node-llama-cpp/llama/gitRelease.bundle');
    try {
      if (!here || !fs.existsSync(bundle)) throw new Error(`no-repack sources or ${bundle} missing`);
      const st = fs.statSync(bundle);
      const key = fs.readFileSync(path.join(here, 'no-repack-shim.c'), 'utf8') + fs.readFileSync(path.join(here, 'build.sh'), 'utf8') + `${st.size}:${st.mtimeMs}`;
      return await buildCached('kail-no-repack', key, 'no-repack-shim.so', (dir) =>
        new Promise<void>((resolve, reject) =>
          execFile('bash', [path.join(here, 'build.sh'), dir], { timeout: 300_000 }, (err, _o, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve())),
        ),
      );
    } catch (e) {
      process.stderr.write(`llama-ref: the no-repack shim could not be built (${(e as Error).message.split('\n')[0]}); llama.cpp runs with its repacked weight buffers\n`);
      return null;
    }
  })();
  return shim;
}

/**
 * The harness's serve mode as a queue: one child process runs the commands one after another
 * (node-llama-cpp's start, which tests its binding in a child process of its own, costs over a
 * second each time). The child ends after 5 idle seconds, and keeps this process alive only while it
 * runs a command; a crash or a timeout fails the command that was running and the next one starts a
 * new child.
 */
class RefServer {
  private child: ChildProcessWithoutNullStreams | undefined;
  private readonly queue: { args: string[]; timeoutMs: number; resolve: (stdout: string) => void; reject: (e: Error) => void }[] = [];
  private running: { id: number; args: string[]; timer: NodeJS.Timeout; resolve: (stdout: string) => void; reject: (e: Error) => void } | undefined;
  private nextId = 0;
  private stderrTail = '';
  private idle: NodeJS.Timeout | undefined;

  constructor(private readonly env: NodeJS.ProcessEnv) {}

  run(args: string[], timeoutMs: number): Promise<string> {
    return new Promise((resolve, reject) => {
      this.queue.push({ args, timeoutMs, resolve, reject });
      this.pump();
    });
  }

  private start(): ChildProcessWithoutNullStreams {
    const child = spawn(process.execPath, [llamaRefScript(), 'serve'], { env: this.env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.stderrTail = '';
    createInterface({ input: child.stdout, crlfDelay: Infinity }).on('line', (line) => {
      if (line.trim()) this.reply(line);
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d: string) => {
      this.stderrTail = (this.stderrTail + d).slice(-8192);
    });
    child.stdin.on('error', () => {});
    child.on('exit', (code, signal) => {
      if (this.child !== child) return;
      this.child = undefined;
      this.fail(new Error(`llama-ref exited (${signal ?? `code ${code}`})\n${this.stderrTail}`));
    });
    child.on('error', (e) => {
      if (this.child !== child) return;
      this.child = undefined;
      this.fail(e);
    });
    return child;
  }

  /** An idle child (and its pipes) does not keep this process alive; one running a command does. */
  private static hold(child: ChildProcessWithoutNullStreams, on: boolean): void {
    if (on) child.ref();
    else child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr] as unknown as { ref?: () => void; unref?: () => void }[]) {
      if (on) s.ref?.();
      else s.unref?.();
    }
  }

  private pump(): void {
    if (this.running || this.queue.length === 0) return;
    if (this.idle) clearTimeout(this.idle);
    this.idle = undefined;
    const job = this.queue.shift()!;
    const child = (this.child ??= this.start());
    RefServer.hold(child, true);
    const id = this.nextId++;
    this.stderrTail = '';
    const timer = setTimeout(() => {
      this.child = undefined;
      child.kill('SIGKILL');
      this.fail(new Error(`timed out after ${job.timeoutMs} ms`));
    }, job.timeoutMs);
    timer.unref();
    this.running = { id, args: job.args, timer, resolve: job.resolve, reject: job.reject };
    child.stdin.write(JSON.stringify({ id, args: job.args }) + '\n');
  }

  private reply(line: string): void {
    const r = this.running;
    let msg: { id?: number; ok?: boolean; stdout?: string; error?: string };
    try {
      msg = JSON.parse(line) as typeof msg;
    } catch {
      msg = { id: r?.id, ok: false, error: `unparsable reply: ${line.slice(0, 300)}` };
    }
    if (!r || msg.id !== r.id) return;
    clearTimeout(r.timer);
    this.running = undefined;
    if (msg.ok) r.resolve(msg.stdout ?? '');
    else r.reject(new Error(`llama-ref ${r.args[0]} failed: ${msg.error}\n${this.stderrTail}`));
    this.afterJob();
  }

  /** Fails the running command (the child is gone or killed); queued ones go to a new child. */
  private fail(e: Error): void {
    const r = this.running;
    this.running = undefined;
    if (r) {
      clearTimeout(r.timer);
      r.reject(new Error(`llama-ref ${r.args[0]} failed: ${e.message}`));
    }
    this.afterJob();
  }

  private afterJob(): void {
    if (this.queue.length) {
      this.pump();
      return;
    }
    const child = this.child;
    if (!child) return;
    RefServer.hold(child, false);
    this.idle = setTimeout(() => {
      if (this.child === child && !this.running) {
        this.child = undefined;
        child.stdin.end();
      }
    }, 5_000);
    this.idle.unref();
  }
}

let server: RefServer | undefined;

/** Runs the harness with `args` and parses its JSON stdout. */
export async function runLlamaRef<T = unknown>(args: string[], timeoutMs = 120_000): Promise<T> {
  const preload = await noRepackShim();
  server ??= new RefServer({
    ...process.env,
    NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true',
    ...(preload ? { LD_PRELOAD: [preload, process.env.LD_PRELOAD].filter(Boolean).join(':') } : {}),
  });
  const stdout = await server.run(args, timeoutMs);
  try {
    return JSON.parse(stdout) as T;
  } catch {
    throw new Error(`llama-ref ${args[0]}: unparsable output: ${stdout.slice(0, 500)}`);
  }
}

/** Reads OUT.f32 + OUT.json as written by the harness. */
export function readLogitsFiles(out: string): LlamaLogits {
  const meta = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8')) as Record<string, unknown> & { n_tokens: number; n_vocab: number };
  const buf = fs.readFileSync(`${out}.f32`);
  const logits = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  if (logits.length !== meta.n_tokens * meta.n_vocab) throw new Error(`${out}.f32: ${logits.length} floats, expected ${meta.n_tokens}x${meta.n_vocab}`);
  return { nTokens: meta.n_tokens, nVocab: meta.n_vocab, logits, meta };
}

function tempPrefix(): { dir: string; out: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-llama-ref-'));
  return { dir, out: path.join(dir, 'logits') };
}

/** llama.cpp's embedding of `tokens` (its embedding context; last-token pooling for a file without a pooling type), not normalized. */
export async function llamaEmbedding(model: string, tokens: number[], opts: LlamaRefOptions = {}): Promise<number[]> {
  const r = await runLlamaRef<{ embedding: number[] }>(['embed', '--model', model, '--tokens', tokens.join(','), ...optionArgs(opts)], opts.timeoutMs);
  return r.embedding;
}

/** llama.cpp's raw logits for every position of `tokens`. */
export async function llamaLogits(model: string, tokens: number[], opts: LlamaRefOptions = {}): Promise<LlamaLogits> {
  const [r] = await llamaLogitsBatch([{ model, tokens }], opts);
  return r;
}

/**
 * Several logits runs in one child process (llama.cpp loads once; consecutive jobs on one file
 * load it once). A job gives `tokens`, or `text`
 * for llama.cpp to tokenize (BOS as the model asks; `meta.tokens`, `meta.detokenized` report it);
 * `generate: n` also records n greedy tokens after the input in `meta.generated`.
 */
export async function llamaLogitsBatch(
  jobs: {
    model: string;
    tokens?: number[];
    text?: string;
    generate?: number;
    lora?: { path: string; scale?: number }[];
    /** A context shift after tokens[0, at) (llama-ref.mjs): the logits are of tokens[at, n) only. */
    shift?: { at: number; keep: number; discard: number };
    /** This job's KV cache type (K and V) and flash attention, in place of `opts`' (a context of its own; the model's load is shared with the jobs beside it on the same file). */
    kv?: LlamaKvType;
    flashAttention?: 'off' | 'on' | 'auto';
  }[],
  opts: LlamaRefOptions = {},
): Promise<LlamaLogits[]> {
  const { dir } = tempPrefix();
  try {
    const withOut = jobs.map(({ flashAttention, ...j }, i) => ({ ...j, ...(flashAttention !== undefined ? { 'flash-attention': flashAttention } : {}), out: path.join(dir, `job${i}`) }));
    const jobsFile = path.join(dir, 'jobs.json');
    fs.writeFileSync(jobsFile, JSON.stringify(withOut));
    await runLlamaRef(['batch', '--jobs', jobsFile, ...optionArgs(opts)], opts.timeoutMs);
    return withOut.map((j) => readLogitsFiles(j.out));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** llama.cpp's reranking score of each token sequence (a ranking context over the file's classification head). */
/** llama.cpp's pooled embedding (not normalized) of each token sequence, one model load for all. */
export async function llamaEmbeddings(model: string, inputs: number[][], opts: { timeoutMs?: number; lora?: string[] } = {}): Promise<number[][]> {
  const { dir } = tempPrefix();
  try {
    const file = path.join(dir, 'inputs.json');
    fs.writeFileSync(file, JSON.stringify(inputs));
    const lora = (opts.lora ?? []).flatMap((f) => ['--lora', f]);
    return (await runLlamaRef<{ embeddings: number[][] }>(['embed', '--model', model, '--tokens-file', file, ...lora], opts.timeoutMs)).embeddings;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export async function llamaRankScores(model: string, inputs: number[][], opts: { timeoutMs?: number } = {}): Promise<{ scores: number[]; normalized: boolean }> {
  const { dir } = tempPrefix();
  try {
    const file = path.join(dir, 'inputs.json');
    fs.writeFileSync(file, JSON.stringify(inputs));
    return await runLlamaRef<{ scores: number[]; normalized: boolean }>(['rank', '--model', model, '--tokens-file', file], opts.timeoutMs);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** llama.cpp's tokenization of `text`; `bos` prepends BOS when the model's metadata asks for it. */
export async function llamaTokenize(model: string, text: string, opts: { special?: boolean; bos?: boolean; timeoutMs?: number } = {}): Promise<number[]> {
  const args = ['tokenize', '--model', model, '--text', text];
  if (opts.special) args.push('--special');
  if (opts.bos) args.push('--bos');
  return (await runLlamaRef<{ tokens: number[] }>(args, opts.timeoutMs)).tokens;
}

export async function llamaDetokenize(model: string, tokens: number[], opts: { special?: boolean; timeoutMs?: number } = {}): Promise<string> {
  const args = ['detokenize', '--model', model, '--tokens', tokens.join(',')];
  if (opts.special) args.push('--special');
  return (await runLlamaRef<{ text: string }>(args, opts.timeoutMs)).text;
}

/** Greedy continuation of `prompt` (argmax of raw logits, no penalties). */
export async function llamaGenerateGreedy(
  model: string,
  prompt: number[],
  opts: LlamaRefOptions & { maxTokens?: number; stopAtEog?: boolean } = {},
): Promise<{ tokens: number[]; text: string }> {
  const args = ['generate', '--model', model, '--tokens', prompt.join(','), '--max-tokens', String(opts.maxTokens ?? 16), ...optionArgs(opts)];
  if (opts.stopAtEog) args.push('--stop-at-eog');
  return runLlamaRef<{ tokens: number[]; text: string }>(args, opts.timeoutMs);
}

/** One generation of `llamaGenerateMany`: greedy, under a GBNF grammar file where one is given. */
export interface LlamaGenerateJob {
  tokens: number[];
  maxTokens?: number;
  grammarFile?: string;
  /** Token ids llama.cpp may never pick (a logit bias of -infinity). */
  ban?: number[];
  stopAtEog?: boolean;
}

/**
 * Several generations on one loaded model, in one harness process (starting the harness and
 * loading llama.cpp cost more than a short generation): each from a cleared context.
 */
export async function llamaGenerateMany(
  model: string,
  jobs: LlamaGenerateJob[],
  opts: LlamaRefOptions = {},
): Promise<{ prompt: number[]; tokens: number[]; eog: boolean; text: string }[]> {
  const { dir, out } = tempPrefix();
  try {
    const file = `${out}-jobs.json`;
    fs.writeFileSync(file, JSON.stringify(jobs.map((j) => ({ tokens: j.tokens, 'max-tokens': j.maxTokens, 'grammar-file': j.grammarFile, ban: j.ban, 'stop-at-eog': j.stopAtEog }))));
    const r = await runLlamaRef<{ results: { prompt: number[]; tokens: number[]; eog: boolean; text: string }[] }>(['generate', '--model', model, '--jobs', file, ...optionArgs(opts)], opts.timeoutMs);
    return r.results;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * One model loaded in llama.cpp for many passes (llama-ref.mjs's `passes`): `logits(tokens)`
 * evaluates the tokens from a cleared sequence and gives every position's logits, e.g. a
 * diffusion loop's canvas at each step, one non-causal pass apiece. close() ends the child.
 */
export async function llamaPasses(model: string, opts: LlamaRefOptions = {}): Promise<{ logits(tokens: ArrayLike<number>): Promise<Float32Array>; close(): Promise<void> }> {
  const { spawn } = await import('node:child_process');
  const preload = await noRepackShim();
  const { dir, out } = tempPrefix();
  const child = spawn(process.execPath, [llamaRefScript(), 'passes', '--model', model, '--out', out, ...optionArgs(opts)], {
    env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true', ...(preload ? { LD_PRELOAD: [preload, process.env.LD_PRELOAD].filter(Boolean).join(':') } : {}) },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const waiting: { resolve: (line: string) => void; reject: (e: Error) => void }[] = [];
  let buf = '';
  const fail = (e: Error) => {
    for (const w of waiting.splice(0)) w.reject(e);
  };
  child.stdout.on('data', (d: Buffer) => {
    buf += d.toString();
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      waiting.shift()?.resolve(line);
    }
  });
  child.on('exit', (code) => fail(new Error(`llama-ref passes exited (${code}): ${stderr}`)));
  const next = (timeoutMs = opts.timeoutMs ?? 120_000) =>
    new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`llama-ref passes: no answer in ${timeoutMs} ms\n${stderr}`)), timeoutMs);
      waiting.push({ resolve: (l) => (clearTimeout(timer), resolve(l)), reject: (e) => (clearTimeout(timer), reject(e)) });
    });
  const ready = await next();
  if (ready !== 'ready') throw new Error(`llama-ref passes: ${ready}\n${stderr}`);
  return {
    async logits(tokens) {
      const answer = next();
      child.stdin.write(JSON.stringify(Array.from(tokens)) + '\n');
      const r = JSON.parse(await answer) as { logits: string; nTokens: number; nVocab: number };
      const b = fs.readFileSync(r.logits);
      fs.rmSync(r.logits);
      return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
    },
    async close() {
      child.stdin.end();
      await new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', () => resolve())));
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
