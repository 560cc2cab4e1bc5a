// Presets for talkie (Talkie, lewtun/talkie-1930-13b; architectures/talkie.ts): 4 blocks, n_embd
// 256, FFN 512, heads of 64, Llama 3 byte-level vocabulary (1024), untied head, no norm weights.
// tiny-talkie: split q/k/v, GQA 4/2, attn_output.scale and ffn_down.scale as converted files carry
// them, rms epsilon float32's (the converter's), logit_scale 1.7. tiny-talkie-fused: one attn_qkv,
// 4 KV heads, no per-tensor scales, epsilon 1e-6, logit_scale 0.6.
import type { TalkieConfig } from './architectures/talkie';
import type { Preset } from './presets';

const base = {
  nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, ctx: 4096, normEps: 1e-6, ropeBase: 1e4,
  tiedEmbeddings: false, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'llama3' as const,
};

const talkie: TalkieConfig = { ...base, arch: 'talkie', name: 'tiny-talkie', logitScale: 1.7, outScales: true, normEps: 1.1920928955078125e-7 };
const fused: TalkieConfig = { ...base, arch: 'talkie', name: 'tiny-talkie-fused', logitScale: 0.6, fusedQkv: true, nKvHeads: 4, ropeBase: 5e5 };

export const TALKIE_PRESETS: Record<string, Preset> = {
  'tiny-talkie': { description: 'talkie (Talkie 1930): unweighted RMS norms, normed embedding added to every block times its layer_output_scale, per-head q gain after RoPE (NeoX), unweighted k norm, attn_output.scale / ffn_down.scale, logit_scale 1.7, untied head', config: talkie },
  'tiny-talkie-fused': { description: 'talkie with one fused attn_qkv, 4 KV heads, rope base 500000, no per-tensor scales, logit_scale 0.6', config: fused },
};
