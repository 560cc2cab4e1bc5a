// Parity with llama.cpp for the GPT-2-style decoders: gpt2 (learned absolute positions, LayerNorms
// with biases, one attn_qkv with its bias, every bias, a GELU FFN, tied head), starcoder (the same
// block, multi-query, untied head), codeshell (the GPT-2 block with NeoX RoPE instead of positions;
// -split: split q/k/v with biases and no token_embd, output.weight embedding the tokens) and qwen
// (Qwen v1: Llama's block with one attn_qkv and its bias, NeoX RoPE, feed_forward_length twice the
// FFN's width), on models the project writes itself. Same rules as parity-moe-families.native.spec.ts.
//
// F32 bounds: the GELU files match to 1e-11 to 1e-10 (measured 8e-12 to 9e-11), not 1e-13: GELU
// reads ggml's table of F16 inputs, where a last-bit difference before it (a LayerNorm's or a
// product's summation order) can flip an entry, as tiny-starcoder2's 3.8e-11 in
// parity-moe-families; tiny-qwen (SwiGLU, no table) matches to 4e-14.
import { denseParitySuite } from './dense-parity.suite';

denseParitySuite({
  name: 'gpt2/starcoder/codeshell/qwen',
  f32: [
    ['tiny-gpt2', 1e-9],
    ['tiny-starcoder', 1e-9],
    ['tiny-codeshell', 1e-9],
    ['tiny-codeshell-split', 1e-9],
    ['tiny-qwen', 1e-12],
  ],
  quant: [
    ['tiny-gpt2', 'Q4_K_M'],
    ['tiny-starcoder', 'Q8_0'],
    ['tiny-codeshell', 'Q4_K_M'],
    ['tiny-qwen', 'Q4_K_M'],
  ],
});
