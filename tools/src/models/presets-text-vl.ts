// Presets for the vision-language models' text decoders of architectures/text-vl.ts (paddleocr,
// cogvlm, chameleon), text tokens only: n_embd 256, FFN 512, 4 blocks, heads of 64, Llama 3
// byte-level vocabulary (1024; tiny-chameleon 8448, past the image tokens 4..8195 llama.cpp
// suppresses). Each one exercises what its loader reads beyond Llama's block (see text-vl.ts).
// Also Muse Glimmer (architectures/muse-glimmer.ts). Measured against llama.cpp (node-llama-cpp's
// CPU build, F32 KV, flash attention off, 64 tokens, seed 7): F32 NMSE 2.8e-14 (tiny-paddleocr) to
// 1.8e-13 (tiny-muse-glimmer); chameleon on the text tokens' logits 3.8e-14 (tiny-chameleon-swin
// with ffn_down zeroed 7.6e-14: llama.cpp's swin block feeds its FFN the attention output alone);
// quantized kail 3.3e-6 to 1.5e-4 against llama.cpp's own spread of 7.4e-5 to 7.2e-4.
import type { MuseGlimmerConfig } from './architectures/muse-glimmer';
import type { TextVlConfig } from './architectures/text-vl';
import type { Preset } from './presets';

const base = {
  nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, ctx: 4096, normEps: 1e-6, ropeBase: 1e4,
  tiedEmbeddings: false, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'llama3' as const,
};

const paddleocr: TextVlConfig = { ...base, arch: 'paddleocr', name: 'tiny-paddleocr', qkvBias: true, outBias: true, ropeSections: [16, 8, 8, 0], ropeBase: 5e5, normEps: 1e-5 };
const cogvlm: TextVlConfig = { ...base, arch: 'cogvlm', name: 'tiny-cogvlm', nKvHeads: 4, normEps: 1e-5, ropeBase: 5e5 };
const chameleon: TextVlConfig = { ...base, arch: 'chameleon', name: 'tiny-chameleon', vocabSize: 8448, qkNormBias: true, swinNorm: false, normEps: 1e-5 };
const chameleonSwin: TextVlConfig = { ...base, arch: 'chameleon', name: 'tiny-chameleon-swin', vocabSize: 8448, swinNorm: true, tiedEmbeddings: true, nKvHeads: 4 };
// Muse Glimmer (architectures/muse-glimmer.ts; not a vision model, kept here with this batch).
const muse: MuseGlimmerConfig = { ...base, arch: 'muse-glimmer', name: 'tiny-muse-glimmer', window: 8, logitScale: 0.5, softcap: 3, ropeBaseSwa: 5e4, normEps: 1e-5 };
const musePattern: MuseGlimmerConfig = { ...base, arch: 'muse-glimmer', name: 'tiny-muse-glimmer-pattern', window: 6, swaPattern: [true, false, true, false], logitScale: 1.5 };

export const TEXT_VL_PRESETS: Record<string, Preset> = {
  'tiny-paddleocr': { description: "paddleocr (PaddleOCR-VL's language model, text only): Llama block with q/k/v biases, attn_output.bias, M-RoPE sections [16, 8, 8, 0] (NeoX for text), untied head", config: paddleocr },
  'tiny-cogvlm': { description: "cogvlm (CogVLM's language model, text only): one attn_qkv (4 heads), NeoX RoPE at base 10000 (the file's rope.freq_base 500000 unread, as its graph), the vision expert's weights per block (unused by text), untied head", config: cogvlm },
  'tiny-chameleon': { description: 'chameleon (Chameleon, text output): per-head q/k LayerNorms with biases before RoPE, pre-norm blocks (swin_norm false), image-token logits 4..8195 suppressed, vocabulary 8448, untied head', config: chameleon },
  'tiny-chameleon-swin': { description: "chameleon with swin_norm: attn_norm / ffn_norm on the sub-layers' outputs, q/k LayerNorms without biases, 4 KV heads, tied head", config: chameleonSwin },
  'tiny-muse-glimmer': { description: 'muse-glimmer (Muse Glimmer): unweighted RMS norm of the embedding, per-head q/k norms, RoPE over pairs on the sliding blocks only (window 8, every 4th block full, rope.freq_base_swa 50000), sigmoid-gated attention output, post norms (eps 1e-8), logit_scale 0.5, final softcap 3', config: muse },
  'tiny-muse-glimmer-pattern': { description: 'muse-glimmer with a BOOL window pattern (blocks 0 and 2 slide, window 6), logit_scale 1.5, no final_logit_softcapping key (the loader\'s default cap 30)', config: musePattern },
};
