// What the encoder parity specs (parity-encoders, parity-encoders2, parity-t5encoder) share: their
// texts, their preset x file type cases (encoderParityCases), and one file's embeddings (with LoRA adapters at scale 1 when given) as the engine service returns them
// for /v1/embeddings before normalization (LocalModelHost, EMBED_MODEL: the file's pooling type; each text tokenized with the file's
// special tokens) against llama.cpp's embedding context on the same tokens. (Test-only: jest's
// expect; left out of the tools build by tsconfig.lib.json's *.suite.ts.)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { LocalModelHost } from '@kailstream/engine';
import { engine as pb } from '@kailstream/proto';

import type { ModelConfig } from '../models/arch';
import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaEmbeddings } from './llama-ref';
import { nmse } from './metrics';

export const EMBED_TEXTS = [
  'Experts stream from storage into a RAM cache.',
  'the router picks the top experts for each token; the cache keeps the hot ones (and evicts the cold).',
  'Ünïcödé, numbers 3.14159 and CJK 中文 too',
  'a',
];

/** Each text's tokens, kail's embedding of it and that embedding's NMSE against llama.cpp's (same length checked). */
export async function embeddingParity(file: string, opts: { lora?: string[] } = {}): Promise<{ prompts: number[][]; errs: number[]; ours: number[][] }> {
  const host = new LocalModelHost({ seqsPerModel: 2, defaultContext: 256 });
  const ours: number[][] = [];
  const prompts: number[][] = [];
  try {
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'enc', threads: 2, contextLength: 256, lora: (opts.lora ?? []).map((path) => ({ path, scale: 1 })) }));
    for (const [i, text] of EMBED_TEXTS.entries()) {
      prompts.push(host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'enc', text, addSpecial: true })).tokens);
      const req = pb.GenerateRequest.fromPartial({ requestId: `enc-${i}`, model: 'enc', prompt: text, maxTokens: 1, embed: pb.EmbedPooling.EMBED_MODEL });
      let emb: number[] = [];
      for await (const r of host.generate(req, new AbortController().signal)) if (r.embedding.length) emb = r.embedding;
      ours.push(emb);
    }
  } finally {
    await host.close();
  }
  const ref = await llamaEmbeddings(file, prompts, { timeoutMs: 120_000, lora: opts.lora });
  const errs = ours.map((e, i) => {
    expect(e).toHaveLength(ref[i].length);
    return nmse(Float32Array.from(e), Float32Array.from(ref[i]));
  });
  return { prompts, errs, ours };
}

export interface EncoderParityCases {
  /** Names the temp directory. */
  name: string;
  /** [preset, file type, NMSE bound] */
  cases: [string, FileTypeName, number][];
  /** The config a case's preset name stands for (default: the preset's). */
  config?: (preset: string) => ModelConfig;
  /** More checks of a case's prompts. */
  checkPrompts?: (prompts: number[][]) => void;
  /** Width of the table's preset column. */
  pad?: number;
}

/**
 * Registers, inside the spec's describe, one test per case: the preset written in that type (seed
 * 5) embeds each text as llama.cpp embeds its tokens, NMSE under the bound; the table is printed
 * and the temp directory removed after the describe. Returns the directory (made on first use) and
 * the table, for the spec's own cases.
 */
export function encoderParityCases(o: EncoderParityCases): { dir: () => string; lines: string[] } {
  let tmp = '';
  const lines: string[] = [];
  const dir = () => (tmp ||= fs.mkdtempSync(path.join(os.tmpdir(), `kail-parity-${o.name}-`)));
  afterAll(() => {
    if (lines.length) console.log(lines.join('\n'));
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });
  it.each(o.cases)('%s %s: each text embeds as llama.cpp embeds its tokens (NMSE ≤ %s)', async (preset, type, bound) => {
    const file = path.join(dir(), `${preset}-${type}.gguf`);
    writeModel({ config: o.config?.(preset) ?? getPreset(preset).config, fileType: type, seed: 5, out: file });
    const { prompts, errs } = await embeddingParity(file);
    o.checkPrompts?.(prompts);
    lines.push(`${preset.padEnd(o.pad ?? 24)} ${type.padEnd(5)} NMSE ${errs.map((e) => e.toExponential(2)).join(' ')} (bound ${bound})`);
    for (const e of errs) expect(e).toBeLessThan(bound);
  }, 180_000);
  return { dir, lines };
}
