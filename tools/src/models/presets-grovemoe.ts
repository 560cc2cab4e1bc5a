// Presets for grovemoe (inclusionAI GroveMoE; architectures/grovemoe.ts): Qwen3-MoE blocks plus
// chunk ("adjugate") experts, one per group of experts_per_group routed experts, whose mix is
// scaled by expert_group_scale.
import type { GroveMoeConfig } from './architectures/grovemoe';
import type { Preset } from './presets';

// GroveMoE style, scaled down: tiny-qwen3moe's attention in 4 blocks (4 heads over 2 KV heads of
// 128: attention width 512 over n_embd 256, per-head q/k norms, NeoX RoPE base 1e6), 8 softmax
// experts top-2 of 512 renormalized, experts_per_group 2: 4 chunk experts of 64 (top-2 of them:
// min(n_expert_used, n_chunk)). Every width differs from the others (n_embd 256, head 128, expert
// 512, chunk 64): a reader that takes the chunk width from the head size (llama.cpp's default when
// the key is absent; the converter writes head_dim) or from the expert width fails to load.
// expert_group_scale 0.5 rather than the real 0.05 so that the chunk experts visibly move the logits
// of a random model. Untied head, Qwen2 tokenizer. Rows: 256 and 512 take every K-quant;
// ffn_down_chexps' rows of 64 fall back (Q4_K -> Q5_0, Q6_K -> Q8_0, IQ types -> IQ4_NL), as the
// narrow ffn_down_exps of the other tiny MoE presets do. Measured in llama.cpp (node-llama-cpp's
// build, flash attention off, F32 KV, 64 tokens, seeds 1-3): logits std 2.0, 58..64 distinct top-1
// tokens of 64; F32 vs Q8_0 NMSE 1.5e-4..1.7e-3, Q4_K_M 1.9e-2 (the same model with
// expert_group_scale 0: 2.7e-4..1.0e-3 and 1.1e-2..1.3e-2, about tiny-qwen3moe's 8.7e-3 at Q4_K_M);
// scale 0.5 against 0 (no chunk experts) 3.2e-2..3.4e-2 with 17..20 of 64 top-1 tokens changed,
// against the real 0.05 2.7e-2..2.8e-2.
const tinyGrove: GroveMoeConfig = {
  arch: 'grovemoe', name: 'tiny-grovemoe', nLayers: 4, dim: 256, ff: 768, nHeads: 4, nKvHeads: 2, headDim: 128,
  nExperts: 8, nExpertsUsed: 2, expertFf: 512, sharedFf: 0, chunkFf: 64, expertsPerGroup: 2, expertGroupScale: 0.5,
  vocabSize: 1024, vocabKind: 'qwen2', ctx: 4096, ropeBase: 1e6, normEps: 1e-6, tiedEmbeddings: false,
};
// tiny-grovemoe with 4 experts per group: 2 chunk experts, as many as the experts used (top-2), the
// most llama.cpp can run (see GroveMoeConfig: more used experts than chunk experts fails its
// graph), so the chunk call picks top-min(2, 2) = 2, and the two top experts of one group name the
// same chunk expert twice; chunk experts of 256 (rows that take Q4_K without a fallback), scale
// 0.25 (another value than tiny-grovemoe's, so a reader with a constant fails one of them), tied head
// (the residual writers scaled with its embedding, architectures/grovemoe.ts). Measured as
// tiny-grovemoe: logits std 2.2 (through the tied head each position's own token leads: 62..64
// distinct top-1 tokens, none changed by the chunk experts), F32 vs Q8_0 NMSE 2.0e-4..6.6e-4,
// Q4_K_M 3.3e-3..3.8e-3; scale 0.25 against 0: 7.8e-3..9.3e-3, against 0.05: 5.1e-3..6.2e-3.
const tinyGroveG4: GroveMoeConfig = {
  ...tinyGrove, name: 'tiny-grovemoe-g4', expertsPerGroup: 4, chunkFf: 256, expertGroupScale: 0.25, tiedEmbeddings: true,
};
// GroveMoE-Inst's shape, estimated (not read from its config.json): Qwen3-30B-A3B's trunk, which it
// is up-cycled from (48 blocks of 2048, 32 heads over 4 KV heads of 128, 128 experts top-8 of 768,
// intermediate_size 6144, rope_theta 1e6, RMS eps 1e-6, untied head), plus what conversion/grovemoe.py
// hardcodes: chunk experts of head_dim (128), 2 experts per group (64 chunk experts), scale 0.05;
// context 40960 and vocabulary 32000 as bench-qwen3-30b-a3b-shaped (the real vocabulary: 151936).
// 3 + 48 x 14 = 675 tensors, 32.46B parameters (32.95B with the real vocabulary: the published
// 33B). Rows of 2048, 4096 and 768 take Q4_K; ffn_down_chexps' rows of 128 fall back to Q5_0, as
// llama-quant does for the real model. --layers N keeps the first N blocks (1 block at Q4_K with
// --expert-pool 64: 0.80B parameters, 457 MB, which llama.cpp loads and runs to logits of std 2.0).
const groveBench: GroveMoeConfig = {
  ...tinyGrove, name: 'bench-grovemoe-shaped', nLayers: 48, dim: 2048, ff: 6144, nHeads: 32, nKvHeads: 4, headDim: 128, nExperts: 128, nExpertsUsed: 8,
  expertFf: 768, chunkFf: 128, expertsPerGroup: 2, expertGroupScale: 0.05, vocabSize: 32000, ctx: 40960, tiedEmbeddings: false,
};

export const GROVEMOE_PRESETS: Record<string, Preset> = {
  'tiny-grovemoe': {
    description: 'grovemoe (GroveMoE style): qwen3moe blocks (q/k norms, heads of 128 over n_embd 256) with 8 softmax experts top-2 of 512 plus 4 chunk experts of 64 (experts_per_group 2) run on the routed output, scaled by 0.5 (real: 0.05) and added; untied head',
    config: tinyGrove,
  },
  'tiny-grovemoe-g4': {
    description: 'tiny-grovemoe with experts_per_group 4: 2 chunk experts of 256 for top-2 routing (n_expert_used = chunk expert count, the most llama.cpp runs), group scale 0.25, tied head',
    config: tinyGroveG4,
  },
  'bench-grovemoe-shaped': {
    description: 'GroveMoE-Inst 33B-A3B shape estimated from Qwen3-30B-A3B and the converter defaults (48 x 2048, 32/4 heads x 128, 128 experts top-8 of ff 768 + 64 chunk experts of 128, 2 per group, scale 0.05), vocab 32000; --layers N keeps the first N blocks',
    config: groveBench,
  },
};
