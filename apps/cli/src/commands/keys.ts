import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import type { Command } from 'commander';

import { dataDir, SERVICE_ENTRIES } from '../paths';

/**
 * Runs the API app's key administration on the data directory's key store (the store is the API
 * app's; the CLI is its front door). Works whether or not the server runs: the server re-reads
 * the store per request.
 */
function runKeys(args: string[], dir: string, json?: boolean): void {
  if (!fs.existsSync(SERVICE_ENTRIES.apiKeys)) throw new Error(`${SERVICE_ENTRIES.apiKeys} is missing: build the API first (npx nx run api:build)`);
  const r = spawnSync(process.execPath, [SERVICE_ENTRIES.apiKeys, '--data-dir', dir, ...args, ...(json ? ['--json'] : [])], {
    stdio: ['ignore', 'inherit', 'pipe'],
    encoding: 'utf8',
  });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error((r.stderr || `keys ${args[0]} failed (exit ${r.status})`).trim().replace(/^kail keys: /, ''));
}

interface KeysOpts {
  dataDir?: string;
  json?: boolean;
}

export function registerKeys(program: Command): void {
  const keys = program.command('keys').description('API keys: create, list (with usage), revoke; works with or without a running server');
  keys
    .command('create <name>')
    .description('create a key (shown once; stored hashed); from then on every API route but /health needs a key')
    .option('--data-dir <dir>', 'data directory (default: $KAIL_DATA_DIR or ~/.kailstream)')
    .option('--json', 'print {id, name, key, prefix, createdAt} as JSON')
    .action((name: string, o: KeysOpts) => runKeys(['create', name], dataDir(o.dataDir), o.json));
  keys
    .command('list')
    .description('list keys with their usage (requests, prompt and generated tokens)')
    .option('--data-dir <dir>', 'data directory')
    .option('--json', 'print JSON')
    .action((o: KeysOpts) => runKeys(['list'], dataDir(o.dataDir), o.json));
  keys
    .command('revoke <id>')
    .description('revoke a key by id, id prefix or listed key prefix; takes effect on the next request')
    .option('--data-dir <dir>', 'data directory')
    .action((id: string, o: KeysOpts) => runKeys(['revoke', id], dataDir(o.dataDir)));
}
