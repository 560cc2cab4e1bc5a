// Parity with llama.cpp for the parallel-residual dense decoders of llama-family.ts's DenseLayout:
// gptneox (GPT-NeoX / Pythia: LayerNorms with biases, one attn_qkv with its bias, NeoX RoPE on a
// quarter of the head, attention and an ungated GELU FFN side by side from norms of their own;
// -seq: use_parallel_residual false, one after the other, half the head rotating), phi2 (Phi-2: one
// LayerNorm read by attention and FFN side by side, split q/k/v with biases, partial NeoX RoPE,
// output.bias; -fused: one attn_qkv with its bias) and falcon (Falcon-7B style: multi-query, one
// attn_norm for both, tied head; -40b: attn_norm_2 for the attention, 2 KV heads, untied head) and,
// beside them, chatglm (ChatGLM3 / GLM-4 older files: RMS norms, one attn_qkv with its bias, RoPE
// over adjacent pairs on half the head, the fused gate|up; -split: split q/k/v, tied head), on
// models the project writes itself. Same rules as parity-moe-families.native.spec.ts.
//
// F32: the GELU of every FFN is ggml's table of F16 inputs (kail's gelu op reads the same table),
// so a last-bit difference upstream that moves an input across an F16 rounding boundary changes
// that activation by up to 1e-3 of itself: the positions before the first such flip agree to
// 3e-14 to 6e-14, the whole 64 tokens to 1e-11 to 5e-10 (measured; tiny-starcoder2's GELU FFN shows
// the same, 3.8e-11). A semantic error moves these logits far more: kail on tiny-falcon-40b with
// attn_norm_2 renamed away (the attention reading attn_norm) 1.3e-2, on tiny-gptneox with
// use_parallel_residual flipped 1.7e-2, against llama.cpp on the files (measured). chatglm has no
// GELU: its bound is 1e-12 (measured 3.9e-14, -split 2.1e-13).
import { denseParitySuite } from './dense-parity.suite';

const PRESETS = ['tiny-gptneox', 'tiny-gptneox-seq', 'tiny-phi2', 'tiny-phi2-fused', 'tiny-falcon', 'tiny-falcon-40b', 'tiny-chatglm', 'tiny-chatglm-split'];

denseParitySuite({
  name: 'gptneox/phi2/falcon/chatglm',
  f32: PRESETS.map((p) => [p, p.startsWith('tiny-chatglm') ? 1e-12 : 1e-8]),
  quant: [
    ['tiny-gptneox', 'Q4_K_M'],
    ['tiny-gptneox-seq', 'Q8_0'],
    ['tiny-phi2', 'Q4_K_M'],
    ['tiny-falcon', 'Q4_K_M'],
    ['tiny-falcon-40b', 'Q8_0'],
    ['tiny-chatglm', 'Q4_K_M'],
  ],
});
