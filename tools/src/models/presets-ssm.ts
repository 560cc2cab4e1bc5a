// Presets for the pure state-space models (mamba, mamba2) and Falcon-H1 (architectures/ssm.ts).
import type { FalconH1Config, Mamba2Config, MambaConfig } from './architectures/ssm';
import type { Preset } from './presets';

const base = { ctx: 4096, normEps: 1e-5, expertFf: 0, sharedFf: 0, nExperts: 0, nExpertsUsed: 0, vocabSize: 1024, ropeBase: 10000 };

// Mamba-130m style in 4 blocks of n_embd 256: Mamba-1 mixers of d_inner 512 (2 x dim, the only
// expansion llama.cpp takes), state 16, 4-tap convolutions, a dt rank of 32 (HF's default would be
// ceil(256 / 16) = 16, whose ssm_dt rows fit no 32-block type: see tiny-jamba), a tied head.
const mambaTiny: MambaConfig = {
  ...base, arch: 'mamba', name: 'tiny-mamba', nLayers: 4, dim: 256, ff: 0, nHeads: 0, nKvHeads: 0, vocabKind: 'llama3', tiedEmbeddings: true,
  ssm: { convKernel: 4, stateSize: 16, dtRank: 32 },
};
// Falcon-Mamba style: ssm.dt_b_c_rms (weightless RMS norms of dt, B and C), an untied head, 3 blocks.
const falconMamba: MambaConfig = { ...mambaTiny, name: 'tiny-falcon-mamba', nLayers: 3, tiedEmbeddings: false, dtBcRms: true, normEps: 1e-6 };
// Mamba-2 (mamba2-130m / Mamba-Codestral style) in 4 blocks: 8 heads of 64 (d_inner 512), 2 groups
// of state 64, 4-tap convolutions, the grouped ssm_norm; untied head.
const mamba2Tiny: Mamba2Config = {
  ...base, arch: 'mamba2', name: 'tiny-mamba2', nLayers: 4, dim: 256, ff: 0, nHeads: 0, nKvHeads: 0, vocabKind: 'llama3', tiedEmbeddings: false,
  ssm: { convKernel: 4, stateSize: 64, nGroup: 2, nHeads: 8, headDim: 64 },
};
// Falcon-H1 style in 4 blocks of n_embd 256: GQA of 4 heads of 64 over 2 KV heads (NeoX RoPE) beside
// a Mamba-2 mixer of 8 heads of 64 (d_inner 512), 2 groups of state 32, then a SwiGLU FFN of 512.
// -plain: no ssm_norm (optional in the loader), a tied head, 3 blocks.
const falconH1Tiny: FalconH1Config = {
  ...base, arch: 'falcon-h1', name: 'tiny-falcon-h1', nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, headDim: 64, vocabKind: 'llama3', tiedEmbeddings: false,
  ssm: { convKernel: 4, stateSize: 32, nGroup: 2, nHeads: 8, headDim: 64 },
};
const falconH1Plain: FalconH1Config = { ...falconH1Tiny, name: 'tiny-falcon-h1-plain', nLayers: 3, tiedEmbeddings: true, plain: true };

export const SSM_PRESETS: Record<string, Preset> = {
  'tiny-mamba': { description: 'mamba (Mamba-1, mamba-130m style): 4 blocks of Mamba-1 mixers only (d_inner 512, state 16, dt rank 32), no attention, no FFN, tied head', config: mambaTiny },
  'tiny-falcon-mamba': { description: 'mamba with ssm.dt_b_c_rms (Falcon-Mamba style): weightless RMS norms of dt, B and C; 3 blocks, untied head', config: falconMamba },
  'tiny-mamba2': { description: 'mamba2 (Mamba-2 / Mamba-Codestral style): 4 blocks of Mamba-2 mixers only (8 heads x 64, 2 groups of state 64, grouped norm), no attention, no FFN', config: mamba2Tiny },
  'tiny-falcon-h1': { description: 'falcon-h1 (Falcon-H1 style): 4 blocks of NeoX-RoPE GQA (4 x 64 over 2 KV heads) and a Mamba-2 mixer (8 heads x 64, 2 groups of state 32) side by side, then a SwiGLU FFN of 512', config: falconH1Tiny },
  'tiny-falcon-h1-plain': { description: 'tiny-falcon-h1 without ssm_norm (the grouped norm), tied head, 3 blocks', config: falconH1Plain },
};
