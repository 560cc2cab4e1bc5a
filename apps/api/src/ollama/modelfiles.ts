// What Ollama's create keeps besides the weights: a model's system prompt, default options
// ("PARAMETER" lines), opening messages and license. For a model of the models directory they
// live next to its file, as ID.modelfile.json (as its ADAPTER lines live in ID.lora.json), so the
// engine's copy and delete carry them whoever asks (kail cp / kail rm too, and a file removed by
// hand takes them along). For a model loaded from elsewhere (kail serve -m PATH), or an API
// without a models directory, they are kept per model id in one JSON file of the data directory
// (in memory without one). The GGUF file itself goes to the engine's models directory; blobs
// uploaded for it (POST /api/blobs/sha256:…) wait in <data dir>/blobs.
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

import { setDamagedAside } from '../damaged-file';

export interface Modelfile {
  system?: string;
  /** TEMPLATE: an Ollama template (Go text/template) that renders the model's chats in place of its own. */
  template?: string;
  /** Default options (Ollama's names), under the request's own. */
  parameters?: Record<string, unknown>;
  messages?: { role: string; content: string }[];
  license?: string;
}

export const MODELFILES_FILE = 'ollama-modelfiles.json';
/** The sidecar of a models-directory model that holds its Modelfile settings (the engine's copy and delete know it). */
export const MODELFILE_SIDECAR = '.modelfile.json';

/** A Modelfile without its empty parts; null when nothing is left. */
function cleaned(m: Modelfile): Modelfile | null {
  const clean = Object.fromEntries(Object.entries(m).filter(([, v]) => v !== undefined && v !== null && !(typeof v === 'object' && Object.keys(v).length === 0)));
  return Object.keys(clean).length ? clean : null;
}

/** Writes a JSON file whole or not at all (a temporary file renamed over it). */
export function writeJson(file: string, value: unknown): void {
  const tmp = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, JSON.stringify(value, null, 1));
  fs.renameSync(tmp, file);
}

export class ModelfileStore {
  private readonly entries = new Map<string, Modelfile>();
  /** Sidecars as last read, with the file's mtime and size then: read again only when the file changed. */
  private readonly sidecars = new Map<string, { mtimeMs: number; size: number; m: Modelfile | undefined }>();

  /**
   * `file`: the data directory's store (null: in memory); `modelsDir`: the models directory, whose
   * models keep theirs in sidecars; `onNote` hears of a damaged file set aside (default: stderr).
   */
  constructor(
    private readonly file: string | null,
    private readonly modelsDir: string | null = null,
    onNote?: (message: string) => void,
  ) {
    if (file && fs.existsSync(file)) {
      try {
        const parsed: unknown = JSON.parse(fs.readFileSync(file, 'utf8'));
        if (parsed && typeof parsed === 'object' && !Array.isArray(parsed))
          for (const [id, m] of Object.entries(parsed)) if (m && typeof m === 'object') this.entries.set(id, m as Modelfile);
      } catch (e) {
        // A damaged file loses the defaults, not the server: start empty, keep the old one aside.
        setDamagedAside(file, e, "the Modelfile settings of models made by kail create outside the models directory; kail create makes them again", onNote);
      }
    }
    // Entries of models now in the models directory (kept here before the sidecars) move next to their file.
    let moved = false;
    for (const [id, m] of this.entries) {
      const side = this.sidecar(id);
      if (!side) continue;
      if (!fs.existsSync(side)) writeJson(side, m);
      this.entries.delete(id);
      moved = true;
    }
    if (moved) this.save();
  }

  /** ID.modelfile.json of a model whose ID.gguf is in the models directory, else null. */
  private sidecar(id: string): string | null {
    if (!this.modelsDir || !/^[A-Za-z0-9_][A-Za-z0-9._:-]{0,199}$/.test(id)) return null;
    return fs.existsSync(path.join(this.modelsDir, `${id}.gguf`)) ? path.join(this.modelsDir, `${id}${MODELFILE_SIDECAR}`) : null;
  }

  get(id: string): Modelfile | undefined {
    const side = this.sidecar(id);
    if (!side) return this.entries.get(id);
    let st: fs.Stats;
    try {
      st = fs.statSync(side);
    } catch {
      this.sidecars.delete(side);
      return undefined;
    }
    // (A request's preHandler and its route both ask; so does every request to the model.)
    const seen = this.sidecars.get(side);
    if (seen && seen.mtimeMs === st.mtimeMs && seen.size === st.size) return seen.m;
    let m: Modelfile | undefined;
    try {
      const v: unknown = JSON.parse(fs.readFileSync(side, 'utf8'));
      m = v && typeof v === 'object' && !Array.isArray(v) ? (v as Modelfile) : undefined;
    } catch {
      // Unreadable: its model runs with the defaults; the next create rewrites it.
      m = undefined;
    }
    this.sidecars.set(side, { mtimeMs: st.mtimeMs, size: st.size, m });
    return m;
  }

  set(id: string, m: Modelfile): void {
    const clean = cleaned(m);
    const side = this.sidecar(id);
    if (side) {
      this.sidecars.delete(side);
      if (clean) writeJson(side, clean);
      else fs.rmSync(side, { force: true });
      if (this.entries.delete(id)) this.save();
      return;
    }
    if (clean) this.entries.set(id, clean);
    else this.entries.delete(id);
    this.save();
  }

  /** Forgets a model's settings (a models-directory model's sidecar goes with its file: the engine deletes it). */
  delete(id: string): void {
    const side = this.sidecar(id);
    if (side) {
      this.sidecars.delete(side);
      fs.rmSync(side, { force: true });
    }
    if (this.entries.delete(id)) this.save();
  }

  /** The settings of the model a request names (its id, or the id without a :latest tag); {} for none. */
  of(name: string): Modelfile {
    return (name.endsWith(':latest') ? this.get(name.slice(0, -7)) : undefined) ?? this.get(name) ?? {};
  }

  copy(from: string, to: string): void {
    const m = this.get(from);
    if (m) this.set(to, structuredClone(m));
    else this.delete(to);
  }

  private save(): void {
    if (this.file) writeJson(this.file, Object.fromEntries(this.entries));
  }
}

/** "sha256:<64 hex>" (or Ollama's file form "sha256-…") as the hex digest; null when it is not one. */
export function blobDigest(d: string): string | null {
  const m = /^sha256[:-]([0-9a-f]{64})$/.exec(d);
  return m ? m[1] : null;
}

export class BlobStore {
  constructor(readonly dir: string) {}

  path(hex: string): string {
    return path.join(this.dir, `sha256-${hex}`);
  }

  has(hex: string): boolean {
    return fs.existsSync(this.path(hex));
  }

  /**
   * Writes a body to the blob `hex`, checking its SHA-256 as it streams; the blob appears only
   * once the whole body matched (a partial or wrong upload leaves nothing behind).
   */
  async put(hex: string, body: Readable): Promise<{ ok: true; bytes: number } | { ok: false; got: string }> {
    fs.mkdirSync(this.dir, { recursive: true });
    const tmp = path.join(this.dir, `.partial-${hex}-${randomBytes(6).toString('hex')}`);
    const hash = createHash('sha256');
    let bytes = 0;
    const hashing = new Transform({
      transform(c: Buffer, _enc, done) {
        hash.update(c);
        bytes += c.length;
        done(null, c);
      },
    });
    try {
      await pipeline(body, hashing, fs.createWriteStream(tmp));
      const got = hash.digest('hex');
      if (got !== hex) {
        fs.rmSync(tmp, { force: true });
        return { ok: false, got };
      }
      fs.renameSync(tmp, this.path(hex));
      return { ok: true, bytes };
    } catch (e) {
      fs.rmSync(tmp, { force: true });
      throw e;
    }
  }
}
