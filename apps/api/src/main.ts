#!/usr/bin/env node
// The API process: `node apps/api/dist/main.js [--host H] [--port P] [--scheduler host:port] [--data-dir DIR] [--reasoning-budget N] [--reasoning-format F] [--request-timeout S] [--alias NAME=ID …]
// [--cors-origins LIST] [--cors-methods M] [--cors-headers H] [--cors-credentials true|false]
// [--sampling-defaults JSON] [--ssl-key-file KEY.pem --ssl-cert-file CERT.pem] [--api-prefix /PATH] [--check]`.
// --check: only check the configuration (what `kail serve` runs before it starts the engine).
// Binds 127.0.0.1 unless --host says otherwise. Prints one JSON line once listening.
import { parseArgs } from 'node:util';
import { AUTH_TOKEN_ENV } from '@kailstream/proto';

import { parseApiConfig, STATIC_KEYS_ENV } from './env';
import { prepareApi, startApi } from './server';

/** `--alias NAME=ID` (repeatable) as ApiConfig.aliases; one without an id is an error naming it. */
function aliasesOf(list: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const a of list) {
    const eq = a.indexOf('=');
    if (eq <= 0) throw new Error(`--alias takes NAME=ID, got '${a}'`);
    out[a.slice(0, eq)] = a.slice(eq + 1);
  }
  return out;
}

/** A JSON argument, parsed; undefined when absent; not JSON: an error naming the flag. */
function jsonArg(flag: string, v: string | undefined): unknown {
  if (v === undefined) return undefined;
  try {
    return JSON.parse(v);
  } catch {
    throw new Error(`${flag} takes JSON, got '${v}'`);
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      host: { type: 'string' },
      port: { type: 'string' },
      scheduler: { type: 'string' },
      'data-dir': { type: 'string' },
      'reasoning-budget': { type: 'string' },
      'reasoning-format': { type: 'string' },
      'request-timeout': { type: 'string' },
      alias: { type: 'string', multiple: true },
      'cors-origins': { type: 'string' },
      'cors-methods': { type: 'string' },
      'cors-headers': { type: 'string' },
      'cors-credentials': { type: 'string' },
      'sampling-defaults': { type: 'string' },
      'ssl-key-file': { type: 'string' },
      'api-prefix': { type: 'string' },
      'ssl-cert-file': { type: 'string' },
      // Check the configuration (and the HTTPS files, and keys beyond loopback) and exit: 0, or 1 with the error.
      check: { type: 'boolean' },
    },
  });
  const config = parseApiConfig({
    host: values.host ?? process.env.KAIL_API_HOST,
    port: values.port ?? process.env.KAIL_API_PORT,
    schedulerAddress: values.scheduler ?? process.env.KAIL_SCHEDULER_ADDRESS,
    dataDir: values['data-dir'] ?? process.env.KAIL_DATA_DIR,
    modelsDir: process.env.KAIL_MODELS_DIR,
    reasoningBudget: values['reasoning-budget'] ?? process.env.KAIL_REASONING_BUDGET,
    reasoningFormat: values['reasoning-format'] ?? process.env.KAIL_REASONING_FORMAT,
    requestTimeoutS: values['request-timeout'] ?? process.env.KAIL_REQUEST_TIMEOUT,
    aliases: aliasesOf(values.alias ?? []),
    corsOrigins: values['cors-origins'] ?? process.env.KAIL_API_CORS_ORIGINS,
    corsMethods: values['cors-methods'] ?? process.env.KAIL_API_CORS_METHODS,
    corsHeaders: values['cors-headers'] ?? process.env.KAIL_API_CORS_HEADERS,
    corsCredentials: values['cors-credentials'] ?? process.env.KAIL_API_CORS_CREDENTIALS,
    apiPrefix: values['api-prefix'] ?? process.env.KAIL_API_PREFIX,
    sslKeyFile: values['ssl-key-file'] ?? process.env.KAIL_API_SSL_KEY_FILE,
    sslCertFile: values['ssl-cert-file'] ?? process.env.KAIL_API_SSL_CERT_FILE,
    samplingDefaults: jsonArg('--sampling-defaults', values['sampling-defaults'] ?? process.env.KAIL_API_SAMPLING_DEFAULTS),
    schedulerToken: process.env[AUTH_TOKEN_ENV],
    // (In the environment, not on the command line where `ps` shows it.)
    staticKeys: (process.env[STATIC_KEYS_ENV] ?? '').split('\n').filter((k) => k !== ''),
  });
  if (values.check) {
    const ready = prepareApi(config);
    ready.keys?.close();
    await ready.app.close();
    return;
  }
  const api = await startApi(config);
  process.stdout.write(JSON.stringify({ service: 'api', address: api.url, ...(api.localUrl ? { local: api.localUrl } : {}), pid: process.pid }) + '\n');
  const stop = () => void api.close().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((e) => {
  process.stderr.write(`api: ${(e as Error).message}\n`);
  process.exit(1);
});
