// Parity with llama.cpp (node-llama-cpp 3.22.1) for talkie (Talkie 1930: unweighted RMS norms, the
// normed embedding added to every block times its layer_output_scale, a per-head q gain
// attn_q_norm {1, n_head} after RoPE, an unweighted k norm, logit_scale) on models the project
// writes itself (architectures/talkie.ts): tiny-talkie (split q/k/v with attn_output.scale and
// ffn_down.scale, float32's epsilon) and tiny-talkie-fused (one attn_qkv). Same rules as the other
// dense parity specs (dense-parity.suite.ts).
import { denseParitySuite } from './dense-parity.suite';

denseParitySuite({
  name: 'talkie',
  f32: [
    ['tiny-talkie', 1e-12],
    ['tiny-talkie-fused', 1e-12],
  ],
  quant: [['tiny-talkie', 'Q4_K_M']],
});
