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
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import { GgufWriter, kv } from '../gguf/writer';
import { writeModel } from '../models/build';
import type { MiscDenseConfig } from '../models/architectures/misc-dense';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';
import { quantSpread, quantSpreadRefs, type QuantSpreadRefs } from './quant-spread';

const PRESETS = ['tiny-qwen2vl', 'tiny-hunyuan-vl', 'tiny-plamo', 'tiny-plamo3', 'tiny-plamo3-pattern', 'tiny-pangu-embedded', 'tiny-openelm'];
const F32_BOUND = 1e-12;
const QUANT_CASES: [string, FileTypeName][] = [
  ['tiny-qwen2vl', 'Q4_K_M'],
  ['tiny-hunyuan-vl', 'Q8_0'],
  ['tiny-plamo', 'Q4_K_M'],
  ['tiny-plamo3-pattern', 'Q4_K_M'],
  ['tiny-pangu-embedded', 'Q8_0'],
  ['tiny-openelm', 'Q4_K_M'],
];

let dir: string;
const table: string[] = [];
const file = (preset: string, type: string) => path.join(dir, `${preset}-${type}.gguf`);

async function kailLogits(model: string, tokens: number[]): Promise<Float32Array> {
  const m = EngineModel.load(model, { kvType: 'f32', threads: 2, nCtx: tokens.length + 8 });
  try {
    return await m.evaluate(0, tokens, 'all', 64);
  } finally {
    m.close();
  }
}

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

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-misc-dense-'));
}, 60_000);
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  process.stdout.write(`\nparity with llama.cpp (qwen2vl/hunyuan_vl/plamo/plamo3/pangu-embedded/openelm, measured):\n${table.join('\n')}\n`);
});

describe('F32 files', () => {
  let refs: LlamaLogits[];
  let xdRef: LlamaLogits;
  const tokens = new Map<string, number[]>();
  const xd: MiscDenseConfig = { ...(getPreset('tiny-hunyuan-vl').config as MiscDenseConfig), ropeSections: [8, 8, 8, 8] };
  beforeAll(async () => {
    for (const preset of PRESETS) {
      const cfg = getPreset(preset).config;
      writeModel({ config: cfg, fileType: 'F32', seed: 7, out: file(preset, 'F32') });
      tokens.set(preset, tokenIds(64, cfg.vocabSize, 11));
    }
    writeModel({ config: xd, fileType: 'F32', seed: 7, out: file('tiny-hunyuan-vl-xd', 'F32') });
    const jobs = PRESETS.map((p) => ({ model: file(p, 'F32'), tokens: tokens.get(p)! }));
    [xdRef, ...refs] = await llamaLogitsBatch([{ model: file('tiny-hunyuan-vl-xd', 'F32'), tokens: tokens.get('tiny-hunyuan-vl')! }, ...jobs], { kv: 'f32', flashAttention: 'off', timeoutMs: 200_000 });
  }, 300_000);

  it.each(PRESETS)('%s F32', async (preset) => {
    const i = PRESETS.indexOf(preset);
    const ours = await kailLogits(file(preset, 'F32'), tokens.get(preset)!);
    const e = nmse(ours, refs[i].logits);
    const { agree, total } = top1Agreement(ours, refs[i].logits, refs[i].nVocab);
    table.push(`${preset.padEnd(22)} F32     NMSE ${e.toExponential(2)}  top-1 ${agree}/${total}  (bound ${F32_BOUND})`);
    expect(e).toBeLessThanOrEqual(F32_BOUND);
    expect(agree).toBe(total);
  });

  it('hunyuan_vl with a fourth XD-RoPE section: every section rotates by the position (= no sections, bit for bit)', async () => {
    const t = tokens.get('tiny-hunyuan-vl')!;
    const plain = { ...xd, ropeSections: undefined };
    writeModel({ config: plain, fileType: 'F32', seed: 7, out: file('tiny-hunyuan-vl-plain', 'F32') });
    const ours = await kailLogits(file('tiny-hunyuan-vl-xd', 'F32'), t);
    expect(sameBits(ours, await kailLogits(file('tiny-hunyuan-vl-plain', 'F32'), t))).toBe(true);
    table.push(`tiny-hunyuan-vl sections [8, 8, 8, 8]: kail = kail without sections (bits); llama.cpp (4th section unrotated on text) differs by NMSE ${nmse(ours, xdRef.logits).toExponential(2)}`);
  });

  it("plamo3's post norms named with '.weight' (its converter's names) give the same logits, bit for bit", async () => {
    const t = tokens.get('tiny-plamo3-pattern')!;
    const src = file('tiny-plamo3-pattern', 'F32');
    const renamed = renamedCopy(src, path.join(dir, 'tiny-plamo3-pattern-weight-names.gguf'), (n) => (/\.post_(attention|ffw)_norm$/.test(n) ? `${n}.weight` : n));
    expect(readGgufHeader(renamed).tensors.filter((x) => x.name.endsWith('_norm.weight') && x.name.includes('.post_'))).toHaveLength(8);
    expect(sameBits(await kailLogits(renamed, t), await kailLogits(src, t))).toBe(true);
  });
});

describe('quantized files stay within llama.cpp’s own spread', () => {
  let refs: QuantSpreadRefs;
  beforeAll(async () => {
    refs = await quantSpreadRefs(QUANT_CASES, file, 200_000);
  }, 300_000);

  it.each(QUANT_CASES)('%s %s', async (p, t) => {
    const i = QUANT_CASES.findIndex(([a, b]) => a === p && b === t);
    const d = quantSpread(await kailLogits(file(p, t), refs.tokens[i]), refs, i);
    table.push(`${p.padEnd(22)} ${t.padEnd(7)} kail↔llama.cpp exact ${d.kail.toExponential(2)}  llama.cpp default↔exact ${d.llama.toExponential(2)}`);
    expect(d.kail).toBeLessThanOrEqual(Math.max(d.llama * 2, 1e-6));
  });
});
