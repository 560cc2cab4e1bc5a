import os from 'node:os';
import path from 'node:path';

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
