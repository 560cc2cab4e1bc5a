import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { writeTestModel } from '@kailstream/engine/testing';

import { writeModel } from './build';
import { cachedFile, commandIndexPath, stableKeyText } from './file-cache';
import { getPreset } from './presets';

describe('test model file cache', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-file-cache-'));
  const saved = process.env.KAIL_TEST_MODEL_CACHE;
  afterEach(() => {
    if (saved === undefined) delete process.env.KAIL_TEST_MODEL_CACHE;
    else process.env.KAIL_TEST_MODEL_CACHE = saved;
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('keys plain data by value (key order aside) and refuses what it cannot print faithfully', () => {
    expect(stableKeyText({ a: 1, b: [2, 'x', null, undefined], c: { d: true } })).toBe(stableKeyText({ c: { d: true }, b: [2, 'x', null, undefined], a: 1 }));
    expect(stableKeyText({ a: 1 })).not.toBe(stableKeyText({ a: 2 }));
    expect(stableKeyText({ a: undefined, b: 1 })).toBe(stableKeyText({ b: 1 }));
    expect(stableKeyText([undefined])).not.toBe(stableKeyText([]));
    expect(stableKeyText({ v: new Float32Array([1, 2]) })).not.toBe(stableKeyText({ v: new Float32Array([1, 3]) }));
    expect(stableKeyText({ v: new Float32Array([1]) })).not.toBe(stableKeyText({ v: new Int32Array([1]) }));
    expect(stableKeyText({ m: new Map([[1, 2]]) })).toBeNull();
    expect(stableKeyText({ f: () => 1 })).toBeNull();
    expect(stableKeyText({ d: new Date(0) })).toBeNull();
  });

  it('is off without KAIL_TEST_MODEL_CACHE: every call makes the file', () => {
    delete process.env.KAIL_TEST_MODEL_CACHE;
    let made = 0;
    const out = path.join(dir, 'off.bin');
    const make = () => (fs.writeFileSync(out, 'x'), ++made);
    cachedFile('k', out, make);
    cachedFile('k', out, make);
    expect(made).toBe(2);
  });

  it('writes a model once per recipe; a hit is an independent copy with the same bytes and result', () => {
    process.env.KAIL_TEST_MODEL_CACHE = path.join(dir, 'cache');
    const config = getPreset('tiny-qwen3moe').config;
    const a = writeModel({ config, fileType: 'Q8_0', seed: 3, out: path.join(dir, 'a.gguf') });
    const cached = fs.readdirSync(path.join(dir, 'cache'));
    expect(cached.filter((f) => f.endsWith('.gguf'))).toHaveLength(1);
    const b = writeModel({ config, fileType: 'Q8_0', seed: 3, out: path.join(dir, 'b.gguf') });
    expect(fs.readdirSync(path.join(dir, 'cache'))).toEqual(cached);
    expect(fs.readFileSync(path.join(dir, 'b.gguf')).equals(fs.readFileSync(path.join(dir, 'a.gguf')))).toBe(true);
    expect({ ...b, seconds: 0 }).toEqual({ ...a, seconds: 0, path: path.join(dir, 'b.gguf') });
    // Patching a copy leaves the cache alone.
    fs.truncateSync(path.join(dir, 'b.gguf'), 100);
    writeModel({ config, fileType: 'Q8_0', seed: 3, out: path.join(dir, 'c.gguf') });
    expect(fs.readFileSync(path.join(dir, 'c.gguf')).equals(fs.readFileSync(path.join(dir, 'a.gguf')))).toBe(true);
    // Another seed, type or config is another file.
    writeModel({ config, fileType: 'Q8_0', seed: 4, out: path.join(dir, 'd.gguf') });
    writeModel({ config, fileType: 'F16', seed: 3, out: path.join(dir, 'e.gguf') });
    writeModel({ config: { ...config, nLayers: 1 }, fileType: 'Q8_0', seed: 3, out: path.join(dir, 'f.gguf') });
    expect(fs.readdirSync(path.join(dir, 'cache')).filter((f) => f.endsWith('.gguf'))).toHaveLength(4);
    expect(fs.readFileSync(path.join(dir, 'd.gguf')).equals(fs.readFileSync(path.join(dir, 'a.gguf')))).toBe(false);
  });

  it("gen-model records its command line's cache file, which the engine's writeTestModel then copies without starting it", () => {
    const cache = path.join(dir, 'cmd-cache');
    process.env.KAIL_TEST_MODEL_CACHE = cache;
    const genModel = path.resolve(__dirname, '../../dist/gen-model.js');
    const args = ['--preset', 'tiny-llama', '--type', 'Q8_0', '--seed', '5', '--layers', '1'];
    execFileSync(process.execPath, [genModel, '--preset', 'tiny-llama', '--type', 'Q8_0', '--seed', '5', '--out', path.join(dir, 'g.gguf'), '--layers', '1'], {
      stdio: 'pipe',
      // (A child gets the real environment, not jest's copy of it.)
      env: { ...process.env, KAIL_TEST_MODEL_CACHE: cache },
    });
    const index = commandIndexPath(cache, genModel, args);
    const { entry } = JSON.parse(fs.readFileSync(index, 'utf8')) as { entry: string };
    expect(fs.readFileSync(entry).equals(fs.readFileSync(path.join(dir, 'g.gguf')))).toBe(true);
    // writeTestModel's copy: the same bytes, and gen-model never ran (an entry that is not a GGUF file shows it).
    fs.copyFileSync(entry, `${entry}.saved`);
    fs.writeFileSync(entry, 'not the writer');
    const hit = writeTestModel(fs.mkdtempSync(path.join(dir, 'h-')), 'tiny-llama', 'Q8_0', 5, ['--layers', '1']);
    expect(fs.readFileSync(hit, 'utf8')).toBe('not the writer');
    // Gone from the cache: gen-model writes the file again.
    fs.rmSync(entry);
    const miss = writeTestModel(fs.mkdtempSync(path.join(dir, 'm-')), 'tiny-llama', 'Q8_0', 5, ['--layers', '1']);
    expect(fs.readFileSync(miss).equals(fs.readFileSync(`${entry}.saved`))).toBe(true);
  });
});
