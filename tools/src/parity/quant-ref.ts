// llama.cpp's llama-quantize (llama_model_quantize in node-llama-cpp's prebuilt libllama), through
// the quant-ref program (quant-ref/quant-ref.cpp: its header is the contract), as the oracle for
// `kail quantize`. Built once per source and library version (mtp-ref's build script) into a cache
// directory under the OS temp dir; runs as a child process.
import fs from 'node:fs';
import path from 'node:path';

import { parityRefBinary, runProgram } from './cached-build';

export interface QuantRefOptions {
  threads?: number;
  pure?: boolean;
  allowRequantize?: boolean;
  leaveOutputTensor?: boolean;
  /** ggml type ids. */
  outputTensorType?: number;
  tokenEmbeddingType?: number;
  tensorTypes?: { pattern: string; type: number }[];
  copy?: boolean;
  /** Write one file per input split; `output` is then their prefix. */
  keepSplit?: boolean;
  /** Blocks to prune (llama-quantize's --prune-layers). */
  pruneLayers?: number[];
  /** Importance values per tensor name, as llama-quantize's load_imatrix hands them over (means). */
  imatrixValues?: Map<string, Float32Array>;
  /** Metadata overrides, in order (llama-quantize adds quantize.imatrix.* ones with an imatrix). */
  kvOverrides?: ({ key: string; str: string } | { key: string; u32: number } | { key: string; f64: number } | { key: string; bool: boolean })[];
  timeoutMs?: number;
}

/** Writes `output` as llama.cpp's llama_model_quantize does from `input` at llama_ftype `ftype`. */
export async function llamaQuantize(input: string, output: string, ftype: number, opts: QuantRefOptions = {}): Promise<void> {
  const bin = await parityRefBinary('quant-ref');
  const args = ['--in', path.resolve(input), '--out', path.resolve(output), '--ftype', String(ftype), '--threads', String(opts.threads ?? 2)];
  if (opts.pure) args.push('--pure');
  if (opts.allowRequantize) args.push('--allow-requantize');
  if (opts.leaveOutputTensor) args.push('--leave-output-tensor');
  if (opts.copy) args.push('--copy');
  if (opts.keepSplit) args.push('--keep-split');
  if (opts.pruneLayers?.length) args.push('--prune-layers', opts.pruneLayers.join(','));
  if (opts.outputTensorType !== undefined) args.push('--output-tensor-type', String(opts.outputTensorType));
  if (opts.tokenEmbeddingType !== undefined) args.push('--token-embedding-type', String(opts.tokenEmbeddingType));
  for (const t of opts.tensorTypes ?? []) args.push('--tensor-type', `${t.pattern}=${t.type}`);
  for (const o of opts.kvOverrides ?? []) {
    if ('str' in o) args.push('--kv-str', `${o.key}=${o.str}`);
    else if ('f64' in o) args.push('--kv-f64', `${o.key}=${o.f64}`);
    else if ('bool' in o) args.push('--kv-bool', `${o.key}=${o.bool}`);
    else args.push('--kv-u32', `${o.key}=${o.u32}`);
  }
  const valuesFile = opts.imatrixValues ? `${path.resolve(output)}.imatrix-values` : undefined;
  if (valuesFile && opts.imatrixValues) {
    const parts: Buffer[] = [];
    const u32 = (v: number) => {
      const b = Buffer.alloc(4);
      b.writeUInt32LE(v);
      parts.push(b);
    };
    u32(opts.imatrixValues.size);
    for (const [name, v] of opts.imatrixValues) {
      const nb = Buffer.from(name, 'utf8');
      u32(nb.length);
      parts.push(nb);
      u32(v.length);
      parts.push(Buffer.from(v.buffer, v.byteOffset, v.byteLength));
    }
    fs.writeFileSync(valuesFile, Buffer.concat(parts));
    args.push('--imatrix-values', valuesFile);
  }
  try {
    await runProgram(bin, args, opts.timeoutMs ?? 120_000, 'quant-ref');
  } finally {
    if (valuesFile) fs.rmSync(valuesFile, { force: true });
  }
}
