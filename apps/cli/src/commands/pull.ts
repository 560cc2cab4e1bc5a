// `kail pull`: a GGUF model from a Hugging Face repository or a URL into the data directory's
// models/ (tools/src/models/pull.ts does the work), with a progress bar per file.
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';

import { formatBytes } from '@kailstream/engine/core';
import type { PullResult } from '@kailstream/tools';

import { dataDir, modelsDirOf } from '../paths';
import { createProgress, type Progress } from '../progress';

/**
 * Pulls a repository reference (or, with `isUrl`, a URL) into `<dir>/models`, a progress bar per
 * file on stderr; what `kail pull`, `kail run -hf` and `kail serve -hf` share.
 */
/** The tools package, loaded on first use (it brings the GGUF writer and more: not for every command). */
function tools(): typeof import('@kailstream/tools') {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('@kailstream/tools') as typeof import('@kailstream/tools');
}

export async function pullInto(dir: string, source: string, o: { hfFile?: string; sha256?: string; force?: boolean; isUrl?: boolean } = {}): Promise<PullResult> {
  const plan = o.isUrl ? tools().planUrlPull(source, o.sha256) : await tools().planRepoPull(source, o.hfFile);
  const modelsDir = modelsDirOf(dir);
  const log = (l: string) => process.stderr.write(l + '\n');
  log(`${plan.source}: ${plan.files.map((f) => f.name + (f.size !== undefined ? ` (${formatBytes(f.size)})` : '')).join(', ')}`);
  let bar: Progress | undefined;
  return tools().runPull(plan, modelsDir, {
    force: o.force,
    events: {
      start: (f) => (bar = createProgress({ label: `pulling ${f.name}`, total: f.size ?? 0, format: formatBytes })),
      progress: (_f, done) => bar?.update(done),
      end: (f, how) => {
        if (how.skipped) log(`${f.name}: already in ${modelsDir}${f.size === undefined ? '' : ' at its size'} (--force downloads it again)`);
        else bar?.done(how.error ? `failed: ${f.name}` : `pulled ${f.name} (${formatBytes(fs.statSync(path.join(modelsDir, f.name)).size)}${f.sha256 ? ', SHA-256 checked' : ''})`);
        bar = undefined;
      },
    },
  });
}

/** The file of the models directory that the pick of `ref` (or `hfFile`) finds there, else undefined. */
function localPick(dir: string, ref: string, hfFile?: string): string | undefined {
  const t = tools();
  const parsed = t.parseRepoRef(ref);
  const modelsDir = modelsDirOf(dir);
  if (!parsed || !fs.existsSync(modelsDir)) return undefined;
  const local = fs.readdirSync(modelsDir).filter((f) => f.toLowerCase().endsWith('.gguf')).map((f) => ({ path: f }));
  try {
    return hfFile !== undefined ? local.find((f) => f.path === path.basename(hfFile))?.path : t.pickModelFiles(local, parsed.tag)[0].path;
  } catch {
    return undefined;
  }
}

/**
 * `-hf USER/REPO[:QUANT]` for run and serve: pulled (files already there are kept), or, when the
 * repository cannot be reached, the file of the models directory the same pick finds (as llama.cpp
 * falls back on its cache), saying so. With `offline` (llama.cpp's --offline) only that file, no
 * network. Returns the model's first file and its id.
 */
export async function pullOrLocal(dir: string, ref: string, hfFile?: string, o: { offline?: boolean } = {}): Promise<{ path: string; id: string }> {
  const t = tools();
  const modelsDir = modelsDirOf(dir);
  if (o.offline) {
    if (!t.parseRepoRef(ref)) throw new Error(`--offline: '${ref}' is not USER/REPO[:QUANT]`);
    const picked = localPick(dir, ref, hfFile);
    if (!picked) throw new Error(`--offline: no file of ${modelsDir} is what ${ref}${hfFile !== undefined ? ` --hf-file ${hfFile}` : ''} picks (kail pull it first, or run without --offline)`);
    return { path: path.join(modelsDir, picked), id: t.pulledModelId(picked) };
  }
  try {
    const r = await pullInto(dir, ref, { hfFile });
    return { path: r.files[0].path, id: r.id };
  } catch (e) {
    // (Unreachable, not an answer such as a 404: that repository or file is not there.)
    if (!(e instanceof t.PullError) || !/^GET \S+: (?!HTTP )/.test(e.message)) throw e;
    const picked = localPick(dir, ref, hfFile);
    if (!picked) throw e;
    process.stderr.write(`${e.message}\n(offline: using ${picked} of ${modelsDir}, which the same pick finds)\n`);
    return { path: path.join(modelsDir, picked), id: t.pulledModelId(picked) };
  }
}

/** `kail pull ollama:NAME[:TAG]`: a model an Ollama installation has, linked into the models directory (no download). */
async function importFromOllama(dir: string, name: string, o: { force?: boolean; json?: boolean; ollamaDir?: string; hfFile?: string; sha256?: string }): Promise<void> {
  if (o.hfFile !== undefined || o.sha256 !== undefined) throw new Error('--hf-file and --sha256 go with Hugging Face and URL sources, not ollama:NAME');
  const t = tools();
  if (o.ollamaDir !== undefined) t.checkOllamaStore(o.ollamaDir);
  const m = t.findOllamaModel(name, o.ollamaDir !== undefined ? [o.ollamaDir] : t.ollamaStoreDirs());
  const modelsDir = modelsDirOf(dir);
  fs.mkdirSync(modelsDir, { recursive: true });
  // (A hard link needs one file system; across two the file is copied, which takes a while.)
  if (fs.statSync(m.model).dev !== fs.statSync(modelsDir).dev) process.stderr.write(`copying ${formatBytes(m.size)}: Ollama's store and ${modelsDir} are on different file systems, so the file cannot be linked\n`);
  const r = await t.importOllamaModel(m, modelsDir, undefined, { force: o.force });
  for (const n of r.notes) process.stderr.write(`note: ${n}\n`);
  if (o.json) {
    process.stdout.write(JSON.stringify({ source: `ollama:${m.name}`, ollamaBlob: m.model, path: r.path, id: r.id, linked: r.linked, bytes: m.size }) + '\n');
    return;
  }
  process.stderr.write(`ollama:${m.name}: ${formatBytes(m.size)} ${r.linked ? 'linked' : 'copied'} from ${m.model}${m.system !== undefined || m.parameters ? ', with its system prompt and parameters' : ''}\n`);
  process.stdout.write(`${r.path}\nkail run ${r.id} (a chat); kail serve loads it as '${r.id}'\n`);
}

export function registerPull(program: Command): void {
  program
    .command('pull')
    .description("download a GGUF model into the data directory's models/ (what kail serve loads by name): USER/REPO[:QUANT] from Hugging Face as llama.cpp's -hf (or Ollama's hf.co/USER/REPO:QUANT), the URL of a .gguf file, or ollama:NAME[:TAG], a model this machine's Ollama has already downloaded (linked, not downloaded again)")
    .argument('<source>', 'USER/REPO[:QUANT] (e.g. Qwen/Qwen3-30B-A3B-GGUF:Q4_K_M), hf.co/USER/REPO:QUANT, https://…/MODEL.gguf, or ollama:NAME[:TAG] (e.g. ollama:qwen3:30b)')
    .option('--hf-file <file>', "that file of the repository instead of a pick by quantization (llama.cpp's -hff)")
    .option('--sha256 <hex>', 'with a URL: the SHA-256 the file must have (a repository lists its own)')
    .option('--force', 'download again files that are already there')
    .option('--hf-token <token>', "Hugging Face access token for gated or private repositories (llama.cpp's -hft; default $HF_TOKEN, which keeps it off the command line)")
    .option('--json', 'print the result as JSON')
    .option('--data-dir <dir>', 'data directory (the model goes into its models/)')
    .option('--ollama-dir <dir>', 'with ollama:NAME: the Ollama store to take it from (default: $OLLAMA_MODELS, else ~/.ollama/models and /usr/share/ollama/.ollama/models)')
    .action(async (source: string, o: { hfFile?: string; sha256?: string; force?: boolean; json?: boolean; dataDir?: string; hfToken?: string; ollamaDir?: string }) => {
      if (/^ollama:/i.test(source)) return importFromOllama(dataDir(o.dataDir), source.replace(/^ollama:(\/\/)?/i, ''), o);
      if (o.ollamaDir !== undefined) throw new Error('--ollama-dir goes with ollama:NAME');
      if (o.hfToken !== undefined) process.env.HF_TOKEN = o.hfToken;
      if (o.sha256 !== undefined && !/^[0-9a-fA-F]{64}$/.test(o.sha256)) throw new Error(`--sha256 takes 64 hex digits, got '${o.sha256}'`);
      const isUrl = /^https?:\/\//i.test(source) && !tools().parseRepoRef(source);
      if (isUrl && o.hfFile) throw new Error('--hf-file goes with a repository, not a URL');
      if (!isUrl && o.sha256) throw new Error('--sha256 goes with a URL: a repository lists its files\' own');
      const r = await pullInto(dataDir(o.dataDir), source, { hfFile: o.hfFile, sha256: o.sha256?.toLowerCase(), force: o.force, isUrl });
      if (o.json) process.stdout.write(JSON.stringify(r) + '\n');
      else process.stdout.write(`${r.files[0].path}\nkail run ${r.id} (a chat); kail serve loads it as '${r.id}'\n`);
    });
}
