import fs from 'node:fs';

/**
 * When a model's file last changed (its mtime): OpenAI's `created` and Ollama's `modified_at`, as
 * Ollama reports when a model was made. `fallback` (the API's start) when this process cannot see
 * the file, as for an engine on another machine.
 */
export function modelFileTime(file: string, fallback: Date): Date {
  try {
    return fs.statSync(file).mtime;
  } catch {
    return fallback;
  }
}
