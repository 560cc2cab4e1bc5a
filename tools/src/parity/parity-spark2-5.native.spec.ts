// Parity with llama.cpp (node-llama-cpp 3.22.1) for spark2_5 (Spark-X2.5: sliding and full blocks
// alternating, a fused qkv, partial NeoX RoPE on the full blocks, a sigmoid gate per attention head,
// a GELU-gated FFN) on the model the project writes itself (architectures/spark2-5.ts):
// tiny-spark2-5, whose 64 tokens run well past its sliding window of 8. Same rules as the other
// dense parity specs (dense-parity.suite.ts). The F32 distance over all 64 positions is set by
// ggml's F16 GELU table (ggml_geglu_split: an input one float ulp off across an F16 rounding
// boundary takes the neighbouring entry, at scattered positions; measured 4.3e-11, as the other
// GELU families in parity-alibi), so the bound is the GELU families' and the median position, which
// no crossing reaches, is held to 1e-12.
import { denseParitySuite } from './dense-parity.suite';
import { llamaLogitsBatch } from './llama-ref';
import { medianNmse } from './metrics';

const { file, kailLogits, tokens, table } = denseParitySuite({
  name: 'spark2_5',
  f32: [['tiny-spark2-5', 1e-9]],
  quant: [['tiny-spark2-5', 'Q4_K_M']],
});

it('tiny-spark2-5 F32: the median position is llama.cpp’s to 1e-12 (no GELU table crossing)', async () => {
  const t = tokens('tiny-spark2-5');
  const [ref] = await llamaLogitsBatch([{ model: file('tiny-spark2-5', 'F32'), tokens: t }], { kv: 'f32', flashAttention: 'off', timeoutMs: 300_000 });
  const med = medianNmse(await kailLogits(file('tiny-spark2-5', 'F32'), t), ref.logits, ref.nVocab);
  table.push(`${'tiny-spark2-5'.padEnd(20)} F32     median position NMSE ${med.toExponential(2)}  (bound 1e-12)`);
  expect(med).toBeLessThanOrEqual(1e-12);
}, 300_000);
