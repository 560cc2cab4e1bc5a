// llama.cpp with control vectors (llama_set_adapter_cvec, as llama-cli's --control-vector-scaled and
// --control-vector-layer-range set them), through the cvec-ref program (cvec-ref/cvec-ref.cpp: its
// header is the contract). node-llama-cpp does not expose control vectors, so the program links
// its prebuilt libllama directly; it is built once per source and library version (mtp-ref's
// build script) into a cache directory under the OS temp dir, and runs as a child process.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { ropeOptionArgs, type RopeOptions } from '@kailstream/engine/core';

import { parityRefBinary, runProgram } from './cached-build';

/** llama.cpp's logits of every position of `tokens` with the control vectors loaded ([n][nVocab]). */
export async function llamaCvecLogits(
  model: string,
  tokens: number[],
  cvecs: { path: string; scale: number }[],
  opts: {
    layerRange?: [number, number];
    threads?: number;
    timeoutMs?: number;
    /** llama_context_params' RoPE values, as llama-cli's --rope-* and --yarn-* flags set them. */
    rope?: RopeOptions;
  } = {},
): Promise<{ nVocab: number; logits: Float32Array; layerStart: number; layerEnd: number }> {
  const bin = await parityRefBinary('cvec-ref');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cvec-out-'));
  try {
    const out = path.join(dir, 'cvec');
    const args = ['--model', path.resolve(model), '--tokens', tokens.join(','), '--out', out, '--threads', String(opts.threads ?? 2)];
    for (const c of cvecs) args.push('--cvec', path.resolve(c.path), String(c.scale));
    if (opts.layerRange) args.push('--layer-range', String(opts.layerRange[0]), String(opts.layerRange[1]));
    args.push(...ropeOptionArgs(opts.rope));
    await runProgram(bin, args, opts.timeoutMs ?? 120_000, 'cvec-ref');
    const meta = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8')) as { n_vocab: number; n_tokens: number; layer_start: number; layer_end: number };
    const buf = fs.readFileSync(`${out}.f32`);
    const logits = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
    if (logits.length !== meta.n_tokens * meta.n_vocab) throw new Error(`cvec-ref: ${logits.length} floats, expected ${meta.n_tokens * meta.n_vocab}`);
    return { nVocab: meta.n_vocab, logits, layerStart: meta.layer_start, layerEnd: meta.layer_end };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
