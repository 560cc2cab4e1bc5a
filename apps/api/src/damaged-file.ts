// A data-directory JSON file that no longer parses: moved aside (FILE.damaged-TIME, kept for
// whoever wants it back) so the server starts with what it can rebuild, and said on stderr.
import fs from 'node:fs';

/** Moves `file` aside after `e` (its read or parse error); `loses` says what starting without it costs. */
export function setDamagedAside(file: string, e: unknown, loses: string, onNote: (message: string) => void = (m) => process.stderr.write(`api: ${m}\n`)): void {
  const aside = `${file}.damaged-${new Date().toISOString().replace(/[:.]/g, '-')}`;
  const why = (e as Error).message;
  try {
    fs.renameSync(file, aside);
    onNote(`${file} is damaged (${why}): moved it to ${aside}; starting without it (${loses})`);
  } catch (r) {
    onNote(`${file} is damaged (${why}) and could not be moved aside (${(r as Error).message}); starting without it (${loses})`);
  }
}
