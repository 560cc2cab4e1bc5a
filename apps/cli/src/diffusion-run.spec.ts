// kail run with a diffusion model (tiny-llada, tiny-dream): the diffusion loop, its flags with
// llama-diffusion-cli's names, a progress line per step, --json; and the flag checks.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getPreset, writeModel } from '@kailstream/tools';

const KAIL = path.resolve(__dirname, '../bin/kail.js');
const kail = (...args: string[]) => spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });

describe('kail run with a diffusion model', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cli-diffusion-'));
  const llada = path.join(dir, 'llada.gguf');
  const dream = path.join(dir, 'dream.gguf');
  beforeAll(() => {
    writeModel({ config: getPreset('tiny-llada').config, fileType: 'Q8_0', seed: 3, out: llada });
    writeModel({ config: getPreset('tiny-dream').config, fileType: 'Q8_0', seed: 3, out: dream });
  }, 60_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('unmasks -n tokens over --diffusion-steps passes, with a progress line; --json gives the tokens and the settings', () => {
    const r = kail('run', '-m', llada, '-p', 'Experts stream', '-n', '16', '--diffusion-steps', '8', '-t', '2');
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/diffusion: llada, \d+ prompt \+ 16 generated tokens, 8 steps, confidence, blocks of 32, mask token 1021/);
    expect(r.stderr).toMatch(/diffusion: 8 passes/);
    const j = kail('run', '-m', dream, '-p', 'Experts stream', '-n', '12', '--diffusion-steps', '6', '--diffusion-algorithm', '2', '--json', '-t', '2');
    expect(j.status).toBe(0);
    const out = JSON.parse(j.stdout);
    expect(out.tokens).toHaveLength(12);
    expect(out.diffusion).toEqual({ steps: 6, algorithm: 'margin', schedule: { kind: 'timestep', eps: 0.001 }, mask_token_id: 1021, shift_logits: true });
    // Temperature 0 (kail run's default): the same tokens again.
    expect(JSON.parse(kail('run', '-m', dream, '-p', 'Experts stream', '-n', '12', '--diffusion-steps', '6', '--diffusion-algorithm', 'margin', '--json', '-t', '2').stdout).tokens).toEqual(out.tokens);
  }, 60_000);

  it('refuses both schedules at once, an unknown algorithm and steps the blocks do not divide, with exit 1', () => {
    for (const [args, want] of [
      [['--diffusion-eps', '0.01', '--diffusion-block-length', '4'], /give one of the diffusion eps .* and the diffusion block length/],
      [['--diffusion-algorithm', '7'], /unknown diffusion algorithm '7': 0-4 or origin/],
      [['--diffusion-block-length', '4', '--diffusion-steps', '5'], /multiple of the block count \(4/],
    ] as const) {
      const r = kail('run', '-m', llada, '-p', 'hi', '-n', '16', ...args);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(want);
    }
  }, 60_000);

  it('with -n -1 fills the rest of one pass, cut to the most blocks of 32 the steps divide', () => {
    const r = kail('run', '-m', llada, '-p', 'hi', '-n', '-1', '--diffusion-steps', '8', '-t', '2');
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/diffusion: llada, \d+ prompt \+ 256 generated tokens, 8 steps, confidence, blocks of 32/);
  }, 60_000);
});
