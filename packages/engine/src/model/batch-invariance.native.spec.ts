// A token's logits are the same bits whether it is evaluated alone (decode), inside one prompt
// batch, or split across batches of other sizes. Speculative verification scores k drafted tokens
// in one pass and must choose exactly what one-token-at-a-time decoding would; continuous batching
// must not make one request's output depend on who else is running.
import fs from 'node:fs';

import { EngineModel } from './model';
import { tempDir, writeTestModel, writeTestModels } from '../testing';

const dir = tempDir('kail-batch-inv-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function firstDiff(a: Float32Array, b: Float32Array): number {
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < ua.length; i++) if (ua[i] !== ub[i]) return i;
  return -1;
}

const CASES: [string, string, ...[number, number, number][]][] = [
  ['tiny-llama', 'Q4_0'],
  ['tiny-llama', 'F16'],
  ['tiny-qwen3moe', 'Q4_K'],
  ['tiny-mixtral', 'Q8_0'],
  ['tiny-deepseek2-lite', 'Q6_K'],
  ['tiny-deepseek3', 'Q5_1'],
  ['tiny-glm4moe', 'F32'],
  ['tiny-gpt-oss', 'MXFP4'],
  ['tiny-dots1', 'Q4_K'],
  ['tiny-llama4-maverick', 'Q8_0'],
  ['tiny-deepseek32', 'Q8_0'],
  ['tiny-deepseek2-ocr-sig', 'Q4_K'],
  ['tiny-granite-swa-moe', 'Q8_0'],
  ['tiny-dots3note', 'Q4_K'],
  ['tiny-hy-v4', 'Q4_K'],
  // CSA compressed rows from position 3, the indexer's top 4 from position 19: a token alone = in a batch.
  ['tiny-deepseek4', 'Q4_K'],
  ['tiny-qwen4exp', 'Q4_K'],
  // QSA from position 11 (top 8 in blocks of 4 plus the tail): the selection of a token alone = in a batch.
  ['tiny-qwen4exp-qsa', 'Q4_K'],
  ['tiny-qwen35moe', 'Q4_K'],
  ['tiny-minimax-01-interval', 'Q4_K'],
  // MSA from position 16 (blocks of 4, top 4): the selection of a token alone = in a batch.
  ['tiny-minimax-m3', 'Q4_K'],
  ['tiny-kimi-linear', 'Q4_K'],
  ['tiny-bailingmoe3', 'Q4_K'],
  ['tiny-kimi-k3', 'Q4_K'],
  ['tiny-gemma4', 'Q4_K'],
  // AltUp streams, LAuReL, gaussian top-k, per-layer inputs and the shared-KV blocks 20 and 21 (Gemma 3n).
  ['tiny-gemma3n', 'Q4_K'],
  ['tiny-step35-clamp', 'Q8_0'],
  // Dense layouts: post norms and windows of 8 (OLMo 3), NoPE full blocks among sliding ones at
  // 64 blocks (EXAONE 4), a fused gate|up and partial RoPE (GLM-4).
  ['tiny-olmo2-swa', 'Q4_K'],
  ['tiny-exaone4-swa', 'Q8_0'],
  ['tiny-glm4', 'Q4_K'],
  // xIELU FFNs (Apertus).
  ['tiny-apertus', 'Q4_K'],
  // Dense MLA: MiniCPM3 (LongRoPE table, residual scales), PLM (squared-ReLU FFN).
  ['tiny-minicpm3', 'Q8_0'],
  ['tiny-plm', 'Q4_K'],
  // Blocks of their own shape (Nemotron-51B): linear, attention-free and FFN-free blocks.
  ['tiny-deci', 'Q4_K'],
  ['tiny-deci-noffn', 'Q8_0'],
  // Nanbeige's loops (each pass KV rows of its own); StableLM 2 12B's parallel blocks and per-head
  // q/k LayerNorms.
  ['tiny-nanbeige', 'Q4_K'],
  ['tiny-stablelm-12b', 'Q8_0'],
  // Parallel-residual blocks: GPT-NeoX (ffn_norm of the block's input), Falcon-40B (attn_norm_2
  // for the attention, attn_norm for the FFN, GQA), Phi-2 (one LayerNorm for both, output.bias);
  // ChatGLM (fused QKV with its bias, RoPE over adjacent pairs on half the head, fused gate|up).
  ['tiny-gptneox', 'Q4_K'],
  ['tiny-falcon-40b', 'Q8_0'],
  ['tiny-phi2', 'Q8_0'],
  ['tiny-chatglm', 'Q4_K'],
  // Learned absolute positions (GPT-2; StarCoder multi-query): a token's position row alone = in a batch.
  ['tiny-gpt2', 'Q4_K'],
  ['tiny-starcoder', 'Q8_0'],
  // ALiBi (BLOOM: the embedding's LayerNorm, fused q/k/v; Baichuan 13B: 40 blocks, 6 heads): a
  // token's distances to the cached rows alone = in a batch.
  ['tiny-bloom', 'Q4_K'],
  ['tiny-baichuan-13b', 'Q8_0'],
  // Jais (ALiBi with 1/head scores, fused q/k/v, every bias); BitNet in its ternary TQ2_0 (sub-norms,
  // per-tensor scales).
  ['tiny-jais', 'Q4_K'],
  ['tiny-bitnet', 'TQ2_0'],
  // Qwen2-VL's text model (q/k/v biases, M-RoPE sections); PLaMo (attention and FFN side by side
  // from one RMS norm); PLaMo 3 (fused q/k/v, q/k norms, post norms, windows on blocks of a BOOL
  // pattern at their own RoPE base); OpenELM (head counts and FFN widths per block).
  ['tiny-qwen2vl', 'Q4_K'],
  ['tiny-plamo', 'Q8_0'],
  ['tiny-plamo3-pattern', 'Q4_K'],
  ['tiny-openelm', 'Q4_K'],
  // Vision-language text decoders: PaddleOCR-VL (biases, M-RoPE sections), CogVLM (one attn_qkv, its
  // vision expert unread), Chameleon with swin norms (per-head q/k LayerNorms, image logits clamped).
  ['tiny-paddleocr', 'Q4_K'],
  ['tiny-cogvlm', 'Q8_0'],
  ['tiny-chameleon-swin', 'Q4_K'],
  // Muse Glimmer: windows on a BOOL pattern, NoPE full blocks, gated attention, the default softcap.
  ['tiny-muse-glimmer-pattern', 'Q4_K'],
  // HRM-Text: 12 KV cache slots over 4 blocks (nested low/high passes, each pass its own slots).
  ['tiny-hrm-text', 'Q4_K'],
  // Spark-X2.5: sliding (window 8) and full blocks, fused qkv, a sigmoid gate per head, GeGLU.
  ['tiny-spark2-5', 'Q4_K'],
  // Talkie: weightless norms, the normed embedding added to every block, a per-head q gain, logit_scale.
  ['tiny-talkie', 'Q4_K'],
  // Pure state-space models (no attention: Mamba-1 with Falcon-Mamba's weightless norms, Mamba-2)
  // and Falcon-H1 (attention beside Mamba-2 in every block).
  ['tiny-falcon-mamba', 'Q4_K'],
  ['tiny-mamba2', 'Q8_0'],
  ['tiny-falcon-h1', 'Q4_K'],
  // PLaMo 2: Mamba blocks (per-head z|x, normed B/C/dt) and GQA blocks with per-head q/k norms, post norms.
  ['tiny-plamo2', 'Q4_K'],
  // RWKV-7 (token shifts, the WKV-7 recurrence, quantized r/k/v/output and channel mix).
  ['tiny-rwkv7', 'Q4_K'],
  ['tiny-arwkv7', 'Q8_0'],
  // RWKV-6 (data-dependent lerps through a grouped LoRA, the WKV-6 recurrence with time_first).
  ['tiny-rwkv6', 'Q8_0'],
  ['tiny-rwkv6qwen2', 'Q4_K'],
  // Granite Switch: activation tokens (position, token, the token it is embedded as) switch the
  // LoRA adapter mid-sequence (426 at 3: adapter 1; 919 at 9: the average of 1 and 3; 306 at 13),
  // in the first split pass, the second and the other sequence's row of the mixed pass.
  ['tiny-graniteswitch', 'Q4_K', [3, 426, 100], [9, 919, 102], [13, 306, 103]],
];

// Every model below in one gen-model process (each test still asks writeTestModel for its file,
// then in dir): with a cold model cache, one process per model cost ~0.4 s of start each.
beforeAll(() => {
  writeTestModels(dir, [...CASES.map(([preset, type]) => [preset, type] as const), ['tiny-t5', 'Q8_0'], ['tiny-graniteswitch', 'Q4_K']]);
}, 600_000);

describe.each(CASES)('%s %s: batch-invariant logits', (preset, type, ...switches) => {
  it('one pass = token by token = split passes, bit for bit (f16 KV)', async () => {
    const m = EngineModel.load(writeTestModel(dir, preset, type), { threads: 2, nCtx: 64, nSeqMax: 2 });
    try {
      const V = m.nVocab;
      const put = (toks: number[], k: 1 | 2) => toks.map((t, i) => switches.find(([p]) => p === i)?.[k] ?? t);
      const toks = put(Array.from({ length: 20 }, (_, i) => ((i * 37 + 5) % (V - 10)) + 3), 1);
      const all = await m.evaluate(0, toks, 'all');
      if (switches.length) {
        // The switches act: with each activation token's substitute instead (the same embedding, no
        // switch) the rows part from the first switch on.
        m.truncate(0, 0);
        const plain = await m.evaluate(0, put(toks, 2), 'all');
        const at = switches[0][0];
        expect(firstDiff(plain.subarray(0, at * V), all.subarray(0, at * V))).toBe(-1);
        expect(firstDiff(plain.subarray(at * V, (at + 1) * V), all.subarray(at * V, (at + 1) * V))).toBeGreaterThanOrEqual(0);
      }
      m.truncate(0, 0);
      for (let i = 0; i < toks.length; i++) {
        const one = await m.evaluate(0, [toks[i]], 'last');
        const d = firstDiff(one, all.subarray(i * V, (i + 1) * V));
        if (d >= 0) throw new Error(`position ${i} alone differs at vocab ${d}: ${one[d]} vs ${all[i * V + d]}`);
      }
      m.truncate(0, 0);
      await m.evaluate(0, toks.slice(0, 7), 'all');
      const tail = await m.evaluate(0, toks.slice(7), 'all');
      expect(firstDiff(tail, all.subarray(7 * V))).toBe(-1);
      // Another sequence in the same pass does not change this one's logits.
      m.truncate(0, 0);
      await m.evaluate(1, toks.slice(0, 3), 'all');
      const mixed = await m.forwardBatch({
        tokens: Int32Array.from([toks[0], toks[3]]),
        pos: Int32Array.from([0, 3]),
        seq: Int32Array.from([0, 1]),
        output: Uint8Array.from([1, 1]),
      });
      expect(firstDiff(mixed.subarray(0, V), all.subarray(0, V))).toBe(-1);
      expect(firstDiff(mixed.subarray(V, 2 * V), all.subarray(3 * V, 4 * V))).toBe(-1);
    } finally {
      m.close();
    }
  }, 60_000);
});

// T5 (an encoder-decoder): the decoder's rows after an encoded prompt give the same bits in one
// pass, one at a time, and beside another sequence encoded in the same pass with another prompt.
describe('tiny-t5 Q8_0: encoder-decoder passes', () => {
  it('decoder rows in one pass = one at a time = beside another sequence, bit for bit', async () => {
    const m = EngineModel.load(writeTestModel(dir, 'tiny-t5', 'Q8_0'), { threads: 2, nCtx: 64, nSeqMax: 2 });
    try {
      const V = m.nVocab;
      const prompt = Array.from({ length: 12 }, (_, i) => ((i * 37 + 5) % (V - 10)) + 3);
      const other = Array.from({ length: 9 }, (_, i) => ((i * 53 + 11) % (V - 10)) + 3);
      const dec = [0, 17, 401, 93, 650, 5];
      const rows = (toks: number[], pos0: number, seq: number, out: number) => ({
        tokens: Int32Array.from(toks), pos: Int32Array.from(toks.map((_, i) => pos0 + i)), seq: new Int32Array(toks.length).fill(seq), output: new Uint8Array(toks.length).fill(out),
      });
      await m.forwardBatch(rows(prompt, 0, 0, 0));
      const all = await m.forwardBatch(rows(dec, prompt.length, 0, 1));
      m.truncate(0, 0);
      await m.forwardBatch(rows(prompt, 0, 0, 0));
      for (let i = 0; i < dec.length; i++) {
        const one = await m.forwardBatch(rows([dec[i]], prompt.length + i, 0, 1));
        expect(firstDiff(one, all.subarray(i * V, (i + 1) * V))).toBe(-1);
      }
      m.truncate(0, 0);
      const both = (a: ReturnType<typeof rows>, b: ReturnType<typeof rows>) => ({
        tokens: Int32Array.from([...a.tokens, ...b.tokens]), pos: Int32Array.from([...a.pos, ...b.pos]), seq: Int32Array.from([...a.seq, ...b.seq]), output: Uint8Array.from([...a.output, ...b.output]),
      });
      await m.forwardBatch(both(rows(other, 0, 1, 0), rows(prompt, 0, 0, 0)));
      const mixed = await m.forwardBatch(both(rows(dec.slice(0, 3), other.length, 1, 1), rows(dec.slice(0, 3), prompt.length, 0, 1)));
      expect(firstDiff(mixed.subarray(3 * V), all.subarray(0, 3 * V))).toBe(-1);
      expect(firstDiff(mixed.subarray(0, V), all.subarray(0, V))).toBeGreaterThanOrEqual(0);
    } finally {
      m.close();
    }
  }, 60_000);
});

// Granite Switch: each token's adapter comes from a router over its own sequence's earlier tokens
// (its KV layer), so sequences on different adapters (426: adapter 1, 561: 2, 919 then 306: the
// average of 3 and 4) give the same bits alone, token by token, and interleaved in one pass.
describe('tiny-graniteswitch Q4_K: sequences on different adapters side by side', () => {
  it('alone = token by token = interleaved with the others, bit for bit', async () => {
    const m = EngineModel.load(writeTestModel(dir, 'tiny-graniteswitch', 'Q4_K'), { threads: 2, nCtx: 32, nSeqMax: 3 });
    try {
      const V = m.nVocab;
      const base = Array.from({ length: 14 }, (_, i) => ((i * 37 + 5) % (V - 10)) + 3);
      const put = (at: [number, number][]) => base.map((t, i) => at.find(([p]) => p === i)?.[1] ?? t);
      const seqs = [put([[4, 426]]), put([[6, 561]]), put([[3, 919], [10, 306]])];
      const clear = () => seqs.forEach((_, s) => m.truncate(s, 0));
      const alone: Float32Array[] = [];
      for (const [s, toks] of seqs.entries()) {
        clear();
        alone.push(await m.evaluate(s, toks, 'all'));
        clear();
        for (let i = 0; i < toks.length; i++) {
          const one = await m.evaluate(s, [toks[i]], 'last');
          const d = firstDiff(one, alone[s].subarray(i * V, (i + 1) * V));
          if (d >= 0) throw new Error(`sequence ${s} position ${i} alone differs at vocab ${d}`);
        }
      }
      // The adapters act: the sequences part where their activation tokens come.
      expect(firstDiff(alone[0].subarray(0, 3 * V), alone[1].subarray(0, 3 * V))).toBe(-1);
      expect(firstDiff(alone[0].subarray(4 * V, 5 * V), alone[1].subarray(4 * V, 5 * V))).toBeGreaterThanOrEqual(0);
      expect(firstDiff(alone[0].subarray(13 * V), alone[1].subarray(13 * V))).toBeGreaterThanOrEqual(0);
      clear();
      const n = base.length;
      const mixed = await m.forwardBatch({
        tokens: Int32Array.from({ length: 3 * n }, (_, j) => seqs[j % 3][Math.floor(j / 3)]),
        pos: Int32Array.from({ length: 3 * n }, (_, j) => Math.floor(j / 3)),
        seq: Int32Array.from({ length: 3 * n }, (_, j) => j % 3),
        output: new Uint8Array(3 * n).fill(1),
      });
      for (let j = 0; j < 3 * n; j++) {
        const [s, i] = [j % 3, Math.floor(j / 3)];
        const d = firstDiff(mixed.subarray(j * V, (j + 1) * V), alone[s].subarray(i * V, (i + 1) * V));
        if (d >= 0) throw new Error(`sequence ${s} position ${i} interleaved differs at vocab ${d}`);
      }
    } finally {
      m.close();
    }
  }, 60_000);
});
