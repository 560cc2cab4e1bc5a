// jina-bert-v3 (BERT's post-norm block with NeoX RoPE and GELU FFNs) and T5's encoder (t5encoder:
// RMS norms, unscaled attention with the relative position bias, gated GELU or ReLU FFNs) against
// llama.cpp's embedding context (node-llama-cpp), as parity-encoders2 does for the other encoders:
// kail's embedding is what the engine service returns for /v1/embeddings before normalization
// (LocalModelHost, EMBED_MODEL: the file's pooling type), each text tokenized with the file's vocabulary.
// The t5encoder presets write attention.causal false; a converted file has no such key, and
// llama.cpp's llama_decode (its embedding context and llama-embedding alike) then attends causally
// (a KV-cache context keeps causal_attn's default true; only llama_encode attends both ways), which
// T5's encoder never does: kail attends both ways either way, checked here by the keyless file's
// embeddings equalling the keyed one's (which equal llama.cpp's), with llama.cpp's causal distance printed.
import path from 'node:path';

import { writeModel } from '../models/build';
import { writeLoraAdapter } from '../models/lora';
import type { FileTypeName } from '../models/quant-plan';
import { getPreset } from '../models/presets';
import { embeddingParity, encoderParityCases } from './encoder-parity.suite';
import { nmse } from './metrics';

// Quantized: 8-bit activation rounding moves a text by up to ~1e-4 (as parity-encoders2 measures).
const BOUND: Partial<Record<FileTypeName, number>> = { F32: 1e-11, Q8_0: 1e-4, Q4_K: 1e-4 };
// GELU goes through ggml's F16 table (see parity-encoders2): an input one float ulp off across an
// F16 rounding boundary takes the neighbouring entry; the ReLU encoder has no table.
const GELU_F32 = 3e-8;
const TYPES: Record<string, FileTypeName[]> = {
  'tiny-jina-bert-v3': ['F32', 'Q8_0'],
  'tiny-t5encoder': ['F32', 'Q4_K'],
  'tiny-t5encoder-relu': ['F32'],
};
const CASES = Object.entries(TYPES).flatMap(([preset, types]) =>
  types.map((t) => [preset, t, t === 'F32' && preset !== 'tiny-t5encoder-relu' ? GELU_F32 : BOUND[t]!] as [string, FileTypeName, number]),
);

describe("jina-bert-v3 and t5encoder embeddings against llama.cpp's embedding context", () => {
  const { dir, lines } = encoderParityCases({ name: 't5', cases: CASES });

  it("jina-bert-v3 with a task LoRA (qkv, output, FFN and token embedding pairs) as llama.cpp applies it", async () => {
    const { config } = getPreset('tiny-jina-bert-v3');
    const file = path.join(dir(), 'jina-v3-lora-base.gguf');
    writeModel({ config, fileType: 'F32', seed: 5, out: file });
    const lora = writeLoraAdapter({ config, out: path.join(dir(), 'jina-v3-retrieval.lora.gguf'), targets: ['attn_qkv', 'attn_output', 'ffn_up', 'ffn_down', 'token_embd.weight'], bStd: 0.1 });
    expect(lora.tensors).toHaveLength(9);
    const base = await embeddingParity(file);
    const adapted = await embeddingParity(file, { lora: [lora.path] });
    const moved = adapted.ours.map((e, i) => nmse(Float32Array.from(e), Float32Array.from(base.ours[i])));
    lines.push(`tiny-jina-bert-v3 LoRA NMSE ${adapted.errs.map((e) => e.toExponential(2)).join(' ')}; the adapter's effect ${moved.map((e) => e.toExponential(2)).join(' ')}`);
    for (const e of adapted.errs) expect(e).toBeLessThan(GELU_F32);
    for (const e of moved) expect(e).toBeGreaterThan(1e-4);
  }, 180_000);

  // jina-embeddings-v3's task adapters also hold a token-type pair (its converter writes it in a
  // projection's layout, A [n_embd, rank], B [rank, n_types]); llama.cpp checks it and its graph
  // adds token_types' row 0 without LoRA, and kail does the same (Hugging Face's model applies it).
  it('jina-bert-v3 with a LoRA pair on token_types: loaded and left unused, as llama.cpp does', async () => {
    const { config } = getPreset('tiny-jina-bert-v3');
    const file = path.join(dir(), 'jina-v3-types-base.gguf');
    writeModel({ config, fileType: 'F32', seed: 5, out: file });
    const withTypes = writeLoraAdapter({ config, out: path.join(dir(), 'types.lora.gguf'), targets: ['attn_qkv', 'token_types.weight'], bStd: 0.1 });
    const without = writeLoraAdapter({ config, out: path.join(dir(), 'no-types.lora.gguf'), targets: ['attn_qkv'], bStd: 0.1 });
    expect(withTypes.tensors).toContain('token_types.weight');
    const a = await embeddingParity(file, { lora: [withTypes.path] });
    const b = await embeddingParity(file, { lora: [without.path] });
    lines.push(`jina-bert-v3 LoRA with a token_types pair NMSE ${a.errs.map((e) => e.toExponential(2)).join(' ')}`);
    for (const e of a.errs) expect(e).toBeLessThan(GELU_F32);
    a.ours.forEach((e, i) => expect(e).toEqual(b.ours[i]));
  }, 180_000);

  it('t5encoder without attention.causal: attends both ways (as with it), where llama_decode attends causally', async () => {
    const { config } = getPreset('tiny-t5encoder-relu');
    const keyed = path.join(dir(), 'keyed.gguf');
    const keyless = path.join(dir(), 'keyless.gguf');
    writeModel({ config, fileType: 'F32', seed: 5, out: keyed });
    writeModel({ config: { ...config, causal: undefined }, fileType: 'F32', seed: 5, out: keyless });
    const a = await embeddingParity(keyed);
    const b = await embeddingParity(keyless);
    const same = a.ours.map((e, i) => nmse(Float32Array.from(b.ours[i]), Float32Array.from(e)));
    lines.push(`t5encoder keyless vs keyed (kail) NMSE ${same.map((e) => e.toExponential(2)).join(' ')}; llama.cpp's causal llama_decode on the keyless file ${b.errs.map((e) => e.toExponential(2)).join(' ')}`);
    for (const e of same) expect(e).toBe(0);
    for (const e of a.errs) expect(e).toBeLessThan(1e-11);
    // (The one-token text 'a' is BOS + 'a': its second row sees one more position causally or not.)
    for (const e of b.errs) expect(e).toBeGreaterThan(1e-4);
  }, 180_000);
});
