#!/usr/bin/env node
// The scheduler service process:
//   node packages/scheduler/dist/main.js --port 0 [--host H] [--engine host:port ...] [--slots N]
//     [--max-queued N] [--max-queued-per-tenant N] [--max-queue-wait-ms N] [--auth-token T]
//     [--no-load-on-demand] [--keep-alive-ms N] [--models-max N]
// Prints one JSON line {"service":"scheduler","address":...} once listening.
import { parseArgs } from 'node:util';

import { AUTH_TOKEN_ENV } from '@kailstream/proto';

import { startSchedulerServer } from './scheduler-service';

function int(name: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min}, got '${v}'`);
  return n;
}

/** Milliseconds; negative: until unloaded by hand. */
function keepAlive(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n)) throw new Error(`--keep-alive-ms must be an integer number of milliseconds (negative: never), got '${v}'`);
  return n;
}

async function main() {
  const { values } = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      engine: { type: 'string', multiple: true, default: [] },
      slots: { type: 'string' },
      'max-queued': { type: 'string' },
      'max-queued-per-tenant': { type: 'string' },
      'max-queue-wait-ms': { type: 'string' },
      'probe-interval-ms': { type: 'string' },
      'auth-token': { type: 'string' },
      // Models in an engine's models directory load when a request names them (as Ollama's do).
      'no-load-on-demand': { type: 'boolean', default: false },
      // How long a model loaded on demand stays after its last request (negative: until unloaded).
      'keep-alive-ms': { type: 'string' },
      // Most models per engine before the least recently used idle one is unloaded for a new one.
      'models-max': { type: 'string' },
    },
  });
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be 0..65535, got '${values.port}'`);
  const authToken = values['auth-token'] ?? process.env[AUTH_TOKEN_ENV] ?? '';
  const running = await startSchedulerServer({
    host: values.host,
    port,
    engines: values.engine,
    slotsPerEngine: int('slots', values.slots, 1),
    maxQueued: int('max-queued', values['max-queued'], 1),
    maxQueuedPerTenant: int('max-queued-per-tenant', values['max-queued-per-tenant'], 1),
    maxQueueWaitMs: int('max-queue-wait-ms', values['max-queue-wait-ms'], 1),
    probeIntervalMs: int('probe-interval-ms', values['probe-interval-ms'], 50),
    authToken,
    loadOnDemand: !values['no-load-on-demand'],
    keepAliveMs: keepAlive(values['keep-alive-ms']),
    maxModels: int('models-max', values['models-max'], 0),
  });
  process.stdout.write(JSON.stringify({ service: 'scheduler', address: `${running.host}:${running.port}`, pid: process.pid, auth: authToken !== '' }) + '\n');
  const stop = () => void running.close().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((e) => {
  process.stderr.write(`scheduler: ${(e as Error).message}\n`);
  process.exit(1);
});
