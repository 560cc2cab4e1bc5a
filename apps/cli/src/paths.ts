import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { checkOutputFile } from '@kailstream/engine/core';

/** Repository root (the CLI runs from its build output inside the repository). */
export const REPO_ROOT = path.resolve(__dirname, '../../..');

/**
 * The data directory: models the project generates, caches, profiles, keys, usage history.
 * `--data-dir` wins, then KAIL_DATA_DIR, then ~/.kailstream.
 */
export function dataDir(flag?: string): string {
  return path.resolve(flag ?? process.env.KAIL_DATA_DIR ?? path.join(os.homedir(), '.kailstream'));
}

/**
 * The models directory (what `kail serve` loads by name, `kail pull` fills, `kail list` shows):
 * $KAIL_MODELS_DIR (`kail serve --models-dir` sets it for its services), else `<data dir>/models`,
 * as Ollama's OLLAMA_MODELS.
 */
export function modelsDirOf(dataDirPath: string): string {
  const env = process.env.KAIL_MODELS_DIR;
  return env ? path.resolve(env) : path.join(dataDirPath, 'models');
}

/** Entry scripts of the service processes (built outputs). */
export const SERVICE_ENTRIES = {
  engine: path.join(REPO_ROOT, 'packages/engine/dist/service/main.js'),
  scheduler: path.join(REPO_ROOT, 'packages/scheduler/dist/main.js'),
  api: path.join(REPO_ROOT, 'apps/api/dist/main.js'),
  /** The API's key administration (`kail keys` runs it: the store belongs to the API app). */
  apiKeys: path.join(REPO_ROOT, 'apps/api/dist/keys-main.js'),
  web: path.join(REPO_ROOT, 'apps/web'),
} as const;

/** The file `kail serve` writes into the data directory while it runs (read by ps, stop, chat). */
export const SERVE_STATE_FILE = 'serve.json';

/**
 * A model argument (-m, or a command's model file) as a file: the path as given when it exists,
 * else a name of the models directory, as `ollama run NAME` reads one: NAME, NAME.gguf (with
 * or without Ollama's :latest), or the first split of a model pulled as NAME
 * (NAME-00001-of-0000N.gguf). A name found nowhere is an error naming where it was looked for;
 * a path (holding a separator), or any argument with `lenient`, is returned as given, for the
 * loader's own error.
 */
export function resolveModelArg(m: string, dataDirPath: string, o: { lenient?: boolean } = {}): string {
  if (fs.existsSync(m)) return m;
  const name = m.endsWith(':latest') ? m.slice(0, -7) : m;
  if (!name || /[\\/]/.test(name)) return m;
  const dir = modelsDirOf(dataDirPath);
  for (const c of [name, `${name}.gguf`]) {
    const p = path.join(dir, c);
    if (fs.existsSync(p) && fs.statSync(p).isFile()) return p;
  }
  let names: string[] = [];
  try {
    names = fs.readdirSync(dir);
  } catch {
    // (No models directory: nothing is named there.)
  }
  const first = names.filter((f) => f.startsWith(`${name}-00001-of-`) && /^\d{5}\.gguf$/i.test(f.slice(name.length + 10)));
  if (first.length === 1) return path.join(dir, first[0]);
  if (o.lenient) return m;
  throw new Error(`model file not found: ${m} (nor ${name}.gguf in ${dir}: \`kail list\` shows the models there, \`kail pull\` downloads one)${ollamaHint(m)}`);
}

/** "; this machine's Ollama has it: …" when an Ollama store holds a model of that name, else ''. */
function ollamaHint(name: string): string {
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const t = require('@kailstream/tools') as typeof import('@kailstream/tools');
    const m = t.findOllamaModel(name);
    return `; this machine's Ollama has '${m.name}': \`kail pull ollama:${name}\` links it in without downloading it`;
  } catch {
    return '';
  }
}

/**
 * A file a flag names for writing, checked before any work: not a directory, in a directory that
 * exists (else an error naming the flag and the file, not a raw EISDIR/ENOENT at the end).
 */
export function checkOutputPath(file: string, flag: string): void {
  checkOutputFile(file, `${flag}:`);
}
