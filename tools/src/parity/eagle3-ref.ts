// llama.cpp's EAGLE-3 draft (arch eagle3) bound to its target, through the eagle3-ref program
// (eagle3-ref/eagle3-ref.cpp: its header is the contract). node-llama-cpp does not expose EAGLE-3;
// its prebuilt libllama does (llama-ext.h's layer-input extraction, target layer ids, nextn
// embeddings, and llama_context_params.ctx_other), so the program links it directly; it is built
// once per source and library version (mtp-ref's build script) and runs as a child process.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { parityRefBinary, runProgram } from './cached-build';

export interface Eagle3Ref {
  nTokens: number;
  nVocab: number;
  /** The draft's n_embd. */
  nEmbd: number;
  nEmbdTgt: number;
  targetLayers: number[];
  tokens: number[];
  /** [n][nVocab] */
  targetLogits: Float32Array;
  /** [n][3 nEmbdTgt]: row k = the three target layers' inputs at pos k. */
  features: Float32Array;
  /** [n][nEmbd]: the encoder's g rows. */
  g: Float32Array;
  /** [n-1][nVocab]: row p = the draft's logits for (tokens[p+1], g row p) at pos p (-inf outside d2t's ids). */
  eagleLogits: Float32Array;
  /** [n-1][nEmbd]: row p = the block's pre-norm output. */
  eagleH: Float32Array;
  /** Chained steps: draftTokens[j] = argmax of the previous logits row, at pos n-1+j with the previous pre-norm row. */
  draftTokens: number[];
  /** [K][nVocab] */
  draftLogits: Float32Array;
  /** [K][nEmbd] */
  draftH: Float32Array;
}

function readF32(file: string, n: number): Float32Array {
  const buf = fs.readFileSync(file);
  const a = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  if (a.length !== n) throw new Error(`${file}: ${a.length} floats, expected ${n}`);
  return a;
}

/** Runs llama.cpp's target (three layers extracted) and EAGLE-3 draft over `tokens` (see eagle3-ref.cpp). */
export async function llamaEagle3Ref(target: string, draft: string, tokens: number[], opts: { draftSteps?: number; threads?: number; timeoutMs?: number } = {}): Promise<Eagle3Ref> {
  if (tokens.length < 2) throw new Error('eagle3-ref: needs at least two tokens');
  const bin = await parityRefBinary('eagle3-ref');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-eagle3-out-'));
  try {
    const out = path.join(dir, 'eagle3');
    const K = opts.draftSteps ?? 1;
    const args = ['--target', path.resolve(target), '--draft', path.resolve(draft), '--tokens', tokens.join(','), '--out', out, '--threads', String(opts.threads ?? 2), '--draft-steps', String(K)];
    await runProgram(bin, args, opts.timeoutMs ?? 120_000, 'eagle3-ref');
    const meta = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8')) as {
      n_tokens: number; n_vocab: number; n_embd: number; n_embd_tgt: number; target_layers: number[]; tokens: number[]; draft_tokens: number[]; files: Record<string, string>;
    };
    const { n_tokens: n, n_vocab: V, n_embd: E, n_embd_tgt: Et, files } = meta;
    return {
      nTokens: n,
      nVocab: V,
      nEmbd: E,
      nEmbdTgt: Et,
      targetLayers: meta.target_layers,
      tokens: meta.tokens,
      targetLogits: readF32(files.target_logits, n * V),
      features: readF32(files.features, n * 3 * Et),
      g: readF32(files.g, n * E),
      eagleLogits: readF32(files.eagle_logits, (n - 1) * V),
      eagleH: readF32(files.eagle_h, (n - 1) * E),
      draftTokens: meta.draft_tokens,
      draftLogits: readF32(files.draft_logits, K * V),
      draftH: readF32(files.draft_h, K * E),
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
