#!/usr/bin/env node
// Key administration on the data directory's key store, with or without a running server (the
// server re-reads the store per request, so changes apply at once). `kail keys` runs this:
//   node apps/api/dist/keys-main.js --data-dir DIR create NAME [--json]
//   node apps/api/dist/keys-main.js --data-dir DIR list [--json]
//   node apps/api/dist/keys-main.js --data-dir DIR revoke ID|PREFIX
import path from 'node:path';
import { parseArgs } from 'node:util';

import { KEYS_FILE, KeyStore } from './auth/keys';

const USAGE = 'usage: keys-main --data-dir DIR (create NAME | list | revoke ID) [--json]';

function table(rows: string[][]): string {
  const w = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((c, i) => c.padEnd(w[i])).join('  ').trimEnd()).join('\n');
}

export function runKeys(argv: string[], out: (s: string) => void = (s) => process.stdout.write(s)): number {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: { 'data-dir': { type: 'string' }, json: { type: 'boolean' } } });
  const dir = values['data-dir'];
  const [cmd, arg] = positionals;
  if (!dir || !cmd) throw new Error(USAGE);
  const file = path.join(dir, KEYS_FILE);
  if (cmd === 'create') {
    if (!arg) throw new Error('keys create needs a name: kail keys create <name>');
    const store = KeyStore.open(file);
    try {
      const k = store.create(arg);
      if (values.json) out(JSON.stringify(k) + '\n');
      else
        out(
          `created key "${k.name}" (id ${k.id})\n\n  ${k.key}\n\n` +
            `This is the only time the key is shown; it is stored hashed in ${file}.\n` +
            'Send it as "Authorization: Bearer <key>". Every route but /health now requires a key.\n',
        );
      return 0;
    } finally {
      store.close();
    }
  }
  if (cmd === 'list') {
    const store = KeyStore.open(file);
    try {
      const keys = store.list();
      const usage = new Map(store.usage().map((u) => [u.id, u]));
      const rows = keys.map((k) => ({ ...k, ...(usage.get(k.id) ?? { requests: 0, promptTokens: 0, completionTokens: 0 }) }));
      if (values.json) {
        out(JSON.stringify(rows.map(({ id, name, prefix, createdAt, revokedAt, lastUsedAt, requests, promptTokens, completionTokens }) => ({ id, name, prefix, createdAt, revokedAt, lastUsedAt, requests, promptTokens, completionTokens }))) + '\n');
        return 0;
      }
      if (rows.length === 0) {
        out('no keys (the API needs none on loopback until one exists): kail keys create <name>\n');
        return 0;
      }
      const t = [['ID', 'NAME', 'PREFIX', 'CREATED', 'LAST USED', 'REQUESTS', 'PROMPT TOK', 'GEN TOK', 'STATUS']];
      for (const r of rows)
        t.push([r.id.slice(0, 8), r.name, r.prefix, r.createdAt.slice(0, 19), r.lastUsedAt?.slice(0, 19) ?? '-', String(r.requests), String(r.promptTokens), String(r.completionTokens), r.revokedAt ? `revoked ${r.revokedAt.slice(0, 19)}` : 'active']);
      out(table(t) + '\n');
      return 0;
    } finally {
      store.close();
    }
  }
  if (cmd === 'revoke') {
    if (!arg) throw new Error('keys revoke needs the key id (or its listed prefix): kail keys revoke <id>');
    const store = KeyStore.open(file);
    try {
      if (!store.revoke(arg)) {
        process.stderr.write(`no active key matches "${arg}" (see kail keys list)\n`);
        return 1;
      }
      out(`revoked ${arg}\n`);
      return 0;
    } finally {
      store.close();
    }
  }
  throw new Error(`unknown keys command "${cmd}"; ${USAGE}`);
}

if (require.main === module) {
  try {
    process.exitCode = runKeys(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`kail keys: ${(e as Error).message}\n`);
    process.exitCode = 2;
  }
}
