// Models published in several files (llama.cpp's gguf-split naming, PREFIX-0000i-of-0000N.gguf):
// opened from the first split, they give the single file's logits in memory and streaming (expert
// slices read from whichever split holds them), repack, plan and size as one model, match what
// llama.cpp computes on the same split files, and a later split, a missing one or splits that
// disagree are refused naming the file.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel, isLaterSplit, modelFileBytes, modelFiles, native, planModel, repackModel, splitNameOf } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaLogits } from '../parity/llama-ref';
import { readGgufHeader } from './reader';
import { ggufSplitPath, mergeGguf, planGgufSplit, splitGguf } from './split';
import { GgufWriter, kv } from './writer';

const TOKENS = [1, 17, 99, 3, 250, 7, 42, 8];

describe('split GGUF models', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-split-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  let whole: string;
  let splits: string[];
  beforeAll(() => {
    whole = path.join(dir, 'whole.gguf');
    writeModel({ config: getPreset('tiny-qwen3moe').config, fileType: 'Q4_K', seed: 1, out: whole });
    // 27 tensors, at most 7 per file: 4 splits, the expert tensors of one block spread over two.
    splits = splitGguf(whole, path.join(dir, 'qwen3moe-q4k'), 7);
  });

  it('writes files as gguf-split does: metadata and split keys in the first, split keys only in the rest', () => {
    expect(splits).toEqual([1, 2, 3, 4].map((i) => ggufSplitPath(path.join(dir, 'qwen3moe-q4k'), i, 4)));
    const heads = splits.map(readGgufHeader);
    expect(heads[0].kv.get('general.architecture')?.value).toBe('qwen3moe');
    heads.forEach((h, i) => {
      expect(h.kv.get('split.no')?.value).toBe(i);
      expect(h.kv.get('split.count')?.value).toBe(4);
      expect(h.kv.get('split.tensors.count')?.value).toBe(27);
      if (i > 0) expect([...h.kv.keys()]).toEqual(['split.no', 'split.count', 'split.tensors.count']);
    });
    expect(heads.reduce((a, h) => a + h.tensors.length, 0)).toBe(27);
    expect(splitNameOf(splits[2])).toEqual({ prefix: path.join(dir, 'qwen3moe-q4k'), no: 3, count: 4 });
    expect(isLaterSplit(splits[1])).toBe(true);
    expect(isLaterSplit(splits[0])).toBe(false);
    expect(modelFiles(splits[0])).toEqual(splits);
    expect(modelFileBytes(splits[0])).toBe(splits.reduce((a, f) => a + fs.statSync(f).size, 0));
  });

  it('opens as one model: every tensor with its split, the size of all files', () => {
    const f = native().openGguf(splits[0], { mapData: false });
    try {
      expect(f.splits.map((s) => s.path)).toEqual(splits);
      expect(f.fileSize).toBe(modelFileBytes(splits[0]));
      expect(f.tensors.length).toBe(27);
      expect(new Set(f.tensors.map((t) => t.split))).toEqual(new Set([0, 1, 2, 3]));
      const one = native().openGguf(whole, { mapData: false });
      try {
        // The same bytes, wherever they now lie.
        for (const t of f.tensors) {
          const u = one.tensors.find((x) => x.name === t.name)!;
          expect(Buffer.from(f.tensorData(t.name)).equals(Buffer.from(one.tensorData(u.name)))).toBe(true);
        }
      } finally {
        one.close();
      }
    } finally {
      f.close();
    }
  });

  it('gives the single file logits in memory and streaming, and repacks', async () => {
    const logits = async (file: string, opts = {}) => {
      const m = EngineModel.load(file, { threads: 2, nCtx: 64, ...opts });
      try {
        expect(m.summary.fileBytes).toBe(modelFileBytes(file));
        return await m.evaluate(0, TOKENS, 'all');
      } finally {
        m.close();
      }
    };
    const want = await logits(whole);
    expect(await logits(splits[0])).toEqual(want);
    const p = planModel(splits[0], { nCtx: 64, ramBytes: 2 ** 40, ramReserveBytes: 0 });
    expect(p.expertBytes).toBe(planModel(whole, { nCtx: 64, ramBytes: 2 ** 40, ramReserveBytes: 0 }).expertBytes);
    const ramBytes = p.fixedBytes + 2 * p.nMoeLayers * p.expertEntryBytes;
    const m = EngineModel.load(splits[0], { threads: 2, nCtx: 64, ramBytes, ramReserveBytes: 0 });
    try {
      expect(await m.evaluate(0, TOKENS, 'all')).toEqual(want);
      const st = m.runtime.stats().stream!;
      expect(st.files).toEqual(splits);
      expect(st.readErrors).toBe(0);
    } finally {
      m.close();
    }
    const stripe = path.join(dir, 'pack');
    fs.mkdirSync(stripe);
    repackModel(splits[0], 'm.kxp', [stripe]);
    expect(await logits(splits[0], { ramBytes, ramReserveBytes: 0, storage: [stripe] })).toEqual(want);
  });

  it('matches llama.cpp on the same split files', async () => {
    const ref = await llamaLogits(splits[0], TOKENS, { kv: 'f32' });
    const m = EngineModel.load(splits[0], { threads: 2, nCtx: 64, kvType: 'f32' });
    try {
      const got = await m.evaluate(0, TOKENS, 'all');
      let maxDiff = 0;
      for (let i = 0; i < got.length; i++) maxDiff = Math.max(maxDiff, Math.abs(got[i] - ref.logits[i]));
      expect(ref.nVocab).toBe(m.nVocab);
      expect(maxDiff).toBeLessThan(2e-2);
    } finally {
      m.close();
    }
  }, 180_000);

  it('refuses a later split, a missing split and splits that disagree, naming the file', () => {
    const open = (f: string) => () => native().openGguf(f, { mapData: false }).close();
    expect(open(splits[1])).toThrow(/is split 2 of 4 of a model: open its first split \(the file ending in '-00001-of-00004\.gguf'\)/);
    // A first split under another name: its siblings cannot be found.
    const renamed = path.join(dir, 'renamed.gguf');
    fs.copyFileSync(splits[0], renamed);
    expect(open(renamed)).toThrow(/is the first of 4 splits, but its name does not end in '-00001-of-00004\.gguf'/);
    // Splits 1-2 of 4 alone: split 3 is missing.
    const part = path.join(dir, 'part');
    fs.mkdirSync(part);
    for (const f of splits.slice(0, 2)) fs.copyFileSync(f, path.join(part, path.basename(f)));
    expect(open(path.join(part, path.basename(splits[0])))).toThrow(/split 3 of 4 of .*cannot open '.*qwen3moe-q4k-00003-of-00004\.gguf': No such file/);
    // A split that says it is another one.
    const odd = path.join(dir, 'odd');
    fs.mkdirSync(odd);
    for (const f of splits) fs.copyFileSync(f, path.join(odd, path.basename(f)));
    fs.copyFileSync(splits[3], path.join(odd, path.basename(splits[2])));
    expect(open(path.join(odd, path.basename(splits[0])))).toThrow(/says it is split 4 of 4, expected 3 of 4/);
    // A count the splits do not hold.
    const two = splitGguf(whole, path.join(dir, 'two'), 14);
    const h = readGgufHeader(two[1]);
    const w = new GgufWriter(two[1], { alignment: h.alignment });
    w.set('split.no', kv.u16(1)).set('split.count', kv.u16(2)).set('split.tensors.count', kv.i32(27));
    w.begin();
    w.finish();
    expect(open(two[0])).toThrow(/declares 27 tensors over its 2 splits, which hold 14/);
    // The engine keeps going: the good split still loads.
    expect(() => EngineModel.load(splits[0], { threads: 1, nCtx: 16 }).close()).not.toThrow();
  });

  it('splits by size and with a tensorless first split, as llama-gguf-split; --merge gives the model back', async () => {
    const h = readGgufHeader(whole);
    const pad = (n: number) => Math.ceil(n / 32) * 32;
    const max = 3 * pad(Math.max(...h.tensors.map((t) => t.bytes)));
    const plan = planGgufSplit(whole, { maxBytes: max });
    // Each split takes tensors while their padded sizes stay within the limit, in file order.
    expect(plan.splits.flat()).toEqual(h.tensors.map((_, i) => i));
    for (const ids of plan.splits) expect(ids.reduce((a, i) => a + pad(h.tensors[i].bytes), 0)).toBeLessThanOrEqual(max);
    for (let s = 1; s < plan.splits.length; s++) {
      const prev = plan.splits[s - 1].reduce((a, i) => a + pad(h.tensors[i].bytes), 0);
      expect(prev + pad(h.tensors[plan.splits[s][0]].bytes)).toBeGreaterThan(max);
    }
    const sized = splitGguf(whole, path.join(dir, 'sized'), { maxBytes: max });
    expect(sized.map((f) => fs.statSync(f).size)).toEqual(plan.bytes);
    const bare = splitGguf(whole, path.join(dir, 'bare'), { maxTensors: 10, noTensorFirstSplit: true });
    expect(bare.map((f) => readGgufHeader(f).tensors.length)).toEqual([0, 10, 10, 7]);
    // Merged: the first split's metadata with split.count 0, every tensor's bytes in order.
    const merged = path.join(dir, 'merged.gguf');
    expect(mergeGguf(bare[0], merged)).toEqual({ files: bare, tensors: 27 });
    const m = readGgufHeader(merged);
    expect([...m.kv.keys()]).toEqual([...h.kv.keys(), 'split.no', 'split.count', 'split.tensors.count']);
    expect(m.kv.get('split.count')?.value).toBe(0);
    expect(m.tensors.map((t) => t.name)).toEqual(h.tensors.map((t) => t.name));
    const a = fs.readFileSync(merged);
    const b = fs.readFileSync(whole);
    for (const [i, t] of m.tensors.entries()) expect(a.subarray(t.fileOffset, t.fileOffset + t.bytes).equals(b.subarray(h.tensors[i].fileOffset, h.tensors[i].fileOffset + t.bytes))).toBe(true);
    const logits = async (file: string) => {
      const model = EngineModel.load(file, { threads: 2, nCtx: 32 });
      try {
        return await model.evaluate(0, TOKENS, 'all');
      } finally {
        model.close();
      }
    };
    const ref = await logits(whole);
    expect(await logits(bare[0])).toEqual(ref);
    expect(await logits(merged)).toEqual(ref);
    // Refusals, naming the problem; nothing half-written stays.
    expect(() => planGgufSplit(whole, { maxBytes: 100 })).toThrow(/would leave a split with no tensors: the size per split is too small/);
    expect(() => splitGguf(bare[0], path.join(dir, 'again'), 5)).toThrow(/is itself a split file/);
    expect(() => mergeGguf(bare[0], merged)).toThrow(/the output .*merged\.gguf already exists/);
    expect(() => mergeGguf(bare[1], path.join(dir, 'm2.gguf'))).toThrow(/is not named PREFIX-00001-of-00004\.gguf \(give the first split\)/);
    expect(() => mergeGguf(whole, path.join(dir, 'm3.gguf'))).toThrow(/has no split\.count: not a split file/);
    fs.rmSync(bare[2]);
    expect(() => mergeGguf(bare[0], path.join(dir, 'm4.gguf'))).toThrow(/split 3 of 4, .*bare-00003-of-00004\.gguf, is missing/);
    expect(fs.existsSync(path.join(dir, 'm4.gguf'))).toBe(false);
  });
});
