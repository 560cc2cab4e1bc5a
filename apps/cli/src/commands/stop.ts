import fs from 'node:fs';
import path from 'node:path';
import type * as grpc from '@grpc/grpc-js';
import type { engine as epb, scheduler as spb } from '@kailstream/proto';
import type { Command } from 'commander';

import { dataDir, SERVE_STATE_FILE } from '../paths';
import { isAlive, readServeState } from '../serve-state';
import { onServer } from './models';
import { rpc, unary } from './ps';

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

/**
 * Unloads model `name` from the server running on `dir`, as `ollama stop NAME`: once its requests
 * are done (waiting up to timeoutMs), or at once with `force`, cancelling them. Returns a line.
 */
export async function stopModel(dir: string, name: string, timeoutMs: number, force = false): Promise<string> {
  const { grpc: g } = rpc();
  const ids = name.endsWith(':latest') ? [name, name.slice(0, -7)] : [name];
  const end = Date.now() + timeoutMs;
  const served = await onServer(dir, async (c): Promise<string | 'not-loaded' | 'busy'> => {
    for (;;) {
      let busy = false;
      for (const id of ids) {
        try {
          await unary<spb.UnloadModelRequest, epb.UnloadModelResponse>(c.unloadModel.bind(c), { engineId: '', unload: { id, ifIdle: !force } }, Math.max(1000, end - Date.now()));
          return `unloaded '${id}'`;
        } catch (e) {
          const code = (e as grpc.ServiceError).code;
          if (code === g.status.RESOURCE_EXHAUSTED) busy = true;
          else if (code !== g.status.NOT_FOUND) throw e;
        }
      }
      if (!busy) return 'not-loaded';
      if (Date.now() >= end) return 'busy';
      await new Promise((r) => setTimeout(r, 250));
    }
  });
  if (!served) throw new Error(`no server is running on ${dir}: nothing to unload`);
  if (served.value === 'not-loaded') throw new Error(`model '${name}' is not loaded (kail ps lists the loaded models)`);
  if (served.value === 'busy') throw new Error(`model '${name}' still has requests after ${timeoutMs / 1000} s: not unloaded (--force cancels them)`);
  return served.value;
}

export function registerStop(program: Command): void {
  program
    .command('stop')
    .argument('[models...]', 'unload these models (as ollama stop NAME) and leave the server running')
    .description('stop the server running on the data directory (found through its serve.json); with model names, unload those models from it instead, once their requests are done')
    .option('--data-dir <dir>', 'data directory (default: $KAIL_DATA_DIR or ~/.kailstream)')
    .option('--timeout <s>', 'seconds to wait for the server to exit, or for a model to finish its requests', '30')
    .option('--force', 'unload a model at once, cancelling its running requests')
    .action(async (models: string[], o: { dataDir?: string; timeout: string; force?: boolean }) => {
      const t = Number(o.timeout);
      if (!Number.isFinite(t) || t <= 0) throw new Error(`--timeout must be a positive number of seconds, got '${o.timeout}'`);
      const dir = dataDir(o.dataDir);
      if (!models.length) {
        if (o.force) throw new Error('--force is for unloading models: kail stop MODEL --force');
        process.stdout.write((await stopServer(dir, t * 1000)) + '\n');
        return;
      }
      for (const m of models) process.stdout.write((await stopModel(dir, m, t * 1000, o.force)) + '\n');
    });
}
