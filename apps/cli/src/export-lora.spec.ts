// kail export-lora from the command line: the merged file scores a text as the base with the
// adapter does (llama.cpp's two-word --lora-scaled FNAME SCALE accepted), and errors name the
// problem. (Against llama.cpp, and the file's layout: tools/src/gguf/export-lora.native.spec.ts.)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { exportLora, getPreset, writeLoraAdapter, writeModel } from '@kailstream/tools';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });
}

describe('kail export-lora', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cli-export-lora-'));
  const model = path.join(dir, 'moe.gguf');
  const adapter = path.join(dir, 'a.gguf');
  const text = path.join(dir, 't.txt');
  beforeAll(() => {
    const config = getPreset('tiny-qwen3moe').config;
    writeModel({ config, fileType: 'F16', seed: 2, out: model });
    writeLoraAdapter({ config, out: adapter, rank: 8, alpha: 16, seed: 3, bStd: 0.2, targets: ['attn_q', 'attn_v', 'ffn_up_exps', 'ffn_down_exps'] });
    fs.writeFileSync(text, 'Merged adapters must score text as the adapters applied at run time do. '.repeat(30));
  }, 60_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('writes a model that scores a text as the base with the adapter does', () => {
    const out = path.join(dir, 'merged.gguf');
    const r = kail('export-lora', '-m', model, '-o', out, '--lora-scaled', adapter, '0.5');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^wrote .*merged\.gguf \([\d.]+ MiB\): 8 tensors merged with 1 adapter\(s\), \d+ copied$/m);
    const ppl = (...a: string[]) => JSON.parse(kail('perplexity', '-m', ...a, '-f', text, '-c', '64', '--chunks', '2', '-t', '2', '--json').stdout).ppl as number;
    const merged = ppl(out);
    const atRunTime = ppl(model, '--lora-scaled', `${adapter}:0.5`);
    expect(Math.abs(merged / atRunTime - 1)).toBeLessThan(1e-3);
    expect(Math.abs(ppl(model) / atRunTime - 1)).toBeGreaterThan(1e-3);
    const bad = kail('export-lora', '-m', model, '-o', path.join(dir, 'x.gguf'));
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/give at least one adapter/);
    const notAdapter = kail('export-lora', '-m', model, '-o', path.join(dir, 'x.gguf'), '--lora', model);
    expect(notAdapter.stderr).toMatch(/expected 'adapter' \(is this a model rather than an adapter\?\)/);
    expect(kail('export-lora', '-m', model, '-o', path.join(dir, 'x.gguf'), '--lora', path.join(dir, 'none.gguf')).stderr).toMatch(/LoRA adapter .*none\.gguf: no such file \(ENOENT\)/);
    expect(() => exportLora(model, path.join(dir, 'x.gguf'), { lora: [{ path: dir, scale: 1 }] })).toThrow(/LoRA adapter .* is a directory, not a file/);
    expect(() => exportLora(model, dir, { lora: [{ path: adapter, scale: 1 }] })).toThrow(/export-lora: the output .* is a directory; name a file/);
    expect(fs.existsSync(path.join(dir, 'x.gguf'))).toBe(false);
  });
});
