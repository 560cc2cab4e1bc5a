#!/usr/bin/env node
// The scheduler service process: `node packages/scheduler/dist/main.js --port 0 --engine host:port ...`.
// Prints one JSON line {"service":"scheduler","address":...} once listening.
import { parseArgs } from 'node:util';

import { startSchedulerServer } from './scheduler-service';

async function main() {
  const { values } = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      engine: { type: 'string', multiple: true, default: [] },
    },
  });
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be 0..65535, got '${values.port}'`);
  const running = await startSchedulerServer({ host: values.host, port, engines: values.engine });
  process.stdout.write(JSON.stringify({ service: 'scheduler', address: `${running.host}:${running.port}`, pid: process.pid }) + '\n');
  const stop = () => void running.close().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((e) => {
  process.stderr.write(`scheduler: ${(e as Error).message}\n`);
  process.exit(1);
});
