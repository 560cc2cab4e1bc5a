// Small native helpers the parity harnesses build on first use (a few seconds, gcc and the llama.cpp
// source bundled in node-llama-cpp) into `<tmp>/<name>-<hash>`, keyed by what they are built from.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * Path of `artifact` in the cache directory for `key`, running `build(dir)` into a fresh directory
 * first when it is missing. The build goes beside and is renamed into place, so a concurrent
 * builder (another jest worker) either wins or loses whole.
 */
export async function buildCached(name: string, key: string, artifact: string, build: (dir: string) => Promise<void>): Promise<string> {
  const dir = path.join(os.tmpdir(), `${name}-${crypto.createHash('sha256').update(key).digest('hex').slice(0, 16)}`);
  const out = path.join(dir, artifact);
  if (fs.existsSync(out)) return out;
  const tmp = fs.mkdtempSync(`${dir}.build-`);
  try {
    await build(tmp);
    try {
      fs.renameSync(tmp, dir);
    } catch (e) {
      if (!fs.existsSync(out)) throw e;
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  return out;
}
