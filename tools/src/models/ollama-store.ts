// Models an Ollama installation has already downloaded, used without downloading them again. An
// Ollama store (~/.ollama/models, $OLLAMA_MODELS) keeps each model as a manifest
// (manifests/HOST/NAMESPACE/MODEL/TAG, an OCI image manifest) whose layers are files of blobs/
// (sha256-<hex>): the weights are a plain GGUF file (application/vnd.ollama.image.model), beside
// the Modelfile's parts (params: JSON options, system, license, messages; template: a Go template).
// Importing links the GGUF into the models directory (a hard link: no second copy) and keeps the
// params, system prompt, messages and license as the model's Modelfile sidecar (ID.modelfile.json,
// the API's Ollama routes read it).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { readGgufHeader } from '../gguf/reader';
import { PullError } from './pull';

const MEDIA = 'application/vnd.ollama.image.';

/** An Ollama name's parts, defaults filled as Ollama fills them (registry.ollama.ai/library/NAME:latest). */
export interface OllamaName {
  host: string;
  namespace: string;
  model: string;
  tag: string;
}

/** Parses [host/][namespace/]model[:tag] as Ollama does (types/model/name.go); null when it is not one. */
export function parseOllamaName(s: string): OllamaName | null {
  const name = s.replace(/^https?:\/\//, '');
  const m = /^(?:(?:([A-Za-z0-9_.-]+)\/)?([A-Za-z0-9_-]+)\/)?([A-Za-z0-9_.-]+)(?::([A-Za-z0-9_.-]+))?$/.exec(name);
  if (!m || name.length > 128 || /\.\./.test(name)) return null;
  return { host: m[1] ?? 'registry.ollama.ai', namespace: m[2] ?? 'library', model: m[3], tag: m[4] ?? 'latest' };
}

/** The Ollama stores to look in: $OLLAMA_MODELS, else a user's (~/.ollama/models) and the Linux service's. */
export function ollamaStoreDirs(env: NodeJS.ProcessEnv = process.env): string[] {
  if (env.OLLAMA_MODELS) return [env.OLLAMA_MODELS];
  return [path.join(os.homedir(), '.ollama', 'models'), '/usr/share/ollama/.ollama/models'];
}

/**
 * A store a flag names (`--ollama-dir`): a directory holding Ollama's manifests/ or blobs/. The
 * default stores may be missing (no Ollama here); a named one that is not a store is an error, not
 * an empty list. Ollama's own directory (~/.ollama) is a common slip: its store is models/ inside.
 */
export function checkOllamaStore(dir: string, flag = '--ollama-dir'): void {
  let st: fs.Stats;
  try {
    st = fs.statSync(dir);
  } catch (e) {
    throw new PullError(`${flag} ${dir}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such directory' : (e as Error).message}`);
  }
  if (!st.isDirectory()) throw new PullError(`${flag} ${dir} is not a directory`);
  const isStore = (d: string) => fs.existsSync(path.join(d, 'manifests')) || fs.existsSync(path.join(d, 'blobs'));
  if (isStore(dir)) return;
  const inner = path.join(dir, 'models');
  throw new PullError(`${flag} ${dir} is not an Ollama store (no manifests/ or blobs/ directory in it)${isStore(inner) ? `; the store is ${inner}` : ''}`);
}

/** A model of an Ollama store, with what its Modelfile gave it. */
export interface OllamaModel {
  /** The name as Ollama shows it (library models without host and namespace). */
  name: string;
  store: string;
  manifest: string;
  /** The GGUF blob. */
  model: string;
  size: number;
  parameters?: Record<string, unknown>;
  system?: string;
  license?: string;
  messages?: { role: string; content: string }[];
  /** Its Go template (Ollama renders its prompts with it). */
  template?: string;
  /** Layers there is no use for here, by kind (projector, adapter), to say so. */
  skipped: string[];
}

/** A path entry matched without regard to case (Ollama compares names so), else null. */
function entryFold(dir: string, name: string): string | null {
  const exact = path.join(dir, name);
  if (fs.existsSync(exact)) return exact;
  try {
    const hit = fs.readdirSync(dir).find((e) => e.toLowerCase() === name.toLowerCase());
    return hit ? path.join(dir, hit) : null;
  } catch {
    return null;
  }
}

const shortName = (n: OllamaName) =>
  `${n.host === 'registry.ollama.ai' ? (n.namespace === 'library' ? '' : `${n.namespace}/`) : `${n.host}/${n.namespace}/`}${n.model}:${n.tag}`;

interface Layer {
  mediaType: string;
  digest: string;
  size?: number;
}

function blobPath(store: string, digest: string): string {
  const m = /^sha256[:-]([0-9a-f]{64})$/.exec(digest);
  if (!m) throw new PullError(`a layer's digest is not sha256:<64 hex digits>: ${JSON.stringify(digest)}`);
  return path.join(store, 'blobs', `sha256-${m[1]}`);
}

/** Reads a manifest of a store into the model it describes. */
function readManifest(store: string, manifest: string, name: string): OllamaModel {
  let layers: Layer[];
  try {
    const m = JSON.parse(fs.readFileSync(manifest, 'utf8')) as { layers?: Layer[] };
    if (!Array.isArray(m.layers)) throw new Error('no layers');
    layers = m.layers;
  } catch (e) {
    throw new PullError(`${manifest}: not an Ollama manifest (${(e as Error).message})`);
  }
  const models = layers.filter((l) => l.mediaType === `${MEDIA}model`);
  if (models.length !== 1) throw new PullError(`${name}: its manifest has ${models.length} model layers (one GGUF file expected; a safetensors-based model of Ollama's own engine cannot be used here)`);
  const model = blobPath(store, models[0].digest);
  if (!fs.existsSync(model)) throw new PullError(`${name}: its weights ${model} are missing from the Ollama store (ollama pull ${name} again)`);
  const out: OllamaModel = { name, store, manifest, model, size: fs.statSync(model).size, skipped: [] };
  const text = (l: Layer) => fs.readFileSync(blobPath(store, l.digest), 'utf8');
  for (const l of layers) {
    const kind = l.mediaType.startsWith(MEDIA) ? l.mediaType.slice(MEDIA.length) : l.mediaType;
    try {
      if (kind === 'model') continue;
      else if (kind === 'params') out.parameters = JSON.parse(text(l)) as Record<string, unknown>;
      else if (kind === 'system') out.system = text(l);
      else if (kind === 'license') out.license = [out.license, text(l)].filter(Boolean).join('\n');
      else if (kind === 'messages') out.messages = JSON.parse(text(l)) as { role: string; content: string }[];
      else if (kind === 'template') out.template = text(l);
      else out.skipped.push(kind);
    } catch (e) {
      throw new PullError(`${name}: its ${kind} layer cannot be read (${(e as Error).message})`);
    }
  }
  return out;
}

/** The model `name` of the first store that has it, else a PullError saying where it looked. */
export function findOllamaModel(name: string, stores: readonly string[] = ollamaStoreDirs()): OllamaModel {
  const n = parseOllamaName(name);
  if (!n) throw new PullError(`'${name}' is not an Ollama model name ([host/][namespace/]model[:tag])`);
  for (const store of stores) {
    let at: string | null = path.join(store, 'manifests');
    const found: string[] = [];
    for (const part of [n.host, n.namespace, n.model, n.tag]) {
      at = at && entryFold(at, part);
      if (at) found.push(path.basename(at));
    }
    // (Named as the store spells it.)
    if (at && fs.statSync(at).isFile()) return readManifest(store, at, shortName({ host: found[0], namespace: found[1], model: found[2], tag: found[3] }));
  }
  throw new PullError(`no Ollama model '${shortName(n)}' in ${stores.join(' or ')} (ollama list shows its models; OLLAMA_MODELS or --ollama-dir names another store)`);
}

/** Every model of the stores (name, size), for listing; unreadable manifests are skipped. */
export function listOllamaModels(stores: readonly string[] = ollamaStoreDirs()): { name: string; size: number; store: string }[] {
  const out: { name: string; size: number; store: string }[] = [];
  for (const store of stores) {
    const root = path.join(store, 'manifests');
    const sub = (d: string) => {
      try {
        return fs.readdirSync(d).sort();
      } catch {
        return [];
      }
    };
    for (const host of sub(root))
      for (const namespace of sub(path.join(root, host)))
        for (const model of sub(path.join(root, host, namespace)))
          for (const tag of sub(path.join(root, host, namespace, model))) {
            const name = shortName({ host, namespace, model, tag });
            try {
              const m = readManifest(store, path.join(root, host, namespace, model, tag), name);
              out.push({ name, size: m.size, store });
            } catch {
              // (not a usable model: listed by ollama list, not here)
            }
          }
  }
  return out;
}

/** The id an imported model answers to: its name and tag (no tag for :latest), without host or namespace. */
export function ollamaModelId(name: string): string {
  const n = parseOllamaName(name)!;
  return n.tag === 'latest' ? n.model : `${n.model}:${n.tag}`;
}

/**
 * Brings an Ollama model into the models directory as ID.gguf: a hard link to its blob where the
 * file system allows one (else a copy, which appears under its name only once whole), with its
 * Modelfile settings as ID.modelfile.json: its Go template too when the file has no chat template
 * of its own (else the file's renders its chats, as in llama.cpp). Returns the file, whether it is
 * a link, and notes on what was not brought (a projector, adapters) or how its chats render.
 */
export async function importOllamaModel(m: OllamaModel, modelsDir: string, id: string = ollamaModelId(m.name), o: { force?: boolean } = {}): Promise<{ path: string; id: string; linked: boolean; notes: string[] }> {
  if (!/^[A-Za-z0-9_][A-Za-z0-9._:-]{0,199}$/.test(id)) throw new PullError(`'${id}' cannot be a model id (letters, digits and . _ : -)`);
  const header = readGgufHeader(m.model);
  fs.mkdirSync(modelsDir, { recursive: true });
  const dest = path.join(modelsDir, `${id}.gguf`);
  if (fs.existsSync(dest)) {
    if (!o.force) throw new PullError(`model '${id}' is already in ${modelsDir} (--force replaces it)`);
    fs.rmSync(dest);
  }
  let linked = true;
  try {
    fs.linkSync(m.model, dest);
  } catch {
    // (Another file system: a copy, off the event loop, so a server importing one keeps answering.)
    linked = false;
    const part = `${dest}.part`;
    try {
      await fs.promises.copyFile(m.model, part);
      fs.renameSync(part, dest);
    } catch (e) {
      fs.rmSync(part, { force: true });
      throw new PullError(`cannot copy ${m.model} into ${modelsDir}: ${(e as Error).message}`);
    }
  }
  const ownTemplate = header.kv.has('tokenizer.chat_template');
  const template = m.template && !ownTemplate ? m.template : undefined;
  const settings = Object.fromEntries(
    Object.entries({ system: m.system, template, parameters: m.parameters, messages: m.messages, license: m.license }).filter(([, v]) => v !== undefined && !(typeof v === 'object' && Object.keys(v).length === 0)),
  );
  const sidecar = path.join(modelsDir, `${id}.modelfile.json`);
  if (Object.keys(settings).length) fs.writeFileSync(sidecar, JSON.stringify(settings, null, 1));
  else fs.rmSync(sidecar, { force: true });
  const notes: string[] = [];
  if (template)
    notes.push("the file has no chat template of its own: Ollama's Go template, kept with the model, renders its chats on Ollama's /api/chat and /api/generate; the other routes use ChatML unless kail serve --chat-template-file gives one");
  if (m.skipped.includes('projector')) notes.push('its vision projector is not brought: images are not supported');
  if (m.skipped.includes('adapter')) notes.push('its LoRA adapter layers are not brought (kail create with ADAPTER lines adds them)');
  return { path: dest, id, linked, notes };
}
