/** Stable error codes thrown by the native core (see include/kail/status.h). */
export const NATIVE_ERROR_CODES = [
  'KAIL_E_BAD_MODEL',
  'KAIL_E_IO',
  'KAIL_E_BUDGET',
  'KAIL_E_INVALID_ARG',
  'KAIL_E_UNSUPPORTED',
  'KAIL_E_CANCELLED',
  'KAIL_E_INTERNAL',
] as const;

export type NativeErrorCode = (typeof NATIVE_ERROR_CODES)[number];

/** Thrown when the addon cannot be loaded; `attempts` lists every place tried. */
export class NativeLoadError extends Error {
  readonly code = 'KAIL_E_NATIVE_LOAD';
  constructor(
    message: string,
    readonly attempts: { path: string; error: string }[],
  ) {
    super(message);
    this.name = 'NativeLoadError';
  }
}

/** True when `e` is an error thrown by the native core with one of the stable codes. */
export function isNativeError(e: unknown, code?: NativeErrorCode): e is Error & { code: NativeErrorCode } {
  if (!(e instanceof Error)) return false;
  const c = (e as { code?: unknown }).code;
  return typeof c === 'string' && (NATIVE_ERROR_CODES as readonly string[]).includes(c) && (code === undefined || c === code);
}
