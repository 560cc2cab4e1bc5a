// llama.cpp's T5 encoder-decoder generation (llama_encode over the prompt, then greedy llama_decode
// steps from the decoder start token), through the t5-ref program (t5-ref/t5-ref.cpp: its header is
// the exact contract). node-llama-cpp does not drive encoder-decoder models, so the program links its
// prebuilt libllama directly; it is built once per source and library version (mtp-ref's build
// script) into a cache directory under the OS temp dir, and runs as a child process.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { parityRefBinary, runProgram } from './cached-build';

export interface T5Ref {
  nVocab: number;
  /** The prompt the encoder ran over. */
  tokens: number[];
  /** The decoder start token (d[0]). */
  decoderStart: number;
  /** d[0..steps-1]: the decoder's inputs, d[j+1] = argmax of logits row j (lowest id on ties). */
  decoderTokens: number[];
  /** argmax of the last row. */
  nextToken: number;
  /** [steps][nVocab]: row j = the decoder's logits after d[0..j]. */
  logits: Float32Array;
  meta: Record<string, unknown>;
}

/**
 * Runs llama.cpp's T5 encoder over `tokens`, then `steps` greedy decoder steps (see t5-ref.cpp):
 * with `decoderTokens` (steps of them) those inputs instead, teacher-forced; with `defaultRun`
 * llama.cpp's default settings (F16 K and V caches, flash attention auto) instead of the exact ones.
 */
export async function llamaT5Ref(model: string, tokens: number[], steps: number, opts: { threads?: number; timeoutMs?: number; decoderTokens?: number[]; defaultRun?: boolean } = {}): Promise<T5Ref> {
  if (tokens.length === 0) throw new Error('t5-ref: needs at least one prompt token');
  const bin = await parityRefBinary('t5-ref');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-t5-out-'));
  try {
    const out = path.join(dir, 't5');
    const args = ['--model', path.resolve(model), '--tokens', tokens.join(','), '--steps', String(steps), '--out', out, '--threads', String(opts.threads ?? 2)];
    if (opts.decoderTokens) args.push('--decoder-tokens', opts.decoderTokens.join(','));
    if (opts.defaultRun) args.push('--default');
    await runProgram(bin, args, opts.timeoutMs ?? 120_000, 't5-ref');
    const meta = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8')) as Record<string, unknown> & {
      n_vocab: number; steps: number; tokens: number[]; decoder_start: number; decoder_tokens: number[]; next_token: number; files: { logits: string };
    };
    const buf = fs.readFileSync(meta.files.logits);
    const logits = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
    if (logits.length !== meta.steps * meta.n_vocab) throw new Error(`t5-ref: ${logits.length} floats, expected ${meta.steps * meta.n_vocab}`);
    return { nVocab: meta.n_vocab, tokens: meta.tokens, decoderStart: meta.decoder_start, decoderTokens: meta.decoder_tokens, nextToken: meta.next_token, logits, meta };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
