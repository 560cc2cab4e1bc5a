import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getPreset, writeModel } from '@kailstream/tools';

import { embdCosine as cosine, embdNormalize as normalizeEmbedding } from '@kailstream/engine';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });
}

describe('kail embed (llama-embedding)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-embed-'));
  const model = path.join(dir, 'tiny-bert.gguf');
  beforeAll(() => writeModel({ config: getPreset('tiny-bert').config, fileType: 'Q8_0', seed: 3, out: model }));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  const json = (...args: string[]) => {
    const r = kail('embed', '-m', model, '--embd-output-format', 'json+', ...args);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    return JSON.parse(r.stdout) as { data: { index: number; embedding: number[] }[]; cosineSimilarity?: number[][] };
  };

  it('embeds each line: unit vectors by default, the raw pooled state with --embd-normalize -1, a cosine matrix', () => {
    const out = json('-p', 'experts stream from storage\nthe cache keeps hot experts\nexperts stream from storage');
    expect(out.data.map((d) => d.index)).toEqual([0, 1, 2]);
    for (const d of out.data) expect(Math.hypot(...d.embedding)).toBeCloseTo(1, 5);
    expect(out.data[2].embedding).toEqual(out.data[0].embedding);
    expect(out.cosineSimilarity![0][2]).toBeCloseTo(1, 2);
    expect(out.cosineSimilarity![0][1]).toBeLessThan(0.999);
    const raw = json('-p', 'experts stream from storage', '--embd-normalize', '-1').data[0].embedding;
    const n = Math.hypot(...raw);
    expect(n).not.toBeCloseTo(1, 2);
    raw.forEach((x, i) => expect(x / n).toBeCloseTo(out.data[0].embedding[i], 5));
    // CLS pooling is another vector; the text form prints llama-embedding's lines.
    const cls = json('-p', 'experts stream from storage', '--pooling', 'cls').data[0].embedding;
    expect(cosine(Float32Array.from(cls), Float32Array.from(out.data[0].embedding))).toBeLessThan(0.9999);
    // Pooling none: one (normalized) vector per token.
    const tokens = JSON.parse(kail('tokenize', '-m', model, 'experts stream from storage').stdout) as number[];
    const rows = json('-p', 'experts stream from storage', '--pooling', 'none').data;
    expect(rows).toHaveLength(tokens.length);
    for (const d of rows) expect(Math.hypot(...d.embedding)).toBeCloseTo(1, 5);
    const text = kail('embed', '-m', model, '-p', 'a\nb');
    expect(text.stdout).toMatch(/^embedding 0: +-?\d\.\d{6}/);
    expect(text.stdout).toContain('cosine similarity matrix:');
  });

  it("refuses what it cannot do, and `kail run` says the model gives embeddings", () => {
    expect(kail('embed', '-m', model).stderr).toMatch(/-p\/--prompt or -f\/--file/);
    expect(kail('embed', '-m', model, '-f', path.join(os.tmpdir(), 'kail-none.txt')).stderr).toContain(`-f: cannot read ${path.join(os.tmpdir(), 'kail-none.txt')}: ENOENT`);
    expect(kail('embed', '-m', model, '-p', 'x', '--pooling', 'rank').stderr).toMatch(/--pooling must be one of none, mean, cls, last/);
    expect(kail('embed', '-m', model, '-p', 'x', '--embd-output-format', 'xml').stderr).toMatch(/--embd-output-format/);
    const run = kail('run', '-m', model, '-p', 'hi', '-n', '2');
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/is an embedding model \(bert\).*kail embed/);
  });

  it('kail bench measures an embedding model\'s prompt processing alone', () => {
    const r = kail('bench', '-m', model, '-p', '64', '-r', '1', '--json');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout);
    expect([out.prompt_tokens, out.gen_tokens]).toEqual([64, 0]);
    expect(out.prompt_tps).toBeGreaterThan(0);
    expect(kail('bench', '-m', model, '--parallel', '1,2').stderr).toMatch(/embedding model: kail bench measures its prompt processing only/);
  });

  it("normalizes as llama.cpp's common_embd_normalize", () => {
    const v = Float32Array.from([3, -4]);
    expect(Array.from(normalizeEmbedding(v, 2))).toEqual([Math.fround(0.6), Math.fround(-0.8)]);
    expect(Array.from(normalizeEmbedding(v, -1))).toEqual([3, -4]);
    expect(Array.from(normalizeEmbedding(v, 0)).map(Math.round)).toEqual([24570, -32760]);
    expect(Array.from(normalizeEmbedding(v, 1))).toEqual([Math.fround(3 / 7), Math.fround(-4 / 7)]);
    expect(Array.from(normalizeEmbedding(new Float32Array(2), 2))).toEqual([0, 0]);
  });
});
