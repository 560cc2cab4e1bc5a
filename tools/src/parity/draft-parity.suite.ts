// What the parity specs of drafts that read their target's hidden states (parity-eagle3,
// parity-dflash) share: the target and draft files, the two loaded as speculation loads them, and
// the draft's logits compared in the target's vocabulary. (Test-only: jest globals, left out of the
// tools build by tsconfig.lib.json's *.suite.ts.)
import fs from 'node:fs';
import path from 'node:path';
import { EngineModel, draftLayersOf } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { nmse } from './metrics';

/**
 * The target (seed 5; written once per type, the cases share it) and the draft (seed 6) in `dir`,
 * both `type`; then the target loaded with the draft's layers extracted and the draft over it
 * (token_embd / output from the target where it has none), F32 caches.
 */
export function targetAndDraft(dir: string, targetPreset: string, draftPreset: string, type: FileTypeName, nCtx: number): { target: EngineModel; draft: EngineModel; files: { target: string; draft: string } } {
  const tfile = path.join(dir, `${targetPreset}-${type}.gguf`);
  if (!fs.existsSync(tfile)) writeModel({ config: getPreset(targetPreset).config, fileType: type, seed: 5, out: tfile });
  const dfile = path.join(dir, `${draftPreset}-${type}.gguf`);
  writeModel({ config: getPreset(draftPreset).config, fileType: type, seed: 6, out: dfile });
  const opts = { threads: 2, nCtx, kvType: 'f32' as const };
  const target = EngineModel.load(tfile, { ...opts, extractLayers: draftLayersOf(dfile)! });
  const draft = EngineModel.load(dfile, { ...opts, embeddingsFrom: tfile });
  return { target, draft, files: { target: tfile, draft: dfile } };
}

/** `rows` rows of a draft's logits in the target's vocabulary of nVocab (d2t: -inf outside its ids, as llama.cpp's graph writes them). */
export function inTargetVocab(l: Float32Array, rows: number, nVocab: number, d2t: Int32Array | null | undefined): Float32Array {
  if (!d2t) return l;
  const o = new Float32Array(rows * nVocab).fill(-Infinity);
  for (let r = 0; r < rows; r++) for (let j = 0; j < d2t.length; j++) o[r * nVocab + d2t[j]] = l[r * d2t.length + j];
  return o;
}

/** NMSE over the finite entries, after checking both sides are -inf at the same places. */
export function finiteNmse(a: Float32Array, b: Float32Array): number {
  const keep: number[] = [];
  for (let i = 0; i < b.length; i++) {
    expect(Number.isFinite(a[i])).toBe(Number.isFinite(b[i]));
    if (Number.isFinite(b[i])) keep.push(i);
  }
  return nmse(Float32Array.from(keep, (i) => a[i]), Float32Array.from(keep, (i) => b[i]));
}
