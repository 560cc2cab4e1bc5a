// llama.cpp's Gemma 4 assistant draft (arch gemma4-assistant) over its gemma4 target's KV cache,
// through the gemma4-assistant-ref program (gemma4-assistant-ref/gemma4-assistant-ref.cpp: its
// header is the contract). node-llama-cpp does not expose these drafts; its prebuilt libllama does
// (llama-ext.h's nextn embeddings and llama_context_params.ctx_other), so the program links it
// directly; it is built once per source and library version (mtp-ref's build script) and runs as a
// child process.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { parityRefBinary, runProgram } from './cached-build';

export interface Gemma4AssistantRef {
  nTokens: number;
  nVocab: number;
  /** The draft's n_embd. */
  nEmbd: number;
  /** The target's n_embd (the width of the hidden rows both exchange). */
  nEmbdTgt: number;
  tokens: number[];
  /** [n-1][nVocab]: row m-1 = the target's logits at position m-1 (decoded one token at a time). */
  targetLogits: Float32Array;
  /** [n-1][nEmbdTgt]: the target's post-output-norm state at position m-1. */
  targetH: Float32Array;
  /** [n-1][nVocab]: row m-1 = the draft row (tokens[m], targetH row m-1) at position m. */
  draftLogits: Float32Array;
  /** [n-1][nEmbdTgt]: its h_next. */
  draftH: Float32Array;
  /** Chained steps at position n-1: chainTokens[j] = argmax of the previous logits row, with the previous h row. */
  chainTokens: number[];
  /** [K][nVocab] */
  chainLogits: Float32Array;
  /** [K][nEmbdTgt] */
  chainH: Float32Array;
}

function readF32(file: string, n: number): Float32Array {
  const buf = fs.readFileSync(file);
  const a = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  if (a.length !== n) throw new Error(`${file}: ${a.length} floats, expected ${n}`);
  return a;
}

/** Runs llama.cpp's gemma4 target and its assistant draft over `tokens` (see gemma4-assistant-ref.cpp). */
export async function llamaGemma4AssistantRef(target: string, draft: string, tokens: number[], opts: { draftSteps?: number; threads?: number; timeoutMs?: number } = {}): Promise<Gemma4AssistantRef> {
  if (tokens.length < 2) throw new Error('gemma4-assistant-ref: needs at least two tokens');
  const bin = await parityRefBinary('gemma4-assistant-ref');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-g4a-out-'));
  try {
    const out = path.join(dir, 'g4a');
    const K = opts.draftSteps ?? 1;
    const args = ['--target', path.resolve(target), '--draft', path.resolve(draft), '--tokens', tokens.join(','), '--out', out, '--threads', String(opts.threads ?? 2), '--draft-steps', String(K)];
    await runProgram(bin, args, opts.timeoutMs ?? 120_000, 'gemma4-assistant-ref');
    const meta = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8')) as {
      n_tokens: number; n_vocab: number; n_embd: number; n_embd_tgt: number; tokens: number[]; chain_tokens: number[]; files: Record<string, string>;
    };
    const { n_tokens: n, n_vocab: V, n_embd_tgt: T, files } = meta;
    return {
      nTokens: n,
      nVocab: V,
      nEmbd: meta.n_embd,
      nEmbdTgt: T,
      tokens: meta.tokens,
      targetLogits: readF32(files.target_logits, (n - 1) * V),
      targetH: readF32(files.target_h, (n - 1) * T),
      draftLogits: readF32(files.draft_logits, (n - 1) * V),
      draftH: readF32(files.draft_h, (n - 1) * T),
      chainTokens: meta.chain_tokens,
      chainLogits: readF32(files.chain_logits, K * V),
      chainH: readF32(files.chain_h, K * T),
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
