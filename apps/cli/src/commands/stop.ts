import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';

import { dataDir, SERVE_STATE_FILE } from '../paths';
import { isAlive, readServeState } from '../serve-state';

/**
 * Stops the server running on `dir`: SIGTERM to the `kail serve` supervisor found through
 * serve.json (it stops every service and removes the file), then waits for it to exit.
 * Returns a line describing what happened.
 */
export async function stopServer(dir: string, timeoutMs: number): Promise<string> {
  const state = readServeState(dir);
  const file = path.join(dir, SERVE_STATE_FILE);
  if (!state) throw new Error(`no server is running on ${dir} (no ${SERVE_STATE_FILE})`);
  if (!isAlive(state.pid)) {
    fs.rmSync(file, { force: true });
    return `the server recorded in ${file} (pid ${state.pid}) is not running; removed the stale file`;
  }
  process.kill(state.pid, 'SIGTERM');
  const end = Date.now() + timeoutMs;
  while (isAlive(state.pid)) {
    if (Date.now() > end) throw new Error(`kail serve (pid ${state.pid}) did not exit within ${timeoutMs / 1000} s after SIGTERM`);
    await new Promise((r) => setTimeout(r, 100));
  }
  // The supervisor removes it on a clean stop; make sure a crash during stop leaves nothing stale.
  fs.rmSync(file, { force: true });
  return `stopped kail serve (pid ${state.pid}) and its services`;
}

export function registerStop(program: Command): void {
  program
    .command('stop')
    .description('stop the server running on the data directory (found through its serve.json)')
    .option('--data-dir <dir>', 'data directory (default: $KAIL_DATA_DIR or ~/.kailstream)')
    .option('--timeout <s>', 'seconds to wait for it to exit', '30')
    .action(async (o: { dataDir?: string; timeout: string }) => {
      const t = Number(o.timeout);
      if (!Number.isFinite(t) || t <= 0) throw new Error(`--timeout must be a positive number of seconds, got '${o.timeout}'`);
      process.stdout.write((await stopServer(dataDir(o.dataDir), t * 1000)) + '\n');
    });
}
