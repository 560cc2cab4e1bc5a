import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import * as grpc from '@grpc/grpc-js';
import { bearerClientOptions, common, scheduler as spb } from '@kailstream/proto';

import { ModelAliases } from './aliases';
import { registerCors } from './cors';
import { registerModelfileParameters, registerSamplingDefaults } from './sampling-defaults';
import { authRequired, isLoopback, registerAuth, StaticKeys, tenantOf } from './auth/auth';
import { KEYS_FILE, KeyStore } from './auth/keys';
import type { ApiConfig } from './env';
import { ApiMetrics } from './metrics';
import { registerAnthropicRoutes } from './anthropic/messages';
import { LLAMA_SERVER_ROUTES, registerLlamaServerRoutes, unloadedModelFiles } from './llama-server/routes';
import { errorBody } from './error-shape';
import { MODELFILES_FILE, ModelfileStore } from './ollama/modelfiles';
import { OLLAMA_ROUTES, registerOllamaRoutes } from './ollama/routes';
import { registerResponsesRoutes } from './openai/responses';
import { MemoryResponseStore, RESPONSES_FILE, SqliteResponseStore, type ResponseStore } from './openai/response-store';
import { registerOpenAiRoutes, type OpenAiDeps } from './openai/routes';
import { openAiError } from './openai/schemas';
import { modelFileTime } from './file-times';
import { PullJobs } from './pull-jobs';
import { readiness } from './ready';
import { mountTrpc } from './trpc';
import type { TelemetryHub } from './trpc/telemetry-hub';
import { VERSION } from './version';

const NATIVE_ROUTES: ReadonlySet<string> = new Set([...LLAMA_SERVER_ROUTES, ...OLLAMA_ROUTES]);

export interface RunningApi {
  app: FastifyInstance;
  url: string;
  /** With HTTPS: the plain-HTTP loopback address that serves the same routes (for the console and the CLI here). */
  localUrl?: string;
  /** The key store (undefined without a data directory). */
  keys?: KeyStore;
  metrics: ApiMetrics;
  close(): Promise<void>;
}

/** The largest request body the API reads. */
export const MAX_BODY_BYTES = 64 << 20;

/** Where a request outside the API prefix is routed: nowhere (a 404 that names the prefix). */
const OUTSIDE_PREFIX = '/\u0000outside-the-api-prefix';

/** Fastify's rewriteUrl for an API prefix: /PREFIX/x is /x; anything else is outside it. */
function underPrefix(prefix: string): (req: { url?: string }) => string {
  return (req) => {
    const u = req.url ?? '/';
    if (u === prefix || u.startsWith(`${prefix}/`) || u.startsWith(`${prefix}?`)) return u.slice(prefix.length).replace(/^(?!\/)/, '/');
    return `${OUTSIDE_PREFIX}${u}`;
  };
}

/** A PEM file for HTTPS, read, or an error naming the flag and the file. */
function readPem(file: string, flag: string): Buffer {
  let b: Buffer;
  try {
    b = fs.readFileSync(file);
  } catch (e) {
    throw new Error(`${flag}: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  if (!b.includes('-----BEGIN ')) throw new Error(`${flag}: ${file} is not a PEM file (no -----BEGIN line)`);
  return b;
}

/** Builds the HTTP API: OpenAI routes, keys, metrics, health and readiness. */
/**
 * What the API makes before it serves: its Fastify server (HTTPS from the key and certificate files,
 * under the API prefix) and its key store, refusing to listen beyond loopback without a key. Every
 * failure of a start that is the configuration's shows here, before any other store is open: `kail
 * serve` runs this alone (`main.js --check`) before it starts the engine.
 */
export function prepareApi(config: ApiConfig): { app: FastifyInstance; tls: boolean; keys: KeyStore | undefined; staticKeys: StaticKeys } {
  const tls = config.sslKeyFile ? { key: readPem(config.sslKeyFile, '--ssl-key-file'), cert: readPem(config.sslCertFile, '--ssl-cert-file') } : undefined;
  // Bodies up to 64 MiB: Fastify's default (1 MiB) is less than a long context's prompt (a 256k-token
  // conversation is about 1 MB of text; its token ids as JSON more). Past the limit: a 413 that says so.
  let app: FastifyInstance;
  try {
    const common = { logger: false, bodyLimit: MAX_BODY_BYTES, ...(config.apiPrefix ? { rewriteUrl: underPrefix(config.apiPrefix) } : {}) };
    app = (tls ? Fastify({ ...common, https: tls }) : Fastify(common)) as unknown as FastifyInstance;
  } catch (e) {
    // (Fastify's https option: a key that does not match the certificate fails here.)
    throw new Error(`HTTPS: the key (${config.sslKeyFile}) and the certificate (${config.sslCertFile}) do not make a TLS server: ${(e as Error).message}`);
  }
  const keys = config.dataDir ? KeyStore.open(path.join(config.dataDir, KEYS_FILE)) : undefined;
  const staticKeys = new StaticKeys(config.staticKeys);
  if (!isLoopback(config.host) && !staticKeys.size && (!keys || keys.activeCount() === 0)) {
    keys?.close();
    throw new Error(
      `refusing to listen on ${config.host} (beyond loopback) without an API key: create one with ` +
        `\`kail keys create <name>${config.dataDir ? ` --data-dir ${config.dataDir}` : ''}\`` +
        (config.dataDir ? '' : ' and pass the data directory (--data-dir)') +
        ' (or give one with `kail serve --api-key`), or bind 127.0.0.1',
    );
  }
  return { app, tls: !!tls, keys, staticKeys };
}

export async function startApi(config: ApiConfig): Promise<RunningApi> {
  // (The HTTPS files and the server first: a bad file stops the start before any store is open.)
  const { app, tls, keys, staticKeys } = prepareApi(config);
  const beyondLoopback = !isLoopback(config.host);
  // Where pulls go: the models directory the engine loads from (`kail serve` gives both the same).
  const modelsDir = config.modelsDir ? path.resolve(config.modelsDir) : config.dataDir ? path.join(config.dataDir, 'models') : '';
  // Stored responses (/v1/responses): in the data directory when there is one, so they outlive a restart.
  let responses: ResponseStore;
  try {
    responses = config.dataDir
      ? SqliteResponseStore.open(path.join(config.dataDir, RESPONSES_FILE), undefined, (m) => process.stderr.write(`api: ${m}\n`))
      : new MemoryResponseStore();
  } catch (e) {
    keys?.close();
    throw e;
  }

  // A body whose content type is not JSON's (curl -d sends form-urlencoded, as the curl lines in
  // Ollama's and llama-server's docs do; a browser's fetch of a string sends text/plain) is read as
  // JSON all the same, as those servers read it.
  const jsonAnyway = (_req: unknown, body: string | Buffer, done: (err: Error | null, body?: unknown) => void) => {
    const text = body.toString();
    if (!text.trim()) return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch {
      done(Object.assign(new Error('the body is not valid JSON'), { statusCode: 400, code: 'invalid_json' }), undefined);
    }
  };
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('text/plain', { parseAs: 'string' }, jsonAnyway);
  app.addContentTypeParser('*', { parseAs: 'string' }, jsonAnyway);
  const scheduler = config.schedulerAddress
    ? new spb.SchedulerServiceClient(config.schedulerAddress, grpc.credentials.createInsecure(), bearerClientOptions(config.schedulerToken || undefined))
    : undefined;
  const metrics = new ApiMetrics();
  if (scheduler) metrics.follow(scheduler);

  // Error handlers first: routes take the handler in force when the app boots (an awaited
  // register below boots it), and every error must leave in OpenAI's shape.
  app.setNotFoundHandler((req, reply) => {
    const url = req.originalUrl ?? req.url;
    const outside = config.apiPrefix && req.url.startsWith(OUTSIDE_PREFIX);
    reply.code(404).send(errorBody(req.url, 404, `no route ${req.method} ${url}${outside ? ` (this server answers under ${config.apiPrefix})` : ''}`, 'not_found'));
  });
  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    // Fastify's own errors (malformed JSON, wrong content type, body too large) carry a 4xx status.
    const status = err.statusCode && err.statusCode >= 400 && err.statusCode < 600 ? err.statusCode : 500;
    reply.code(status).send(errorBody(req.url, status, err.message, err.code ?? null));
  });

  // Browsers' cross-origin requests: headers on every answer, preflights answered before the key check.
  registerCors(app, { origins: config.corsOrigins, methods: config.corsMethods, headers: config.corsHeaders, credentials: config.corsCredentials });
  const auth = { store: keys, always: beyondLoopback, staticKeys };
  registerAuth(app, auth);
  // Other names of the loaded models (kail serve --alias): read as their ids before any route's handler.
  const aliases = new ModelAliases(config.aliases);
  aliases.register(app);
  // Models' Modelfile settings (kail create, Ollama's create): Ollama's routes apply them, and the
  // OpenAI routes too (PARAMETERs here, above the server's defaults; system prompt and TEMPLATE in the chat route).
  const modelfiles = new ModelfileStore(config.dataDir ? path.join(config.dataDir, MODELFILES_FILE) : null, modelsDir || null);
  registerModelfileParameters(app, (model) => modelfiles.of(model));
  // The server's sampling defaults (kail serve --temp …) in bodies that leave them out.
  registerSamplingDefaults(app, config.samplingDefaults);

  // Liveness: the process is up and its event loop answers (no key needed).
  app.get('/health', async () => ({ status: 'ok', version: VERSION }));

  // Readiness: a model is loaded and an engine answered a probe recently.
  app.get('/ready', async (_req, reply) => {
    const r = await readiness(scheduler, config.readyMaxAgeS * 1000);
    return reply.code(r.ready ? 200 : 503).send(r);
  });

  app.get('/metrics', async (_req, reply) => {
    const body = await metrics.registry.metrics();
    return reply.type(metrics.registry.contentType).send(body);
  });

  const apiStarted = new Date();
  const listModels = async () => {
    if (!scheduler) return [];
    const res = await new Promise<spb.ListModelsResponse>((resolve, reject) =>
      scheduler.listModels({}, new grpc.Metadata(), { deadline: Date.now() + 5000 }, (e, r) => (e ? reject(e) : resolve(r))),
    );
    // Loaded models, then the models directory's files that load when a request names them
    // (`status` as llama-server's router mode reports it).
    const files = await unloadedModelFiles(scheduler);
    const entry = (id: string, file: string, status: string) => {
      const names = aliases.of(id);
      const created = Math.floor(modelFileTime(file, apiStarted).getTime() / 1000);
      return { id, object: 'model', created, owned_by: 'kailstream', ...(names.length ? { aliases: names } : {}), status: { value: status } };
    };
    return [
      ...res.models.map((m: common.ModelInfo) => entry(m.id, m.path, 'loaded')),
      ...files.filter((f) => !res.models.some((m) => m.id === f.id)).map((f) => entry(f.id, f.path, 'unloaded')),
    ];
  };
  const schedulerDown = (reply: FastifyReply, e: unknown) =>
    reply.code(503).header('retry-after', '1').send(openAiError(`scheduler unavailable: ${(e as Error).message}`, 'server_error', null, 'unavailable'));

  app.get('/v1/models', async (_req, reply) => {
    try {
      return { object: 'list', data: await listModels() };
    } catch (e) {
      return schedulerDown(reply, e);
    }
  });

  // OpenAI's "retrieve model"; ids may contain '/', as Hugging Face names do.
  app.get('/v1/models/*', async (req, reply) => {
    const id = (req.params as { '*': string })['*'];
    try {
      const model = (await listModels()).find((m) => m.id === (aliases.idFor(id) ?? id));
      if (model) return model;
      return reply.code(404).send(openAiError(`The model '${id}' does not exist`, 'invalid_request_error', 'model', 'model_not_found'));
    } catch (e) {
      return schedulerDown(reply, e);
    }
  });

  const deps: OpenAiDeps = {
    scheduler: () => scheduler,
    tenantOf,
    metrics,
    requestTimeoutMs: config.requestTimeoutS * 1000,
    reasoningBudget: config.reasoningBudget,
    reasoningFormat: config.reasoningFormat,
    samplingDefaults: config.samplingDefaults,
    modelfileOf: (model) => modelfiles.of(model),
    onUsage: (req, promptTokens, completionTokens) => {
      // (Keys given at start have no row in the store.)
      if (!req.apiKey || !keys || StaticKeys.isStatic(req.apiKey.id)) return;
      try {
        keys.recordUsage(req.apiKey.id, { requests: 1, promptTokens, completionTokens });
      } catch (e) {
        // Usage accounting must not fail a request that already succeeded.
        app.log.error(e);
      }
    },
  };
  registerOpenAiRoutes(app, deps);
  // llama-server's own endpoints (/completion, /infill, /tokenize, /detokenize) for clients written against it.
  // (/slots reads the engines' telemetry that the console's hub follows.)
  let hub: TelemetryHub | undefined;
  registerLlamaServerRoutes(app, deps, () => hub?.slots() ?? []);
  registerAnthropicRoutes(app, deps);
  // OpenAI's Responses API (/v1/responses), stored responses in this process's memory.
  registerResponsesRoutes(app, deps, responses);
  // Ollama's own API (/api/chat, /api/generate, /api/tags…), for clients written against Ollama.
  registerOllamaRoutes(app, deps, { dataDir: config.dataDir || undefined, modelsDir: modelsDir || undefined, modelfiles });

  // The console's tRPC router (apps/api/src/trpc), behind the same key check as every route.
  hub = await mountTrpc(app, { scheduler: () => scheduler, keys: () => keys, authRequired: () => authRequired(auth), pulls: new PullJobs(modelsDir || null) });

  // Errors answered as whole responses (streams that fail midway count themselves).
  app.addHook('onResponse', async (req, reply) => {
    if (reply.statusCode >= 400 && (req.url.startsWith('/v1/') || NATIVE_ROUTES.has(req.url.split('?')[0]))) metrics.requestErrors.inc({ status: String(reply.statusCode) });
  });

  try {
    await app.listen({ host: config.host, port: config.port });
  } catch (e) {
    metrics.close();
    scheduler?.close();
    keys?.close();
    responses.close();
    throw e;
  }
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.port;
  const hostForUrl = config.host.includes(':') ? `[${config.host}]` : config.host;
  // With HTTPS, the same routes (hooks, keys and all) in plain HTTP on a loopback port, for this
  // machine's console and CLI, which need no certificate to trust.
  let local: http.Server | undefined;
  let localUrl: string | undefined;
  if (tls) {
    local = http.createServer((req, res) => app.routing(req, res));
    await new Promise<void>((resolve, reject) => local!.once('error', reject).listen(0, '127.0.0.1', () => resolve()));
    localUrl = `http://127.0.0.1:${(local.address() as { port: number }).port}`;
  }
  return {
    app,
    url: `${tls ? 'https' : 'http'}://${hostForUrl}:${port}${config.apiPrefix}`,
    localUrl: localUrl && `${localUrl}${config.apiPrefix}`,
    keys,
    metrics,
    close: async () => {
      metrics.close();
      local?.closeAllConnections();
      local?.close();
      await app.close();
      scheduler?.close();
      keys?.close();
      responses.close();
    },
  };
}
