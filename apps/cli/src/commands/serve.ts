import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';

import { dataDir, REPO_ROOT, SERVICE_ENTRIES } from '../paths';
import { freePort, Supervisor } from '../supervisor';

export interface ServeOptions {
  /** GGUF files to load at start (`id=path` names the model). */
  model?: string[];
  /** Context length per sequence for loaded models. */
  ctx?: string;
  host: string;
  port: string;
  dataDir?: string;
  web: boolean;
}

async function waitHttp(url: string, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      const r = await fetch(url);
      if (r.status < 500) return;
    } catch {
      // not up yet
    }
    if (Date.now() > end) throw new Error(`${url} did not answer within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Starts engine, scheduler, API and web console as separate processes; returns the supervisor. */
export async function serve(opts: ServeOptions, log: (l: string) => void = (l) => process.stdout.write(l + '\n')): Promise<Supervisor> {
  const dir = dataDir(opts.dataDir);
  fs.mkdirSync(dir, { recursive: true });
  const sup = new Supervisor(log);
  const node = process.execPath;
  try {
    const engineArgs = [SERVICE_ENTRIES.engine, '--port', '0', ...(opts.ctx ? ['--ctx', opts.ctx] : [])];
    for (const m of opts.model ?? []) engineArgs.push('--model', m);
    const engine = await sup.start({ name: 'engine', command: node, args: engineArgs, restart: true }, 300_000);
    log(`engine     grpc://${engine.address}`);
    const sched = await sup.start({ name: 'scheduler', command: node, args: [SERVICE_ENTRIES.scheduler, '--port', '0', '--engine', engine.address] });
    log(`scheduler  grpc://${sched.address}`);
    const api = await sup.start({ name: 'api', command: node, args: [SERVICE_ENTRIES.api, '--host', opts.host, '--port', opts.port, '--scheduler', sched.address, '--data-dir', dir] });
    log(`api        ${api.address}`);
    if (opts.web) {
      const webPort = await freePort();
      const nextBin = require.resolve('next/dist/bin/next', { paths: [SERVICE_ENTRIES.web] });
      const url = `http://127.0.0.1:${webPort}`;
      await sup.start({
        name: 'web',
        command: node,
        args: [nextBin, 'start', '-p', String(webPort), '-H', '127.0.0.1'],
        cwd: SERVICE_ENTRIES.web,
        env: { KAIL_API_URL: api.address, NEXT_TELEMETRY_DISABLED: '1' },
        fixedAddress: url,
        waitReady: () => waitHttp(url, 60_000),
      });
      log(`web        ${url}`);
    }
    const state = {
      pid: process.pid,
      startedAt: new Date().toISOString(),
      repo: REPO_ROOT,
      services: Object.fromEntries([...sup.services].map(([k, v]) => [k, { address: v.address, pid: v.child.pid }])),
    };
    fs.writeFileSync(path.join(dir, 'serve.json'), JSON.stringify(state, null, 2));
    return sup;
  } catch (e) {
    await sup.stopAll();
    throw e;
  }
}

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('start the engine, scheduler, API and web console as separate processes')
    .option('-m, --model <file...>', 'GGUF model(s) to load at start (id=FILE names one)')
    .option('-c, --ctx <n>', 'context length per sequence', '4096')
    .option('--host <host>', 'API bind address (loopback unless you say otherwise)', '127.0.0.1')
    .option('--port <port>', 'API port', '8080')
    .option('--data-dir <dir>', 'data directory (default: $KAIL_DATA_DIR or ~/.kailstream)')
    .option('--no-web', 'do not start the web console')
    .action(async (opts: ServeOptions) => {
      const sup = await serve(opts);
      process.stdout.write('ready; Ctrl-C stops everything\n');
      await new Promise<void>((resolve) => {
        const stop = () => {
          process.stdout.write('stopping...\n');
          sup.stopAll().then(() => {
            const state = path.join(dataDir(opts.dataDir), 'serve.json');
            fs.rmSync(state, { force: true });
            resolve();
          });
        };
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
      });
    });
}
