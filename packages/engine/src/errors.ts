/** Stable error codes of the engine package. */
export type EngineErrorCode =
  | 'KAIL_E_BAD_MODEL'
  | 'KAIL_E_IO'
  | 'KAIL_E_BUDGET'
  | 'KAIL_E_INVALID_ARG'
  | 'KAIL_E_UNSUPPORTED'
  | 'KAIL_E_CANCELLED'
  | 'KAIL_E_NOT_FOUND'
  | 'KAIL_E_ALREADY_EXISTS'
  | 'KAIL_E_CONTEXT_OVERFLOW'
  | 'KAIL_E_INTERNAL';

/** An expected failure: one request or one load fails, the engine keeps serving. */
export class EngineError extends Error {
  constructor(
    readonly code: EngineErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'EngineError';
  }
}

/** Wraps any thrown value (native errors carry a string `code`) as an EngineError. */
export function toEngineError(e: unknown): EngineError {
  if (e instanceof EngineError) return e;
  // Duck-typed: errors thrown by the addon come from the main realm's Error, which is not this
  // realm's Error under jest's vm contexts or worker threads.
  if (typeof e === 'object' && e !== null && typeof (e as { message?: unknown }).message === 'string') {
    const { code, message } = e as { code?: unknown; message: string };
    if (typeof code === 'string' && code.startsWith('KAIL_E_')) return new EngineError(code as EngineErrorCode, message);
    return new EngineError('KAIL_E_INTERNAL', message);
  }
  return new EngineError('KAIL_E_INTERNAL', String(e));
}

/**
 * Why a file could not be read or written, in words with the errno code: 'no such file (ENOENT)',
 * 'a directory, not a file (EISDIR)'; for messages that already name the file and the flag.
 */
export function fsErrorText(e: unknown): string {
  const code = (e as { code?: unknown } | null)?.code;
  const words: Record<string, string> = {
    ENOENT: 'no such file',
    EISDIR: 'a directory, not a file',
    ENOTDIR: 'a part of the path is not a directory',
    EACCES: 'permission denied',
    EPERM: 'permission denied',
    EEXIST: 'a file is in the way',
    ENOSPC: 'no space left on the device',
    EROFS: 'a read-only file system',
  };
  if (typeof code === 'string') return words[code] ? `${words[code]} (${code})` : code;
  return e instanceof Error ? e.message : String(e);
}
