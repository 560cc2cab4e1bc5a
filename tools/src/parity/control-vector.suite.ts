// What the control-vector parity cases share (parity-control-vector, parity-gemma3n,
// parity-hrm-text): a preset written in F32 (seed 4) with two vectors from the writer, seed 1 at
// 0.8 on every layer and seed 2 at -0.5 on one layer, run over 24 tokens with the vectors on every
// layer, then on that layer only; kail's logits against llama.cpp's (cvec-ref), and how far the
// vectors move llama.cpp's. (Test-only; left out of the tools build by tsconfig.lib.json's *.suite.ts.)
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { writeControlVector } from '../models/control-vector';
import { getPreset } from '../models/presets';
import { llamaCvecLogits } from './cvec-ref';
import { nmse, tokenIds } from './metrics';

export interface ControlVectorCase {
  /** The layers llama.cpp applied the vectors to ("0-3"). */
  layers: string;
  /** NMSE of kail's logits against llama.cpp's. */
  err: number;
  /** NMSE of llama.cpp's logits with the vectors against without. */
  moved: number;
}

/** The two cases (every layer, then `layer` only) of `preset`, its files written under `dir`. */
export async function controlVectorParity(dir: string, preset: string, layer: number): Promise<ControlVectorCase[]> {
  const config = getPreset(preset).config;
  const model = path.join(dir, `${preset}.gguf`);
  writeModel({ config, fileType: 'F32', seed: 4, out: model });
  const a = writeControlVector({ config, out: path.join(dir, `${preset}-a.gguf`), seed: 1 }).path;
  const b = writeControlVector({ config, out: path.join(dir, `${preset}-b.gguf`), seed: 2, layers: [layer] }).path;
  const toks = tokenIds(24, config.vocabSize, 7);
  const cvecs = [{ path: a, scale: 0.8 }, { path: b, scale: -0.5 }];
  const plain = await llamaCvecLogits(model, toks, []);
  const out: ControlVectorCase[] = [];
  for (const range of [undefined, [layer, layer] as [number, number]]) {
    const ref = await llamaCvecLogits(model, toks, cvecs, { layerRange: range });
    const m = EngineModel.load(model, { threads: 2, kvType: 'f32', nCtx: 64, controlVectors: cvecs, controlVectorLayerRange: range });
    let ours: Float32Array;
    try {
      ours = await m.evaluate(0, toks, 'all');
    } finally {
      m.close();
    }
    out.push({ layers: `${ref.layerStart}-${ref.layerEnd}`, err: nmse(ours, ref.logits), moved: nmse(plain.logits, ref.logits) });
  }
  return out;
}
