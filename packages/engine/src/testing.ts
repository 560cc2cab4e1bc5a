// Helpers for tests of this and other packages. Test models come from the project's own GGUF
// writer (tools/), run as a child process so the engine does not depend on the tools package.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { GgufTensorInfo, GgufValue, ModelProgram, ProgramOp } from '@kailstream/core-native';

import { generate } from './generate';
import { buildProgram } from './model/architectures';
import type { HardwareProfile } from './model/hardware-profile';
import { Metadata, readHParams } from './model/hparams';
import { EngineModel, type LoadModelOptions } from './model/model';
import { native } from './native';

const GEN_MODEL = path.resolve(__dirname, '../../../tools/dist/gen-model.js');

/** The tokens greedy decoding gives with `file` loaded as `opts` (streaming tests' in-memory reference); the model is closed after. */
export async function greedyTokens(file: string, opts: LoadModelOptions, prompt: readonly number[], maxTokens: number): Promise<number[]> {
  const m = EngineModel.load(file, opts);
  try {
    return (await generate(m, prompt, { maxTokens, sampling: { temperature: 0 } })).tokens;
  } finally {
    m.close();
  }
}

/**
 * Writes a preset model (e.g. 'tiny-qwen3moe', 'F32') into dir and returns its path. `extra` are
 * more gen-model flags (e.g. ['--layers', '1'] for a same-vocabulary draft: weights are seeded per
 * tensor name, so the shared tensors equal the full model's).
 */
export function writeTestModel(dir: string, preset: string, type = 'F32', seed = 1, extra: string[] = []): string {
  const { out, args } = testModelJob(dir, preset, type, seed, extra);
  if (fs.existsSync(out)) return out;
  if (!fs.existsSync(GEN_MODEL)) throw new Error(`${GEN_MODEL} is missing: build the tools first (npx nx run tools:build)`);
  // With the test-run model cache on, a command line gen-model has run before is a copy of the
  // cache file it recorded (tools/src/models/file-cache.ts, commandIndexPath: the same key, from
  // the command line less --out and gen-model.js's mtime and size), without starting gen-model.
  const index = commandIndex(args);
  if (index) {
    try {
      const { entry } = JSON.parse(fs.readFileSync(index, 'utf8')) as { entry: string };
      fs.mkdirSync(dir, { recursive: true });
      fs.copyFileSync(entry, out);
      return out;
    } catch {
      // Not recorded (or its file is gone): gen-model writes it.
    }
  }
  execFileSync(process.execPath, [GEN_MODEL, ...args, '--out', out], { stdio: 'pipe' });
  return out;
}

/** writeTestModel's file for a model and gen-model's command line for it. */
function testModelJob(dir: string, preset: string, type: string, seed: number, extra: readonly string[]): { out: string; args: string[] } {
  const tag = extra.length ? `-${extra.join('').replace(/[^\w.]+/g, '_')}` : '';
  return { out: path.join(dir, `${preset}-${type}-${seed}${tag}.gguf`), args: ['--preset', preset, '--type', type, '--seed', String(seed), ...extra] };
}

/** The model cache's record of a gen-model command line (null with the cache off or gen-model missing). */
function commandIndex(args: readonly string[]): string | null {
  const cache = process.env.KAIL_TEST_MODEL_CACHE;
  if (!cache || !fs.existsSync(GEN_MODEL)) return null;
  const st = fs.statSync(GEN_MODEL);
  const key = createHash('sha256').update(JSON.stringify([st.mtimeMs, st.size, args])).digest('hex').slice(0, 32);
  return path.join(path.resolve(cache), `cmd-${key}.json`);
}

/** What writeTestModel writes: the preset, type, seed and extra flags. */
export type TestModelSpec = readonly [preset: string, type?: string, seed?: number, extra?: readonly string[]];

/**
 * writeTestModel for several models, the ones neither in `dir` nor in the model cache written by one
 * gen-model process (its main() per command line, the same files and cache entries as one process
 * each: starting one costs ~0.4 s, about what writing a tiny model costs). Where that process fails,
 * writeTestModel writes the rest one at a time and reports its own error.
 */
export function writeTestModels(dir: string, models: readonly TestModelSpec[]): string[] {
  const pending: [string[], string][] = [];
  for (const [preset, type = 'F32', seed = 1, extra = []] of models) {
    const { out, args } = testModelJob(dir, preset, type, seed, extra);
    if (fs.existsSync(out) || pending.some(([, o]) => o === out)) continue;
    const index = commandIndex(args);
    if (index && fs.existsSync(index)) continue; // writeTestModel copies it
    pending.push([args, out]);
  }
  if (pending.length > 1 && fs.existsSync(GEN_MODEL)) {
    fs.mkdirSync(dir, { recursive: true });
    // Each file under a temporary name, renamed once written: a failure leaves no partial model
    // (and the model cache's last entry cleared before each, as a fresh process has it).
    const script =
      "const fs = require('fs'); const path = require('path'); const g = require(process.argv[1]);" +
      "const fc = require(path.join(path.dirname(process.argv[1]), 'models/file-cache.js'));" +
      '(async () => { for (const [args, out] of JSON.parse(process.argv[2])) {' +
      " fc.cachedFile(null, out, () => 0); const tmp = out.replace(/\\.gguf$/, '.part.gguf'); if ((await g.main([...args, '--out', tmp])) !== 0) process.exit(1); fs.renameSync(tmp, out); } })()" +
      '.catch((e) => { console.error(e); process.exit(1); });';
    try {
      execFileSync(process.execPath, ['-e', script, GEN_MODEL, JSON.stringify(pending)], { stdio: 'pipe', maxBuffer: 256 << 20 });
    } catch {
      // writeTestModel below writes what is missing and names what fails.
    }
  }
  return models.map(([preset, type, seed, extra]) => writeTestModel(dir, preset, type, seed, extra && [...extra]));
}

/** A preset model's metadata (a copy, to edit) and tensor table, as writeTestModel writes it. */
export function testModelFile(dir: string, preset: string, type = 'F32'): { kv: Record<string, GgufValue>; tensors: Map<string, GgufTensorInfo> } {
  const f = native().openGguf(writeTestModel(dir, preset, type), { mapData: false });
  try {
    return { kv: { ...f.metadata }, tensors: new Map(f.tensors.map((t) => [t.name, t])) };
  } finally {
    f.close();
  }
}

/** A program's ops of one kind, in order (the architecture specs' program checks). */
export const opsOf = (p: ModelProgram, op: ProgramOp['op']): ProgramOp[] => p.ops.filter((o) => o.op === op);

/** A tensor table without these tensors (a missing-tensor refusal case). */
export const without = (ts: Map<string, GgufTensorInfo>, ...names: string[]): Map<string, GgufTensorInfo> => new Map([...ts].filter(([n]) => !names.includes(n)));

/** A tensor table with one tensor given other dims (a wrong-shape refusal case). */
export const reshaped = (ts: Map<string, GgufTensorInfo>, name: string, dims: number[]): Map<string, GgufTensorInfo> =>
  new Map([...ts].map(([n, t]) => [n, n === name ? { ...t, dims } : t]));

/** A copy of metadata with keys set, or removed where the value is undefined (a loader-refusal case). */
export function editedKv(kv: Record<string, GgufValue>, extra: Record<string, GgufValue | undefined>): Record<string, GgufValue> {
  const out: Record<string, GgufValue> = { ...kv };
  for (const [k, v] of Object.entries(extra)) {
    if (v === undefined) delete out[k];
    else out[k] = v;
  }
  return out;
}

/** The program its architecture builds from (possibly edited) metadata and tensors, at a 4096 context. */
export function programOfFile(kv: Record<string, GgufValue>, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  return buildProgram(readHParams(new Metadata(kv, String(kv['general.architecture'])), tensors), tensors, { nCtxSeq: 4096 });
}

export function tempDir(prefix = 'kail-test-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Copies a file, replacing the first occurrence of `from` with `to` (same length) in its bytes. */
export function patchedCopy(src: string, dst: string, from: string, to: string): string {
  if (Buffer.byteLength(from) !== Buffer.byteLength(to)) throw new Error('patch must keep the length');
  const buf = fs.readFileSync(src);
  const at = buf.indexOf(Buffer.from(from));
  if (at < 0) throw new Error(`'${from}' not found in ${src}`);
  Buffer.from(to).copy(buf, at);
  fs.writeFileSync(dst, buf);
  return dst;
}

/**
 * A hardware profile for tests: a 2-core machine whose profiled RAM budget is `ramBytes` and whose
 * storage at `dir` reads 2.5 GB/s at random, reads uncut (what `kail profile` would write, without measuring).
 */
export function testHardwareProfile(dir: string, ramBytes: number): HardwareProfile {
  return {
    format: 'kailstream-hardware-profile',
    version: 1,
    measured: 'test',
    host: 'test',
    cpu: { model: 'x', logicalCores: 2, physicalCores: 2, simd: [], kernelLevel: '' },
    // The default budget's usual share of what was available (80%), so a run shrinks it only when
    // less than ramBytes / 0.8 is available now.
    memory: { totalBytes: 2 ** 34, availableBytes: Math.ceil(ramBytes / 0.8), readBytesPerSecond: 1e10, copyBytesPerSecond: 1e10, threads: 2 },
    gpus: [],
    storage: [{ path: dir, directIo: true, note: '', testFileBytes: 1, results: [], sequentialBytesPerSecond: 3e9, randomBytesPerSecond: 2.5e9, randomBlockBytes: 2 ** 20, queueDepth: 4, readBytes: 0 }],
    defaults: { ramBytes, ioThreads: 2, readBytes: 0, storagePath: dir, why: { ramBytes: 'test', ioThreads: 'test', readBytes: 'test: reads uncut' } },
  };
}
