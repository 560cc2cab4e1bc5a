// llama.cpp's multi-token-prediction (NextN) forward, through the mtp-ref program
// (mtp-ref/mtp-ref.cpp: its header is the exact input/output contract). node-llama-cpp does not
// expose MTP, so the program links its prebuilt libllama directly; it is built once per source
// and library version into a cache directory under the OS temp dir, and runs as a child process.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { buildCached } from './cached-build';

export interface MtpRefOptions {
  /** CPU threads. Default 2. */
  threads?: number;
  /** Chained draft steps after the MTP rows (K). Default 1. */
  draftSteps?: number;
  /** Kill the child after this long. Default 120 s. */
  timeoutMs?: number;
}

export interface MtpRef {
  nTokens: number;
  nVocab: number;
  nEmbd: number;
  /** Trunk blocks (the NextN block is block nLayer). */
  nLayer: number;
  nLayerNextn: number;
  tokens: number[];
  /** [nTokens][nVocab]: row k = the trunk's logits after tokens[0..k]. */
  targetLogits: Float32Array;
  /** [nTokens][nEmbd]: row k = output_norm(final residual) at pos k (what the LM head multiplies). */
  targetH: Float32Array;
  /** [nTokens][nVocab]: row k = the MTP block's logits for (tokens[k], pos k, targetH row k-1 or zeros). */
  mtpLogits: Float32Array;
  /** [nTokens][nEmbd]: row k = the MTP block's shared_head_norm output. */
  mtpH: Float32Array;
  /**
   * The chained steps' tokens: draftTokens[j] = argmax (lowest id on ties) of the previous logits
   * row (step 0: mtpLogits row nTokens-1), fed at pos nTokens+j with the previous h row.
   */
  draftTokens: number[];
  /** Step 0's position (nTokens). */
  draftPos: number;
  /** [draftSteps][nVocab]: row j = the MTP block's logits for step j, after the MTP rows and steps < j. */
  draftLogits: Float32Array;
  /** [draftSteps][nEmbd] */
  draftH: Float32Array;
  meta: Record<string, unknown>;
}

function sourceDir(): string {
  const candidates = [path.join(__dirname, 'mtp-ref'), path.resolve(__dirname, '../../src/parity/mtp-ref')];
  const found = candidates.find((p) => fs.existsSync(path.join(p, 'mtp-ref.cpp')));
  if (!found) throw new Error(`mtp-ref sources not found; looked in ${candidates.join(', ')}`);
  return found;
}

function run(file: string, args: string[], timeoutMs: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${what} failed: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

let building: Promise<string> | undefined;

/**
 * Path of the built mtp-ref binary: built on first use (about 5 s: headers from node-llama-cpp's
 * source bundle, g++) into `<tmp>/kail-mtp-ref-<hash>`, keyed by the sources and the library.
 */
export function mtpRefBinary(): Promise<string> {
  building ??= buildOnce().catch((e: unknown) => {
    building = undefined;
    throw e;
  });
  return building;
}

async function buildOnce(): Promise<string> {
  if (process.platform !== 'linux' || process.arch !== 'x64') throw new Error(`mtp-ref: needs node-llama-cpp's linux-x64 prebuilt; this is ${process.platform}-${process.arch}`);
  const src = sourceDir();
  const script = path.join(src, 'build.sh');
  let key = '';
  for (const f of ['mtp-ref.cpp', 'build.sh', '../ref-common.h']) key += fs.readFileSync(path.join(src, f), 'utf8');
  const root = path.resolve(src, '../../../..');
  const lib = path.join(process.env.MTP_REF_LLAMA_BINS ?? path.join(root, 'node_modules/@node-llama-cpp/linux-x64/bins/linux-x64'), 'libllama.v0.5.0.so');
  if (!fs.existsSync(lib)) throw new Error(`mtp-ref: ${lib} not found (node-llama-cpp's linux-x64 prebuilt; run npm install, or set MTP_REF_LLAMA_BINS)`);
  const st = fs.statSync(lib);
  key += `${lib}:${st.size}:${st.mtimeMs}`;
  return buildCached('kail-mtp-ref', key, 'mtp-ref', async (dir) => {
    await run('bash', [script, dir], 300_000, 'mtp-ref build');
  });
}

function readF32(file: string, n: number): Float32Array {
  const buf = fs.readFileSync(file);
  const a = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  if (a.length !== n) throw new Error(`${file}: ${a.length} floats, expected ${n}`);
  return a;
}

/** Runs llama.cpp's target and MTP forward over `tokens` (see mtp-ref.cpp for the contract). */
export async function llamaMtpRef(model: string, tokens: number[], opts: MtpRefOptions = {}): Promise<MtpRef> {
  if (tokens.length === 0) throw new Error('mtp-ref: needs at least one token');
  const bin = await mtpRefBinary();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-mtp-out-'));
  try {
    const out = path.join(dir, 'mtp');
    const args = ['--model', path.resolve(model), '--tokens', tokens.join(','), '--out', out, '--threads', String(opts.threads ?? 2), '--draft-steps', String(opts.draftSteps ?? 1)];
    await run(bin, args, opts.timeoutMs ?? 120_000, 'mtp-ref');
    const meta = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8')) as Record<string, unknown> & {
      n_tokens: number; n_vocab: number; n_embd: number; n_layer: number; n_layer_nextn: number; tokens: number[];
      draft_steps: number; draft_tokens: number[]; draft_pos: number; files: Record<string, string>;
    };
    const { n_tokens: n, n_vocab: V, n_embd: E, draft_steps: K, files } = meta;
    return {
      nTokens: n,
      nVocab: V,
      nEmbd: E,
      nLayer: meta.n_layer,
      nLayerNextn: meta.n_layer_nextn,
      tokens: meta.tokens,
      targetLogits: readF32(files.target_logits, n * V),
      targetH: readF32(files.target_h, n * E),
      mtpLogits: readF32(files.mtp_logits, n * V),
      mtpH: readF32(files.mtp_h, n * E),
      draftTokens: meta.draft_tokens,
      draftPos: meta.draft_pos,
      draftLogits: readF32(files.draft_logits, K * V),
      draftH: readF32(files.draft_h, K * E),
      meta,
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
