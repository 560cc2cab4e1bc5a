import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Command } from 'commander';

import { dataDir, modelsDirOf, REPO_ROOT, SERVICE_ENTRIES } from '../paths';
// (The supervisor and the contracts load grpc-js: required when serve runs, not for every command.)
import type { Supervisor } from '../supervisor';
import { parseKvOverrides, parseLoraFlags, parseRamBudget, parseRopeFlags, parseVramBudget, parseChatTemplateKwargsFlag, readChatTemplateFlags, type RopeFlag } from '@kailstream/engine/core';
import { pullOrLocal } from './pull';
import { addCacheTypeOptions, addRopeOptions, budget, CACHE_TYPE_HELP, int, num, addSeedOption, OVERRIDE_KV_HELP, ropeFlagValues, type RopeFlagOpts } from './model-commands';

export interface ServeOptions {
  /** GGUF files to load at start (`id=path` names the model). */
  model?: string[];
  /** The models directory, in place of <data dir>/models (Ollama's OLLAMA_MODELS); set for the services as KAIL_MODELS_DIR. */
  modelsDir?: string;
  /** Hugging Face repositories (USER/REPO[:QUANT]) pulled into the models directory and loaded at start (llama-server's -hf). */
  hfRepo?: string[];
  /** llama.cpp's -hft: the Hugging Face token for -hf (and the API's pulls), else $HF_TOKEN. */
  hfToken?: string;
  /** llama.cpp's --offline: -hf takes the models directory's file, no network. */
  offline?: boolean;
  /** llama-server's --alias: names (comma-separated; repeatable) the one -m or -hf model answers to besides its id. */
  alias?: string[];
  /** llama-server's --cors-origins/-methods/-headers/--(no-)cors-credentials, for the API. */
  corsOrigins?: string;
  corsMethods?: string;
  corsHeaders?: string;
  corsCredentials?: boolean;
  /** llama-server's sampling flags: defaults for requests that set none (the API's samplingDefaults). */
  temp?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  seed?: number;
  repeatPenalty?: number;
  repeatLastN?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  nPredict?: number;
  /** Speculative decoding for the -m/-hf models (llama-server's -md; kail run's --draft, --lookup, --mtp, --spec-k). */
  draft?: string;
  lookup?: boolean;
  mtp?: boolean;
  specK?: number;
  /** llama-server's --chat-template-kwargs JSON, for every model the engine loads. */
  chatTemplateKwargs?: string;
  /** llama-server's --api-prefix: every API route under this path (/llm). */
  apiPrefix?: string;
  /** llama-server's --ssl-key-file / --ssl-cert-file: the API serves HTTPS with them. */
  sslKeyFile?: string;
  sslCertFile?: string;
  /** llama-server's --reasoning-format for chat requests that give none. */
  reasoningFormat?: string;
  /** llama-server's -to/--timeout: seconds a generation request may take from its arrival (0 = none; the API's default 600). */
  timeout?: number;
  /** Context length per sequence for loaded models. */
  ctx?: string;
  maxStallMs?: string;
  /** KV cache type of the engine's models (KV_TYPES: f16, q8_0, q4_0, ...); K's and V's apart when given. */
  cacheType?: string;
  cacheTypeK?: string;
  cacheTypeV?: string;
  /** LoRA adapters for the -m models (llama.cpp's --lora / --lora-scaled). */
  lora?: string[];
  loraScaled?: string[];
  /** The adapters load at scale 0 (llama-server's --lora-init-without-apply). */
  loraInitWithoutApply?: boolean;
  /** llama-server's --context-shift: generations that fill the context drop old tokens and go on. */
  contextShift?: boolean;
  /** llama-server's --pooling: what embeddings pool, over each file's pooling_type. */
  pooling?: string;
  /** Control vectors for the -m models (llama.cpp's --control-vector / --control-vector-scaled / --control-vector-layer-range). */
  controlVector?: string[];
  controlVectorScaled?: string[];
  controlVectorLayerRange?: string;
  /** llama.cpp's --swa-full for the engine's models. */
  swaFull?: boolean;
  /** llama.cpp's --override-kv KEY=TYPE:VALUE[,...] for every model the engine loads. */
  overrideKv?: string[];
  /** llama-server's --parallel (-np): sequences each model decodes at once (the engine's --seqs). */
  parallel?: string;
  /** Compute threads of each model (llama-server's -t; default: the CPUs this process may use). */
  threads?: string;
  /** The engine's RAM budget, shared by its models (8G, 512M, 75%): over the hardware profile's. */
  ram?: string;
  /** The VRAM tier's budget for models whose experts stream. */
  vram?: string;
  /** llama-server's --api-key (each may hold several, comma-separated) and --api-key-file (a key per line): keys besides the stored ones. */
  apiKey?: string[];
  apiKeyFile?: string;
  /** llama-server's --chat-template (Jinja source, or chatml) / --chat-template-file: every model's chat template. */
  chatTemplate?: string;
  chatTemplateFile?: string;
  /** llama.cpp's RoPE context flags for every model the engine loads. */
  rope?: Partial<Record<RopeFlag, string>>;
  /** Models in memory computed from the file's mapping (--mmap). */
  mmap?: boolean;
  /** llama-server's --ctx-checkpoints: a recurrent model's context checkpoints per slot. */
  ctxCheckpoints?: string;
  /** llama-server's --slot-save-path (POST /slots/ID?action=save|restore). */
  slotSavePath?: string;
  /** Reasoning budget of chat requests that give none (-1 = none). */
  reasoningBudget?: string;
  host: string;
  port: string;
  dataDir?: string;
  web: boolean;
  /** Load models from <data dir>/models on demand (default true; false from --no-load-on-demand). */
  loadOnDemand?: boolean;
  /** How long a model loaded on demand stays after its last request, in ms (negative: until unloaded). */
  keepAlive?: number;
  /** Most models the engine holds before the least recently used idle one makes room (0: memory decides). */
  modelsMax?: number;
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

/**
 * --host and --port as an address this machine can listen on, tried (and closed at once) before any
 * service starts: a name that does not resolve, an address of another machine or a port in use is
 * an error naming the flag, not an API that fails once the engine has loaded its models.
 */
async function checkListenAddress(host: string, port: number): Promise<void> {
  const why = await new Promise<string | null>((resolve) => {
    const probe = net.createServer();
    probe.once('error', (e: NodeJS.ErrnoException) => {
      const c = e.code ?? '';
      if (c === 'ENOTFOUND' || c === 'EAI_AGAIN') resolve(`--host ${host}: no such host name or address (${c})`);
      else if (c === 'EADDRNOTAVAIL') resolve(`--host ${host}: not an address of this machine (${c})`);
      else if (c === 'EADDRINUSE') resolve(`--port ${port}: in use on ${host} (${c}); give another, or 0 for any free one`);
      else if (c === 'EACCES') resolve(`--port ${port}: this user may not listen on it (${c}; ports below 1024 need privileges)`);
      else resolve(`cannot listen on ${host}:${port}: ${c || e.message}`);
    });
    probe.listen(port, host, () => probe.close(() => resolve(null)));
  });
  if (why) throw new Error(why);
}

const isLoopback = (host: string) => host === 'localhost' || host === '::1' || host.startsWith('127.');

/** The gRPC bearer token in the data directory (`grpc-token`, mode 0600), created on first use. */
export function grpcToken(dir: string): string {
  const file = path.join(dir, 'grpc-token');
  try {
    const t = fs.readFileSync(file, 'utf8').trim();
    if (t) return t;
  } catch {
    // first use
  }
  const t = randomBytes(24).toString('base64url');
  fs.writeFileSync(file, t + '\n', { mode: 0o600 });
  return t;
}

/**
 * llama-server's --api-key KEY[,KEY…] (repeatable) and --api-key-file FILE (a key per line, blank
 * lines skipped): the keys, or an error naming the flag for an empty key, one with spaces, or a
 * file that cannot be read.
 */
export function staticApiKeys(flags: readonly string[], file: string | undefined): string[] {
  const keys = flags.flatMap((f) => f.split(',').map((k) => ({ k: k.trim(), from: '--api-key' })));
  if (file !== undefined) {
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (e) {
      throw new Error(`--api-key-file: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    keys.push(...text.split(/\r?\n/).map((k) => k.trim()).filter(Boolean).map((k) => ({ k, from: `--api-key-file ${file}` })));
    if (!keys.some((x) => x.from !== '--api-key')) throw new Error(`--api-key-file ${file}: no key in it`);
  }
  for (const { k, from } of keys) {
    if (!k) throw new Error(`${from}: an empty key`);
    if (/\s/.test(k)) throw new Error(`${from}: a key cannot hold spaces`);
  }
  return [...new Set(keys.map((x) => x.k))];
}

/**
 * `--alias a,b` (llama-server's): the one model given by -m or -hf answers to these names. Its id
 * becomes the first name that can be an id (no '/'), else stays its file's; every other name is
 * the API's alias of that id. Returns the -m/-hf entries with the id in place and the aliases.
 */
export function applyAliases(alias: readonly string[], models: readonly string[]): { models: string[]; aliases: string[] } {
  const names = [...new Set(alias.flatMap((a) => a.split(',')).map((a) => a.trim()).filter(Boolean))];
  if (!names.length) return { models: [...models], aliases: [] };
  if (models.length !== 1) throw new Error(`--alias names one model, as llama-server's: give one -m or -hf${models.length ? ' (several are named each by -m ID=FILE)' : ''}`);
  for (const n of names) if (/[\s=]/.test(n)) throw new Error(`--alias: '${n}' cannot hold spaces or '='`);
  const m = models[0];
  const eq = m.indexOf('=');
  const named = eq > 0 && !m.slice(0, eq).includes('/');
  const file = named ? m.slice(eq + 1) : m;
  const id = names.find((n) => !n.includes('/'));
  const modelId = id ?? (named ? m.slice(0, eq) : path.basename(file).replace(/\.gguf$/i, ''));
  return { models: [id ? `${id}=${file}` : m], aliases: names.filter((n) => n !== id).map((n) => `${n}=${modelId}`) };
}

/** The engine's speculative-decoding arguments (a draft given as a path that exists is made absolute; else it names a file of the models directory). */
function specArgs(o: ServeOptions): string[] {
  return [
    ...(o.draft !== undefined ? ['--draft', fs.existsSync(o.draft) ? path.resolve(o.draft) : o.draft] : []),
    ...(o.lookup ? ['--lookup'] : []),
    ...(o.mtp ? ['--mtp'] : []),
    ...(o.specK !== undefined ? ['--spec-k', String(o.specK)] : []),
  ];
}

/** The API's --cors-* arguments from serve's. */
function corsArgs(o: ServeOptions): string[] {
  return [
    ...(o.corsOrigins !== undefined ? ['--cors-origins', o.corsOrigins] : []),
    ...(o.corsMethods !== undefined ? ['--cors-methods', o.corsMethods] : []),
    ...(o.corsHeaders !== undefined ? ['--cors-headers', o.corsHeaders] : []),
    ...(o.corsCredentials !== undefined ? ['--cors-credentials', String(o.corsCredentials)] : []),
  ];
}

/** The API's --sampling-defaults from serve's sampling flags (none: no argument). */
function samplingArgs(o: ServeOptions): string[] {
  const d: Record<string, number | undefined> = {
    temperature: o.temp, top_k: o.topK, top_p: o.topP, min_p: o.minP, seed: o.seed, repeat_penalty: o.repeatPenalty,
    repeat_last_n: o.repeatLastN, presence_penalty: o.presencePenalty, frequency_penalty: o.frequencyPenalty, n_predict: o.nPredict,
  };
  const given = Object.fromEntries(Object.entries(d).filter(([, v]) => v !== undefined));
  return Object.keys(given).length ? ['--sampling-defaults', JSON.stringify(given)] : [];
}

/** Starts engine, scheduler, API and web console as separate processes; returns the supervisor. */
export async function serve(opts: ServeOptions, log: (l: string) => void = (l) => process.stdout.write(l + '\n')): Promise<Supervisor> {
  if (opts.pooling !== undefined && !['none', 'mean', 'cls', 'last'].includes(opts.pooling)) throw new Error(`--pooling must be none, mean, cls or last, got '${opts.pooling}'`);
  // A malformed override stops here, not in an engine the supervisor would restart again and again.
  parseKvOverrides(opts.overrideKv ?? []);
  parseRopeFlags(opts.rope ?? {});
  for (const [flag, v, parse] of [['--ram', opts.ram, parseRamBudget], ['--vram', opts.vram, parseVramBudget]] as const) if (v !== undefined) budget(flag, parse)(v);
  readChatTemplateFlags(opts.chatTemplate, opts.chatTemplateFile);
  if (opts.chatTemplateKwargs !== undefined) parseChatTemplateKwargsFlag(opts.chatTemplateKwargs);
  if ((opts.sslKeyFile === undefined) !== (opts.sslCertFile === undefined)) throw new Error('HTTPS needs both --ssl-key-file and --ssl-cert-file');
  for (const [flag, f] of [['--ssl-key-file', opts.sslKeyFile], ['--ssl-cert-file', opts.sslCertFile]] as const)
    if (f !== undefined && !fs.existsSync(f)) throw new Error(`${flag}: ${f} does not exist`);
  if ([opts.draft !== undefined, opts.lookup, opts.mtp].filter(Boolean).length > 1) throw new Error('give one of --draft FILE, --lookup and --mtp');
  if ((opts.draft !== undefined || opts.lookup || opts.mtp) && !(opts.model?.length || opts.hfRepo?.length)) throw new Error('--draft, --lookup and --mtp speculate for the models given with -m or -hf: give one');
  // (Numbers the engine and API take as text are checked here, before any service starts: their
  // own parsers would name them only after a start, a negative one as commander's 'ambiguous'.)
  if (!/^\d+$/.test(String(opts.port)) || Number(opts.port) > 65535) throw new Error(`--port must be an integer in 0..65535, got '${opts.port}'`);
  for (const [flag, v, min] of [['--ctx', opts.ctx, 1], ['--max-stall-ms', opts.maxStallMs, 0], ['--ctx-checkpoints', opts.ctxCheckpoints, 0]] as const)
    if (v !== undefined && !(/^\d+$/.test(String(v)) && Number(v) >= min)) throw new Error(`${flag} must be an integer >= ${min}, got '${v}'`);
  // (A directory flag naming a file is refused here, not as a raw EEXIST or at the first save.)
  for (const [flag, d] of [['--data-dir', opts.dataDir], ['--models-dir', opts.modelsDir], ['--slot-save-path', opts.slotSavePath]] as const)
    if (d !== undefined && fs.existsSync(d) && !fs.statSync(d).isDirectory()) throw new Error(`${flag}: ${d} is a file, not a directory`);
  await checkListenAddress(opts.host, Number(opts.port));
  const apiKeys = staticApiKeys(opts.apiKey ?? [], opts.apiKeyFile);
  const dir = dataDir(opts.dataDir);
  fs.mkdirSync(dir, { recursive: true });
  // (The services, and this process's pulls, find it in the environment.)
  if (opts.modelsDir !== undefined) process.env.KAIL_MODELS_DIR = path.resolve(opts.modelsDir);
  // (Pulled before anything starts; kept in the models directory for the next start.)
  // (--alias needs exactly one model: checked before a pull starts.)
  applyAliases(opts.alias ?? [], [...(opts.model ?? []), ...(opts.hfRepo ?? [])]);
  const pulled: string[] = [];
  // (In this process's environment, so the API's pulls have it too.)
  if (opts.hfToken !== undefined) process.env.HF_TOKEN = opts.hfToken;
  for (const ref of opts.hfRepo ?? []) {
    const r = await pullOrLocal(dir, ref, undefined, { offline: opts.offline });
    pulled.push(`${r.id}=${r.path}`);
  }
  const { models, aliases } = applyAliases(opts.alias ?? [], [...(opts.model ?? []), ...pulled]);
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { EngineKeeper, freePort, Supervisor } = require('../supervisor') as typeof import('../supervisor');
  const { AUTH_TOKEN_ENV } = require('@kailstream/proto') as typeof import('@kailstream/proto');
  /* eslint-enable @typescript-eslint/no-require-imports */
  const sup = new Supervisor(log);
  const node = process.execPath;
  try {
    // Bound beyond loopback, the gRPC services listen there too (for clients on other machines)
    // and every service requires the bearer token kept in the data directory.
    const grpcHost = isLoopback(opts.host) ? '127.0.0.1' : opts.host;
    const token = isLoopback(opts.host) ? '' : grpcToken(dir);
    const env = token ? { [AUTH_TOKEN_ENV]: token } : {};
    const modelsDir = modelsDirOf(dir);
    fs.mkdirSync(modelsDir, { recursive: true });
    // (The keys given at start go in the API's environment, not on a command line `ps` shows.)
    const apiEnv = apiKeys.length ? { ...env, KAIL_API_KEYS: apiKeys.join('\n') } : env;
    const apiArgs = (scheduler: string) => [SERVICE_ENTRIES.api, '--host', opts.host, '--port', opts.port, '--scheduler', scheduler, '--data-dir', dir, ...(opts.reasoningBudget ? ['--reasoning-budget', opts.reasoningBudget] : []), ...(opts.reasoningFormat !== undefined ? ['--reasoning-format', opts.reasoningFormat] : []), ...(opts.timeout !== undefined ? ['--request-timeout', String(opts.timeout)] : []), ...aliases.flatMap((a) => ['--alias', a]), ...corsArgs(opts), ...samplingArgs(opts), ...(opts.apiPrefix !== undefined ? ['--api-prefix', opts.apiPrefix] : []), ...(opts.sslKeyFile !== undefined ? ['--ssl-key-file', path.resolve(opts.sslKeyFile), '--ssl-cert-file', path.resolve(opts.sslCertFile!)] : [])];
    // The API's configuration (its flags, the HTTPS files, a key when bound beyond loopback) is
    // checked before anything starts: a mistake there fails now, not after the engine loaded its models.
    const check = spawnSync(node, [...apiArgs('127.0.0.1:1'), '--check'], { env: { ...process.env, ...apiEnv }, encoding: 'utf8', timeout: 60_000 });
    if (check.status !== 0) throw new Error((check.stderr || check.error?.message || `the API's configuration check exited with ${check.status}`).trim().replace(/^api: /, ''));
    // A fixed port, so a restarted engine comes back at the address the scheduler knows.
    const enginePort = await freePort(grpcHost === '0.0.0.0' || grpcHost === '::' ? '127.0.0.1' : grpcHost);
    const engineArgs = [SERVICE_ENTRIES.engine, '--host', grpcHost, '--port', String(enginePort), '--models-dir', modelsDir, '--data-dir', dir, ...(opts.ctx ? ['--ctx', opts.ctx] : []), ...(opts.maxStallMs ? ['--max-stall-ms', opts.maxStallMs] : []), ...(opts.cacheType ? ['--cache-type', opts.cacheType] : []), ...(opts.cacheTypeK ? ['--cache-type-k', opts.cacheTypeK] : []), ...(opts.cacheTypeV ? ['--cache-type-v', opts.cacheTypeV] : []), ...(opts.lora ?? []).flatMap((l) => ['--lora', l]), ...(opts.loraScaled ?? []).flatMap((l) => ['--lora-scaled', l]), ...(opts.loraInitWithoutApply ? ['--lora-init-without-apply'] : []), ...(opts.contextShift ? ['--context-shift'] : []), ...(opts.pooling ? ['--pooling', opts.pooling] : []), ...(opts.slotSavePath ? ['--slot-save-path', path.resolve(opts.slotSavePath)] : []), ...(opts.controlVector ?? []).flatMap((c) => ['--control-vector', c]), ...(opts.controlVectorScaled ?? []).flatMap((c) => ['--control-vector-scaled', c]), ...(opts.controlVectorLayerRange ? ['--control-vector-layer-range', opts.controlVectorLayerRange] : []), ...(opts.swaFull ? ['--swa-full'] : []), ...(opts.overrideKv ?? []).flatMap((v) => ['--override-kv', v]), ...(opts.mmap ? ['--mmap'] : []), ...(opts.ctxCheckpoints ? ['--ctx-checkpoints', opts.ctxCheckpoints] : []), ...Object.entries(opts.rope ?? {}).flatMap(([f, v]) => [`--${f}`, v]), ...(opts.parallel ? ['--seqs', opts.parallel] : []), ...(opts.threads ? ['--threads', opts.threads] : []), ...(opts.ram ? ['--ram', opts.ram] : []), ...(opts.vram ? ['--vram', opts.vram] : []), ...(opts.chatTemplate !== undefined ? ['--chat-template', opts.chatTemplate] : []), ...(opts.chatTemplateFile !== undefined ? ['--chat-template-file', path.resolve(opts.chatTemplateFile)] : []), ...(opts.chatTemplateKwargs !== undefined ? ['--chat-template-kwargs', opts.chatTemplateKwargs] : []), ...specArgs(opts)];
    for (const m of models) engineArgs.push('--model', m);
    let schedAddress: string | undefined;
    const keeper = new EngineKeeper('', () => schedAddress, { token, log });
    const engine = await sup.start({ name: 'engine', command: node, args: engineArgs, env, restart: true, onExit: keeper.onExit, afterRestart: keeper.afterRestart }, 300_000);
    log(`engine     grpc://${engine.address}`);
    const sched = await sup.start({ name: 'scheduler', command: node, args: [SERVICE_ENTRIES.scheduler, '--host', grpcHost, '--port', '0', '--engine', engine.address, ...(opts.loadOnDemand === false ? ['--no-load-on-demand'] : []), ...(opts.keepAlive !== undefined ? ['--keep-alive-ms', String(opts.keepAlive)] : []), ...(opts.modelsMax ? ['--models-max', String(opts.modelsMax)] : [])], env });
    schedAddress = sched.address;
    keeper.track(engine.address);
    sup.once('stopping', () => keeper.stop());
    log(`scheduler  grpc://${sched.address}${token ? ` (bearer token in ${path.join(dir, 'grpc-token')})` : ''}`);
    const api = await sup.start({ name: 'api', command: node, args: apiArgs(sched.address), env: apiEnv });
    // (With HTTPS the API answers this machine's console and CLI in plain HTTP on a loopback port.)
    const apiLocal = typeof api.info.local === 'string' ? api.info.local : undefined;
    log(`api        ${api.address}${apiLocal ? ` (and ${apiLocal} for this machine)` : ''}`);
    if (opts.web) {
      const webPort = await freePort();
      const nextBin = require.resolve('next/dist/bin/next', { paths: [SERVICE_ENTRIES.web] });
      const url = `http://127.0.0.1:${webPort}`;
      await sup.start({
        name: 'web',
        command: node,
        args: [nextBin, 'start', '-p', String(webPort), '-H', '127.0.0.1'],
        cwd: SERVICE_ENTRIES.web,
        env: { KAIL_API_URL: apiLocal ?? api.address, NEXT_TELEMETRY_DISABLED: '1' },
        fixedAddress: url,
        waitReady: () => waitHttp(url, 60_000),
      });
      log(`web        ${url}`);
    }
    const state = {
      pid: process.pid,
      startedAt: new Date().toISOString(),
      repo: REPO_ROOT,
      services: Object.fromEntries([...sup.services].map(([k, v]) => [k, { address: v.address, pid: v.child.pid, ...(typeof v.info.local === 'string' ? { local: v.info.local } : {}) }])),
    };
    fs.writeFileSync(path.join(dir, 'serve.json'), JSON.stringify(state, null, 2));
    return sup;
  } catch (e) {
    await sup.stopAll();
    throw e;
  }
}

/**
 * llama-server's environment variables (common/arg.cpp's set_env) that `kail serve` reads, each as
 * the flag it stands for: a container made for llama-server (LLAMA_ARG_MODEL, LLAMA_ARG_CTX_SIZE,
 * LLAMA_ARG_N_PARALLEL…) starts the same way. Under a flag given on the command line or its KAIL_
 * variable.
 */
export const LLAMA_ARG_ENV: Readonly<Record<string, string>> = {
  LLAMA_ARG_MODEL: '--model', LLAMA_ARG_MODELS_DIR: '--models-dir', LLAMA_ARG_HF_REPO: '--hf-repo', LLAMA_ARG_ALIAS: '--alias', LLAMA_ARG_OFFLINE: '--offline',
  LLAMA_ARG_HOST: '--host', LLAMA_ARG_PORT: '--port', LLAMA_ARG_CTX_SIZE: '--ctx', LLAMA_ARG_N_PARALLEL: '--parallel', LLAMA_ARG_THREADS: '--threads',
  LLAMA_ARG_CACHE_TYPE_K: '--cache-type-k', LLAMA_ARG_CACHE_TYPE_V: '--cache-type-v', LLAMA_ARG_CTX_CHECKPOINTS: '--ctx-checkpoints',
  LLAMA_ARG_ROPE_SCALING_TYPE: '--rope-scaling', LLAMA_ARG_ROPE_SCALE: '--rope-scale', LLAMA_ARG_ROPE_FREQ_BASE: '--rope-freq-base', LLAMA_ARG_ROPE_FREQ_SCALE: '--rope-freq-scale',
  LLAMA_ARG_YARN_ORIG_CTX: '--yarn-orig-ctx', LLAMA_ARG_YARN_EXT_FACTOR: '--yarn-ext-factor', LLAMA_ARG_YARN_BETA_FAST: '--yarn-beta-fast', LLAMA_ARG_YARN_BETA_SLOW: '--yarn-beta-slow',
  LLAMA_ARG_POOLING: '--pooling', LLAMA_ARG_CONTEXT_SHIFT: '--context-shift', LLAMA_ARG_SWA_FULL: '--swa-full',
  LLAMA_API_KEY: '--api-key', LLAMA_ARG_API_KEY_FILE: '--api-key-file', LLAMA_ARG_API_PREFIX: '--api-prefix', LLAMA_ARG_SSL_KEY_FILE: '--ssl-key-file', LLAMA_ARG_SSL_CERT_FILE: '--ssl-cert-file',
  LLAMA_ARG_CORS_ORIGINS: '--cors-origins', LLAMA_ARG_CORS_METHODS: '--cors-methods', LLAMA_ARG_CORS_HEADERS: '--cors-headers', LLAMA_ARG_CORS_CREDENTIALS: '--cors-credentials',
  LLAMA_ARG_TEMPERATURE: '--temp', LLAMA_ARG_TOP_K: '--top-k', LLAMA_ARG_TOP_P: '--top-p', LLAMA_ARG_MIN_P: '--min-p', LLAMA_ARG_REPEAT_PENALTY: '--repeat-penalty',
  LLAMA_ARG_PRESENCE_PENALTY: '--presence-penalty', LLAMA_ARG_FREQUENCY_PENALTY: '--frequency-penalty', LLAMA_ARG_N_PREDICT: '--n-predict',
  LLAMA_ARG_SPEC_DRAFT_MODEL: '--draft', LLAMA_ARG_DRAFT_MAX: '--spec-k', LLAMA_ARG_SPEC_DRAFT_N_MAX: '--spec-k', LLAMA_ARG_TIMEOUT: '--timeout',
  LLAMA_ARG_CHAT_TEMPLATE: '--chat-template', LLAMA_ARG_CHAT_TEMPLATE_FILE: '--chat-template-file', LLAMA_ARG_CHAT_TEMPLATE_KWARGS: '--chat-template-kwargs',
  LLAMA_ARG_THINK_BUDGET: '--reasoning-budget', LLAMA_ARG_MODELS_MAX: '--models-max', LLAMA_ARG_MODELS_AUTOLOAD: '--no-load-on-demand', LLAMA_ARG_UI: '--no-web',
};

/** llama.cpp's truthy and falsey spellings of a switch in the environment (common/arg.cpp). */
function envSwitch(name: string, v: string): boolean {
  if (['on', 'enabled', 'true', '1'].includes(v.toLowerCase())) return true;
  if (['off', 'disabled', 'false', '0'].includes(v.toLowerCase())) return false;
  throw new Error(`${name} takes on/off, true/false, enabled/disabled or 1/0, got '${v}'`);
}

/**
 * Sets `long` from the variable `name` unless the command line or a KAIL_ variable (or an earlier
 * variable) set it; whether it did.
 */
function setFromEnv(c: Command, name: string, long: string, v: string): boolean {
  const option = c.options.find((o) => o.long === long);
  if (!option) return false;
  const key = option.attributeName();
  if (['cli', 'env'].includes(c.getOptionValueSource(key) ?? '')) return false;
  let value: unknown;
  // (A --no- switch holds the positive attribute: LLAMA_ARG_UI=off is --no-web.)
  if (option.negate) value = envSwitch(name, v);
  else if (option.isBoolean()) value = envSwitch(name, v);
  else if (option.variadic && !option.parseArg) value = [v];
  else value = option.parseArg ? option.parseArg(v, option.defaultValue) : v;
  c.setOptionValueWithSource(key, value, 'env');
  return true;
}

/**
 * Sets the options the LLAMA_ARG_ variables of `env` give (where neither the command line nor a
 * KAIL_ variable did); returns those it applied and the LLAMA_ARG_ variables it does not read, to say so.
 */
export function applyLlamaArgEnv(c: Command, env: NodeJS.ProcessEnv): { applied: string[]; unread: string[] } {
  const applied: string[] = [];
  for (const [name, long] of Object.entries(LLAMA_ARG_ENV)) {
    const v = env[name];
    if (v !== undefined && setFromEnv(c, name, long, v)) applied.push(`${name} (${long})`);
  }
  return { applied, unread: Object.keys(env).filter((k) => /^LLAMA_ARG_/.test(k) && !(k in LLAMA_ARG_ENV)).sort() };
}

/** `ollama serve`'s variables that `kail serve` reads (under the command line, KAIL_ and LLAMA_ARG_ variables). */
export const OLLAMA_SERVE_ENV = ['OLLAMA_HOST', 'OLLAMA_KEEP_ALIVE', 'OLLAMA_NUM_PARALLEL', 'OLLAMA_CONTEXT_LENGTH', 'OLLAMA_MAX_LOADED_MODELS', 'OLLAMA_ORIGINS', 'OLLAMA_KV_CACHE_TYPE'] as const;
// (Read elsewhere or of no use to say: the store `kail pull ollama:` reads, switches always on here.)
const OLLAMA_QUIET = new Set(['OLLAMA_MODELS', 'OLLAMA_FLASH_ATTENTION', 'OLLAMA_DEBUG']);

/**
 * Sets the options `ollama serve`'s variables give, as Ollama reads them, so a machine set up for
 * Ollama serves the same way: OLLAMA_HOST ([scheme://]host[:port]; the port stays kail's 8080
 * when it names none), OLLAMA_KEEP_ALIVE, OLLAMA_NUM_PARALLEL and OLLAMA_MAX_LOADED_MODELS (0:
 * Ollama's automatic choice, kail's default), OLLAMA_CONTEXT_LENGTH, OLLAMA_ORIGINS (besides this
 * machine's pages, as Ollama allows them; patterns with `*` inside are left out, said in `notes`),
 * OLLAMA_KV_CACHE_TYPE (K and V). Returns what it applied, notes, and the OLLAMA_ variables it does
 * not read.
 */
export function applyOllamaEnv(c: Command, env: NodeJS.ProcessEnv): { applied: string[]; notes: string[]; unread: string[] } {
  const applied: string[] = [];
  const notes: string[] = [];
  const set = (name: string, long: string, v: string) => {
    if (setFromEnv(c, name, long, v)) applied.push(`${name} (${long})`);
  };
  const host = env.OLLAMA_HOST?.trim();
  if (host) {
    const m = /^(?:[a-z][a-z0-9+.-]*:\/\/)?(\[[^\]]*\]|[^:/]*)(?::(\d*))?\/?$/i.exec(host);
    if (!m) throw new Error(`OLLAMA_HOST takes [scheme://]host[:port], got '${host}'`);
    if (m[1]) set('OLLAMA_HOST', '--host', m[1].replace(/^\[(.*)\]$/, '$1'));
    if (m[2]) set('OLLAMA_HOST', '--port', m[2]);
  }
  const positive = (name: string, long: string) => {
    const v = env[name]?.trim();
    if (v && v !== '0') set(name, long, v);
  };
  positive('OLLAMA_NUM_PARALLEL', '--parallel');
  positive('OLLAMA_MAX_LOADED_MODELS', '--models-max');
  positive('OLLAMA_CONTEXT_LENGTH', '--ctx');
  if (env.OLLAMA_KEEP_ALIVE?.trim()) set('OLLAMA_KEEP_ALIVE', '--keep-alive', env.OLLAMA_KEEP_ALIVE.trim());
  if (env.OLLAMA_KV_CACHE_TYPE?.trim()) set('OLLAMA_KV_CACHE_TYPE', '--cache-type', env.OLLAMA_KV_CACHE_TYPE.trim().toLowerCase());
  if (env.OLLAMA_ORIGINS?.trim()) {
    const all = env.OLLAMA_ORIGINS.split(',').map((o) => o.trim()).filter(Boolean);
    const patterns = all.filter((o) => o !== '*' && o.includes('*'));
    if (patterns.length) notes.push(`OLLAMA_ORIGINS: ${patterns.join(', ')} left out (origins are matched whole here: list each, or *)`);
    const kept = all.filter((o) => !patterns.includes(o));
    if (kept.length) set('OLLAMA_ORIGINS', '--cors-origins', ['localhost', ...kept].join(','));
  }
  const known = new Set<string>(OLLAMA_SERVE_ENV);
  return { applied, notes, unread: Object.keys(env).filter((k) => /^OLLAMA_/.test(k) && !known.has(k) && !OLLAMA_QUIET.has(k)).sort() };
}

export function registerServe(program: Command): void {
  const cmd = program
    .command('serve')
    .description('start the engine, scheduler, API and web console as separate processes')
    .option('-m, --model <file...>', 'GGUF model(s) to load at start (id=FILE names one)')
    .option('--models-dir <dir>', "the models directory (what requests load by name, kail pull and the console's pulls fill), in place of <data dir>/models; as Ollama's OLLAMA_MODELS, KAIL_MODELS_DIR sets it for every command")
    .option('--hf-repo <USER/REPO[:QUANT]>', "a Hugging Face repository's GGUF, pulled into the models directory (kept for the next start) and loaded at start, as llama-server's -hf (also -hf); repeatable", (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('-a, --alias <names>', "names the one -m or -hf model answers to, comma-separated (llama-server's): its id becomes the first, and requests naming any of them reach it; /v1/models lists them", (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--hf-token <token>', "Hugging Face access token for -hf and the API's pulls (llama.cpp's -hft; default $HF_TOKEN, which keeps it off the command line)")
    .option('--offline', "-hf takes the file of the models directory the pick finds, with no network (llama.cpp's --offline)")
    .option('-c, --ctx <n>', 'context length per sequence', '4096');
  addSeedOption(cmd, 'default sampling seed of requests that set none (-1, the default: a random one each)');
  addRopeOptions(addCacheTypeOptions(cmd, `${CACHE_TYPE_HELP}, for the models`), '; for every model the engine loads')
    .option('--lora <files>', 'LoRA adapter for the -m models (comma-separated for several), scale 1; repeatable', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--lora-scaled <file:scale>', 'LoRA adapter with its default scale, FNAME:SCALE; repeatable', (v: string, acc: string[]) => {
      parseLoraFlags([], [v]);
      return [...acc, v];
    }, [] as string[])
    .option('--lora-init-without-apply', "load the adapters at scale 0: requests' lora or POST /lora-adapters apply them")
    .option('--pooling <type>', "what embeddings pool, over each model's pooling_type: none (every token's row, on /embedding), mean, cls or last (llama-server's --pooling)")
    .option('--context-shift', "a generation that fills the context drops cached tokens after the request's n_keep (half the rest, or n_discard) and goes on, as llama-server's --context-shift")
    .option('--no-context-shift', 'a generation that fills the context ends there (the default)')
    .option('--control-vector <file>', 'control vector for the -m models at strength 1; repeatable', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--control-vector-scaled <file:scale>', "control vector with a strength (llama.cpp's FNAME SCALE works too); repeatable", (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--control-vector-layer-range <start:end>', "layers the control vectors apply to (llama.cpp's START END works too)")
    .option('--swa-full', "sliding-window layers keep every position (llama.cpp's --swa-full; gpt-oss can then shift its context)")
    .option('--override-kv <KEY=TYPE:VALUE>', `${OVERRIDE_KV_HELP}; for every model the engine loads`, (v: string, acc: string[]) => {
      parseKvOverrides([v]);
      return [...acc, v];
    }, [] as string[])
    .option('--mmap', "models in memory compute from the file's mapping (llama.cpp's default) instead of a copy in huge pages: they start faster and run slower")
    .option('--parallel <n>', "sequences each model decodes at once, a slot each (llama-server's -np; default 8): more share each pass, each holds its own KV cache", (v: string) => {
      if (!/^\d+$/.test(v) || Number(v) < 1 || Number(v) > 256) throw new Error(`--parallel must be an integer in 1..256, got '${v}'`);
      return v;
    })
    .option('-t, --threads <n>', "compute threads of each model (llama-server's -t; default: the physical cores this process may run on, at most its cgroup CPU quota)", (v: string) => {
      if (!/^\d+$/.test(v) || Number(v) < 1 || Number(v) > 1024) throw new Error(`--threads must be an integer in 1..1024, got '${v}'`);
      return v;
    })
    .option('--ram <bytes>', "the engine's RAM budget, shared by its models (8G, 512M, or a share of the memory available such as 75%): a model whose file is larger than what the loaded ones leave streams its experts within it; over the hardware profile's budget")
    .option('--vram <bytes>', "GPU memory for the expert cache of models whose experts stream (8G, or a share of GPU 0's free memory such as 90%; needs a CUDA device)")
    .option('--api-key <keys>', "an API key every route then needs (llama-server's; comma-separated for several; repeatable), besides those of kail keys; each its own tenant, its usage not stored", (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--temp <t>', "default temperature of requests that set none (llama-server's; every route: OpenAI's, Ollama's under a Modelfile's, llama-server's, Anthropic's up to its 1)", num('--temp', 0, 2))
    .option('--top-k <k>', 'default top-k of requests that set none (0 = off)', int('--top-k', 0))
    .option('--top-p <p>', 'default top-p of requests that set none (1 = off)', (v: string) => {
      const p = num('--top-p', 0, 1)(v);
      if (p === 0) throw new Error("--top-p must be above 0 (1 turns it off), got '0'");
      return p;
    })
    .option('--min-p <p>', 'default min-p of requests that set none (0 = off)', num('--min-p', 0, 1))
    .option('--repeat-penalty <p>', 'default repetition penalty of requests that set none (1 = off)', num('--repeat-penalty', 0, 100))
    .option('--repeat-last-n <n>', 'default window of the penalties of requests that set none (-1 = the whole context)', int('--repeat-last-n', -1))
    .option('--presence-penalty <p>', 'default presence penalty of requests that set none', num('--presence-penalty', -2, 2))
    .option('--frequency-penalty <p>', 'default frequency penalty of requests that set none', num('--frequency-penalty', -2, 2))
    .option('-n, --n-predict <n>', "default most tokens generated by requests that set none (llama-server's -n; -1 = until the context ends)", int('--n-predict', -1))
    .option('--draft <file>', "speculative decoding for the -m/-hf models with this draft GGUF (same vocabulary, checked; llama-server's -md/--model-draft); loaded in RAM. An EAGLE-3 draft (llama.cpp's eagle3 files) drafts from the target's hidden states at its three layers; a Gemma 4 assistant draft (gemma4-assistant files) over the target's KV cache")
    .option('--lookup', 'speculative decoding for the -m/-hf models with prompt-lookup (n-gram) drafts from the context')
    .option('--mtp', "speculative decoding for the -m/-hf models with the file's own multi-token-prediction block")
    .option('--spec-k <n>', "drafted tokens per pass to start from (1..32; llama-server's --draft-max), then adapted to the acceptance rate", int('--spec-k', 1, 32))
    .option('--cors-origins <origins>', "web pages that may call the API from a browser, comma-separated: localhost (pages of this machine, the default, as Ollama's), * (any), or origins such as https://app.example (llama-server's)")
    .option('--cors-methods <methods>', "methods a browser's preflight is told are allowed (default: GET, POST, DELETE, OPTIONS)")
    .option('--cors-headers <headers>', "headers a browser's preflight is told are allowed (default *: those it asks for)")
    .option('--cors-credentials', 'allow credentials in cross-origin requests (the default)')
    .option('--no-cors-credentials', 'do not allow credentials in cross-origin requests')
    .option('--reasoning-format <format>', "where a chat answer's <think> block goes for requests that say nothing (llama-server's): deepseek or auto (message.reasoning_content, the default), none (left in the content)", (v: string) => {
      if (!['none', 'auto', 'deepseek'].includes(v)) throw new Error(`--reasoning-format must be none, auto or deepseek, got '${v}'`);
      return v;
    })
    .option('--timeout <s>', "seconds a generation request may take from its arrival before it fails with 504 (llama-server's -to; default 600, 0 = none)", int('--timeout', 0, 86_400 * 365))
    .option('--api-prefix <path>', "serve every API route under this path, e.g. /llm for a reverse proxy that forwards /llm/… (llama-server's); the addresses printed hold it")
    .option('--ssl-key-file <file>', "serve the API over HTTPS with this PEM private key (llama-server's; with --ssl-cert-file); this machine's console and CLI reach it in plain HTTP on a loopback port")
    .option('--ssl-cert-file <file>', "the PEM certificate (chain) for --ssl-key-file (llama-server's)")
    .option('--api-key-file <file>', "API keys from a file, one per line (llama-server's --api-key-file)")
    .option('--chat-template <jinja>', "a chat template for every model in place of its file's (llama-server's): Jinja source, or chatml")
    .option('--chat-template-kwargs <json>', "variables every chat is rendered with, under a request's own chat_template_kwargs (llama-server's), e.g. '{\"enable_thinking\": false}'")
    .option('--chat-template-file <file>', "a chat template from a file for every model in place of its file's (llama-server's)")
    .option('--slot-save-path <dir>', "directory for llama-server's POST /slots/ID?action=save|restore files (off without it)")
    .option('--max-stall-ms <ms>', 'while streams decode, the longest a pass spends on arriving prompts (0 = no limit)', '500')
    .option('--ctx-checkpoints <n>', "recurrent models (Qwen3.5, Qwen3-Next, Nemotron-H, Granite 4.0-H, Jamba, LFM2): states kept per slot one token before each prompt's end, so a regenerated or rewritten turn computes only what follows (llama-server's --ctx-checkpoints; 0 = off)", '2')
    .option('--reasoning-budget <n>', "most tokens a chat answer's <think> block may take before the engine closes it, for requests that set none (-1 = none)", (v: string) => {
      if (!/^(-1|\d+)$/.test(v) || Number(v) > 1e9) throw new Error(`--reasoning-budget must be -1 or a token count (0..1000000000), got '${v}'`);
      return v;
    })
    .option('--host <host>', 'API bind address (loopback unless you say otherwise)', '127.0.0.1')
    .option('--port <port>', 'API port', '8080')
    .option('--data-dir <dir>', 'data directory (default: $KAIL_DATA_DIR or ~/.kailstream)')
    .option('--no-web', "do not start the web console (llama-server's --no-webui, also taken)")
    .option('--no-load-on-demand', "do not load a model from <data dir>/models when a request names one that is not loaded")
    .option('--keep-alive <duration>', "how long a model loaded on demand stays after its last request, as Ollama's keep_alive: 5m, 1h, 30s, 0, -1 = until unloaded (default 5m)", (v: string) => {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const ms = (require('@kailstream/proto') as typeof import('@kailstream/proto')).parseDurationMs(v);
      if (Number.isNaN(ms)) throw new Error(`--keep-alive must be a duration such as 5m, 1h30m, 30s, 0 or -1, got '${v}'`);
      // Negative, or a thousand years and more: until unloaded.
      return ms < 0 || ms >= 1000 * 365.25 * 24 * 3_600_000 ? -1 : Math.round(ms);
    })
    .option('--models-max <n>', 'most models loaded at once; a new one unloads the least recently used idle model loaded on demand (default 0: memory decides)', (v: string) => {
      if (!/^\d+$/.test(v) || Number(v) > 1000) throw new Error(`--models-max must be an integer in 0..1000, got '${v}'`);
      return Number(v);
    })
    .action(async (opts: ServeOptions & RopeFlagOpts) => {
      const rope = ropeFlagValues(opts);
      const sup = await serve({ ...opts, ...(Object.keys(rope).length ? { rope } : {}) });
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
  // Every flag that takes a value may come from the environment instead, KAIL_ and its name
  // (KAIL_PORT, KAIL_CTX, KAIL_PARALLEL, KAIL_RAM…), as llama-server's LLAMA_ARG_ variables do, for
  // containers and service units; a flag on the command line wins. (KAIL_API_KEY stays `kail
  // chat`'s key, and the models are given with -m.)
  for (const option of cmd.options)
    if (option.long && option.required && !['--model', '--api-key', '--data-dir'].includes(option.long))
      option.env(`KAIL_${option.long.slice(2).replace(/-/g, '_').toUpperCase()}`);
  // (Commander reads an option's variable only when the option is made with it: read them here,
  // through each option's own parser, before the action runs.)
  cmd.hook('preAction', (c) => {
    for (const option of c.options) {
      const v = option.envVar === undefined ? undefined : process.env[option.envVar];
      const key = option.attributeName();
      if (v === undefined || c.getOptionValueSource(key) === 'cli') continue;
      c.setOptionValueWithSource(key, option.parseArg ? option.parseArg(v, option.defaultValue) : v, 'env');
    }
    const { applied, unread } = applyLlamaArgEnv(c, process.env);
    if (applied.length) process.stderr.write(`kail serve: from llama-server's variables: ${applied.join(', ')}\n`);
    if (unread.length) process.stderr.write(`kail serve: ${unread.join(', ')} not read (GPU placement, batching and switches that are always on here, or what kail serve does not have)\n`);
    const ollama = applyOllamaEnv(c, process.env);
    if (ollama.applied.length) process.stderr.write(`kail serve: from Ollama's variables: ${ollama.applied.join(', ')}\n`);
    for (const n of ollama.notes) process.stderr.write(`kail serve: ${n}\n`);
    if (ollama.unread.length) process.stderr.write(`kail serve: ${ollama.unread.join(', ')} not read (ollama serve's, without a kail serve setting)\n`);
  });
}
