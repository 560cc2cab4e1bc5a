// What the encoder parity specs (parity-encoders, parity-encoders2) share: their texts, and one
// file's embeddings (with LoRA adapters at scale 1 when given) as the engine service returns them
// for /v1/embeddings before normalization (LocalModelHost, EMBED_MODEL: the file's pooling type; each text tokenized with the file's
// special tokens) against llama.cpp's embedding context on the same tokens. (Test-only: jest's
// expect; left out of the tools build by tsconfig.lib.json's *.suite.ts.)
import { LocalModelHost } from '@kailstream/engine';
import { engine as pb } from '@kailstream/proto';

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
