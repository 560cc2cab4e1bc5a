import fs from 'node:fs';
import path from 'node:path';

import { SERVE_STATE_FILE } from './paths';

/** What `kail serve` records in the data directory while it runs. */
export interface ServeState {
  /** The supervisor (the `kail serve` process). */
  pid: number;
  startedAt: string;
  repo?: string;
  /** `local`: with HTTPS, the API's plain-HTTP loopback address for this machine. */
  services: Record<string, { address: string; pid?: number; local?: string }>;
}

/** True when a process with this pid exists (signal 0 checks without signalling). */
export function isAlive(pid: number | undefined): boolean {
  if (!pid || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists but belongs to someone else.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The running server's state, or undefined when there is no serve.json. Throws on a corrupt file. */
export function readServeState(dir: string): ServeState | undefined {
  const file = path.join(dir, SERVE_STATE_FILE);
  let raw: string;
  try {
    raw = fs.readFileSync(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    if (code === 'ENOTDIR') throw new Error(`the data directory ${dir} is not a directory (--data-dir or KAIL_DATA_DIR names a file)`);
    throw new Error(`cannot read ${file}: ${code ?? (e as Error).message}`);
  }
  let s: ServeState;
  try {
    s = JSON.parse(raw) as ServeState;
  } catch (e) {
    throw new Error(`${file} is not valid JSON (${(e as Error).message}); remove it if no server runs`);
  }
  if (typeof s.pid !== 'number' || typeof s.services !== 'object' || s.services === null) throw new Error(`${file} lacks pid/services; remove it if no server runs`);
  return s;
}

/** The API base URL of the server running on `dir`, when there is one. */
export function apiUrlOf(dir: string): string | undefined {
  const s = readServeState(dir);
  // (On this machine: the loopback address of an API that serves HTTPS, which needs no certificate to trust.)
  return s && isAlive(s.pid) ? (s.services.api?.local ?? s.services.api?.address) : undefined;
}

/**
 * The API a client command talks to: --url, else $KAIL_API_URL (as the console reads it; a server
 * on another machine), else the server running on the data directory, else llama-server's default address.
 */
export function apiBaseUrl(url: string | undefined, dir: string, env: NodeJS.ProcessEnv = process.env): string {
  return (url ?? (env.KAIL_API_URL || undefined) ?? apiUrlOf(dir) ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
}
