import { EngineError } from '../errors';

const UNITS: Record<string, number> = { '': 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 };

/** `share` (0..1) of `bytes`, rounded down to a MiB: how every budget taken as a share is sized. */
export function shareOfBytes(bytes: number, share: number): number {
  return Math.floor((bytes * share) / 2 ** 20) * 2 ** 20;
}

/**
 * Parses a byte count as the CLI flags take it: a plain integer (bytes) or a number with a binary
 * suffix K, M, G or T (optionally followed by 'i' and/or 'B', any case): '8G' = 8 GiB,
 * '512M', '1.5GiB', '4096'. Throws KAIL_E_INVALID_ARG naming the text otherwise.
 */
export function parseByteSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$/i.exec(text);
  if (!m || (m[3] !== '' && m[2] === '' && m[3].toLowerCase() !== 'b'))
    throw new EngineError('KAIL_E_INVALID_ARG', `'${text}' is not a byte size (e.g. 8G, 512M, 1.5GiB, 4096)`);
  const bytes = Math.floor(Number(m[1]) * UNITS[m[2].toLowerCase()]);
  if (!Number.isSafeInteger(bytes)) throw new EngineError('KAIL_E_INVALID_ARG', `'${text}' is too large`);
  return bytes;
}

/** '1.50 GiB', '768.0 KiB', '12 B': the units the native plan's messages use. */
export function formatBytes(bytes: number): string {
  if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
  if (bytes >= 2 ** 20) return `${(bytes / 2 ** 20).toFixed(2)} MiB`;
  if (bytes >= 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${bytes} B`;
}
