// `kail quantize --imatrix` against llama.cpp's llama-quantize with the same importance matrix
// (llama_model_quantize in node-llama-cpp's libllama, through tools/src/parity/quant-ref): the
// weighted quantizers, llama.cpp's imatrix rules for the mixes, per-expert values and the
// quantize.imatrix.* metadata must give the same file byte for byte. Then the file formats
// (GGUF and legacy .dat), the include/exclude filters and what is refused.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaQuantize, llamaQuantizeBatch, type QuantRefOptions } from '../parity/quant-ref';
import { GgmlType, ggmlTypeTraits } from './constants';
import { loadImatrix, readImatrixFile, writeImatrixDat, writeImatrixGguf, type ImatrixEntry } from './imatrix';
import { readGgufHeader } from './reader';
import { parseQuantFileType, quantizeModel, type QuantizeOptions } from './quantize';

/** A made-up imatrix for every matrix of a model (as llama-imatrix collects: not token_embd), some experts unseen. */
function syntheticEntries(model: string, seed: number): Map<string, ImatrixEntry> {
  let s = seed >>> 0;
  const rand = () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
  const entries = new Map<string, ImatrixEntry>();
  for (const t of readGgufHeader(model).tensors) {
    if (t.shape.length < 2 || t.name === 'token_embd.weight') continue;
    const nMat = t.shape[2] ?? 1;
    const counts = Array.from({ length: nMat }, (_, j) => (nMat > 1 && j % 5 === 3 ? 0 : 64 + Math.floor(rand() * 512)));
    // Columns of very different importance (a few hot ones), as real activations give.
    const sums = Float32Array.from({ length: t.shape[0] * nMat }, (_, i) => counts[Math.floor(i / t.shape[0])] * (rand() < 0.05 ? 50 + 200 * rand() : 0.01 + rand()));
    entries.set(t.name, { sums, counts });
  }
  return entries;
}

/** What llama-quantize hands llama_model_quantize for an imatrix file: its values and its metadata overrides. */
function refOptions(file: string, opts: { include?: string[]; exclude?: string[] } = {}): QuantRefOptions {
  const im = loadImatrix(file, opts);
  const kvOverrides: NonNullable<QuantRefOptions['kvOverrides']> = [{ key: 'quantize.imatrix.file', str: file }];
  if (im.datasets.length) kvOverrides.push({ key: 'quantize.imatrix.dataset', str: im.datasets[0] });
  kvOverrides.push({ key: 'quantize.imatrix.entries_count', u32: im.values.size });
  if (im.chunkCount > 0) kvOverrides.push({ key: 'quantize.imatrix.chunks_count', u32: im.chunkCount });
  return { imatrixValues: im.values, kvOverrides };
}

describe("kail quantize --imatrix against llama.cpp's llama-quantize", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-imatrix-'));
  const table: string[] = [];
  const models: Record<string, string> = {};
  const imatrices: Record<string, string> = {};
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nkail quantize --imatrix vs llama-quantize --imatrix (same input, same imatrix):\n${table.join('\n')}\n`);
  });

  beforeAll(() => {
    const write = (name: string, preset: string, fileType: 'F32' | 'F16', over: Record<string, number | boolean> = {}) => {
      models[name] = path.join(dir, `${name}.gguf`);
      writeModel({ config: { ...getPreset(preset).config, ...over }, fileType, seed: 5, out: models[name] });
      imatrices[name] = path.join(dir, `${name}.imatrix.gguf`);
      writeImatrixGguf(imatrices[name], { entries: syntheticEntries(models[name], 11), datasets: ['wiki.train.raw', 'chat.txt'], chunkCount: 7, chunkSize: 512 });
    };
    // 4 experts, not the preset's 16: the same branches of llama.cpp's mix rules (n_expert >= 4,
    // not Mixtral's 8), expert 3 unseen (syntheticEntries), with 4/16 of the expert bytes to
    // quantize 2 x 27 times.
    write('qwen3moe-f16', 'tiny-qwen3moe', 'F16', { nExperts: 4, nExpertsUsed: 2 });
    write('mixtral-f32', 'tiny-mixtral', 'F32');
    // (16 blocks for the imatrix guard on the first two ffn_down, below; FFN width 256, not the
    // preset's 512: the same rules, every row still a whole number of K-quant blocks.)
    write('llama-f16', 'tiny-llama', 'F16', { nLayers: 16, ff: 256 });
    write('llama-odd-f32', 'tiny-llama', 'F32', { nLayers: 9, dim: 96 });
    // MLA with attn_k_b/attn_v_b: 3-D per-head matrices whose imatrix is ne0 x n_head.
    write('deepseek2-f16', 'tiny-deepseek2-lite-split', 'F16');
  }, 120_000);

  // llama.cpp's files for the plain cases (TYPES and PAIRS below), written by one quant-ref process
  // (ggml builds each i-quant codebook once: IQ1_S's and IQ1_M's alone take about 12 s each time).
  const batched = new Map<string, string | undefined>();
  const batchedFile = (model: string, type: string) => path.join(dir, `rb-${model}-${type}.gguf`);
  beforeAll(async () => {
    const cases = [...TYPES.map((t) => ['qwen3moe-f16', t] as const), ...PAIRS];
    const errors = await llamaQuantizeBatch(
      cases.map(([model, type]) => ({ input: models[model], output: batchedFile(model, type), ftype: parseQuantFileType(type).ftype, opts: { threads: 2, ...refOptions(imatrices[model]) } })),
    );
    cases.forEach(([model, type], i) => batched.set(`${model} ${type}`, errors[i]));
  }, 600_000);

  async function compare(
    label: string,
    model: string,
    type: string,
    imatrix: string,
    kailExtra: Pick<QuantizeOptions, 'includeWeights' | 'excludeWeights' | 'pruneLayers' | 'kvOverrides'> = {},
    refExtra: QuantRefOptions = {},
  ) {
    const ours = path.join(dir, `k-${model}-${type}.gguf`);
    let theirs = path.join(dir, `r-${model}-${type}.gguf`);
    const r = quantizeModel(models[model], ours, { type, threads: 2, imatrix, ...kailExtra });
    const plain = imatrix === imatrices[model] && Object.keys(kailExtra).length === 0 && Object.keys(refExtra).length === 0;
    if (plain && batched.has(`${model} ${type}`)) {
      const error = batched.get(`${model} ${type}`);
      if (error !== undefined) throw new Error(`llama.cpp's ${type} of ${model}: ${error}`);
      theirs = batchedFile(model, type);
    } else {
      const ref = refOptions(imatrix, { include: kailExtra.includeWeights, exclude: kailExtra.excludeWeights });
      // (llama-quantize puts its --override-kv values before the imatrix's.)
      await llamaQuantize(models[model], theirs, parseQuantFileType(type).ftype, { threads: 2, ...ref, ...refExtra, kvOverrides: [...(refExtra.kvOverrides ?? []), ...(ref.kvOverrides ?? [])] });
    }
    const same = fs.readFileSync(ours).equals(fs.readFileSync(theirs));
    const types = [...new Set(r.tensors.map((t) => t.to))].join(' ');
    table.push(`  ${model.padEnd(14)} ${label.padEnd(40)} ${same ? 'identical' : 'DIFFERENT'} (${types})`);
    if (!same) {
      const ha = readGgufHeader(ours);
      const hb = readGgufHeader(theirs);
      const ka = [...ha.kv.keys()].join(',');
      const kb = [...hb.kv.keys()].join(',');
      const diffType = ha.tensors.find((t, i) => t.type !== hb.tensors[i]?.type);
      const a = fs.readFileSync(ours);
      const b = fs.readFileSync(theirs);
      const at = ha.tensors.find((t) => !a.subarray(t.fileOffset, t.fileOffset + t.bytes).equals(b.subarray(t.fileOffset, t.fileOffset + t.bytes)));
      throw new Error(`${label} of ${model}: ${ka !== kb ? `keys ${ka} vs ${kb}` : diffType ? `type of ${diffType.name}` : `bytes of ${at?.name}`}`);
    }
    const kv = readGgufHeader(ours).kv;
    fs.rmSync(ours);
    fs.rmSync(theirs);
    return { report: r, kv };
  }

  const TYPES = [
    'Q4_K_M', 'Q4_K_S', 'Q2_K', 'Q2_K_S', 'Q3_K_S', 'Q3_K_M', 'Q3_K_L', 'Q5_K_M', 'Q6_K', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'IQ4_NL', 'IQ4_XS', 'MXFP4_MOE',
    // The codebook i-quants (ggml's grid searches), which need the imatrix.
    'IQ1_S', 'IQ1_M', 'IQ2_XXS', 'IQ2_XS', 'IQ2_S', 'IQ2_M', 'IQ3_XXS', 'IQ3_XS', 'IQ3_S', 'IQ3_M',
  ];
  it.each(TYPES)('%s of an MoE with per-expert values (some experts unseen): the same bytes', async (type) => {
    const { kv } = await compare(type, 'qwen3moe-f16', type, imatrices['qwen3moe-f16']);
    expect(kv.get('quantize.imatrix.file')?.value).toBe(imatrices['qwen3moe-f16']);
    expect(kv.get('quantize.imatrix.dataset')?.value).toBe('wiki.train.raw');
    expect(kv.get('quantize.imatrix.chunks_count')?.value).toBe(7);
  }, 120_000);

  const PAIRS: [string, string][] = [
    ['mixtral-f32', 'Q4_K_M'], ['mixtral-f32', 'Q2_K_S'], ['mixtral-f32', 'IQ4_XS'],
    // 16 layers: the first two ffn_down get llama.cpp's imatrix guard (Q4_0 -> Q4_1, Q5_0 -> Q5_1) and IQ4 keeps its type.
    ['llama-f16', 'Q4_0'], ['llama-f16', 'Q5_0'], ['llama-f16', 'IQ4_NL'], ['llama-f16', 'Q3_K_M'],
    // Rows of 96: every K type falls back to a legacy one, quantized with the imatrix.
    ['llama-odd-f32', 'Q4_K_M'], ['llama-odd-f32', 'Q2_K'],
    ['deepseek2-f16', 'Q4_K_M'], ['deepseek2-f16', 'IQ2_XXS'],
  ];
  it.each(PAIRS)('%s %s: the same bytes', async (model, type) => {
    await compare(type, model, type, imatrices[model]);
  }, 120_000);

  it('takes the legacy .dat format (values divided by ncall), as llama-quantize does', async () => {
    const entries = syntheticEntries(models['qwen3moe-f16'], 12);
    const dat = path.join(dir, 'legacy.dat');
    writeImatrixDat(dat, { entries, datasets: ['calib.txt'], chunkCount: 3, chunkSize: 256 });
    const f = readImatrixFile(dat);
    expect(f.legacy).toBe(true);
    expect(f.chunkCount).toBe(3);
    expect(f.datasets).toEqual(['calib.txt']);
    expect(f.entries.size).toBe(entries.size);
    // An expert that saw nothing comes back as 1 (its mean), as llama-imatrix stores it.
    const [name, e] = [...entries].find(([, x]) => x.counts.length > 1)!;
    const got = loadImatrix(dat).values.get(name)!;
    const ne0 = e.sums.length / e.counts.length;
    expect(got[3 * ne0]).toBe(1);
    expect(got[0]).toBeCloseTo(e.sums[0] / e.counts[0], 3);
    const { report } = await compare('Q4_K_M (legacy .dat)', 'qwen3moe-f16', 'Q4_K_M', dat);
    expect(report.tensors.length).toBeGreaterThan(0);
  }, 120_000);

  it('--include-weights and --exclude-weights filter the entries as llama-quantize does', async () => {
    const a = await compare('Q4_K_M --include-weights ffn_', 'qwen3moe-f16', 'Q4_K_M', imatrices['qwen3moe-f16'], { includeWeights: ['ffn_'] });
    const b = await compare('Q4_K_M --exclude-weights attn_,output', 'qwen3moe-f16', 'Q4_K_M', imatrices['qwen3moe-f16'], { excludeWeights: ['attn_', 'output'] });
    const all = loadImatrix(imatrices['qwen3moe-f16']).values.size;
    expect(a.kv.get('quantize.imatrix.entries_count')?.value).toBeLessThan(all);
    expect(b.kv.get('quantize.imatrix.entries_count')?.value).toBeLessThan(all);
  }, 120_000);

  it('--prune-layers reads the imatrix by the input\'s names, and --override-kv goes before its keys, as llama-quantize does', async () => {
    const { kv } = await compare(
      'IQ2_XXS --prune-layers 3,7 --override-kv',
      'llama-f16',
      'IQ2_XXS',
      imatrices['llama-f16'],
      { pruneLayers: [7, 3], kvOverrides: [{ key: 'general.name', type: 'str', value: 'pruned' }, { key: 'quantize.imatrix.file', type: 'str', value: 'replaced by the imatrix one' }] },
      { pruneLayers: [3, 7], kvOverrides: [{ key: 'general.name', str: 'pruned' }, { key: 'quantize.imatrix.file', str: 'replaced by the imatrix one' }] },
    );
    expect(kv.get('llama.block_count')?.value).toBe(14);
    expect([...kv.keys()].slice(-6)).toEqual(['general.name', 'quantize.imatrix.file', 'quantize.imatrix.dataset', 'quantize.imatrix.entries_count', 'quantize.imatrix.chunks_count', 'llama.block_count']);
  }, 120_000);

  it('changes the bytes (the weights matter), and the GGUF format reads back what was written', () => {
    const plain = path.join(dir, 'plain.gguf');
    const weighted = path.join(dir, 'weighted.gguf');
    quantizeModel(models['llama-f16'], plain, { type: 'Q4_K_M' });
    quantizeModel(models['llama-f16'], weighted, { type: 'Q4_K_M', imatrix: imatrices['llama-f16'] });
    expect(fs.readFileSync(plain).equals(fs.readFileSync(weighted))).toBe(false);
    const entries = syntheticEntries(models['llama-f16'], 11);
    const back = readImatrixFile(imatrices['llama-f16']);
    expect(back.hasMetadata).toBe(true);
    expect(back.chunkSize).toBe(512);
    for (const [name, e] of entries) {
      expect(back.entries.get(name)?.counts).toEqual(e.counts);
      expect(Buffer.from(back.entries.get(name)!.sums.buffer, back.entries.get(name)!.sums.byteOffset, e.sums.byteLength).equals(Buffer.from(e.sums.buffer))).toBe(true);
    }
  }, 120_000);

  it('cuts the error of products with activations that have hot columns (what the imatrix is for), in every weighted type', () => {
    // W random; activations whose 3% hot columns are 20x the rest, as real hidden states have; the
    // imatrix their mean squares. Error: relative squared error of W x against the quantized W's.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const q = (require('@kailstream/engine/core') as { native: () => { convert: (...a: unknown[]) => Uint8Array; dequantize: (t: number, d: Uint8Array, n: number) => Float32Array } }).native();
    let s = 7;
    const rnd = () => {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      return s / 2 ** 32;
    };
    const gauss = () => Math.sqrt(-2 * Math.log(rnd() + 1e-12)) * Math.cos(2 * Math.PI * rnd());
    const ne0 = 1024, rows = 32, ntok = 128;
    const W = Float32Array.from({ length: ne0 * rows }, gauss);
    const colScale = Float32Array.from({ length: ne0 }, () => (rnd() < 0.03 ? 20 : 1) * (0.5 + rnd()));
    const X = Float32Array.from({ length: ntok * ne0 }, (_, i) => gauss() * colScale[i % ne0]);
    const im = new Float32Array(ne0);
    for (let t = 0; t < ntok; t++) for (let j = 0; j < ne0; j++) im[j] += X[t * ne0 + j] ** 2 / ntok;
    const err = (type: number, weights?: Float32Array) => {
      const wq = q.dequantize(type, q.convert(GgmlType.F32, new Uint8Array(W.buffer), ne0 * rows, type, 1, weights), ne0 * rows);
      let num = 0, den = 0;
      for (let t = 0; t < 32; t++)
        for (let r = 0; r < rows; r++) {
          let a = 0, b = 0;
          for (let j = 0; j < ne0; j++) {
            a += W[r * ne0 + j] * X[t * ne0 + j];
            b += wq[r * ne0 + j] * X[t * ne0 + j];
          }
          num += (a - b) ** 2;
          den += a * a;
        }
      return num / den;
    };
    const line: string[] = [];
    for (const t of [GgmlType.Q4_0, GgmlType.Q4_1, GgmlType.Q5_0, GgmlType.Q5_1, GgmlType.Q2_K, GgmlType.Q3_K, GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K, GgmlType.IQ4_NL, GgmlType.IQ4_XS, GgmlType.IQ3_S, GgmlType.IQ3_XXS, GgmlType.IQ2_S, GgmlType.IQ1_M]) {
      const plain = err(t);
      const weighted = err(t, im);
      line.push(`${ggmlTypeTraits(t).name} ${(plain / weighted).toFixed(1)}x`);
      expect(weighted).toBeLessThan(plain / 1.5);
    }
    // Q8_0 takes no weights: the same bytes either way.
    expect(Buffer.from(q.convert(GgmlType.F32, new Uint8Array(W.buffer), ne0 * rows, GgmlType.Q8_0, 1, im)).equals(Buffer.from(q.convert(GgmlType.F32, new Uint8Array(W.buffer), ne0 * rows, GgmlType.Q8_0, 1)))).toBe(true);
    table.push(`  error of W x with 3% hot columns, without / with the imatrix (measured): ${line.join(', ')}`);
  }, 120_000);

  it('refuses what llama-quantize refuses, naming the tensor or the file; nothing is left behind', () => {
    const out = path.join(dir, 'refused.gguf');
    // An imatrix made for another model: sizes differ.
    expect(() => quantizeModel(models['qwen3moe-f16'], out, { type: 'Q4_K_M', imatrix: imatrices['llama-f16'] })).toThrow(/imatrix size \d+ is different from tensor size \d+ for blk\.0\.\w+/);
    // Q2_K_S needs the imatrix for every Q2_K tensor.
    expect(() => quantizeModel(models['qwen3moe-f16'], out, { type: 'Q2_K_S', imatrix: imatrices['qwen3moe-f16'], excludeWeights: ['ffn_down_exps'] })).toThrow(
      /missing importance matrix for tensor blk\.0\.ffn_down_exps\.weight/,
    );
    expect(() => quantizeModel(models['qwen3moe-f16'], out, { type: 'Q2_K_S' })).toThrow(/Q2_K_S needs an importance matrix for .* give one with --imatrix/);
    // A GGUF without the imatrix keys, a non-finite value, garbage, a missing file.
    const bare = path.join(dir, 'bare.gguf');
    const e = syntheticEntries(models['llama-f16'], 1);
    writeImatrixGguf(bare, { entries: e, datasets: [], chunkCount: 1, chunkSize: 1 });
    const h = fs.readFileSync(bare);
    fs.writeFileSync(bare, Buffer.from(h.toString('latin1').replace('imatrix.chunk_size', 'imatrix.chunk_sizX'), 'latin1'));
    expect(() => quantizeModel(models['llama-f16'], out, { type: 'Q4_K_M', imatrix: bare })).toThrow(/missing imatrix metadata/);
    const nan = path.join(dir, 'nan.gguf');
    const first = [...e.values()][0];
    first.sums[5] = NaN;
    writeImatrixGguf(nan, { entries: e, datasets: ['x'], chunkCount: 1, chunkSize: 1 });
    expect(() => quantizeModel(models['llama-f16'], out, { type: 'Q4_K_M', imatrix: nan })).toThrow(/non-finite value \(NaN\) at 5/);
    const junk = path.join(dir, 'junk.dat');
    fs.writeFileSync(junk, Buffer.from([5, 0, 0, 0, 200, 0, 0, 0, 1, 2]));
    expect(() => quantizeModel(models['llama-f16'], out, { type: 'Q4_K_M', imatrix: junk })).toThrow(/junk\.dat: not a GGUF imatrix, and as a legacy \.dat file it ends early/);
    expect(() => quantizeModel(models['llama-f16'], out, { type: 'Q4_K_M', imatrix: path.join(dir, 'nope.dat') })).toThrow(/nope\.dat: cannot open/);
    expect(() => quantizeModel(models['llama-f16'], out, { type: 'Q4_K_M', includeWeights: ['x'] })).toThrow(/need --imatrix/);
    expect(fs.readdirSync(dir).filter((f) => f.startsWith('refused'))).toEqual([]);
  }, 120_000);
});
