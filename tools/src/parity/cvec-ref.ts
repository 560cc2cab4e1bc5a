// llama.cpp with control vectors (llama_set_adapter_cvec, as llama-cli's --control-vector-scaled and
// --control-vector-layer-range set them), through the cvec-ref program (cvec-ref/cvec-ref.cpp: its
// header is the contract). node-llama-cpp does not expose control vectors, so the program links
// its prebuilt libllama directly; it is built once per source and library version (mtp-ref's
// build script) into a cache directory under the OS temp dir, and runs as a child process.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { buildCached } from './cached-build';

function run(file: string, args: string[], timeoutMs: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 64 << 20 }, (err, stdout, stderr) => (err ? reject(new Error(`${what} failed: ${err.message}\n${stderr}`)) : resolve(stdout)));
  });
}

let building: Promise<string> | undefined;

function cvecRefBinary(): Promise<string> {
  building ??= (async () => {
    if (process.platform !== 'linux' || process.arch !== 'x64') throw new Error(`cvec-ref: needs node-llama-cpp's linux-x64 prebuilt; this is ${process.platform}-${process.arch}`);
    const here = [path.join(__dirname), path.resolve(__dirname, '../../src/parity')].find((p) => fs.existsSync(path.join(p, 'cvec-ref', 'cvec-ref.cpp')));
    if (!here) throw new Error('cvec-ref sources not found');
    const script = path.join(here, 'mtp-ref', 'build.sh');
    const root = path.resolve(here, '../../..');
    const lib = path.join(root, 'node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama.v0.5.0.so');
    if (!fs.existsSync(lib)) throw new Error(`cvec-ref: ${lib} not found (node-llama-cpp's linux-x64 prebuilt; run npm install)`);
    const st = fs.statSync(lib);
    const key = ['cvec-ref/cvec-ref.cpp', 'mtp-ref/build.sh', 'ref-common.h'].map((f) => fs.readFileSync(path.join(here, f), 'utf8')).join('') + `${lib}:${st.size}:${st.mtimeMs}`;
    return buildCached('kail-cvec-ref', key, 'cvec-ref', async (dir) => {
      await run('bash', [script, dir, 'cvec-ref'], 300_000, 'cvec-ref build');
    });
  })().catch((e: unknown) => {
    building = undefined;
    throw e;
  });
  return building;
}

/** llama.cpp's logits of every position of `tokens` with the control vectors loaded ([n][nVocab]). */
export async function llamaCvecLogits(
  model: string,
  tokens: number[],
  cvecs: { path: string; scale: number }[],
  opts: { layerRange?: [number, number]; threads?: number; timeoutMs?: number } = {},
): Promise<{ nVocab: number; logits: Float32Array; layerStart: number; layerEnd: number }> {
  const bin = await cvecRefBinary();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cvec-out-'));
  try {
    const out = path.join(dir, 'cvec');
    const args = ['--model', path.resolve(model), '--tokens', tokens.join(','), '--out', out, '--threads', String(opts.threads ?? 2)];
    for (const c of cvecs) args.push('--cvec', path.resolve(c.path), String(c.scale));
    if (opts.layerRange) args.push('--layer-range', String(opts.layerRange[0]), String(opts.layerRange[1]));
    await run(bin, args, opts.timeoutMs ?? 120_000, 'cvec-ref');
    const meta = JSON.parse(fs.readFileSync(`${out}.json`, 'utf8')) as { n_vocab: number; n_tokens: number; layer_start: number; layer_end: number };
    const buf = fs.readFileSync(`${out}.f32`);
    const logits = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
    if (logits.length !== meta.n_tokens * meta.n_vocab) throw new Error(`cvec-ref: ${logits.length} floats, expected ${meta.n_tokens * meta.n_vocab}`);
    return { nVocab: meta.n_vocab, logits, layerStart: meta.layer_start, layerEnd: meta.layer_end };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
