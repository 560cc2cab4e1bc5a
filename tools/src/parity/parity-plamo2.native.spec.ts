// Parity with llama.cpp for PLaMo 2 (architectures/plamo2.ts): Mamba blocks (per-head z|x from
// ssm_in, a causal convolution without bias, RMS-normed B, C and dt, the Mamba-2 scan with A and D
// per head) and GQA blocks (one attn_qkv, per-head q/k norms with a weight row per head, NeoX RoPE),
// every block with post norms and a fused SwiGLU FFN.
//
// llama.cpp (node-llama-cpp 3.22.1's CPU build) never finishes a converted PLaMo 2 file: its
// load_hparams takes n_rot (the rotated dimensions) from block 0's head count, and block 0 of every
// converted file is a Mamba block (head_count 0, the converter's mamba_step 2), so n_rot = 0 (and
// rope.dimension_count is not even read); ggml-cpu's rope then loops forever over the unrotated
// channels (ggml_compute_forward_rope_flt: at i0 == n_offs it steps i0 += n_dims - 2 = -2, then +2,
// back to 0). A gdb backtrace of the hung run ends in ggml_compute_forward_rope_flt under
// llama_decode. So llama.cpp runs here on the same file with one block put in front: a copy of
// attention block 1 with attn_output and ffn_down all zero bytes, an exact identity (its post norms
// of 0 are 0), which gives llama.cpp block 0 heads and so n_rot = key_length. kail's logits on the
// real file are compared with llama.cpp's on that one; kail's on both files are the same bit for bit.
//
// F32 over 64 tokens: NMSE bound 1e-12 and every top-1 equal. Quantized (zero bytes are zeros in
// every block format): within llama.cpp's own spread, its default run (F16 KV, flash attention
// auto) against its exact run, as dense-parity.suite.ts. Measured per position (Q8_0, 128 tokens):
// kail matches llama.cpp's exact run to ~9e-15 for the first 30 positions, then one activation's
// rounding flips and the Mamba states carry it on (4e-5 to 1e-4, a second step near 100 to 2e-4),
// as parity-ssm.native.spec.ts describes for the other state-space models.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { GgufType } from '../gguf/constants';
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import { GgufWriter, kv } from '../gguf/writer';
import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';

/**
 * src behind a new block 0: a copy of attention block `from` whose attn_output and ffn_down are all
 * zero bytes (the block adds exactly 0), head_count / head_count_kv / block_count extended.
 */
function identityLeadCopy(src: string, dst: string, from = 1): string {
  const h = readGgufHeader(src);
  const a = String(h.kv.get('general.architecture')!.value);
  const w = new GgufWriter(dst, { alignment: h.alignment, alignmentKey: h.kv.has('general.alignment') });
  for (const [key, v] of h.kv) {
    if (key === 'general.alignment') continue;
    if (key === `${a}.block_count`) w.set(key, kv.u32((v.value as number) + 1));
    else if (key === `${a}.attention.head_count` || key === `${a}.attention.head_count_kv`) {
      const heads = v.value as number[];
      w.set(key, kv.arr(GgufType.INT32, [heads[from], ...heads]));
    } else w.set(key, kv.raw(v.type, v.raw));
  }
  const shift = (n: string) => n.replace(/^blk\.(\d+)\./, (_, i) => `blk.${Number(i) + 1}.`);
  const entries = [
    ...h.tensors.filter((x) => !x.name.startsWith('blk.')).map((t) => ({ name: t.name, t, zero: false })),
    ...h.tensors.filter((x) => x.name.startsWith(`blk.${from}.`)).map((t) => ({ name: t.name.replace(`blk.${from}.`, 'blk.0.'), t, zero: /\.(attn_output|ffn_down)\.weight$/.test(t.name) })),
    ...h.tensors.filter((x) => x.name.startsWith('blk.')).map((t) => ({ name: shift(t.name), t, zero: false })),
  ];
  for (const e of entries) w.addTensor({ name: e.name, shape: e.t.shape, type: e.t.type });
  w.begin();
  for (const e of entries) w.writeTensorData(e.name, e.zero ? Buffer.alloc(e.t.bytes) : readGgufTensorBytes(src, e.t));
  w.finish();
  return dst;
}

const PRESET = 'tiny-plamo2';
const QUANT: FileTypeName[] = ['Q4_K_M', 'Q8_0'];
const sameBits = (a: Float32Array, b: Float32Array) => a.length === b.length && Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;

describe('plamo2 parity with llama.cpp (its blocks behind an identity attention block for llama.cpp)', () => {
  let dir = '';
  const table: string[] = [];
  const file = (type: string, lead = false) => path.join(dir, `${PRESET}-${type}${lead ? '-lead' : ''}.gguf`);
  const kail = async (model: string, tokens: number[]) => {
    const m = EngineModel.load(model, { kvType: 'f32', threads: 2, nCtx: tokens.length + 8 });
    try {
      return await m.evaluate(0, [...tokens], 'all', 64);
    } finally {
      m.close();
    }
  };
  const config = getPreset(PRESET).config;
  const f32Tokens = tokenIds(64, config.vocabSize, 11);
  const qTokens = tokenIds(128, config.vocabSize, 5);
  let f32Ref: LlamaLogits;
  let exact: LlamaLogits[];
  let runtime: LlamaLogits[];

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-plamo2-'));
    for (const t of ['F32', ...QUANT] as FileTypeName[]) {
      writeModel({ config, fileType: t, seed: 7, out: file(t) });
      identityLeadCopy(file(t), file(t, true));
    }
    [f32Ref] = await llamaLogitsBatch([{ model: file('F32', true), tokens: f32Tokens }], { kv: 'f32', flashAttention: 'off', timeoutMs: 120_000 });
    const jobs = QUANT.map((t) => ({ model: file(t, true), tokens: qTokens }));
    exact = await llamaLogitsBatch(jobs, { kv: 'f32', flashAttention: 'off', timeoutMs: 120_000 });
    runtime = await llamaLogitsBatch(jobs, { kv: 'f16', flashAttention: 'auto', timeoutMs: 120_000 });
  }, 400_000);
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nparity with llama.cpp (plamo2, measured):\n${table.join('\n')}\n`);
  });

  it('the copy has block 0 of attention (so llama.cpp rotates key_length dimensions); the real file starts with a Mamba block', () => {
    const heads = (f: string) => readGgufHeader(f).kv.get('plamo2.attention.head_count_kv')!.value as number[];
    expect(heads(file('F32'))).toEqual([0, 2, 0, 2]);
    expect(heads(file('F32', true))).toEqual([2, 0, 2, 0, 2]);
  });

  it('F32: kail on the real file = llama.cpp on the copy (NMSE <= 1e-12, every top-1), and kail on the copy bit for bit', async () => {
    const ours = await kail(file('F32'), f32Tokens);
    const e = nmse(ours, f32Ref.logits);
    const { agree, total } = top1Agreement(ours, f32Ref.logits, f32Ref.nVocab);
    table.push(`${PRESET} F32     NMSE ${e.toExponential(2)}  top-1 ${agree}/${total}`);
    expect(e).toBeLessThanOrEqual(1e-12);
    expect(agree).toBe(total);
    expect(sameBits(ours, await kail(file('F32', true), f32Tokens))).toBe(true);
  }, 120_000);

  it.each(QUANT)('%s: within llama.cpp’s own spread, every top-1 kept (0.1 margin)', async (t) => {
    const i = QUANT.indexOf(t);
    const ours = await kail(file(t), qTokens);
    const d = { kail: nmse(ours, exact[i].logits), llama: nmse(runtime[i].logits, exact[i].logits) };
    const { agree, total } = top1Agreement(ours, exact[i].logits, exact[i].nVocab, 0.1);
    table.push(`${PRESET} ${t.padEnd(7)} kail↔llama.cpp exact ${d.kail.toExponential(2)}  llama.cpp default↔exact ${d.llama.toExponential(2)}  top-1 ${agree}/${total}`);
    expect(d.kail).toBeLessThanOrEqual(Math.max(d.llama * 2, 1e-6));
    expect(agree).toBe(total);
  }, 120_000);
});
