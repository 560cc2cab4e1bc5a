// Parity with llama.cpp for DFlash block-diffusion drafts (arch dflash) bound to tiny-qwen3: the
// target's inputs of the layers the draft reads, then the draft's logits for every row of two noise
// blocks [last token, mask...], the first after the features of positions 0..S-1 were injected into
// its cache, the second after the cache was trimmed back to S (the first block leaves it) and
// positions S..n-2 injected: against llama.cpp's dflash graphs driven as common/speculative.cpp's
// draft-dflash drives them (dflash-ref.ts). The engine side runs what speculation runs: the target
// loaded with extractLayers, its own features injected, each block in the same pass as the rows
// injected before it.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { dflashRow, type EngineModel } from '@kailstream/engine';

import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaDflashRef, type DflashRef } from './dflash-ref';
import { finiteNmse, inTargetVocab, targetAndDraft } from './draft-parity.suite';
import { nmse, tokenIds, top1Agreement } from './metrics';

const N = 40;
const SPLIT = 23;
// F32 certifies the semantics. Q8_0 (target and draft) is judged against llama.cpp's own spread, as
// quant-spread.ts judges the models: kail's distance to llama.cpp's exact run (F32 caches, flash
// attention off) at most the distance of llama.cpp's default run (F16 caches, flash attention auto)
// to that exact run, for the target's logits and both blocks.
const CASES: [string, FileTypeName][] = [
  ['tiny-dflash', 'F32'],
  ['tiny-dflash-own', 'F32'],
  // (A 512-token draft vocabulary: its rows scattered into the target's through d2t, -inf elsewhere.)
  ['tiny-dflash-d2t', 'F32'],
  ['tiny-dflash', 'Q8_0'],
];

let dir: string;
const table: string[] = [];
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-dflash-'));
});
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  process.stdout.write(`\nDFlash parity with llama.cpp (${N} tokens, blocks at ${SPLIT} and ${N - 1}, measured):\n${table.join('\n')}\n`);
});

describe.each(CASES)('tiny-qwen3 + %s %s', (preset, type) => {
  let ref: DflashRef;
  let dflt: DflashRef | null = null;
  let tokens: number[];
  let target: EngineModel;
  let draft: EngineModel;
  beforeAll(async () => {
    const pair = targetAndDraft(dir, 'tiny-qwen3', preset, type, N + 16);
    ({ target, draft } = pair);
    tokens = tokenIds(N, getPreset('tiny-qwen3').config.vocabSize, 31);
    ref = await llamaDflashRef(pair.files.target, pair.files.draft, tokens, { split: SPLIT, threads: 2 });
    if (type !== 'F32') dflt = await llamaDflashRef(pair.files.target, pair.files.draft, tokens, { split: SPLIT, threads: 2, defaultRun: true });
  }, 300_000);
  afterAll(() => {
    target?.close();
    draft?.close();
  });

  it("the target's logits and its layers' inputs, then both blocks' logits", async () => {
    const { logits, hidden } = await target.evaluateWithHidden(0, tokens, 'all');
    const eL = nmse(logits, ref.targetLogits);
    const eF = nmse(hidden, ref.features);
    const W = draft.runtime.inputWidth;
    const F = target.hiddenWidth;
    const B = ref.block;
    expect(draft.dflash!.maskToken).toBe(ref.maskToken);
    expect(draft.dflash!.blockSize).toBe(ref.blockSize);
    expect(draft.dflash!.causal).toBe(ref.causal);
    // Injected rows (features p) at p in [from, to), then the block rows at to..to+B-1 (dflashRow).
    const pass = (from: number, to: number, last: number) => {
      const rows = to - from + B;
      const embd = new Float32Array(rows * W);
      const tk = new Int32Array(rows).fill(ref.maskToken);
      const out = new Uint8Array(rows);
      const D = draft.hparams.nEmbd;
      for (let i = 0; i < to - from; i++) dflashRow(embd, i, W, D, hidden.subarray((from + i) * F, (from + i + 1) * F));
      for (let j = 0; j < B; j++) {
        const i = to - from + j;
        dflashRow(embd, i, W, D, null);
        if (j === 0) tk[i] = last;
        out[i] = 1;
      }
      return draft.forwardBatch({ tokens: tk, pos: Int32Array.from({ length: rows }, (_, i) => from + i), seq: new Int32Array(rows), output: out, embd });
    };
    draft.truncate(0, 0);
    const b1 = await pass(0, SPLIT, tokens[SPLIT]);
    draft.truncate(0, SPLIT);
    const b2 = await pass(SPLIT, N - 1, tokens[N - 1]);
    draft.truncate(0, 0);
    const l1 = inTargetVocab(b1, B, ref.nVocab, draft.dflash!.d2t);
    const l2 = inTargetVocab(b2, B, ref.nVocab, draft.dflash!.d2t);
    const e1 = finiteNmse(l1, ref.block1Logits);
    const e2 = finiteNmse(l2, ref.block2Logits);
    const t1 = top1Agreement(l1, ref.block1Logits, ref.nVocab);
    const t2 = top1Agreement(l2, ref.block2Logits, ref.nVocab);
    // llama.cpp's own spread (quantized files): its default run against its exact run.
    const sL = dflt ? nmse(dflt.targetLogits, ref.targetLogits) : 1e-12;
    const s1 = dflt ? nmse(dflt.block1Logits, ref.block1Logits) : 1e-12;
    const s2 = dflt ? nmse(dflt.block2Logits, ref.block2Logits) : 1e-12;
    const note = dflt ? `; llama.cpp default vs exact: target ${sL.toExponential(2)}, block 1 ${s1.toExponential(2)}, block 2 ${s2.toExponential(2)}` : '  (bound 1e-12)';
    table.push(
      `${preset.padEnd(16)} ${type.padEnd(4)} target logits ${eL.toExponential(2)}, layers [${ref.targetLayers.join(', ')}] features ${eF.toExponential(2)}; ` +
        `block 1 (${B} rows) ${e1.toExponential(2)} top-1 ${t1.agree}/${t1.total}, block 2 ${e2.toExponential(2)} top-1 ${t2.agree}/${t2.total}${note}`,
    );
    expect(eL).toBeLessThanOrEqual(sL);
    expect(e1).toBeLessThanOrEqual(s1);
    expect(e2).toBeLessThanOrEqual(s2);
    if (type === 'F32') {
      expect(eF).toBeLessThanOrEqual(1e-12);
      expect(t1.agree).toBe(t1.total);
      expect(t2.agree).toBe(t2.total);
    }
  }, 120_000);
});
