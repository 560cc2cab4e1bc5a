// What Ollama's create keeps besides the weights: a model's system prompt, default options
// ("PARAMETER" lines), opening messages and license, per model id, in one JSON file of the data
// directory (in memory without one). The GGUF file itself goes to the engine's models directory;
// blobs uploaded for it (POST /api/blobs/sha256:…) wait in <data dir>/blobs.
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

export interface Modelfile {
  system?: string;
  /** Default options (Ollama's names), under the request's own. */
  parameters?: Record<string, unknown>;
  messages?: { role: string; content: string }[];
  license?: string;
}

export const MODELFILES_FILE = 'ollama-modelfiles.json';

export class ModelfileStore {
  private readonly entries = new Map<string, Modelfile>();

  constructor(private readonly file: string | null) {
    if (file && fs.existsSync(file)) {
      try {
        const parsed: unknown = JSON.parse(fs.readFileSync(file, 'utf8'));
        if (parsed && typeof parsed === 'object' && !Array.isArray(parsed))
          for (const [id, m] of Object.entries(parsed)) if (m && typeof m === 'object') this.entries.set(id, m as Modelfile);
      } catch {
        // A damaged file loses the defaults, not the server: start empty, keep the old one aside.
        fs.renameSync(file, `${file}.damaged-${Date.now()}`);
      }
    }
  }

  get(id: string): Modelfile | undefined {
    return this.entries.get(id);
  }

  set(id: string, m: Modelfile): void {
    const clean = Object.fromEntries(Object.entries(m).filter(([, v]) => v !== undefined && v !== null && !(typeof v === 'object' && Object.keys(v).length === 0)));
    if (Object.keys(clean).length) this.entries.set(id, clean);
    else this.entries.delete(id);
    this.save();
  }

  delete(id: string): void {
    if (this.entries.delete(id)) this.save();
  }

  copy(from: string, to: string): void {
    const m = this.get(from);
    if (m) this.set(to, structuredClone(m));
    else this.delete(to);
  }

  private save(): void {
    if (!this.file) return;
    const tmp = `${this.file}.tmp-${process.pid}`;
    fs.writeFileSync(tmp, JSON.stringify(Object.fromEntries(this.entries), null, 1));
    fs.renameSync(tmp, this.file);
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
