// Parity with llama.cpp for the language models of vision-language architectures, text input only
// (kail has no vision tower): paddleocr (PaddleOCR-VL: q/k/v biases, attn_output.bias, M-RoPE
// sections), cogvlm (CogVLM: one attn_qkv, RoPE at ggml_rope's base 10000 whatever the file's
// rope.freq_base says, the vision expert's weights present and unused by text) and chameleon
// (per-head q/k LayerNorms, swin_norm both ways, image-token logits suppressed), and Muse Glimmer
// (gated attention, NoPE full blocks, windows by the default or a BOOL pattern, post norms at 1e-8,
// logit_scale, final softcap given or the loader's default 30), on models the
// project writes itself (architectures/text-vl.ts). Same rules as parity-moe-families.native.spec.ts
// (dense-parity.suite.ts).
//
// Where kail does not copy llama.cpp: Chameleon's text output sets the image tokens' logits
// (4..8195) to -FLT_MAX; llama.cpp's ggml_set_1d on the [n_vocab, n_outputs] logits reaches only
// the first output row, kail clamps every row. So chameleon is compared on the text tokens' logits
// (the image columns left out of both), and kail's image columns are checked to be -FLT_MAX in
// every row (llama.cpp's in its first row).
// - Chameleon with swin_norm: the model (transformers' ChameleonSwinDecoderLayer) runs its FFN on
//   the stream after the attention's residual add, x + attn_norm(attn(x)); llama.cpp's graph runs it
//   on attn_norm(attn(x)) alone (ffn_inp is left out). kail follows the model. With ffn_down zeroed
//   (the FFN adds ffn_norm(0) = 0 either way) kail matches llama.cpp: that checks the swin norms'
//   placement, the q/k norms and the rest; the full file's distance to llama.cpp is printed.
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import { GgufWriter, kv } from '../gguf/writer';
import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { denseParitySuite } from './dense-parity.suite';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';
import { quantSpreadRefs, type QuantSpreadRefs } from './quant-spread';

const PRESETS = ['tiny-paddleocr', 'tiny-cogvlm', 'tiny-muse-glimmer', 'tiny-muse-glimmer-pattern'];
const { file, kailLogits, table } = denseParitySuite({
  name: 'paddleocr/cogvlm/chameleon/muse-glimmer',
  f32: PRESETS.map((p) => [p, 1e-12]),
  quant: [
    ['tiny-paddleocr', 'Q4_K_M'],
    ['tiny-cogvlm', 'Q8_0'],
    ['tiny-muse-glimmer', 'Q4_K_M'],
  ],
});

const [IMG0, IMG1] = [4, 8196];
const NEG_FLT_MAX = -3.4028234663852886e38;

/** The logits with the image columns [IMG0, IMG1) left out of every row. */
function textColumns(l: Float32Array, nVocab: number): Float32Array {
  const rows = l.length / nVocab;
  const w = nVocab - (IMG1 - IMG0);
  const out = new Float32Array(rows * w);
  for (let r = 0; r < rows; r++) {
    out.set(l.subarray(r * nVocab, r * nVocab + IMG0), r * w);
    out.set(l.subarray(r * nVocab + IMG1, (r + 1) * nVocab), r * w + IMG0);
  }
  return out;
}

/** A copy of a GGUF file with the tensors `zero` picks written as zeros (F32 files). */
function zeroedCopy(src: string, dst: string, zero: (name: string) => boolean): string {
  const h = readGgufHeader(src);
  const w = new GgufWriter(dst, { alignment: h.alignment, alignmentKey: h.kv.has('general.alignment') });
  for (const [key, v] of h.kv) if (key !== 'general.alignment') w.set(key, kv.raw(v.type, v.raw));
  for (const t of h.tensors) w.addTensor({ name: t.name, shape: t.shape, type: t.type });
  w.begin();
  for (const t of h.tensors) {
    const b = readGgufTensorBytes(src, t);
    w.writeTensorData(t.name, zero(t.name) ? new Uint8Array(b.length) : b);
  }
  w.finish();
  return dst;
}

/** Rows whose image columns are all -FLT_MAX. */
function suppressedRows(l: Float32Array, nVocab: number): number {
  let n = 0;
  for (let r = 0; r < l.length / nVocab; r++) if (l.subarray(r * nVocab + IMG0, r * nVocab + IMG1).every((v) => v === NEG_FLT_MAX)) n++;
  return n;
}

describe('chameleon: text-token logits (image tokens suppressed in every row)', () => {
  // tiny-chameleon-swin-noffn: tiny-chameleon-swin with ffn_down zeroed (see the header).
  const F32 = ['tiny-chameleon', 'tiny-chameleon-swin-noffn', 'tiny-chameleon-swin'];
  const toks = F32.map(() => tokenIds(64, getPreset('tiny-chameleon').config.vocabSize, 11));
  let refs: LlamaLogits[];
  let qRefs: QuantSpreadRefs;
  beforeAll(async () => {
    for (const p of ['tiny-chameleon', 'tiny-chameleon-swin']) writeModel({ config: getPreset(p).config, fileType: 'F32', seed: 7, out: file(p, 'F32') });
    zeroedCopy(file('tiny-chameleon-swin', 'F32'), file('tiny-chameleon-swin-noffn', 'F32'), (n) => n.endsWith('.ffn_down.weight'));
    refs = await llamaLogitsBatch(F32.map((p, i) => ({ model: file(p, 'F32'), tokens: toks[i] })), { kv: 'f32', flashAttention: 'off', timeoutMs: 300_000 });
    qRefs = await quantSpreadRefs([['tiny-chameleon', 'Q4_K_M']], file, 300_000);
  }, 400_000);

  it.each(F32.slice(0, 2).map((p, i) => [p, i] as const))('%s F32', async (p, i) => {
    const n = refs[i].nVocab;
    const ours = await kailLogits(file(p, 'F32'), toks[i]);
    expect(suppressedRows(ours, n)).toBe(64);
    expect(suppressedRows(refs[i].logits.subarray(0, n), n)).toBe(1);
    const [a, b] = [textColumns(ours, n), textColumns(refs[i].logits, n)];
    const e = nmse(a, b);
    const { agree, total } = top1Agreement(a, b, n - (IMG1 - IMG0));
    table.push(`${p.padEnd(20)} F32     NMSE ${e.toExponential(2)} (text tokens)  top-1 ${agree}/${total}  (bound 1e-12)`);
    expect(e).toBeLessThanOrEqual(1e-12);
    expect(agree).toBe(total);
  });

  it("tiny-chameleon-swin: the FFN reads the stream (the model's block), not llama.cpp's attention output alone", async () => {
    const n = refs[2].nVocab;
    const ours = await kailLogits(file('tiny-chameleon-swin', 'F32'), toks[2]);
    expect(suppressedRows(ours, n)).toBe(64);
    // With its FFN live the file's logits move away from the zeroed copy's (the FFN is exercised).
    const noFfn = await kailLogits(file('tiny-chameleon-swin-noffn', 'F32'), toks[2]);
    expect(nmse(textColumns(ours, n), textColumns(noFfn, n))).toBeGreaterThan(1e-3);
    table.push(`tiny-chameleon-swin  F32: kail (transformers' swin block) differs from llama.cpp (FFN on the attention output alone) by NMSE ${nmse(textColumns(ours, n), textColumns(refs[2].logits, n)).toExponential(2)} (text tokens)`);
  });

  it('tiny-chameleon Q4_K_M within llama.cpp’s own spread (text tokens)', async () => {
    const n = qRefs.exact[0].nVocab;
    const ours = await kailLogits(file('tiny-chameleon', 'Q4_K_M'), qRefs.tokens[0]);
    expect(suppressedRows(ours, n)).toBe(qRefs.tokens[0].length);
    const exact = textColumns(qRefs.exact[0].logits, n);
    const kail = nmse(textColumns(ours, n), exact);
    const llama = nmse(textColumns(qRefs.runtime[0].logits, n), exact);
    const { agree, total } = top1Agreement(textColumns(ours, n), exact, n - (IMG1 - IMG0), 0.1);
    table.push(`${'tiny-chameleon'.padEnd(20)} Q4_K_M  kail↔llama.cpp exact ${kail.toExponential(2)}  llama.cpp default↔exact ${llama.toExponential(2)}  top-1 ${agree}/${total} (text tokens)`);
    expect(kail).toBeLessThanOrEqual(Math.max(llama * 2, 1e-6));
    expect(agree).toBe(total);
  });
});
