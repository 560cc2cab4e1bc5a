// Models published in several files (llama.cpp's gguf-split): PREFIX-00001-of-0000N.gguf holds the
// metadata, each PREFIX-0000i-of-0000N.gguf a share of the tensors. The native loader opens the
// others from the first (gguf.h); these helpers name and size them for the TypeScript side.
import fs from 'node:fs';

const SPLIT_RE = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/i;

/** For a split file's path, its prefix, 1-based number and count; null for any other name. */
export function splitNameOf(file: string): { prefix: string; no: number; count: number } | null {
  const m = SPLIT_RE.exec(file);
  if (!m) return null;
  const no = Number(m[2]);
  const count = Number(m[3]);
  return no >= 1 && count >= 1 && no <= count ? { prefix: m[1], no, count } : null;
}

/** The split file `no` (1-based) of `count` with this prefix, named as llama.cpp names it. */
export function splitPath(prefix: string, no: number, count: number): string {
  return `${prefix}-${String(no).padStart(5, '0')}-of-${String(count).padStart(5, '0')}.gguf`;
}

/** Every file of the model whose (first) file is `file`: itself, or all its splits by name (those present). */
export function modelFiles(file: string): string[] {
  const s = splitNameOf(file);
  if (!s || s.no !== 1 || s.count === 1) return [file];
  const out = [file];
  for (let i = 2; i <= s.count; i++) {
    const p = splitPath(s.prefix, i, s.count);
    if (fs.existsSync(p)) out.push(p);
  }
  return out;
}

/** Bytes of the model on disk: its file's, or every split's. */
export function modelFileBytes(file: string): number {
  return modelFiles(file).reduce((a, f) => a + fs.statSync(f).size, 0);
}

/** A later split (number 2 and up) of a split model: not a model to open by itself. */
export function isLaterSplit(file: string): boolean {
  const s = splitNameOf(file);
  return !!s && s.no > 1;
}
