import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import type { engine as epb, scheduler as spb } from '@kailstream/proto';

import { dataDir, modelsDirOf } from '../paths';
import { isAlive, readServeState } from '../serve-state';
import { grpcTokenOf, rpc, schedulerClient, unary } from './ps';

// `kail list`, `kail cp` and `kail rm`, as `ollama list`, `ollama cp` and `ollama rm`: the GGUF files of the data
// directory's models/ (what `kail serve` loads on demand). With a server running on the data
// directory they go through its scheduler, so a loaded model is unloaded before its file goes;
// without one they read and delete the files themselves.

export interface ModelListEntry {
  id: string;
  path: string;
  sizeBytes: number;
  architecture: string;
  parameters: number;
  experts: string;
  contextLength: number;
  loaded: boolean;
  /** When the file last changed (its mtime, ISO 8601), as Ollama's modified_at; absent when it cannot be seen from here. */
  modifiedAt?: string;
  /** Why the file could not be read (then the other fields are empty). */
  error?: string;
}

export interface ModelList {
  modelsDir: string;
  /** 'server': asked the running kail serve; 'files': read the directory. */
  source: 'server' | 'files';
  models: ModelListEntry[];
}

type SchedulerClient = ReturnType<typeof schedulerClient>;

/**
 * `call` on the scheduler of the kail serve running on this data directory, with its answer or
 * its error's message; `null` when no server runs there.
 */
export async function onServer<T>(dir: string, call: (c: SchedulerClient) => Promise<T>): Promise<{ value: T } | null> {
  const state = readServeState(dir);
  const address = state && isAlive(state.pid) ? state.services.scheduler?.address : undefined;
  if (!address) return null;
  const c = schedulerClient(address, grpcTokenOf(dir));
  try {
    return { value: await call(c) };
  } catch (e) {
    const se = e as { details?: string; message?: string };
    throw new Error(se.details || `the scheduler at ${address} did not answer: ${se.message}`);
  } finally {
    c.close();
  }
}

function entries(r: epb.ListModelFilesResponse): ModelListEntry[] {
  return r.files.map((f) => ({
    id: f.id,
    path: f.path,
    sizeBytes: f.sizeBytes,
    architecture: f.architecture,
    parameters: f.info?.parameterCount ?? 0,
    experts: f.info?.expertCount ? `${f.info.expertUsedCount}/${f.info.expertCount}` : '-',
    contextLength: f.info?.contextLength ?? 0,
    loaded: f.info?.loaded ?? false,
    ...modifiedAt(f.path),
    ...(f.error ? { error: f.error } : {}),
  }));
}

function modifiedAt(file: string): { modifiedAt?: string } {
  try {
    return { modifiedAt: fs.statSync(file).mtime.toISOString() };
  } catch {
    return {};
  }
}

/**
 * How long ago `t` was, in the words of `ollama list`'s MODIFIED column (Ollama's format.HumanTime):
 * "Less than a second ago", "About a minute ago", "5 hours ago", "3 days ago", "2 weeks ago"…
 */
export function humanTime(t: Date, now = new Date()): string {
  const ms = now.getTime() - t.getTime();
  if (ms < 0) return `${humanDuration(-ms)} from now`;
  return `${humanDuration(ms)} ago`;
}

function humanDuration(ms: number): string {
  const seconds = Math.floor(ms / 1000);
  if (seconds < 1) return 'Less than a second';
  if (seconds === 1) return '1 second';
  if (seconds < 60) return `${seconds} seconds`;
  const minutes = Math.floor(ms / 60_000);
  if (minutes === 1) return 'About a minute';
  if (minutes < 60) return `${minutes} minutes`;
  const hours = Math.round(ms / 3_600_000);
  if (hours === 1) return 'About an hour';
  if (hours < 48) return `${hours} hours`;
  if (hours < 24 * 7 * 2) return `${Math.floor(hours / 24)} days`;
  if (hours < 24 * 30 * 2) return `${Math.floor(hours / 24 / 7)} weeks`;
  if (hours < 24 * 365 * 2) return `${Math.floor(hours / 24 / 30)} months`;
  return `${Math.floor(hours / 24 / 365)} years`;
}

export async function listModels(dir: string, timeoutMs = 10_000): Promise<ModelList> {
  const served = await onServer(dir, (c) => unary<spb.ListModelFilesRequest, epb.ListModelFilesResponse>(c.listModelFiles.bind(c), { engineId: '' }, timeoutMs));
  if (served) return { modelsDir: served.value.modelsDir, source: 'server', models: entries(served.value) };
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { listModelsDirectory } = require('@kailstream/engine') as typeof import('@kailstream/engine');
  const r = listModelsDirectory(modelsDirOf(dir));
  return { modelsDir: r.modelsDir, source: 'files', models: entries(r) };
}

/**
 * The id of a model that the server running on `dir` has loaded from `file`, if one has: `kail run`
 * says it loads a second copy then. Null without a server, or when it does not answer within 2 s.
 */
export async function servedCopyOf(dir: string, file: string): Promise<string | null> {
  const real = (p: string) => {
    try {
      return fs.realpathSync(p);
    } catch {
      return p;
    }
  };
  try {
    const served = await onServer(dir, (c) => unary<spb.ListModelsRequest, spb.ListModelsResponse>(c.listModels.bind(c), {}, 2000));
    return served?.value.models.find((m) => real(m.path) === real(file))?.id ?? null;
  } catch {
    return null;
  }
}

/** Removes a model from the models directory; says whether a running server unloaded it first. */
export async function removeModel(dir: string, id: string, timeoutMs = 30_000): Promise<{ unloaded: boolean }> {
  const served = await onServer(dir, (c) => unary<spb.DeleteModelFileRequest, epb.DeleteModelFileResponse>(c.deleteModelFile.bind(c), { engineId: '', delete: { id } }, timeoutMs));
  if (served) return { unloaded: served.value.unloaded };
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { existingModelFile, removeModelFiles } = require('@kailstream/engine') as typeof import('@kailstream/engine');
  removeModelFiles(existingModelFile(modelsDirOf(dir), id));
  return { unloaded: false };
}

/** Copies a model of the models directory under another name (a hard link where it can be). */
export async function copyModel(dir: string, id: string, dest: string, timeoutMs = 60_000): Promise<void> {
  const copy = () => rpc().proto.engine.CopyModelFileRequest.fromPartial({ sourceId: id, destinationId: dest });
  if (await onServer(dir, (c) => unary<spb.CopyModelFileRequest, epb.CopyModelFileResponse>(c.copyModelFile.bind(c), { engineId: '', copy: copy() }, timeoutMs))) return;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { copyModelInDirectory } = require('@kailstream/engine') as typeof import('@kailstream/engine');
  copyModelInDirectory(modelsDirOf(dir), id, dest);
}

const size = (n: number) =>
  n >= 1 << 30 ? `${(n / (1 << 30)).toFixed(2)} GiB` : n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`;
const params = (n: number) => (n >= 1e9 ? `${(n / 1e9).toFixed(1)}B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n ? String(n) : '-');

/** Rows of cells as a table: each column as wide as its widest cell, two spaces between. */
function alignRows(rows: string[][]): string {
  const w = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(w[i]))).join('  ').trimEnd()).join('\n');
}

export function formatModelList(l: ModelList, now = new Date()): string {
  if (!l.models.length) return `no models in ${l.modelsDir} (put GGUF files there; kail serve loads them when a request names them)`;
  const rows = [['NAME', 'ARCH', 'PARAMS', 'EXPERTS', 'CTX', 'SIZE', 'MODIFIED', l.source === 'server' ? 'LOADED' : '']];
  const modified = (m: ModelListEntry) => (m.modifiedAt ? humanTime(new Date(m.modifiedAt), now) : '-');
  for (const m of l.models)
    rows.push(
      m.error
        ? [m.id, 'unreadable', '', '', '', size(m.sizeBytes), modified(m), m.error]
        : [m.id, m.architecture, params(m.parameters), m.experts, String(m.contextLength), size(m.sizeBytes), modified(m), l.source === 'server' ? (m.loaded ? 'yes' : 'no') : ''],
    );
  return alignRows(rows);
}

export function registerModels(program: Command): void {
  program
    .command('list')
    .alias('ls')
    .description("the models in the data directory's models/ (as ollama list): name, architecture, parameters, size, when each file last changed; through the running server when there is one (then also whether each is loaded)")
    .option('--data-dir <dir>', 'data directory (default: $KAIL_DATA_DIR or ~/.kailstream)')
    .option('--json', 'print JSON')
    .option('--ollama', "list instead the models this machine's Ollama has downloaded, which kail pull ollama:NAME brings in without downloading them again")
    .option('--ollama-dir <dir>', 'with --ollama: the Ollama store (default: $OLLAMA_MODELS, else ~/.ollama/models and /usr/share/ollama/.ollama/models)')
    .action(async (o: { dataDir?: string; json?: boolean; ollama?: boolean; ollamaDir?: string }) => {
      if (o.ollama || o.ollamaDir !== undefined) {
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        const t = require('@kailstream/tools') as typeof import('@kailstream/tools');
        if (o.ollamaDir !== undefined) t.checkOllamaStore(o.ollamaDir);
        const stores = o.ollamaDir !== undefined ? [o.ollamaDir] : t.ollamaStoreDirs();
        const found = t.listOllamaModels(stores);
        const text = found.length ? alignRows([['NAME', 'SIZE'], ...found.map((m) => [m.name, size(m.size)])]) + '\n(kail pull ollama:NAME brings one in)' : `no Ollama models in ${stores.join(' or ')}`;
        process.stdout.write((o.json ? JSON.stringify(found, null, 2) : text) + '\n');
        return;
      }
      const l = await listModels(dataDir(o.dataDir));
      process.stdout.write((o.json ? JSON.stringify(l, null, 2) : formatModelList(l)) + '\n');
    });
  program
    .command('cp')
    .argument('<source>', 'a model name, as kail list shows it')
    .argument('<destination>', 'the new name')
    .description("copy a model of the data directory's models/ under another name (as ollama cp): a hard link where it can be, with the source's LoRA list")
    .option('--data-dir <dir>', 'data directory (default: $KAIL_DATA_DIR or ~/.kailstream)')
    .action(async (source: string, destination: string, o: { dataDir?: string }) => {
      await copyModel(dataDir(o.dataDir), source, destination);
      process.stdout.write(`copied '${source}' to '${destination}'\n`);
    });
  program
    .command('rm')
    .argument('<name...>', 'model names, as kail list shows them')
    .description("delete models from the data directory's models/ (as ollama rm): every split file and its LoRA list; a running server unloads a loaded one first")
    .option('--data-dir <dir>', 'data directory (default: $KAIL_DATA_DIR or ~/.kailstream)')
    .action(async (names: string[], o: { dataDir?: string }) => {
      const dir = dataDir(o.dataDir);
      for (const id of names) {
        const r = await removeModel(dir, id);
        process.stdout.write(`deleted '${id}'${r.unloaded ? ' (unloaded it first)' : ''}\n`);
      }
    });
}
