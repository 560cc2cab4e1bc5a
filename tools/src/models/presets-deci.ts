// Presets for deci (DeciLM / Llama-3.1-Nemotron-51B, architectures/deci.ts): n_embd 256, heads of
// 64, Llama 3 byte-level vocabulary (1024). tiny-deci's six blocks: GQA 4/2 (FFN 512), a linear map
// in place of attention (FFN 512), no attention (FFN 768), MHA 4/4 (FFN 256), MQA 4/1, GQA 4/2;
// llama3 rope_freqs factors, attn_output and FFN biases, an untied head. tiny-deci-noffn: block 3
// has attention and no FFN (Nemotron-Ultra's), which llama.cpp's graph drops whole, so it is
// checked against its twin whose block 3 has an FFN with ffn_down all zero (zeroFfnDown).
import type { DeciConfig } from './architectures/deci';
import type { Preset } from './presets';

const base = {
  nLayers: 6, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, ctx: 4096, normEps: 1e-5, ropeBase: 500000,
  nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'llama3' as const,
};

const deci: DeciConfig = {
  ...base, arch: 'deci', name: 'tiny-deci', tiedEmbeddings: false, ropeFreqs: true, attnOutBias: true, ffnBias: true,
  blocks: [
    { heads: 4, kvHeads: 2, ff: 512 },
    { heads: 4, kvHeads: 0, ff: 512 },
    { heads: 0, kvHeads: 0, ff: 768 },
    { heads: 4, kvHeads: 4, ff: 256 },
    { heads: 4, kvHeads: 1, ff: 512 },
    { heads: 4, kvHeads: 2, ff: 512 },
  ],
};
const deciNoFfn: DeciConfig = {
  ...base, arch: 'deci', name: 'tiny-deci-noffn', nLayers: 4, tiedEmbeddings: true,
  blocks: [
    { heads: 4, kvHeads: 2, ff: 512 },
    { heads: 0, kvHeads: 0, ff: 512 },
    { heads: 4, kvHeads: 0, ff: 256 },
    { heads: 4, kvHeads: 2, ff: 0 },
  ],
};

export const DECI_PRESETS: Record<string, Preset> = {
  'tiny-deci': {
    description: 'deci (Nemotron-51B): blocks with their own KV heads (2, linear, none, 4, 1, 2) and FFN widths, llama3 rope_freqs, attn_output and FFN biases, untied head',
    config: deci,
  },
  'tiny-deci-noffn': { description: 'deci with an FFN-free last block (Nemotron-Ultra), a block without attention and a linear one; tied head', config: deciNoFfn },
};
