import { spawnSync } from 'node:child_process';
import path from 'node:path';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 30_000 });
}

describe('kail CLI', () => {
  it('prints help listing its commands', () => {
    const r = kail('--help');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('Usage: kail');
    expect(r.stdout).toContain('version');
    expect(r.stdout).toContain('serve');
  });

  it('prints the version with native features', () => {
    const r = kail('version', '--json');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(Array.isArray(out.native.simd)).toBe(true);
  });

  it('rejects an unknown command with a non-zero exit and help', () => {
    const r = kail('frobnicate');
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("unknown command 'frobnicate'");
  });
});
