// Parity with llama.cpp for EAGLE-3 drafts (arch eagle3) bound to tiny-llama or tiny-qwen3moe: the target's
// inputs of the three layers the draft reads, the draft's logits and pre-norm rows for every
// (token p+1, target features p) row, and chained draft steps each fed the step before's pre-norm
// row, against llama.cpp's encoder and decoder graphs driven as common/speculative.cpp's
// draft-eagle3 drives them (eagle3-ref.ts). The engine side runs what speculation runs: the target
// loaded with extractLayers, the draft fed [features | 0] or [0 | pre-norm row].
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel, eagle3LayersOf } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaEagle3Ref, type Eagle3Ref } from './eagle3-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';

const N = 24;
const STEPS = 3;
// F32 certifies the semantics; Q8_0 (target and draft) is within llama.cpp's own summation spread.
// (Q8_0, measured: one of the 23 draft rows moves by about 6e-8 of its energy, the others and the
// chained steps match to 1e-14: the signature of one activation whose rounding to Q8_0 before a
// matmul falls the other way in the two programs, from F32 values that differ in the last bit.)
const CASES: [string, string, FileTypeName, number][] = [
  ['tiny-llama', 'tiny-llama-eagle3', 'F32', 1e-12],
  ['tiny-llama', 'tiny-llama-eagle3-d2t', 'F32', 1e-12],
  // (No token_embd / output of its own: llama.cpp's ctx_other, kail's embeddingsFrom.)
  ['tiny-llama', 'tiny-llama-eagle3-shared', 'F32', 1e-12],
  ['tiny-llama', 'tiny-llama-eagle3-d2t', 'Q8_0', 1e-5],
  // A MoE target (q/k norms, NeoX RoPE, routed experts).
  ['tiny-qwen3moe', 'tiny-qwen3moe-eagle3', 'F32', 1e-12],
];

let dir: string;
const table: string[] = [];
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-eagle3-'));
});
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  process.stdout.write(`\nEAGLE-3 parity with llama.cpp (${N} tokens, ${STEPS} chained steps, measured):\n${table.join('\n')}\n`);
});

describe.each(CASES)('%s + %s %s', (targetPreset, preset, type, bound) => {
  let ref: Eagle3Ref;
  let tokens: number[];
  let target: EngineModel;
  let draft: EngineModel;
  beforeAll(async () => {
    const tfile = path.join(dir, `${targetPreset}-${type}.gguf`);
    if (!fs.existsSync(tfile)) writeModel({ config: getPreset(targetPreset).config, fileType: type, seed: 5, out: tfile });
    const dfile = path.join(dir, `${preset}-${type}.gguf`);
    writeModel({ config: getPreset(preset).config, fileType: type, seed: 6, out: dfile });
    tokens = tokenIds(N, getPreset(targetPreset).config.vocabSize, 29);
    ref = await llamaEagle3Ref(tfile, dfile, tokens, { draftSteps: STEPS, threads: 2 });
    const opts = { threads: 2, nCtx: N + STEPS + 8, kvType: 'f32' as const };
    target = EngineModel.load(tfile, { ...opts, extractLayers: eagle3LayersOf(dfile)! });
    draft = EngineModel.load(dfile, { ...opts, embeddingsFrom: tfile });
  }, 300_000);
  afterAll(() => {
    target?.close();
    draft?.close();
  });

  // The draft's logits in the target's vocabulary (d2t: -inf outside its ids, as llama.cpp's graph writes them).
  const toTarget = (l: Float32Array, rows: number): Float32Array => {
    const d2t = draft.eagle3!.d2t;
    if (!d2t) return l;
    const V = ref.nVocab;
    const o = new Float32Array(rows * V).fill(-Infinity);
    for (let r = 0; r < rows; r++) for (let j = 0; j < d2t.length; j++) o[r * V + d2t[j]] = l[r * d2t.length + j];
    return o;
  };
  // NMSE over the finite entries, after checking both sides are -inf at the same places.
  const finiteNmse = (a: Float32Array, b: Float32Array): number => {
    const keep: number[] = [];
    for (let i = 0; i < b.length; i++) {
      expect(Number.isFinite(a[i])).toBe(Number.isFinite(b[i]));
      if (Number.isFinite(b[i])) keep.push(i);
    }
    return nmse(Float32Array.from(keep, (i) => a[i]), Float32Array.from(keep, (i) => b[i]));
  };

  it("the target's logits and its three layers' inputs", async () => {
    const { logits, hidden } = await target.evaluateWithHidden(0, tokens, 'all');
    const eL = nmse(logits, ref.targetLogits);
    const eF = nmse(hidden, ref.features);
    table.push(`${preset.padEnd(24)} ${type.padEnd(4)} target logits NMSE ${eL.toExponential(2)}, layers [${ref.targetLayers.join(', ')}] features NMSE ${eF.toExponential(2)}`);
    expect(eL).toBeLessThanOrEqual(bound);
    expect(eF).toBeLessThanOrEqual(bound);
  });

  it('draft rows (token p+1, features p) and chained draft steps', async () => {
    const F = 3 * ref.nEmbdTgt;
    const W = draft.runtime.inputWidth;
    const E = ref.nEmbd;
    const m = N - 1;
    // llama.cpp's own features, so this checks the draft alone.
    const embd = new Float32Array(m * W);
    for (let p = 0; p < m; p++) embd.set(ref.features.subarray(p * F, (p + 1) * F), p * W);
    draft.truncate(0, 0);
    const r = await draft.forwardBatchWithHidden({ tokens: Int32Array.from(tokens.slice(1)), pos: Int32Array.from({ length: m }, (_, i) => i), seq: new Int32Array(m), output: new Uint8Array(m).fill(1), embd });
    const logits = toTarget(r.logits, m);
    const eL = finiteNmse(logits, ref.eagleLogits);
    const eH = nmse(r.hidden, ref.eagleH);
    const top = top1Agreement(logits, ref.eagleLogits, ref.nVocab);
    const steps = new Float32Array(STEPS * ref.nVocab);
    let h: Float32Array = r.hidden.slice((m - 1) * E);
    for (let j = 0; j < STEPS; j++) {
      const row = new Float32Array(W);
      row.set(h, F);
      const s = await draft.forwardBatchWithHidden({ tokens: Int32Array.of(ref.draftTokens[j]), pos: Int32Array.of(m + j), seq: Int32Array.of(0), output: Uint8Array.of(1), embd: row });
      steps.set(toTarget(s.logits, 1), j * ref.nVocab);
      h = s.hidden;
    }
    const eS = finiteNmse(steps, ref.draftLogits);
    table.push(
      `${preset.padEnd(24)} ${type.padEnd(4)} draft logits NMSE ${eL.toExponential(2)} (top-1 ${top.agree}/${top.total}), pre-norm NMSE ${eH.toExponential(2)}, ` +
        `${STEPS} chained steps NMSE ${eS.toExponential(2)}  (bound ${bound})`,
    );
    expect(eL).toBeLessThanOrEqual(bound);
    expect(eH).toBeLessThanOrEqual(bound);
    expect(eS).toBeLessThanOrEqual(bound);
    expect(top.agree).toBe(top.total);
  });
});
