import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_LAYERS, type HParams } from '../hparams';
import { ProgramBuilder, ropeParams, yarnAttnFactor } from '../program-builder';
import { mlaBlock, outputHead, readMlaDims, readMoeRouting, tensorLookup, trunkLayers, type DsaParams, type MlaBlockContext, type MlaDims } from './deepseek2';

/** llama.cpp's LLAMA_MAX_LAYERS: the longest per-block flag array its loader takes. */
const LLAMA_MAX_LAYERS = 512;

/**
 * A per-block flag array as llama.cpp's get_arr reads one into its fixed per-layer array: BOOL,
 * INT32 or UINT32 entries, at most 512 of them; blocks past its end read 0. Required.
 */
function flagArray(hp: HParams, key: string, n: number): boolean[] {
  const k = `${hp.arch}.${key}`;
  const raw = hp.meta.kv[k];
  if (raw === undefined) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: the file lacks metadata '${k}', an array with one flag per block`);
  if (typeof raw !== 'object' || raw === null || !('length' in (raw as object)) || typeof raw === 'string')
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: metadata '${k}' must be an array with one flag per block`);
  const arr = Array.from(raw as ArrayLike<unknown>);
  if (arr.length > LLAMA_MAX_LAYERS) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: metadata '${k}' has ${arr.length} entries; at most ${LLAMA_MAX_LAYERS}`);
  const bad = arr.findIndex((x) => !(typeof x === 'boolean' || (typeof x === 'number' && Number.isInteger(x)) || typeof x === 'bigint'));
  if (bad >= 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: metadata '${k}' entry ${bad} is ${String(arr[bad])}; expected a flag (bool or integer)`);
  return Array.from({ length: n }, (_, i) => (i < arr.length ? Number(arr[i]) !== 0 : false));
}

/**
 * rednote dots.llm3 (`dots3note`, llama.cpp src/models/dots3note.cpp): DeepSeek-V3.2-style blocks,
 * absorbed MLA on every block with a sliding-window kind and a full kind of their own geometry.
 *
 * - Sliding blocks (`attention.sliding_window_pattern`, one flag per block) attend to the last
 *   `attention.sliding_window` positions, their latent of `attention.kv_lora_rank_swa`, heads of
 *   `attention.key_length_mla_swa` / `attention.value_length_mla_swa`, RoPE base
 *   `rope.freq_base_swa`; full blocks use kv_lora_rank, key_length_mla / value_length_mla and
 *   rope.freq_base. Both rotate rope.dimension_count dims over adjacent pairs, the scale the file's,
 *   and scale scores by 1/sqrt(key size of their kind) (no DeepSeek mscale). Per-block head counts.
 * - The shared RoPE key is RMS-normed (attn_k_norm) before its rotation.
 * - DeepSeek-V3.2's lightning indexer (indexer.* tensors, NeoX RoPE at rope.freq_base, LayerNorm
 *   epsilon 1e-6, Hadamard-rotated) restricts the full blocks' attention to the top
 *   `attention.indexer.top_k` positions; `attention.indexer.types` flags the blocks that own one,
 *   and llama.cpp's graph runs it on every full block, so each full block must be flagged.
 * - Each head's output times sigmoid(attn_gate . normed input) before attn_output (as step35).
 * - `leading_dense_block_count` dense SwiGLU blocks, then sigmoid (expert_gating_func) routing
 *   with a selection bias, renormalization and scale as the file says, plus shared experts.
 * - The multi-token-prediction block a file may append (`nextn_predict_layers`) is left out, as
 *   llama.cpp's main graph leaves it.
 */
export function buildDots3note(hp: HParams, tensors: Map<string, GgufTensorInfo>, opt: { nCtxSeq?: number } = {}): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  const n = trunkLayers(hp);
  // The full blocks' MLA sizes (key_length_mla and value_length_mla are required here).
  for (const k of ['attention.key_length_mla', 'attention.value_length_mla', 'attention.q_lora_rank', 'attention.kv_lora_rank'])
    if (!md.has(k)) bad(`the file lacks metadata '${hp.arch}.${k}', which llama.cpp's dots3note loader requires`);
  const full: MlaDims = readMlaDims(hp);
  if (full.qLora < 1) bad('attention.q_lora_rank must be positive: the queries and the indexer read the q LoRA latent');
  // The sliding blocks': their own latent and head sizes, the same rotary dims.
  const kvLoraSwa = md.int('attention.kv_lora_rank_swa', undefined, 1, MAX_DIM);
  const kSwa = md.int('attention.key_length_mla_swa', undefined, 1, MAX_DIM);
  const vSwa = md.int('attention.value_length_mla_swa', undefined, 1, MAX_DIM);
  const swaDims: MlaDims = { ...full, kvLora: kvLoraSwa, qkNope: kSwa - full.qkRope, vHead: vSwa };
  if (swaDims.qkNope < 1) bad(`attention.key_length_mla_swa ${kSwa} leaves no dimensions beside the ${full.qkRope} rotary ones`);
  const window = md.int('attention.sliding_window', undefined, 1, 1 << 30);
  const baseSwa = md.num('rope.freq_base_swa');
  if (!(baseSwa > 0)) bad(`rope.freq_base_swa ${baseSwa} is not positive`);
  const swa = flagArray(hp, 'attention.sliding_window_pattern', n);
  const indexerTypes = flagArray(hp, 'attention.indexer.types', n);
  for (let il = 0; il < n; il++)
    if (!swa[il] && !indexerTypes[il])
      bad(`block ${il} has full attention, which runs the lightning indexer, but attention.indexer.types gives it none`);

  const dsa: DsaParams = {
    nHead: md.int('attention.indexer.head_count', undefined, 1, MAX_DIM),
    headDim: md.int('attention.indexer.key_length', undefined, 1, MAX_DIM),
    topK: md.int('attention.indexer.top_k', undefined, 1, 1 << 24),
    neox: true,
    eps: 1e-6,
    full: swa.map((s) => !s),
  };
  if (dsa.headDim < 64 || (dsa.headDim & (dsa.headDim - 1)) !== 0 || dsa.headDim < full.qkRope)
    bad(`attention.indexer.key_length ${dsa.headDim} must be a power of two of at least 64 that holds the ${full.qkRope} rotary dimensions`);
  // Every position is selected when the context holds no more than top_k: the indexer is left out.
  const sparse = opt.nCtxSeq === undefined || opt.nCtxSeq > dsa.topK;

  md.int('expert_shared_count', undefined, 0, MAX_DIM);
  const nDense = md.int('leading_dense_block_count', undefined, 0, MAX_LAYERS);
  // (expert_gating_func is required: llama.cpp's loader reads it without a default.)
  const routing = readMoeRouting(hp, 0);
  // The rope of llama.cpp's context: YaRN's attention factor without DeepSeek's log multiplier
  // (this loader does not read it); the sliding blocks take their own base, the same scale.
  const ropeFull = ropeParams(hp, false, { n_dims: full.qkRope, attn_factor: yarnAttnFactor(hp, 0) });
  const ropeSwa = { ...ropeFull, freq_base: baseSwa };
  const scale = (k: number) => Math.fround(1 / Math.fround(Math.sqrt(k)));
  const shapes = [
    { dims: full, kqScale: scale(full.qkNope + full.qkRope), rope: ropeFull, window: 0, indexed: sparse },
    { dims: swaDims, kqScale: scale(kSwa), rope: ropeSwa, window, indexed: false },
  ];
  const c: MlaBlockContext = {
    hp,
    tensors,
    dims: full,
    routing,
    nDense,
    kqScale: shapes[0].kqScale,
    rope: ropeFull,
    naive: false,
    dsa: sparse ? dsa : undefined,
    blockShape: (il) => shapes[swa[il] ? 1 : 0],
    kRopeNorm: true,
    headGate: true,
    moeOptions: { probsBias: 'required', shared: 'required' },
  };
  const p = new ProgramBuilder();
  const x = p.buf('x', hp.nEmbd);
  p.op('embed', x, { weights: { weight: need('token_embd.weight') } });
  for (let il = 0; il < n; il++) mlaBlock(p, c, il, x);
  return outputHead(p, hp, tensors, x);
}
