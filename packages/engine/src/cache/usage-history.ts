// Per-model expert usage that outlives a run: decayed activation counts per (MoE layer, expert),
// kept in a small JSON file per model, keyed by the file's identity. A streaming load warms the RAM
// expert cache with the historically hottest experts and seeds the eviction policy's frequency
// state from it; close() folds the run's counts back in.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import { EngineError } from '../errors';

export const USAGE_HISTORY_FORMAT = 'kailstream-usage-history';
export const USAGE_HISTORY_VERSION = 1;
/** Weight of the history against one new run when merging (each run halves what came before). */
export const DEFAULT_USAGE_DECAY = 0.5;
/** Subdirectory of the data directory (`kail --data-dir`) that holds usage histories by default. */
export const USAGE_HISTORY_SUBDIR = 'usage';

export interface UsageHistory {
  format: typeof USAGE_HISTORY_FORMAT;
  version: typeof USAGE_HISTORY_VERSION;
  /** modelIdentity() of the file the counts belong to. */
  key: string;
  /** The model file when last saved (informational: the key identifies it). */
  model: string;
  nMoeLayers: number;
  nExpert: number;
  /** Runs merged so far. */
  runs: number;
  /** Decayed count of tokens the counts were taken over. */
  tokens: number;
  /** nMoeLayers x nExpert decayed activation counts (one per token that routed to the expert). */
  counts: number[];
  updated: string;
}

const HEAD_BYTES = 4 << 20;
const TAIL_BYTES = 1 << 20;

/**
 * A model file's identity: SHA-256 over its size, its first 4 MiB (header, metadata, tensor table)
 * and its last 1 MiB, as 32 hex digits. Stable across copies and renames; a rewritten file with
 * other weights or layout gets another key. Costs two small reads, not a pass over the file.
 */
export function modelIdentity(file: string): string {
  const fd = fs.openSync(file, 'r');
  try {
    const size = fs.fstatSync(fd).size;
    const h = crypto.createHash('sha256');
    h.update(`${size}:`);
    const head = Buffer.alloc(Math.min(HEAD_BYTES, size));
    fs.readSync(fd, head, 0, head.length, 0);
    h.update(head);
    if (size > HEAD_BYTES) {
      const tail = Buffer.alloc(Math.min(TAIL_BYTES, size - HEAD_BYTES));
      fs.readSync(fd, tail, 0, tail.length, size - tail.length);
      h.update(tail);
    }
    return h.digest('hex').slice(0, 32);
  } finally {
    fs.closeSync(fd);
  }
}

export function usageHistoryPath(dir: string, key: string): string {
  return path.join(dir, `${key}.usage.json`);
}

/**
 * The history for `key` in `dir`, or null when there is none. A file that is not a usage history,
 * belongs to another key or has another shape is an error naming the file (the caller decides
 * whether that stops anything; the engine ignores it and starts cold).
 */
export function readUsageHistory(dir: string, key: string, nMoeLayers: number, nExpert: number): UsageHistory | null {
  const file = usageHistoryPath(dir, key);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new EngineError('KAIL_E_IO', `cannot read usage history ${file}: ${(e as Error).message}`);
  }
  let h: UsageHistory;
  try {
    h = JSON.parse(text) as UsageHistory;
  } catch (e) {
    throw new EngineError('KAIL_E_INVALID_ARG', `usage history ${file} is not JSON: ${(e as Error).message}`);
  }
  const bad = (why: string) => new EngineError('KAIL_E_INVALID_ARG', `usage history ${file}: ${why}`);
  if (h?.format !== USAGE_HISTORY_FORMAT || h.version !== USAGE_HISTORY_VERSION) throw bad(`not a ${USAGE_HISTORY_FORMAT} v${USAGE_HISTORY_VERSION} file`);
  if (h.key !== key) throw bad(`belongs to model key ${h.key}, not ${key}`);
  if (h.nMoeLayers !== nMoeLayers || h.nExpert !== nExpert) throw bad(`has ${h.nMoeLayers} x ${h.nExpert} experts, the model ${nMoeLayers} x ${nExpert}`);
  if (!Array.isArray(h.counts) || h.counts.length !== nMoeLayers * nExpert || h.counts.some((c) => !(Number.isFinite(c) && c >= 0)))
    throw bad(`counts must be ${nMoeLayers * nExpert} non-negative numbers`);
  if (!(Number.isFinite(h.tokens) && h.tokens >= 0)) throw bad('tokens must be a non-negative number');
  return h;
}

/** `prev` decayed by `decay`, plus one run's counts over `tokens` tokens. */
export function mergeUsage(
  prev: UsageHistory | null,
  run: { key: string; model: string; nMoeLayers: number; nExpert: number; counts: ArrayLike<number>; tokens: number },
  decay = DEFAULT_USAGE_DECAY,
): UsageHistory {
  const n = run.nMoeLayers * run.nExpert;
  if (run.counts.length !== n) throw new EngineError('KAIL_E_INVALID_ARG', `usage counts: ${run.counts.length} values for ${run.nMoeLayers} x ${run.nExpert} experts`);
  const counts = new Array<number>(n);
  for (let i = 0; i < n; i++) counts[i] = (prev ? prev.counts[i] * decay : 0) + run.counts[i];
  return {
    format: USAGE_HISTORY_FORMAT,
    version: USAGE_HISTORY_VERSION,
    key: run.key,
    model: run.model,
    nMoeLayers: run.nMoeLayers,
    nExpert: run.nExpert,
    runs: (prev?.runs ?? 0) + 1,
    tokens: (prev ? prev.tokens * decay : 0) + run.tokens,
    counts,
    updated: new Date().toISOString(),
  };
}

/** Writes the history atomically (temp file + rename), creating the directory. */
export function writeUsageHistory(dir: string, h: UsageHistory): string {
  fs.mkdirSync(dir, { recursive: true });
  const file = usageHistoryPath(dir, h.key);
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(h) + '\n');
  fs.renameSync(tmp, file);
  return file;
}

/** Experts to warm, hottest first: (layer, expert) with share = decayed count / decayed tokens. */
export interface WarmOrder {
  layers: Int32Array;
  experts: Int32Array;
  shares: Float64Array;
}

export function warmOrder(h: UsageHistory): WarmOrder {
  const idx: number[] = [];
  for (let i = 0; i < h.counts.length; i++) if (h.counts[i] > 0) idx.push(i);
  idx.sort((a, b) => h.counts[b] - h.counts[a] || a - b);
  const tokens = Math.max(h.tokens, 1e-9);
  return {
    layers: Int32Array.from(idx, (i) => Math.floor(i / h.nExpert)),
    experts: Int32Array.from(idx, (i) => i % h.nExpert),
    shares: Float64Array.from(idx, (i) => Math.min(1, h.counts[i] / tokens)),
  };
}
