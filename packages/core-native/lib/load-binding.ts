import fs from 'node:fs';
import path from 'node:path';

import type { NativeAddon } from './addon-types';
import { NativeLoadError } from './errors';

/** Environment variable naming an explicit addon file (a `.node`), tried first. */
export const NATIVE_PATH_ENV = 'KAIL_NATIVE_PATH';

const PACKAGE_DIR = path.resolve(__dirname, '..');

/** Where the addon is looked for, in order. */
export function bindingCandidates(env: NodeJS.ProcessEnv = process.env): { path: string; fix: string }[] {
  const out: { path: string; fix: string }[] = [];
  const override = env[NATIVE_PATH_ENV];
  if (override) out.push({ path: path.resolve(override), fix: `point ${NATIVE_PATH_ENV} at a built kail_native.node, or unset it` });
  for (const config of ['Release', 'Debug']) {
    out.push({
      path: path.join(PACKAGE_DIR, 'build/addon', config, 'kail_native.node'),
      fix: 'build it: npx nx run core-native:build-native (needs cmake, g++ and Node headers; `bash tools/setup.sh` installs them)',
    });
  }
  return out;
}

let cached: NativeAddon | undefined;

/**
 * Loads the native addon: the env override, then the local build. Throws one NativeLoadError
 * listing every place tried, why it failed and how to fix it.
 */
export function loadBinding(env: NodeJS.ProcessEnv = process.env): NativeAddon {
  if (cached) return cached;
  const attempts: { path: string; error: string }[] = [];
  const fixes = new Set<string>();
  for (const c of bindingCandidates(env)) {
    if (!fs.existsSync(c.path)) {
      attempts.push({ path: c.path, error: 'not found' });
      fixes.add(c.fix);
      continue;
    }
    try {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      cached = require(c.path) as NativeAddon;
      return cached;
    } catch (e) {
      attempts.push({ path: c.path, error: (e as Error).message });
      fixes.add(c.fix);
    }
  }
  const lines = attempts.map((a) => `  - ${a.path}: ${a.error}`).join('\n');
  throw new NativeLoadError(
    `KailStream native addon could not be loaded. Tried:\n${lines}\nTo fix:\n${[...fixes].map((f) => `  - ${f}`).join('\n')}`,
    attempts,
  );
}
