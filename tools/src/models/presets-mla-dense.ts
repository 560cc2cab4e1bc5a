// Presets for the dense MLA decoders of architectures/mla-dense.ts (minicpm3, plm): 4 blocks of 4
// heads, Llama 3 byte-level vocabulary (1024). tiny-minicpm3 has n_embd 128, so llama.cpp's
// hard-coded head scale 256 / n_embd is 2 (at 256 it would be 1 and go unchecked), and LongRoPE
// tables of which a context up to 4096 takes the short one; tiny-minicpm3-long has a training
// context of 128, so any context (padded to 256) takes the long one. tiny-plm: n_embd 256 (K-quants
// apply without fallbacks), values of 48 beside keys of 64 + 32.
import type { MlaDenseConfig } from './architectures/mla-dense';
import type { Preset } from './presets';

const base = {
  nLayers: 4, nHeads: 4, nKvHeads: 4, ctx: 4096, normEps: 1e-5, ropeBase: 10000,
  nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'llama3' as const,
};

const minicpm3: MlaDenseConfig = {
  ...base, arch: 'minicpm3', name: 'tiny-minicpm3', dim: 128, ff: 256, tiedEmbeddings: false, longRope: true,
  mla: { qLora: 96, kvLora: 64, qkNope: 32, qkRope: 16, vHead: 32 },
};
const minicpm3Long: MlaDenseConfig = { ...minicpm3, name: 'tiny-minicpm3-long', ctx: 128 };
const plm: MlaDenseConfig = {
  ...base, arch: 'plm', name: 'tiny-plm', dim: 256, ff: 512, tiedEmbeddings: true, ropeBase: 100000,
  mla: { qLora: 0, kvLora: 128, qkNope: 64, qkRope: 32, vHead: 48 },
};

export const MLA_DENSE_PRESETS: Record<string, Preset> = {
  'tiny-minicpm3': {
    description: 'minicpm3 (MiniCPM3): MLA with q LoRA and one attn_kv_b, NeoX RoPE with LongRoPE tables (the short one at up to 4096), SwiGLU, embedding x12 / residual 1.4/sqrt(L) / head 256/n_embd scales, n_embd 128, untied head',
    config: minicpm3,
  },
  'tiny-minicpm3-long': { description: 'tiny-minicpm3 with a training context of 128: every context takes the long LongRoPE table', config: minicpm3Long },
  'tiny-plm': { description: 'plm (PLM): MLA with a plain attn_q and one attn_kv_b, RoPE over adjacent pairs, squared-ReLU FFN, values of 48 beside keys of 96, tied head', config: plm },
};
