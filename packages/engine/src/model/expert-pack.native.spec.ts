// Expert packs: a repacked, striped copy of the experts gives exactly the in-memory tokens, with
// one read per expert from every stripe; missing or cut stripes are refused with what is wrong.
import fs from 'node:fs';
import path from 'node:path';

import { generate } from '../generate';
import { greedyTokens, tempDir, writeTestModel } from '../testing';
import { EngineModel, planModel, repackModel, type LoadModelOptions } from './model';
import { readPackHeader } from './expert-pack';

const PROMPT = [1, 17, 99, 3, 250, 7, 42, 8];

describe('expert packs (kail repack)', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it.each([
    ['tiny-qwen3moe', 'Q4_K'],
    ['tiny-mixtral', 'Q8_0'],
    // Gate-less experts (up and down): an empty gate slice.
    ['tiny-nemotron-h-moe', 'Q4_K'],
    // Gate and up fused (ffn_gate_up_exps): one gate|up slice and an empty up slice.
    ['tiny-gemma4', 'Q8_0'],
  ])('%s %s: one and two stripes give the in-memory tokens', async (preset, type) => {
    const file = writeTestModel(dir, preset, type);
    const opts: LoadModelOptions = { threads: 2, nCtx: 128 };
    const want = await greedyTokens(file, opts, PROMPT, 12);
    const p = planModel(file, { ...opts, ramBytes: 2 ** 40, ramReserveBytes: 0 });
    const ramBytes = p.fixedBytes + Math.round(2.5 * p.nMoeLayers * p.expertEntryBytes);
    for (const n of [1, 2]) {
      const dirs = Array.from({ length: n }, (_, i) => path.join(dir, `${preset}-${type}-s${n}-${i}`));
      dirs.forEach((d) => fs.mkdirSync(d, { recursive: true }));
      const stripes = repackModel(file, 'model.kxp', dirs);
      expect(stripes).toEqual(dirs.map((d) => path.join(d, 'model.kxp')));
      for (const s of stripes) {
        const h = readPackHeader(s)!;
        expect(h.dataOffset % 4096).toBe(0);
        expect(h.header.stripes).toBe(n);
        for (const l of h.header.layers) {
          expect(l.blockBytes % 4096).toBe(0);
          expect(l.strides[0] === 0).toBe(preset === 'tiny-nemotron-h-moe');
          expect(l.strides[1] === 0).toBe(preset === 'tiny-gemma4');
          expect(l.offset.every((o) => o % 4096 === 0)).toBe(true);
        }
      }
      const m = EngineModel.load(file, { ...opts, ramBytes, ramReserveBytes: 0, storage: dirs });
      try {
        const got = (await generate(m, PROMPT, { maxTokens: 12, sampling: { temperature: 0 } })).tokens;
        expect(got).toEqual(want);
        const st = m.runtime.stats().stream!;
        expect(st.files).toEqual(stripes);
        expect(st.readErrors).toBe(0);
        // One read per expert: every read is one block.
        const block = readPackHeader(stripes[0])!.header.layers[0].blockBytes;
        const l0 = st.layers[0];
        expect(l0.bytesRead).toBe(l0.reads * block);
      } finally {
        m.close();
      }
    }
  }, 120_000);

  it('refuses a pack with a missing or cut stripe, naming it', () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q4_K');
    const dirs = [path.join(dir, 'bad-a'), path.join(dir, 'bad-b')];
    dirs.forEach((d) => fs.mkdirSync(d, { recursive: true }));
    const [a, b] = repackModel(file, 'bad.kxp', dirs);
    const ramBytes = 2 ** 30;
    expect(() => EngineModel.load(file, { nCtx: 64, ramBytes, storage: [dirs[0]] })).toThrow(/no complete expert pack .* lacks stripe\(s\) 1\); write one with kail repack/);
    fs.truncateSync(b, fs.statSync(b).size - 4096);
    expect(() => EngineModel.load(file, { nCtx: 64, ramBytes, storage: dirs })).toThrow(new RegExp(`expert pack ${b} ends before expert \\d+ of MoE layer \\d+`));
    expect(() => EngineModel.load(file, { nCtx: 64, storage: dirs })).toThrow(/needs a RAM budget/);
    expect(fs.existsSync(a)).toBe(true);
  }, 60_000);
});
