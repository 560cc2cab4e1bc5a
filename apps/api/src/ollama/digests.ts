// The `digest` Ollama's /api/tags and /api/ps give each model: here the SHA-256 of its GGUF file
// (of the first file of a split model), 64 lowercase hex digits as Ollama prints them. Hashing a
// large file takes a while (about 1–2 GB/s on one core), so it happens in the background the first
// time a listing asks, one file at a time; until then the listing says '' (as it did before). A
// digest is kept in <data dir>/model-digests.json with the file's size, mtime and inode, so a file
// that changes is hashed again and one that does not is never hashed twice. Files whose hash is
// known as they come in (an uploaded blob, a blob of Ollama's store) are recorded at once.
import { createHash } from 'node:crypto';
import fs from 'node:fs';

import { writeJson } from './modelfiles';

export const DIGESTS_FILE = 'model-digests.json';

interface Entry {
  size: number;
  mtimeMs: number;
  ino: number;
  sha256: string;
}

const HEX64 = /^[0-9a-f]{64}$/;

function identity(file: string): Omit<Entry, 'sha256'> | null {
  try {
    const st = fs.statSync(file);
    return st.isFile() ? { size: st.size, mtimeMs: st.mtimeMs, ino: st.ino } : null;
  } catch {
    return null;
  }
}

const same = (a: Omit<Entry, 'sha256'>, b: Omit<Entry, 'sha256'>) => a.size === b.size && a.mtimeMs === b.mtimeMs && a.ino === b.ino;

export class ModelDigests {
  private readonly entries = new Map<string, Entry>();
  private readonly queue: string[] = [];
  private running: Promise<void> | null = null;

  /** `file`: where the digests persist (null: in memory only). */
  constructor(private readonly file: string | null) {
    if (!file) return;
    try {
      const raw = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, Partial<Entry>>;
      for (const [p, e] of Object.entries(raw ?? {})) {
        // (A damaged or hand-edited file loses its bad entries, nothing else.)
        if (typeof e?.sha256 === 'string' && HEX64.test(e.sha256) && [e.size, e.mtimeMs, e.ino].every((n) => typeof n === 'number'))
          this.entries.set(p, { size: e.size!, mtimeMs: e.mtimeMs!, ino: e.ino!, sha256: e.sha256 });
      }
    } catch {
      // none yet, or unreadable: every file is hashed again
    }
  }

  /** The file's digest when known and still true of it; otherwise '' and the file is queued for hashing. */
  of(file: string): string {
    const id = identity(file);
    if (!id) return '';
    const e = this.entries.get(file);
    if (e && same(e, id)) return e.sha256;
    if (!this.queue.includes(file)) this.queue.push(file);
    this.running ??= this.drain().finally(() => (this.running = null));
    return '';
  }

  /** Records a digest known another way (the file is a copy or link of a blob by that hash). */
  remember(file: string, sha256: string): void {
    const id = identity(file);
    if (!id || !HEX64.test(sha256)) return;
    this.entries.set(file, { ...id, sha256 });
    this.save();
  }

  /** Resolves once every queued file is hashed (for tests and for a clean stop). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  private async drain(): Promise<void> {
    for (let file = this.queue.shift(); file !== undefined; file = this.queue.shift()) {
      const before = identity(file);
      if (!before) continue;
      try {
        const hash = createHash('sha256');
        for await (const chunk of fs.createReadStream(file, { highWaterMark: 1 << 22 })) hash.update(chunk as Buffer);
        const after = identity(file);
        // (A file written to while it was read is hashed again at the next listing.)
        if (after && same(before, after)) {
          this.entries.set(file, { ...after, sha256: hash.digest('hex') });
          this.save();
        }
      } catch {
        // unreadable now: tried again at the next listing
      }
    }
  }

  private save(): void {
    if (!this.file) return;
    for (const p of [...this.entries.keys()]) if (!identity(p)) this.entries.delete(p);
    try {
      writeJson(this.file, Object.fromEntries(this.entries));
    } catch {
      // a read-only data directory: digests stay in memory
    }
  }
}
