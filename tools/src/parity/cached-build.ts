// Small native helpers the parity harnesses build on first use (a few seconds, gcc and the llama.cpp
// source bundled in node-llama-cpp) into `<tmp>/<name>-<hash>`, keyed by what they are built from.
import { execFile } from 'node:child_process';
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

/** Runs a program; rejects with its stderr on failure or past `timeoutMs`. */
export function runProgram(file: string, args: string[], timeoutMs: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 64 << 20 }, (err, stdout, stderr) => (err ? reject(new Error(`${what} failed: ${err.message}\n${stderr}`)) : resolve(stdout)));
  });
}

const refBuilds = new Map<string, Promise<string>>();

/**
 * Path of a reference program of tools/src/parity (NAME/NAME.cpp, linked against node-llama-cpp's
 * prebuilt libllama by mtp-ref/build.sh), built on first use and cached under the OS temp dir,
 * keyed by its source, the build script, ref-common.h and the library.
 */
export function parityRefBinary(name: string): Promise<string> {
  let p = refBuilds.get(name);
  if (!p) {
    p = (async () => {
      if (process.platform !== 'linux' || process.arch !== 'x64') throw new Error(`${name}: needs node-llama-cpp's linux-x64 prebuilt; this is ${process.platform}-${process.arch}`);
      const here = [__dirname, path.resolve(__dirname, '../../src/parity')].find((d) => fs.existsSync(path.join(d, name, `${name}.cpp`)));
      if (!here) throw new Error(`${name} sources not found`);
      const script = path.join(here, 'mtp-ref', 'build.sh');
      const root = path.resolve(here, '../../..');
      const lib = path.join(root, 'node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama.v0.5.0.so');
      if (!fs.existsSync(lib)) throw new Error(`${name}: ${lib} not found (node-llama-cpp's linux-x64 prebuilt; run npm install)`);
      const st = fs.statSync(lib);
      const key = [`${name}/${name}.cpp`, 'mtp-ref/build.sh', 'ref-common.h'].map((f) => fs.readFileSync(path.join(here, f), 'utf8')).join('') + `${lib}:${st.size}:${st.mtimeMs}`;
      return buildCached(`kail-${name}`, key, name, async (dir) => {
        await runProgram('bash', [script, dir, name], 300_000, `${name} build`);
      });
    })().catch((e: unknown) => {
      refBuilds.delete(name);
      throw e;
    });
    refBuilds.set(name, p);
  }
  return p;
}
