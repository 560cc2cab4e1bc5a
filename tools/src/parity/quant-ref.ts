// llama.cpp's llama-quantize (llama_model_quantize in node-llama-cpp's prebuilt libllama), through
// the quant-ref program (quant-ref/quant-ref.cpp: its header is the contract), as the oracle for
// `kail quantize`. Built once per source and library version (mtp-ref's build script) into a cache
// directory under the OS temp dir; runs as a child process.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { buildCached } from './cached-build';

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
  timeoutMs?: number;
}

function run(file: string, args: string[], timeoutMs: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 64 << 20 }, (err, stdout, stderr) => (err ? reject(new Error(`${what} failed: ${err.message}\n${stderr}`)) : resolve(stdout)));
  });
}

let building: Promise<string> | undefined;

function quantRefBinary(): Promise<string> {
  building ??= (async () => {
    if (process.platform !== 'linux' || process.arch !== 'x64') throw new Error(`quant-ref: needs node-llama-cpp's linux-x64 prebuilt; this is ${process.platform}-${process.arch}`);
    const here = [path.join(__dirname), path.resolve(__dirname, '../../src/parity')].find((p) => fs.existsSync(path.join(p, 'quant-ref', 'quant-ref.cpp')));
    if (!here) throw new Error('quant-ref sources not found');
    const script = path.join(here, 'mtp-ref', 'build.sh');
    const root = path.resolve(here, '../../..');
    const lib = path.join(root, 'node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama.v0.5.0.so');
    if (!fs.existsSync(lib)) throw new Error(`quant-ref: ${lib} not found (node-llama-cpp's linux-x64 prebuilt; run npm install)`);
    const st = fs.statSync(lib);
    const key = ['quant-ref/quant-ref.cpp', 'mtp-ref/build.sh'].map((f) => fs.readFileSync(path.join(here, f), 'utf8')).join('') + `${lib}:${st.size}:${st.mtimeMs}`;
    return buildCached('kail-quant-ref', key, 'quant-ref', async (dir) => {
      await run('bash', [script, dir, 'quant-ref'], 300_000, 'quant-ref build');
    });
  })().catch((e: unknown) => {
    building = undefined;
    throw e;
  });
  return building;
}

/** Writes `output` as llama.cpp's llama_model_quantize does from `input` at llama_ftype `ftype`. */
export async function llamaQuantize(input: string, output: string, ftype: number, opts: QuantRefOptions = {}): Promise<void> {
  const bin = await quantRefBinary();
  const args = ['--in', path.resolve(input), '--out', path.resolve(output), '--ftype', String(ftype), '--threads', String(opts.threads ?? 2)];
  if (opts.pure) args.push('--pure');
  if (opts.allowRequantize) args.push('--allow-requantize');
  if (opts.leaveOutputTensor) args.push('--leave-output-tensor');
  if (opts.copy) args.push('--copy');
  if (opts.outputTensorType !== undefined) args.push('--output-tensor-type', String(opts.outputTensorType));
  if (opts.tokenEmbeddingType !== undefined) args.push('--token-embedding-type', String(opts.tokenEmbeddingType));
  for (const t of opts.tensorTypes ?? []) args.push('--tensor-type', `${t.pattern}=${t.type}`);
  await run(bin, args, opts.timeoutMs ?? 120_000, 'quant-ref');
}
