// Parity with llama.cpp for more dense decoders of llama-family.ts's DenseLayout, text input only:
// qwen2vl (Qwen2-VL's language model: q/k/v biases, M-RoPE sections, an output.bias its graph
// leaves out), hunyuan_vl (HunyuanOCR's: q/k norms after RoPE, the alpha-scaled base, M-RoPE
// sections), plamo (PLaMo-13B: attention and FFN side by side from one RMS norm), plamo3 (fused
// q/k/v, q/k norms, post norms, fused gate|up, windows by the default or a BOOL pattern at their own
// RoPE base), pangu-embedded (attn_output.bias, a rope_freqs its graph leaves out) and openelm
// (head counts and FFN widths per block), on models the project writes itself. Same rules as
// parity-moe-families.native.spec.ts.
//
// Where kail does not copy llama.cpp, equivalence instead (both asserted, llama.cpp's distance printed):
// - M-RoPE on text: llama.cpp gives text tokens their position in the first three sections and 0
//   in the fourth (llm_graph_input_pos::set_input), so with a fourth section set (HunyuanOCR's
//   XD-RoPE writes [16, 16, 16, 16]) those pairs do not rotate; the model (and mtmd's own text-like
//   BOI/EOI tokens) rotates every section by the position. kail rotates all of them: its logits with
//   sections [8, 8, 8, 8] are its logits without sections, bit for bit.
// - PLaMo 3's post norms: llama.cpp's loader looks up `post_attention_norm` / `post_ffw_norm`
//   without '.weight', its converter writes them with it (llama.cpp cannot load those files). kail
//   reads either: the same file with the names renamed gives the same logits, bit for bit.

import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import { GgufWriter, kv } from '../gguf/writer';
import { writeModel } from '../models/build';
import type { MiscDenseConfig } from '../models/architectures/misc-dense';
import { getPreset } from '../models/presets';
import { denseParitySuite } from './dense-parity.suite';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse } from './metrics';

const PRESETS = ['tiny-qwen2vl', 'tiny-hunyuan-vl', 'tiny-plamo', 'tiny-plamo3', 'tiny-plamo3-pattern', 'tiny-pangu-embedded', 'tiny-openelm'];
const { file, kailLogits, tokens, table } = denseParitySuite({
  name: 'qwen2vl/hunyuan_vl/plamo/plamo3/pangu-embedded/openelm',
  f32: PRESETS.map((p) => [p, 1e-12]),
  quant: [
    ['tiny-qwen2vl', 'Q4_K_M'],
    ['tiny-hunyuan-vl', 'Q8_0'],
    ['tiny-plamo', 'Q4_K_M'],
    ['tiny-plamo3-pattern', 'Q4_K_M'],
    ['tiny-pangu-embedded', 'Q8_0'],
    ['tiny-openelm', 'Q4_K_M'],
  ],
});

const sameBits = (a: Float32Array, b: Float32Array) => a.length === b.length && Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;

/** A copy of a GGUF file with its tensors renamed (metadata and data as they are). */
function renamedCopy(src: string, dst: string, rename: (name: string) => string): string {
  const h = readGgufHeader(src);
  const w = new GgufWriter(dst, { alignment: h.alignment, alignmentKey: h.kv.has('general.alignment') });
  for (const [key, v] of h.kv) if (key !== 'general.alignment') w.set(key, kv.raw(v.type, v.raw));
  for (const t of h.tensors) w.addTensor({ name: rename(t.name), shape: t.shape, type: t.type });
  w.begin();
  for (const t of h.tensors) w.writeTensorData(rename(t.name), readGgufTensorBytes(src, t));
  w.finish();
  return dst;
}

describe("where kail does not copy llama.cpp: equivalence", () => {
  let xdRef: LlamaLogits;
  const xd: MiscDenseConfig = { ...(getPreset('tiny-hunyuan-vl').config as MiscDenseConfig), ropeSections: [8, 8, 8, 8] };
  beforeAll(async () => {
    writeModel({ config: xd, fileType: 'F32', seed: 7, out: file('tiny-hunyuan-vl-xd', 'F32') });
    [xdRef] = await llamaLogitsBatch([{ model: file('tiny-hunyuan-vl-xd', 'F32'), tokens: tokens('tiny-hunyuan-vl') }], { kv: 'f32', flashAttention: 'off', timeoutMs: 200_000 });
  }, 300_000);

  it('hunyuan_vl with a fourth XD-RoPE section: every section rotates by the position (= no sections, bit for bit)', async () => {
    const t = tokens('tiny-hunyuan-vl');
    const plain = { ...xd, ropeSections: undefined };
    writeModel({ config: plain, fileType: 'F32', seed: 7, out: file('tiny-hunyuan-vl-plain', 'F32') });
    const ours = await kailLogits(file('tiny-hunyuan-vl-xd', 'F32'), t);
    expect(sameBits(ours, await kailLogits(file('tiny-hunyuan-vl-plain', 'F32'), t))).toBe(true);
    table.push(`tiny-hunyuan-vl sections [8, 8, 8, 8]: kail = kail without sections (bits); llama.cpp (4th section unrotated on text) differs by NMSE ${nmse(ours, xdRef.logits).toExponential(2)}`);
  });

  it("plamo3's post norms named with '.weight' (its converter's names) give the same logits, bit for bit", async () => {
    const t = tokens('tiny-plamo3-pattern');
    const src = file('tiny-plamo3-pattern', 'F32');
    const renamed = renamedCopy(src, file('tiny-plamo3-pattern-weight-names', 'F32'), (n) => (/\.post_(attention|ffw)_norm$/.test(n) ? `${n}.weight` : n));
    expect(readGgufHeader(renamed).tensors.filter((x) => x.name.endsWith('_norm.weight') && x.name.includes('.post_'))).toHaveLength(8);
    expect(sameBits(await kailLogits(renamed, t), await kailLogits(src, t))).toBe(true);
  });
});
