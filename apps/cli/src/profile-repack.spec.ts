// kail profile (measured defaults that run/plan then take, and say so) and kail repack + run --storage
// (an expert pack striped over two directories gives the in-memory tokens), on the built-in demo model.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });
}

describe('kail profile and kail repack', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cli-profile-'));
  let model: string;
  let inMemory: number[];
  beforeAll(() => {
    const r = kail('run', '--demo', '--data-dir', dir, '-p', 'Hello', '-n', '8', '-t', '2', '--json', '--no-usage-history');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout);
    model = out.model;
    inMemory = out.tokens;
  }, 120_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('profile measures, writes profile.json with plain progress lines, and plan/run take its defaults', () => {
    const r = kail('profile', '--data-dir', dir, '--file-size', '16M', '--seconds', '0.05', '--ram-share', '0.5');
    expect(r.status).toBe(0);
    // Not a TTY: one plain line per step, no carriage returns.
    expect(r.stderr).not.toContain('\r');
    expect(r.stderr).toMatch(/storage .*: random 1\.00 MiB blocks, queue depth 4: [\d.]+ (KiB|MiB|GiB)\/s/);
    const p = JSON.parse(fs.readFileSync(path.join(dir, 'profile.json'), 'utf8'));
    expect(p.storage).toHaveLength(1);
    expect(p.storage[0].results.length).toBe(17);
    // Each setting measured in three interleaved rounds, keeping the median.
    expect(r.stderr).toMatch(/queue depth 4: [\d.]+ (KiB|MiB|GiB)\/s \(median of 3: /);
    expect(r.stderr).toContain('round 2 of 3 measured');
    for (const m of p.storage[0].results) {
      expect(m.rounds).toHaveLength(3);
      expect(m.bytesPerSecond).toBe([...m.rounds].sort((a: number, b: number) => a - b)[1]);
    }
    expect(p.storage[0].sequentialBytesPerSecond).toBeGreaterThan(0);
    expect(p.memory.readBytesPerSecond).toBeGreaterThan(0);
    expect(p.defaults.ioThreads).toBeGreaterThanOrEqual(1);
    expect(fs.readdirSync(dir).filter((f) => f.includes('kail-profile'))).toEqual([]); // temp file removed
    const bad = kail('profile', '--data-dir', dir, '--rounds', '0');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain("--rounds must be an integer in [1, 20], got '0'");
    const show = kail('profile', '--data-dir', dir, '--show');
    expect(show.stdout).toMatch(/default --ram .*50% of the .* available when profiled/);
    expect(show.stdout).toMatch(/default --io-threads \d+: the smallest queue depth/);
    expect(show.stdout).toMatch(/default --read-size [\d.]+ (KiB|MiB): the smallest block/);

    const plan = kail('plan', '-m', model, '--data-dir', dir, '--json');
    expect(plan.status).toBe(0);
    expect(JSON.parse(plan.stdout).ramBytes).toBe(p.defaults.ramBytes);
    expect(plan.stderr).toContain(`--ram`);
    expect(plan.stderr).toContain('profile.json');
    // The demo model fits the profiled budget: run says so and stays in memory.
    const run = kail('run', '-m', model, '--data-dir', dir, '-p', 'Hello', '-n', '8', '-t', '2', '--json', '--no-usage-history');
    expect(run.status).toBe(0);
    expect(run.stderr).toMatch(/fits the budget .* from .*profile.json: .* so it runs in memory/);
    expect(JSON.parse(run.stdout).stream).toBeNull();
    // A missing model file is named as such with a profile too (its defaults size the file).
    const missing = path.join(dir, 'missing.gguf');
    for (const args of [['run', '-m', missing, '-p', 'Hello'], ['perplexity', '-m', missing, '-f', path.join(dir, 'profile.json')]]) {
      const r = kail(...args, '--data-dir', dir);
      expect(r.status).toBe(1);
      expect(r.stderr).toContain(`kail: model file not found: ${missing}\n`);
    }

    // A profile that assumed far more memory than is available now (taken on a bigger machine, or
    // outside a container): --show says what a run takes now, and plan takes it.
    const big = path.join(dir, 'big-profile');
    fs.mkdirSync(big);
    const T = 2 ** 40;
    fs.writeFileSync(path.join(big, 'profile.json'), JSON.stringify({ ...p, memory: { ...p.memory, availableBytes: 2 * T }, defaults: { ...p.defaults, ramBytes: T } }));
    const bigShow = kail('profile', '--data-dir', big, '--show');
    expect(bigShow.stdout).toMatch(/ now --ram +[\d.]+ (MiB|GiB): 50% of the [\d.]+ (MiB|GiB) (available now|the memory cgroup .* leaves)/);
    const bigPlan = kail('plan', '-m', model, '--data-dir', big, '--json');
    expect(bigPlan.status).toBe(0);
    expect(JSON.parse(bigPlan.stdout).ramBytes).toBeLessThan(T / 2);
    expect(bigPlan.stderr).toMatch(/--ram [\d.]+ (MiB|GiB) 50% of the/);
  }, 120_000);

  it('refuses a storage path that is not a directory before measuring anything', () => {
    const missing = path.join(dir, 'no-such-dir');
    const r = kail('profile', '--data-dir', dir, '--storage', missing, '--seconds', '0.05');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`storage path ${missing} is not a directory`);
    expect(r.stderr).not.toMatch(/^memory:/m);
    // A test file too small to measure is refused, not raised to 16 MiB without a word.
    const tiny = kail('profile', '--data-dir', dir, '--file-size', '0', '--seconds', '0.05');
    expect(tiny.status).toBe(1);
    expect(tiny.stderr).toContain("--file-size must be at least 16M, got '0'");
    expect(tiny.stderr).not.toMatch(/^memory:/m);
  });

  it('reads the largest model file of a storage path in place of writing a test file, and leaves it there', () => {
    const store = path.join(dir, 'store');
    fs.mkdirSync(path.join(store, 'sub'), { recursive: true });
    const big = path.join(store, 'sub', 'big.gguf');
    fs.writeFileSync(path.join(store, 'small.gguf'), 'x');
    fs.writeFileSync(path.join(store, 'bigger.bin'), '');
    fs.truncateSync(path.join(store, 'bigger.bin'), 2 * 2 ** 30); // not a .gguf: not read
    fs.writeFileSync(big, '');
    fs.truncateSync(big, 2 ** 30); // sparse: reads as zeros
    const pdir = path.join(dir, 'probe');
    const r = kail('profile', '--data-dir', pdir, '--storage', store, '--file-size', '16M', '--seconds', '0.05', '--rounds', '1');
    expect(r.status).toBe(0);
    expect(r.stderr).toContain(`storage ${store}: reading ${big} (1.00 GiB) in place of a test file`);
    expect(r.stderr).not.toContain('writing a');
    const p = JSON.parse(fs.readFileSync(path.join(pdir, 'profile.json'), 'utf8'));
    expect(p.storage[0]).toMatchObject({ probeFile: big, testFileBytes: 2 ** 30 });
    expect(fs.statSync(big).size).toBe(2 ** 30); // still there
    expect(kail('profile', '--data-dir', pdir, '--show').stdout).toContain(`read from ${big}`);
    // Asked not to, it writes (and removes) a test file.
    const w = kail('profile', '--data-dir', pdir, '--storage', store, '--file-size', '16M', '--seconds', '0.05', '--rounds', '1', '--no-model-files');
    expect(w.status).toBe(0);
    expect(w.stderr).toContain('writing a 16.00 MiB test file');
    expect(JSON.parse(fs.readFileSync(path.join(pdir, 'profile.json'), 'utf8')).storage[0].probeFile).toBeUndefined();
    expect(fs.readdirSync(store).sort()).toEqual(['bigger.bin', 'small.gguf', 'sub']);
  }, 120_000);

  it('takes no VRAM tier from a profiled GPU whose memory holds none of the experts, and says so', () => {
    // The first test's profile, with a GPU whose usable memory is one byte short of an expert.
    const p = JSON.parse(kail('plan', '-m', model, '--ram', '1G', '--reserve', '0', '--ctx', '256', '--json').stdout);
    const gpuDir = path.join(dir, 'gpu');
    fs.mkdirSync(gpuDir);
    const profile = JSON.parse(fs.readFileSync(path.join(dir, 'profile.json'), 'utf8'));
    profile.gpus = [{ index: 0, name: 'Test GPU', totalBytes: 2 ** 30, freeBytes: 2 ** 29, usableBytes: p.expertEntryBytes - 1 }];
    fs.writeFileSync(path.join(gpuDir, 'profile.json'), JSON.stringify(profile));
    const ram = String(p.fixedBytes + Math.round(2.5 * p.nMoeLayers * p.expertEntryBytes));
    const run = kail('run', '-m', model, '--data-dir', gpuDir, '-p', 'Hello', '-n', '8', '-t', '2', '-c', '256', '--json', '--ram', ram, '--reserve', '0', '--no-usage-history');
    expect(run.stderr).toMatch(/--vram .* from .*profile\.json: GPU #0 Test GPU/);
    expect(run.stderr).toMatch(/no VRAM tier: .* of GPU memory holds none of this model's experts/);
    expect(run.status).toBe(0);
    expect(JSON.parse(run.stdout).tokens).toEqual(inMemory);
    // The same bytes given by hand are refused, naming them.
    const given = kail('run', '-m', model, '--data-dir', gpuDir, '-n', '1', '-c', '256', '--ram', ram, '--reserve', '0', '--vram', String(p.expertEntryBytes - 1));
    expect(given.status).toBe(1);
    expect(given.stderr).toMatch(/cannot hold one expert/);
  }, 120_000);

  it('repack stripes experts over two directories; run --storage gives the in-memory tokens', () => {
    const s1 = path.join(dir, 's1');
    const s2 = path.join(dir, 's2');
    fs.mkdirSync(s1);
    fs.mkdirSync(s2);
    const r = kail('repack', '-m', model, '-o', 'demo.kxp', '--storage', s1, '--storage', s2, '--json');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).stripes).toEqual([path.join(s1, 'demo.kxp'), path.join(s2, 'demo.kxp')]);
    const p = JSON.parse(kail('plan', '-m', model, '--ram', '1G', '--reserve', '0', '--ctx', '256', '--json').stdout);
    const ram = String(p.fixedBytes + Math.round(2.5 * p.nMoeLayers * p.expertEntryBytes));
    const run = kail('run', '-m', model, '--data-dir', dir, '-p', 'Hello', '-n', '8', '-t', '2', '-c', '256', '--json', '--ram', ram, '--reserve', '0', '--storage', s1, '--storage', s2);
    expect(run.status).toBe(0);
    const out = JSON.parse(run.stdout);
    expect(out.tokens).toEqual(inMemory);
    // The profile's read size applied (said on stderr): expert blocks are read in parts.
    expect(run.stderr).toMatch(/--read-size [\d.]+ (KiB|MiB) from .*profile\.json/);
    expect(out.stream.bytesRead).toBeGreaterThan(0);
    const bad = kail('run', '-m', model, '--data-dir', dir, '-n', '1', '--ram', ram, '--reserve', '0', '-c', '256', '--storage', s1);
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/no complete expert pack .* lacks stripe\(s\) 1/);
  }, 120_000);
});
