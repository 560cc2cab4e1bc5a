// llama.cpp's DFlash draft (arch dflash) bound to its target, through the dflash-ref program
// (dflash-ref/dflash-ref.cpp: its header is the contract). node-llama-cpp does not expose DFlash
// drafting; its prebuilt libllama does (llama-ext.h's layer-input extraction and target layer ids,
// llama_set_causal_attn, llama_vocab_mask, llama_context_params.ctx_other), so the program links it
// directly; it is built once per source and library version (mtp-ref's build script) and runs as a
// child process.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { parityRefBinary, runProgram } from './cached-build';

export interface DflashRef {
  nTokens: number;
  nVocab: number;
  nEmbdTgt: number;
  targetLayers: number[];
  tokens: number[];
  /** Round 1's block sits at position `split` after the feature rows of positions 0..split-1. */
  split: number;
  /** Rows per noise block (the last token, then block - 1 masks). */
  block: number;
  blockSize: number;
  maskToken: number;
  causal: boolean;
  /** [n][nVocab] */
  targetLogits: Float32Array;
  /** [n][L nEmbdTgt]: row k = the target layers' inputs at pos k. */
  features: Float32Array;
  /** [block][nVocab]: the block [tokens[split], mask...] at pos split. */
  block1Logits: Float32Array;
  /** [block][nVocab]: the block [tokens[n-1], mask...] at pos n-1, after the cache was trimmed to split and positions split..n-2 injected. */
  block2Logits: Float32Array;
}

function readF32(file: string, n: number): Float32Array {
  const buf = fs.readFileSync(file);
  const a = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  if (a.length !== n) throw new Error(`${file}: ${a.length} floats, expected ${n}`);
  return a;
}

/** Runs llama.cpp's target (its layers extracted) and DFlash draft over `tokens` (see dflash-ref.cpp). */
export async function llamaDflashRef(target: string, draft: string, tokens: number[], opts: { split?: number; block?: number; defaultRun?: boolean; threads?: number; timeoutMs?: number } = {}): Promise<DflashRef> {
  if (tokens.length < 2) throw new Error('dflash-ref: needs at least two tokens');
  const bin = await parityRefBinary('dflash-ref');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-dflash-out-'));
  try {
    const out = path.join(dir, 'dflash');
    const args = ['--target', path.resolve(target), '--draft', path.resolve(draft), '--tokens', tokens.join(','), '--out', out, '--threads', String(opts.threads ?? 2)];
    if (opts.split !== undefined) args.push('--split', String(opts.split));
    if (opts.block !== undefined) args.push('--block', String(opts.block));
    // (llama.cpp's default run: F16 K and V caches, flash attention auto; a quantized file's spread.)
    if (opts.defaultRun) args.push('--default-run', '1');
    await runProgram(bin, args, opts.timeoutMs ?? 120_000, 'dflash-ref');
    const meta = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8')) as {
      n_tokens: number; n_vocab: number; n_embd_tgt: number; target_layers: number[]; tokens: number[]; split: number; block: number; block_size: number; mask_token: number; causal: boolean; files: Record<string, string>;
    };
    const { n_tokens: n, n_vocab: V, n_embd_tgt: Et, files } = meta;
    const B = meta.block;
    return {
      nTokens: n,
      nVocab: V,
      nEmbdTgt: Et,
      targetLayers: meta.target_layers,
      tokens: meta.tokens,
      split: meta.split,
      block: B,
      blockSize: meta.block_size,
      maskToken: meta.mask_token,
      causal: meta.causal,
      targetLogits: readF32(files.target_logits, n * V),
      features: readF32(files.features, n * meta.target_layers.length * Et),
      block1Logits: readF32(files.block1_logits, B * V),
      block2Logits: readF32(files.block2_logits, B * V),
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
