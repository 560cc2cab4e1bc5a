// The names models were pulled by (Ollama's /api/pull of hf.co/USER/REPO:QUANT): the model is the
// repository's GGUF file in the models directory, whose id is the file's name, and clients go on
// naming it as they pulled it. One JSON file of the data directory maps each such name to the id
// (in memory without a data directory); a request's `model` that is one of these names is read as
// its id.
import fs from 'node:fs';

import { setDamagedAside } from '../damaged-file';

export const MODEL_NAMES_FILE = 'ollama-pulled-names.json';

export class PulledNames {
  private names = new Map<string, string>();

  /** `onNote` hears of a damaged file set aside (default: stderr). */
  constructor(
    private readonly file: string | null,
    onNote?: (message: string) => void,
  ) {
    if (file && fs.existsSync(file)) {
      try {
        const parsed: unknown = JSON.parse(fs.readFileSync(file, 'utf8'));
        if (parsed && typeof parsed === 'object' && !Array.isArray(parsed))
          for (const [name, id] of Object.entries(parsed)) if (typeof id === 'string') this.names.set(name, id);
      } catch (e) {
        // A damaged file loses the names, not the server: start empty, keep the old one aside.
        setDamagedAside(file, e, 'the names models were pulled under; their files are still listed by file name', onNote);
      }
    }
  }

  /** The id a pulled name stands for (the name as pulled, or with or without :latest), else undefined. */
  idFor(name: string): string | undefined {
    const bare = name.endsWith(':latest') ? name.slice(0, -7) : name;
    return this.names.get(name) ?? this.names.get(bare) ?? this.names.get(`${bare}:latest`);
  }

  set(name: string, id: string): void {
    this.names.set(name, id);
    this.save();
  }

  /** Forgets the names of a deleted model. */
  forgetId(id: string): void {
    const before = this.names.size;
    for (const [n, i] of this.names) if (i === id) this.names.delete(n);
    if (this.names.size !== before) this.save();
  }

  private save(): void {
    if (!this.file) return;
    const tmp = `${this.file}.tmp-${process.pid}`;
    fs.writeFileSync(tmp, JSON.stringify(Object.fromEntries(this.names), null, 1));
    fs.renameSync(tmp, this.file);
  }
}
