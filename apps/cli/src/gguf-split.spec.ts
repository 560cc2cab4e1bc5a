// kail gguf-split from the command line: llama-gguf-split's plan lines, split by tensors or size,
// --merge back to one file that runs as the original, and errors that name the problem.
// (The file layout and its edge cases: tools/src/gguf/split.native.spec.ts.)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getPreset, splitGguf, writeModel } from '@kailstream/tools';

import { splitSize } from './commands/gguf-split';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });
}

describe('kail gguf-split', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cli-split-'));
  const model = path.join(dir, 'moe.gguf');
  beforeAll(() => writeModel({ config: getPreset('tiny-qwen3moe').config, fileType: 'Q8_0', seed: 2, out: model }), 60_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('reads sizes as llama-gguf-split does (decimal M and G)', () => {
    expect(splitSize('48G')).toBe(48e9);
    expect(splitSize('500M')).toBe(5e8);
    expect(() => splitSize('1.5G')).toThrow(/positive whole number of M \(megabytes\) or G \(gigabytes\)/);
    expect(() => splitSize('0M')).toThrow(/positive/);
    expect(() => splitSize('12K')).toThrow(/got '12K'/);
  });

  it('plans, splits, merges; the merged file and the splits run as the model does', () => {
    const dry = kail('gguf-split', '--split-max-tensors', '10', '--dry-run', model, path.join(dir, 'm'));
    expect(dry.status).toBe(0);
    expect(dry.stdout).toMatch(/^n_split: 3\nsplit 00001: n_tensors = 10, total_size = \d+M\nsplit 00002: n_tensors = 10, total_size = \d+M\nsplit 00003: n_tensors = 7, total_size = \d+M\n$/);
    expect(fs.readdirSync(dir).filter((f) => f.startsWith('m-'))).toEqual([]);
    const s = JSON.parse(kail('gguf-split', '--split-max-size', '2M', '--json', model, path.join(dir, 's')).stdout);
    expect(s.files.length).toBeGreaterThan(1);
    const merged = path.join(dir, 'merged.gguf');
    const m = kail('gguf-split', '--merge', s.files[0], merged);
    expect(m.status).toBe(0);
    expect(m.stdout).toMatch(new RegExp(`merged from ${s.files.length} splits with 27 tensors`));
    const tokens = (f: string) => JSON.parse(kail('run', '-m', f, '-p', 'Hello', '-n', '6', '-t', '2', '--json').stdout).tokens;
    const ref = tokens(model);
    expect(tokens(s.files[0])).toEqual(ref);
    expect(tokens(merged)).toEqual(ref);
    const bad = (re: RegExp, ...a: string[]) => {
      const r = kail('gguf-split', ...a);
      expect(r.status).not.toBe(0);
      expect(r.stderr).toMatch(re);
    };
    bad(/either --split-max-tensors or --split-max-size, not both/, '--split-max-tensors', '3', '--split-max-size', '1M', model, path.join(dir, 'x'));
    bad(/either --split or --merge, not both/, '--split', '--merge', model, path.join(dir, 'x'));
    bad(/the output .* already exists/, '--merge', s.files[0], merged);
    bad(/is itself a split file/, s.files[0], path.join(dir, 'x'));
    bad(/does not exist/, path.join(dir, 'none.gguf'), path.join(dir, 'x'));
    // A directory or a truncated file as the input, an output where none can be: each named.
    const truncated = path.join(dir, 'truncated.gguf');
    fs.writeFileSync(truncated, fs.readFileSync(model).subarray(0, 100));
    bad(/is a directory, not a GGUF file/, dir, path.join(dir, 'x'));
    expect(() => splitGguf(truncated, path.join(dir, 'x'), 128)).toThrow(/truncated\.gguf: GGUF truncated/);
    expect(() => splitGguf(model, path.join(dir, 'none', 'x'), 128)).toThrow(/gguf split: the output .*x-00001-of-00001\.gguf: cannot write in .*none: no such file \(ENOENT\)/);
  });
});
