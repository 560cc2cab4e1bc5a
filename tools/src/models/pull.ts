// Pulling a GGUF model (`kail pull`, Ollama's /api/pull) from a Hugging Face repository (llama.cpp's
// -hf USER/REPO[:QUANT], Ollama's hf.co/USER/REPO:QUANT) or a URL (llama.cpp's --model-url) into a
// models directory, where `kail serve` loads it by name. The repository is read as llama.cpp reads it
// (common/download.cpp, common/hf-cache.cpp): its branches (`api/models/REPO/refs`, main first),
// the files of that commit (`api/models/REPO/tree/COMMIT?recursive=true`), the quantization picked
// by its tag in the file name (Q4_K_M, else Q8_0, else the first model file when none is given),
// every part of a split model, each file from `REPO/resolve/COMMIT/PATH`. Downloads resume from
// a `.part` file with an HTTP range, are checked against the SHA-256 the repository lists (its LFS
// oid) and to be GGUF, and only then take their name. $MODEL_ENDPOINT or $HF_ENDPOINT replace
// https://huggingface.co/, $HF_TOKEN is sent as a bearer token.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';

import { formatBytes, openGgufMetadata, splitNameOf, splitPath } from '@kailstream/engine/core';

/** A file of a repository's commit, as its tree lists it. */
export interface RepoFile {
  path: string;
  size?: number;
  /** The SHA-256 of the content (a Git LFS file's oid), when listed. */
  sha256?: string;
}

/** What to download: each file's URL, where it goes, and what it must hash to. */
export interface PullPlan {
  /** What the files came from (a repository and its commit, or the URL). */
  source: string;
  files: { url: string; name: string; size?: number; sha256?: string }[];
}

export class PullError extends Error {}

/** The endpoint llama.cpp uses: $MODEL_ENDPOINT, else $HF_ENDPOINT, else Hugging Face; ends with '/'. */
export function modelEndpoint(env: NodeJS.ProcessEnv = process.env): string {
  const e = env.MODEL_ENDPOINT || env.HF_ENDPOINT || 'https://huggingface.co/';
  return e.endsWith('/') ? e : `${e}/`;
}

/** A file's split (the engine's reading of llama.cpp's names), or count 0 when it is not one. */
function splitInfo(file: string): { prefix: string; index: number; count: number } {
  const s = splitNameOf(file);
  return s ? { prefix: s.prefix, index: s.no, count: s.count } : { prefix: file, index: 0, count: 0 };
}

/** A model's GGUF, not a projector, an importance matrix or a speculative head (llama.cpp's gguf_filename_is_model). */
function isModelFile(p: string): boolean {
  if (!p.toLowerCase().endsWith('.gguf')) return false;
  const name = p.slice(p.lastIndexOf('/') + 1);
  return !['mmproj', 'imatrix', 'mtp-', 'eagle3-', 'dflash-', 'dspark-'].some((w) => name.includes(w));
}

/**
 * llama.cpp's find_best_model and get_split_files: the first model file whose name holds the tag
 * followed by '.' or '-' (any case; no tag: Q4_K_M, then Q8_0, then the first model file), a
 * split model's first part standing for it, and then every part of that split.
 */
export function pickModelFiles(files: readonly RepoFile[], tag: string): RepoFile[] {
  const escape = (t: string) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const first = (f: RepoFile) => isModelFile(f.path) && (splitInfo(f.path).count <= 1 || splitInfo(f.path).index === 1);
  let primary: RepoFile | undefined;
  for (const t of tag ? [tag] : ['Q4_K_M', 'Q8_0']) {
    const re = new RegExp(`${escape(t)}[.-]`, 'i');
    primary = files.find((f) => first(f) && re.test(f.path));
    if (primary) break;
  }
  if (!primary && !tag) primary = files.find(first);
  if (!primary) {
    const ggufs = files.filter((f) => f.path.toLowerCase().endsWith('.gguf')).map((f) => f.path);
    throw new PullError(`no GGUF model file${tag ? ` for '${tag}'` : ''} in the repository; its GGUF files: ${ggufs.length ? ggufs.join(', ') : 'none'}`);
  }
  return splitParts(files, primary);
}

/** A file and, when it is part of a split model, every part of that split, in order (llama.cpp's get_split_files). */
function splitParts(files: readonly RepoFile[], file: RepoFile): RepoFile[] {
  const s = splitInfo(file.path);
  if (s.count <= 1) return [file];
  const parts = files.filter((f) => {
    const x = splitInfo(f.path);
    return x.count === s.count && x.prefix === s.prefix;
  });
  if (parts.length !== s.count) throw new PullError(`${file.path} is part ${s.index} of ${s.count}, but the repository lists ${parts.length} of its parts`);
  return parts.sort((a, b) => splitInfo(a.path).index - splitInfo(b.path).index);
}

function authHeaders(env: NodeJS.ProcessEnv): Record<string, string> {
  return { 'user-agent': 'kailstream', ...(env.HF_TOKEN ? { authorization: `Bearer ${env.HF_TOKEN}` } : {}) };
}

async function getJson(url: string, env: NodeJS.ProcessEnv): Promise<unknown> {
  let r: Response;
  try {
    r = await fetch(url, { headers: { ...authHeaders(env), accept: 'application/json' } });
  } catch (e) {
    throw new PullError(`GET ${url}: ${(e as Error).cause ? String(((e as Error).cause as Error).message ?? (e as Error).cause) : (e as Error).message}`);
  }
  if (!r.ok) throw new PullError(`GET ${url}: HTTP ${r.status}${r.status === 401 || r.status === 403 ? ' (a gated or private repository needs $HF_TOKEN)' : r.status === 404 ? ' (no such repository?)' : ''}`);
  try {
    return await r.json();
  } catch {
    throw new PullError(`GET ${url}: the answer is not JSON`);
  }
}

/** `USER/REPO[:TAG]`, with Ollama's `hf.co/` or `huggingface.co/` (or a whole https URL of the repository) in front. */
export function parseRepoRef(ref: string): { repo: string; tag: string } | null {
  const m = /^(?:(?:https?:\/\/)?(?:hf\.co|huggingface\.co)\/)?([A-Za-z0-9][\w.-]*\/[\w.-]+?)(?::([\w.-]+))?\/?$/.exec(ref.trim());
  if (!m || m[1].includes('..')) return null;
  // (Ollama's default tag.)
  return { repo: m[1], tag: m[2] === 'latest' ? '' : (m[2] ?? '') };
}

/** The files to download for a repository reference (`file`: that file of the repository instead of a pick by tag). */
export async function planRepoPull(ref: string, file: string | undefined, env: NodeJS.ProcessEnv = process.env): Promise<PullPlan> {
  const r = parseRepoRef(ref);
  if (!r) throw new PullError(`'${ref}' is not a repository: give USER/REPO[:QUANT] (or hf.co/USER/REPO:QUANT), or an http(s) URL of a .gguf file`);
  const endpoint = modelEndpoint(env);
  const refs = (await getJson(`${endpoint}api/models/${r.repo}/refs`, env)) as { branches?: { name?: unknown; targetCommit?: unknown }[] };
  const branches = (Array.isArray(refs?.branches) ? refs.branches : []).filter((b) => typeof b?.name === 'string' && typeof b.targetCommit === 'string' && /^[0-9a-f]{40}$/.test(b.targetCommit));
  const branch = branches.find((b) => b.name === 'main') ?? branches[0];
  if (!branch) throw new PullError(`${r.repo}: the repository lists no branch with a commit`);
  const commit = branch.targetCommit as string;
  const tree = await getJson(`${endpoint}api/models/${r.repo}/tree/${commit}?recursive=true`, env);
  if (!Array.isArray(tree)) throw new PullError(`${r.repo}: the repository's file list is not a list`);
  const files: RepoFile[] = [];
  for (const item of tree as Record<string, unknown>[]) {
    if (!item || item.type !== 'file' || typeof item.path !== 'string') continue;
    // (A path that would leave the models directory is nobody's model.)
    if (item.path.split('/').some((p) => p === '..' || p === '')) continue;
    const lfs = item.lfs as { oid?: unknown; size?: unknown } | undefined;
    const oid = typeof lfs?.oid === 'string' && /^[0-9a-f]{64}$/.test(lfs.oid) ? lfs.oid : undefined;
    const size = typeof lfs?.size === 'number' ? lfs.size : typeof item.size === 'number' ? item.size : undefined;
    files.push({ path: item.path, size, sha256: oid });
  }
  let chosen: RepoFile[];
  if (file !== undefined) {
    const f = files.find((x) => x.path === file);
    if (!f) throw new PullError(`${r.repo}: no file '${file}'; its GGUF files: ${files.filter((x) => x.path.toLowerCase().endsWith('.gguf')).map((x) => x.path).join(', ') || 'none'}`);
    chosen = splitParts(files, f);
  } else chosen = pickModelFiles(files, r.tag);
  return {
    source: `${r.repo} at ${commit.slice(0, 12)}`,
    files: chosen.map((f) => ({ url: `${endpoint}${r.repo}/resolve/${commit}/${f.path.split('/').map(encodeURIComponent).join('/')}`, name: path.posix.basename(f.path), size: f.size, sha256: f.sha256 })),
  };
}

/** A plan for a URL of a .gguf file (every part, for the first of a split model's). */
export function planUrlPull(url: string, sha256?: string): PullPlan {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new PullError(`'${url}' is not a URL`);
  }
  const name = decodeURIComponent(u.pathname.slice(u.pathname.lastIndexOf('/') + 1));
  if (!/\.gguf$/i.test(name) || name.includes('/') || name.startsWith('.')) throw new PullError(`${url}: not the URL of a .gguf file`);
  const s = splitInfo(name);
  if (s.count > 1 && s.index !== 1) throw new PullError(`${name} is part ${s.index} of a split model: give the URL of its first part`);
  if (s.count > 1 && sha256) throw new PullError('--sha256 checks one file; a split model has several');
  const parts = s.count > 1 ? Array.from({ length: s.count }, (_, i) => splitPath(s.prefix, i + 1, s.count)) : [name];
  return { source: url, files: parts.map((p) => ({ url: new URL(encodeURIComponent(p), u).toString(), name: p, sha256 })) };
}

/**
 * Downloads one file to `dest`, through `dest.part` (resumed with a range request where a part is
 * there and the server takes ranges), checked against `sha256` when given and to be a GGUF file;
 * returns the bytes received over the network.
 */
export async function downloadFile(
  f: PullPlan['files'][number],
  dest: string,
  env: NodeJS.ProcessEnv,
  onProgress?: (done: number, total: number) => void,
): Promise<number> {
  const part = `${dest}.part`;
  const hash = createHash('sha256');
  let have = 0;
  if (fs.existsSync(part)) {
    have = fs.statSync(part).size;
    if (f.size !== undefined && have > f.size) have = 0;
  }
  let res: Response;
  try {
    res = await fetch(f.url, { headers: { ...authHeaders(env), ...(have ? { range: `bytes=${have}-` } : {}) } });
  } catch (e) {
    throw new PullError(`GET ${f.url}: ${(e as Error).cause ? String(((e as Error).cause as Error).message ?? (e as Error).cause) : (e as Error).message}`);
  }
  // A part the server says is whole already (416), or one it will not continue (200: start over).
  if (res.status === 416 && have && f.size === have) {
    await res.body?.cancel();
  } else if (res.status === 206 && have) {
    // (The part's bytes go into the hash first.)
  } else if (res.ok) {
    have = 0;
  } else {
    await res.body?.cancel();
    throw new PullError(`GET ${f.url}: HTTP ${res.status}${res.status === 401 || res.status === 403 ? ' (a gated or private file needs $HF_TOKEN)' : ''}`);
  }
  if (have) {
    const fd = fs.openSync(part, 'r');
    try {
      const buf = Buffer.allocUnsafe(1 << 22);
      for (let off = 0; off < have; ) {
        const n = fs.readSync(fd, buf, 0, Math.min(buf.length, have - off), off);
        if (n <= 0) break;
        hash.update(buf.subarray(0, n));
        off += n;
      }
    } finally {
      fs.closeSync(fd);
    }
    fs.truncateSync(part, have);
  }
  const lengthHeader = Number(res.headers.get('content-length'));
  const total = f.size ?? (Number.isFinite(lengthHeader) && lengthHeader > 0 ? have + lengthHeader : 0);
  let got = 0;
  if (res.status !== 416 && res.body) {
    const out = fs.createWriteStream(part, { flags: have ? 'a' : 'w' });
    try {
      for await (const chunk of Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>)) {
        hash.update(chunk as Buffer);
        got += (chunk as Buffer).length;
        if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
        onProgress?.(have + got, total);
      }
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOSPC' || (e as NodeJS.ErrnoException).code === 'EIO') throw e;
      throw new PullError(`${f.name}: the download broke off at ${have + got} bytes (${(e as Error).message}); run the pull again to resume from there`);
    } finally {
      await new Promise<void>((resolve, reject) => out.end((e?: Error | null) => (e ? reject(e) : resolve())));
    }
  }
  const size = fs.statSync(part).size;
  if (f.size !== undefined && size !== f.size) throw new PullError(`${f.name}: ${size} bytes arrived of ${f.size}; run the pull again to resume`);
  const digest = hash.digest('hex');
  if (f.sha256 && digest !== f.sha256) {
    fs.rmSync(part, { force: true });
    throw new PullError(`${f.name}: SHA-256 ${digest} is not the ${f.sha256} the source lists; the download is deleted`);
  }
  const head = Buffer.alloc(4);
  const fd = fs.openSync(part, 'r');
  try {
    fs.readSync(fd, head, 0, 4, 0);
  } finally {
    fs.closeSync(fd);
  }
  if (head.toString('latin1') !== 'GGUF') {
    fs.rmSync(part, { force: true });
    throw new PullError(`${f.name}: not a GGUF file (it starts with ${JSON.stringify(head.toString('latin1'))}); the download is deleted`);
  }
  fs.renameSync(part, dest);
  return got;
}

/** The id a pulled model answers to: its file's name without .gguf, and a split model's without -00001-of-0000N. */
export function pulledModelId(fileName: string): string {
  return fileName.replace(/(-00001-of-\d{5})?\.gguf$/i, '');
}

export interface PullResult {
  source: string;
  files: { name: string; path: string; bytes: number; downloaded: number; sha256?: string; skipped: boolean }[];
  /** The model's id under `kail serve` (its first file's name without .gguf). */
  id: string;
}

/**
 * Takes `dest.part.lock` (this process's pid) so that two pulls of one file, in this process or
 * another (`kail pull` beside the API's /api/pull), never write the same part: a lock whose process
 * is alive is a PullError naming it; one left by a process that is gone is taken over. Returns the
 * release.
 */
function lockPart(dest: string): () => void {
  const lock = `${dest}.part.lock`;
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      fs.writeFileSync(lock, String(process.pid), { flag: 'wx' });
      return () => fs.rmSync(lock, { force: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    const pid = Number(fs.readFileSync(lock, 'utf8'));
    let alive = false;
    try {
      alive = Number.isInteger(pid) && pid > 0 && process.kill(pid, 0);
    } catch (e) {
      // (EPERM: alive, another user's.)
      alive = (e as NodeJS.ErrnoException).code === 'EPERM';
    }
    if (alive) throw new PullError(`${path.basename(dest)} is being pulled already (process ${pid}${pid === process.pid ? ', this one' : ''})`);
    fs.rmSync(lock, { force: true });
  }
  throw new PullError(`${path.basename(dest)}: cannot take ${lock}`);
}

/** What runPull tells as it goes: each file as it starts, its bytes as they arrive, its end. */
export interface PullEvents {
  /** Before a file's download (not for a file kept as it is). */
  start?(file: PullPlan['files'][number]): void;
  progress?(file: PullPlan['files'][number], done: number, total: number): void;
  /** After a file: downloaded and checked, kept as it was (`skipped`), or failed (`error`). */
  end?(file: PullPlan['files'][number], how: { skipped?: boolean; error?: Error }): void;
}

/** Runs a plan into `modelsDir`: files already there at their listed size are kept (unless `force`); the model's header is read at the end. */
export async function runPull(plan: PullPlan, modelsDir: string, o: { force?: boolean; env?: NodeJS.ProcessEnv; events?: PullEvents } = {}): Promise<PullResult> {
  const env = o.env ?? process.env;
  const ev = o.events ?? {};
  fs.mkdirSync(modelsDir, { recursive: true });
  // What the files still need (less any .part already there) against the disk's free space, before a byte moves.
  const need = plan.files.reduce((a, f) => {
    const dest = path.join(modelsDir, f.name);
    if (f.size === undefined || (!o.force && fs.existsSync(dest) && fs.statSync(dest).size === f.size)) return a;
    const part = fs.existsSync(`${dest}.part`) ? fs.statSync(`${dest}.part`).size : 0;
    return a + Math.max(0, f.size - part);
  }, 0);
  const st = fs.statfsSync(modelsDir);
  const free = Number(st.bavail) * Number(st.bsize);
  if (need > free) throw new PullError(`the model needs ${formatBytes(need)} more and ${modelsDir} has ${formatBytes(free)} free`);
  const files: PullResult['files'] = [];
  for (const f of plan.files) {
    const dest = path.join(modelsDir, f.name);
    if (!o.force && fs.existsSync(dest) && (f.size === undefined || fs.statSync(dest).size === f.size)) {
      ev.end?.(f, { skipped: true });
      files.push({ name: f.name, path: dest, bytes: fs.statSync(dest).size, downloaded: 0, sha256: f.sha256, skipped: true });
      continue;
    }
    const unlock = lockPart(dest);
    ev.start?.(f);
    try {
      const got = await downloadFile(f, dest, env, (done, total) => ev.progress?.(f, done, total));
      ev.end?.(f, {});
      files.push({ name: f.name, path: dest, bytes: fs.statSync(dest).size, downloaded: got, sha256: f.sha256, skipped: false });
    } catch (e) {
      ev.end?.(f, { error: e as Error });
      throw e;
    } finally {
      unlock();
    }
  }
  // The whole model's header (every split found by name), or an error naming what is wrong.
  try {
    openGgufMetadata(files[0].path).close();
  } catch (e) {
    throw new PullError(`${files[0].name} arrived but does not open as a model: ${(e as Error).message}`);
  }
  return { source: plan.source, files, id: pulledModelId(files[0].name) };
}
