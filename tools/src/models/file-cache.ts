// A cache of written model files for test runs: the suites write the same small models again and
// again (the same preset, type and seed in a dozen suites), and writing a quantized one costs more
// than most tests that use it. Off unless KAIL_TEST_MODEL_CACHE names a directory;
// tools/test-all.sh points it at a directory it empties at the start of every run, so a file is
// never older than the writer that made it. A hit is a copy of the cached file (a test may patch or
// truncate its copy), made atomically: a cached file is written to a temporary name and renamed.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/** The cache directory, or null when caching is off. */
export function modelCacheDir(): string | null {
  const d = process.env.KAIL_TEST_MODEL_CACHE;
  return d ? path.resolve(d) : null;
}

/**
 * A stable text of `v` for a cache key: plain objects with sorted keys (those set to undefined
 * left out, as JSON does), arrays, typed arrays, primitives. Null when `v` holds anything else (a function, a Map, a class instance): such a
 * write is not cached, since two different values could print the same.
 */
export function stableKeyText(v: unknown): string | null {
  const out: string[] = [];
  const walk = (x: unknown): boolean => {
    if (x === undefined) out.push('u');
    else if (x === null || typeof x === 'boolean' || typeof x === 'string') out.push(JSON.stringify(x));
    else if (typeof x === 'number') out.push(Object.is(x, -0) ? '-0' : String(x));
    else if (typeof x === 'bigint') out.push(`${x}n`);
    else if (Array.isArray(x)) {
      out.push('[');
      for (const e of x) {
        if (!walk(e)) return false;
        out.push(',');
      }
      out.push(']');
    } else if (ArrayBuffer.isView(x)) out.push(`${x.constructor.name}(${Buffer.from(x.buffer, x.byteOffset, x.byteLength).toString('hex')})`);
    else if (typeof x === 'object' && Object.getPrototypeOf(x) === Object.prototype) {
      out.push('{');
      for (const k of Object.keys(x).sort()) {
        // (An option set to undefined is an option left out.)
        if ((x as Record<string, unknown>)[k] === undefined) continue;
        out.push(JSON.stringify(k), ':');
        if (!walk((x as Record<string, unknown>)[k])) return false;
        out.push(',');
      }
      out.push('}');
    } else return false;
    return true;
  };
  return walk(v) ? out.join('') : null;
}

/**
 * `out` made by `make` (which writes it and returns a JSON-able result), or copied from the cache
 * with `make`'s result from the first time, when caching is on and `key` is not null.
 */
export function cachedFile<R>(key: string | null, out: string, make: () => R): R {
  const dir = modelCacheDir();
  lastEntry = undefined;
  if (!dir || key === null) return make();
  const id = createHash('sha256').update(key).digest('hex').slice(0, 32);
  const file = path.join(dir, `${id}.gguf`);
  const meta = path.join(dir, `${id}.json`);
  lastEntry = file;
  if (fs.existsSync(file) && fs.existsSync(meta)) {
    fs.mkdirSync(path.dirname(path.resolve(out)), { recursive: true });
    fs.copyFileSync(file, out);
    return JSON.parse(fs.readFileSync(meta, 'utf8')) as R;
  }
  const r = make();
  fs.mkdirSync(dir, { recursive: true });
  const tmp = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}`;
  fs.copyFileSync(out, tmp);
  fs.writeFileSync(`${meta}.tmp${process.pid}`, JSON.stringify(r));
  fs.renameSync(tmp, file);
  fs.renameSync(`${meta}.tmp${process.pid}`, meta);
  return r;
}

let lastEntry: string | undefined;

/** The cache file the last cachedFile call made or copied (undefined when it did not go through the cache). */
export function lastCacheEntry(): string | undefined {
  return lastEntry;
}

/**
 * Where gen-model records that a command line (less its --out pair) wrote the cache file `entry`:
 * `<cache>/cmd-<key>.json` holding {"entry": path}, the key hashing the command line and
 * gen-model.js's own mtime and size (so a rebuilt writer starts afresh). The engine's test helper
 * (packages/engine/src/testing.ts, writeTestModel) reads it to copy the file without starting
 * gen-model (a process and the writer's modules: 0.2 s); it computes the same key.
 */
export function commandIndexPath(dir: string, genModelJs: string, args: readonly string[]): string {
  const st = fs.statSync(genModelJs);
  const key = createHash('sha256').update(JSON.stringify([st.mtimeMs, st.size, args])).digest('hex').slice(0, 32);
  return path.join(dir, `cmd-${key}.json`);
}
