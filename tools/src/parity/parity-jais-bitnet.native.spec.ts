// Parity with llama.cpp (node-llama-cpp 3.22.1) for jais (ALiBi from attention.max_alibi_bias,
// LayerNorms, one attn_qkv with its bias, 1/head scores, SwiGLU with gate / up / down biases),
// jais2 (LayerNorms, q/k/v biases, NeoX RoPE, ungated ReLU² with biases) and bitnet (sub-norms,
// per-tensor scales, tied head) on models the project writes itself. Same rules as the dense
// cases of parity-moe-families: F32 over 64 tokens against llama.cpp's exact run (F32 KV, no flash
// attention), every top-1; quantized files (bitnet in the ternary TQ2_0 / TQ1_0 it ships in)
// against llama.cpp's own spread.
import { denseParitySuite } from './dense-parity.suite';

denseParitySuite({
  name: 'jais/jais2/bitnet',
  f32: [
    ['tiny-jais', 1e-11],
    ['tiny-jais2', 1e-11],
    ['tiny-bitnet', 1e-11],
  ],
  quant: [
    ['tiny-jais', 'Q4_K_M'],
    ['tiny-jais2', 'Q8_0'],
    ['tiny-bitnet', 'TQ2_0'],
    ['tiny-bitnet', 'TQ1_0'],
  ],
});
