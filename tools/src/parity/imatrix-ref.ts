// llama.cpp's llama-imatrix statistics (its collect_imatrix on llama.cpp's own compute graph)
// through the imatrix-ref program (imatrix-ref/imatrix-ref.cpp: its header is the contract), as
// the oracle for `kail imatrix`. Built once per source and library version (mtp-ref's build
// script) into a cache directory under the OS temp dir; runs as a child process.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { parityRefBinary, runProgram } from './cached-build';

/**
 * llama.cpp's statistics over `chunks` (each nCtx tokens, BOS already in place): per weight name,
 * n_mat * ne0 sums of squared inputs and n_mat counts.
 */
export async function llamaImatrix(
  model: string,
  chunks: number[][],
  opts: { processOutput?: boolean; threads?: number; timeoutMs?: number } = {},
): Promise<Map<string, { sums: Float32Array; counts: number[] }>> {
  const bin = await parityRefBinary('imatrix-ref');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-imatrix-out-'));
  try {
    const out = path.join(dir, 'imatrix.bin');
    const nCtx = chunks[0]?.length ?? 0;
    if (chunks.some((c) => c.length !== nCtx)) throw new Error('imatrix-ref: chunks of different lengths');
    const args = ['--model', path.resolve(model), '--tokens', chunks.flat().join(','), '--ctx', String(nCtx), '--out', out, '--threads', String(opts.threads ?? 2)];
    if (opts.processOutput) args.push('--process-output');
    await runProgram(bin, args, opts.timeoutMs ?? 120_000, 'imatrix-ref');
    const b = fs.readFileSync(out);
    let o = 0;
    const u32 = () => {
      const v = b.readUInt32LE(o);
      o += 4;
      return v;
    };
    const res = new Map<string, { sums: Float32Array; counts: number[] }>();
    for (let n = u32(), i = 0; i < n; i++) {
      const len = u32();
      const name = b.toString('utf8', o, o + len);
      o += len;
      const nMat = u32();
      const ne0 = u32();
      const counts: number[] = [];
      for (let j = 0; j < nMat; j++, o += 8) counts.push(b.readDoubleLE(o));
      const sums = new Float32Array(b.buffer.slice(b.byteOffset + o, b.byteOffset + o + nMat * ne0 * 4));
      o += nMat * ne0 * 4;
      res.set(name, { sums, counts });
    }
    return res;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
