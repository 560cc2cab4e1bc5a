import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { llamaFlagAliases } from './main';

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
    expect(out.native.defaultThreads).toBeGreaterThanOrEqual(1);
    expect(out.native.defaultThreads).toBeLessThanOrEqual(out.native.physicalCores);
    expect(out.memory.availableBytes).toBeGreaterThan(0);
    expect(out.memory.availableBytes).toBeLessThanOrEqual(out.memory.totalBytes);
    if (out.memory.cgroup) expect(out.memory.availableBytes).toBeLessThanOrEqual(out.memory.cgroup.headroomBytes);
    const text = kail('version');
    expect(text.stdout).toMatch(/compute threads? by default\nmemory: .* available of /);
  });

  it('serve refuses a malformed --keep-alive, --models-max or --cache-type before starting anything', () => {
    const a = kail('serve', '--keep-alive', 'forever');
    expect(a.status).not.toBe(0);
    expect(a.stderr).toContain("--keep-alive must be a duration such as 5m, 1h30m, 30s, 0 or -1, got 'forever'");
    const b = kail('serve', '--models-max', '-2');
    expect(b.status).not.toBe(0);
    expect(b.stderr).toContain('--models-max');
    expect(kail('serve', '--help').stdout).toMatch(/--keep-alive <duration>[\s\S]*--models-max <n>/);
    const c = kail('serve', '--cache-type', 'q4_k');
    expect(c.status).not.toBe(0);
    expect(c.stderr).toContain("--cache-type must be f16, f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, got 'q4_k'");
    // The same from the environment (KAIL_ and the flag's name), which a flag overrides.
    const env = spawnSync(process.execPath, [KAIL, 'serve'], { encoding: 'utf8', timeout: 30_000, env: { ...process.env, KAIL_KEEP_ALIVE: 'forever' } });
    expect(env.status).not.toBe(0);
    expect(env.stderr).toContain("--keep-alive must be a duration such as 5m, 1h30m, 30s, 0 or -1, got 'forever'");
    expect(kail('serve', '--help').stdout).toMatch(/\(default: "8080", env: KAIL_PORT\)/);
    const d = kail('serve', '-ctk', 'q8_0', '-ctv', 'q3');
    expect(d.status).not.toBe(0);
    expect(d.stderr).toContain("--cache-type-v must be f16, f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, got 'q3'");
  });

  it("spells llama.cpp's -ctk/-ctv as --cache-type-k/-v, and leaves what follows -- alone", () => {
    expect(llamaFlagAliases(['run', '-ctk', 'q8_0', '-ctv', 'q4_0', '--', '-ctk'])).toEqual(['run', '--cache-type-k', 'q8_0', '--cache-type-v', 'q4_0', '--', '-ctk']);
    // llama.cpp's two-word flags (FNAME SCALE, START END) become one word; the one-word forms stay.
    expect(llamaFlagAliases(['run', '--control-vector-scaled', 'a.gguf', '0.8', '--control-vector-layer-range', '2', '5', '-n', '3'])).toEqual([
      'run', '--control-vector-scaled', 'a.gguf:0.8', '--control-vector-layer-range', '2:5', '-n', '3',
    ]);
    expect(llamaFlagAliases(['run', '--control-vector-scaled', 'a.gguf:-1.5', '-n', '3'])).toEqual(['run', '--control-vector-scaled', 'a.gguf:-1.5', '-n', '3']);
  });

  it('rejects an unknown command with a non-zero exit and help', () => {
    const r = kail('frobnicate');
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("unknown command 'frobnicate'");
  });
});
