#!/usr/bin/env node
// The engine service process: `node packages/engine/dist/service/main.js --port 0 [--host H]`.
// Prints one JSON line {"service":"engine","address":...} once listening, for supervisors.
import { parseArgs } from 'node:util';

import { engine } from '@kailstream/proto';

import { LocalModelHost } from './model-host';
import { startEngineServer } from './engine-service';

async function main() {
  const { values } = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      model: { type: 'string', multiple: true, default: [] },
      ctx: { type: 'string', default: '4096' },
      threads: { type: 'string', default: '0' },
      seqs: { type: 'string', default: '8' },
    },
  });
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be 0..65535, got '${values.port}'`);
  const host = new LocalModelHost({ defaultContext: Number(values.ctx), threads: Number(values.threads), seqsPerModel: Number(values.seqs) });
  for (const m of values.model) {
    // id=path or just path
    const eq = m.indexOf('=');
    const [id, file] = eq > 0 && !m.slice(0, eq).includes('/') ? [m.slice(0, eq), m.slice(eq + 1)] : ['', m];
    const info = await host.loadModel(engine.LoadModelRequest.fromPartial({ path: file, id }));
    process.stderr.write(`engine: loaded ${info.id} (${info.architecture}, ${info.layerCount} layers) from ${info.path}\n`);
  }
  const running = await startEngineServer(host, { host: values.host, port });
  process.stdout.write(JSON.stringify({ service: 'engine', address: `${running.host}:${running.port}`, pid: process.pid }) + '\n');
  const stop = () => {
    running.close().then(() => process.exit(0));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((e) => {
  process.stderr.write(`engine: ${(e as Error).message}\n`);
  process.exit(1);
});
