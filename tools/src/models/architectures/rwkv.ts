// RWKV-7 (`rwkv7`; llama.cpp src/models/rwkv7-base.cpp and rwkv7.cpp, converted by conversion/rwkv.py
// Rwkv7Model). No attention: the converter writes head_count 0 and wkv.head_size (n_embd / head_size
// WKV heads), the four LoRA ranks (decay, in-context learning rate, value residual mix, gate) and
// feed_forward_length (the channel mix's width). Tensors: token_embd, its LayerNorm token_embd_norm
// (LN0, weight and bias), per block attn_norm and attn_norm_2 (LayerNorms with bias), the time mix's
// fused lerp weight [n_embd, 1, 1, 6] (r, w, k, v, a, g), w0/w1/w2, a0/a1/a2, v0/v1/v2 (block 0's are
// the converter's dummies of the iclr rank, which the graph never reads), g1/g2, k_k, k_a, r_k,
// key/value/receptance, the group norm time_mix_ln (weight, bias) and time_mix_output; the channel
// mix's lerp_k [n_embd, 1, 1], key and value; output_norm (weight, bias) and output. The LoRA
// matrices, w0/a0/v0 and the lerp weights stay F32 in every file (llama-quant leaves them alone).
//
// `arwkv7` (ARWKV-7: RWKV-7 time mixes in Qwen2.5; src/models/arwkv7.cpp, conversion/rwkv.py
// ARwkv7Model): no LN0, RMS norms without bias (attn_norm, ffn_norm, output_norm), the time mix's
// gate (g1/g2 and the sixth lerp) and group norm (time_mix_ln) optional per block in the loader,
// token_shift_count 1, layer_norm_rms_epsilon, and a SwiGLU FFN. `gateBlocks` / `groupNormBlocks`
// pick the blocks that have them (tiny-arwkv7 mixes both kinds in one file to exercise each path).
import { denseFfn, embeddings, f32Tensor, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';

export type Rwkv7Config = ModelConfig & {
  rwkv: { headSize: number; decayRank: number; iclrRank: number; valueRank: number; gateRank: number };
  /** arwkv7: the blocks with a gate (g1/g2, six lerps) and with a group norm (time_mix_ln). */
  gateBlocks?: number[];
  groupNormBlocks?: number[];
};

function checkRwkv7(a: string, c: Rwkv7Config): void {
  const r = c.rwkv;
  if (!r) throw new Error(`${a}: needs rwkv { headSize, decayRank, iclrRank, valueRank, gateRank }`);
  for (const [k, v] of Object.entries(r)) if (!Number.isInteger(v) || v < 1) throw new Error(`${a}: rwkv.${k} ${v} is not a positive integer`);
  if (c.dim % r.headSize !== 0) throw new Error(`${a}: head size ${r.headSize} does not divide dim ${c.dim}`);
  if (a === 'rwkv7' && (c.gateBlocks || c.groupNormBlocks)) throw new Error('rwkv7: every block has its gate and group norm (gateBlocks / groupNormBlocks are arwkv7\'s)');
  if (c.nExperts > 0) throw new Error(`${a}: no experts`);
  if (c.tiedEmbeddings) throw new Error(`${a}: the loader requires output.weight (no tied head)`);
}

/** The time mix's tensors of block i (after its attn_norm): gate and group norm where `gate` / `ln`. */
function timeMix(c: Rwkv7Config, i: number, gate: boolean, ln: boolean): TensorSpec[] {
  const r = c.rwkv;
  const d = c.dim;
  const t: TensorSpec[] = [];
  // LoRA triples (F32): n0 [d], n1 [d, rank], n2 [rank, d].
  const lora = (n: string, rank: number): TensorSpec[] => [
    f32Tensor(`blk.${i}.time_mix_${n}0.weight`, [d], { kind: 'normal', std: 0.5 }, i),
    f32Tensor(`blk.${i}.time_mix_${n}1.weight`, [d, rank], linearInit(d), i),
    f32Tensor(`blk.${i}.time_mix_${n}2.weight`, [rank, d], linearInit(rank), i),
  ];
  t.push(...lora('w', r.decayRank), ...lora('a', r.iclrRank), ...lora('v', i === 0 ? r.iclrRank : r.valueRank));
  if (gate) t.push(f32Tensor(`blk.${i}.time_mix_g1.weight`, [d, r.gateRank], linearInit(d), i), f32Tensor(`blk.${i}.time_mix_g2.weight`, [r.gateRank, d], linearInit(r.gateRank), i));
  t.push(f32Tensor(`blk.${i}.time_mix_lerp_fused.weight`, [d, 1, 1, gate ? 6 : 5], { kind: 'normal', mean: 0.5, std: 0.2 }, i));
  t.push(
    f32Tensor(`blk.${i}.time_mix_k_k.weight`, [d], { kind: 'normal', mean: 1, std: 0.2 }, i),
    f32Tensor(`blk.${i}.time_mix_k_a.weight`, [d], { kind: 'normal', mean: 1, std: 0.2 }, i),
    f32Tensor(`blk.${i}.time_mix_r_k.weight`, [d], { kind: 'normal', std: 0.5 }, i),
  );
  t.push(linear(`blk.${i}.time_mix_key.weight`, d, d, 'attn_k', i), linear(`blk.${i}.time_mix_value.weight`, d, d, 'attn_v', i), linear(`blk.${i}.time_mix_receptance.weight`, d, d, 'attn_q', i));
  if (ln) t.push(...layerNorm(`blk.${i}.time_mix_ln`, d, i));
  t.push(linear(`blk.${i}.time_mix_output.weight`, d, d, 'attn_output', i, residualGain(c)));
  return t;
}

/** The keys both converters write (head_count 0 "required by llama.cpp, unused"). */
function rwkvMetadata(a: string, c: ModelConfig, gateRank: number): [string, GgufValue][] {
  const r = (c as Rwkv7Config).rwkv;
  return [
    [`${a}.vocab_size`, kv.u32(c.vocabSize)],
    [`${a}.context_length`, kv.u32(c.ctx)],
    [`${a}.embedding_length`, kv.u32(c.dim)],
    [`${a}.block_count`, kv.u32(c.nLayers)],
    [`${a}.wkv.head_size`, kv.u32(r.headSize)],
    [`${a}.attention.decay_lora_rank`, kv.u32(r.decayRank)],
    [`${a}.attention.iclr_lora_rank`, kv.u32(r.iclrRank)],
    [`${a}.attention.value_residual_mix_lora_rank`, kv.u32(r.valueRank)],
    [`${a}.attention.gate_lora_rank`, kv.u32(gateRank)],
    [`${a}.feed_forward_length`, kv.u32(c.ff)],
    [`${a}.attention.head_count`, kv.u32(0)],
  ];
}

/** A LayerNorm's weight and bias. */
const layerNorm = (name: string, n: number, layer?: number): TensorSpec[] => [norm(`${name}.weight`, n, layer), f32Tensor(`${name}.bias`, [n], { kind: 'normal', std: 0.1 }, layer)];

export const rwkv7: ArchDefinition = {
  name: 'rwkv7',
  ggufArch: 'rwkv7',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'vocabSize', 'ctx']);
    checkRwkv7('rwkv7', c as Rwkv7Config);
    return { ...c, nHeads: 0, nKvHeads: 0 };
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    return [...rwkvMetadata('rwkv7', c, (c as Rwkv7Config).rwkv.gateRank), ['rwkv7.attention.layer_norm_epsilon', kv.f32(c.normEps)]];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const d = c.dim;
    const [embd, outNorm, ...head] = embeddings(c);
    const t: TensorSpec[] = [embd, ...layerNorm('token_embd_norm', d), outNorm, f32Tensor('output_norm.bias', [d], { kind: 'normal', std: 0.1 }), ...head];
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...layerNorm(`blk.${i}.attn_norm`, d, i), ...layerNorm(`blk.${i}.attn_norm_2`, d, i));
      t.push(...timeMix(c as Rwkv7Config, i, true, true));
      t.push(f32Tensor(`blk.${i}.channel_mix_lerp_k.weight`, [d, 1, 1], { kind: 'normal', mean: 0.5, std: 0.2 }, i));
      t.push(linear(`blk.${i}.channel_mix_key.weight`, d, c.ff, 'ffn_up', i), linear(`blk.${i}.channel_mix_value.weight`, c.ff, d, 'ffn_down', i, residualGain(c)));
    }
    return t;
  },
};

export const arwkv7: ArchDefinition = {
  name: 'arwkv7',
  ggufArch: 'arwkv7',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'vocabSize', 'ctx']);
    checkRwkv7('arwkv7', c as Rwkv7Config);
    return { ...c, nHeads: 0, nKvHeads: 0 };
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const a = c as Rwkv7Config;
    return [
      ...rwkvMetadata('arwkv7', c, (a.gateBlocks ?? []).length > 0 ? a.rwkv.gateRank : 0),
      ['arwkv7.attention.layer_norm_rms_epsilon', kv.f32(c.normEps)],
      ['arwkv7.token_shift_count', kv.u32(1)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const a = c as Rwkv7Config;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(norm(`blk.${i}.attn_norm.weight`, c.dim, i), ...timeMix(a, i, (a.gateBlocks ?? []).includes(i), (a.groupNormBlocks ?? []).includes(i)));
      t.push(...denseFfn(c, i));
    }
    return t;
  },
};

// RWKV-6 (`rwkv6`; llama.cpp src/models/rwkv6-base.cpp and rwkv6.cpp, converted by conversion/rwkv.py
// Rwkv6Model): head_count 0, wkv.head_size, time_mix_extra_dim (the token-shift LoRA's rank, five
// slices of it), time_decay_extra_dim (the decay LoRA's rank), rescale_every_n_layers (the residual
// halved after every n-th block; the converter divides time_mix_output and channel_mix_value by
// 2^(block / n) to match), layer_norm_epsilon, feed_forward_length; token_shift_count is not written
// (llama.cpp's default 2). Tensors: token_embd, LN0, per block attn_norm and attn_norm_2 (LayerNorms
// with bias), time_mix_lerp_x [n_embd, 1, 1], time_mix_w1 [n_embd, 5 extra], time_mix_w2 [extra,
// n_embd, 5], time_mix_lerp_fused [n_embd, 1, 1, 5] (w, k, v, r, g), time_mix_first [head_size,
// n_head] (u), time_mix_decay, decay_w1/decay_w2, key/value/receptance/gate, the group norm
// time_mix_ln (weight, bias) and time_mix_output; channel_mix_lerp_k/lerp_r, key, value and
// receptance; output_norm (weight, bias) and output. The LoRA matrices, lerps, time_mix_first and
// time_mix_decay stay F32 in every file (llama-quant leaves them alone).
export type Rwkv6Config = ModelConfig & {
  rwkv6: { headSize: number; mixExtra: number; decayExtra: number; rescaleEvery: number };
  /** rwkv6qwen2: k/v heads (head_count_kv; 0 or dim / headSize: as many as the WKV heads), r/k/v biases. */
  kvHeads?: number;
  qkvBias?: boolean;
};

// `rwkv6qwen2` (QRWKV6, RWKV6Qwen2Model): no LN0, RMS norms without bias (attn_norm, ffn_norm,
// output_norm), layer_norm_rms_epsilon, token_shift_count 1, head_count_kv (k and v of that many
// heads), no time_mix_first (gated linear attention) and no group norm, optional r/k/v biases, a
// SwiGLU FFN; the converter writes no rescale_every_n_layers.
function rwkv6Arch(a: 'rwkv6' | 'rwkv6qwen2'): ArchDefinition {
  const qwen2 = a === 'rwkv6qwen2';
  return {
    name: a,
    ggufArch: a,
    normalize(c: ModelConfig): ModelConfig {
      requirePositive(c, ['nLayers', 'dim', 'ff', 'vocabSize', 'ctx']);
      const x = c as Rwkv6Config;
      const r = x.rwkv6;
      if (!r) throw new Error(`${a}: needs rwkv6 { headSize, mixExtra, decayExtra, rescaleEvery }`);
      for (const [k, v] of Object.entries(r)) if (!Number.isInteger(v) || v < (k === 'rescaleEvery' ? 0 : 1)) throw new Error(`${a}: rwkv6.${k} ${v} is not a ${k === 'rescaleEvery' ? 'non-negative' : 'positive'} integer`);
      if (c.dim % r.headSize !== 0) throw new Error(`${a}: head size ${r.headSize} does not divide dim ${c.dim}`);
      if (!qwen2 && (x.kvHeads !== undefined || x.qkvBias)) throw new Error('rwkv6: kvHeads / qkvBias are rwkv6qwen2\'s');
      const kvh = x.kvHeads ?? 0;
      if (kvh !== 0 && (c.dim / r.headSize) % kvh !== 0) throw new Error(`${a}: kvHeads ${kvh} does not divide the ${c.dim / r.headSize} WKV heads`);
      if (c.nExperts > 0) throw new Error(`${a}: no experts`);
      if (c.tiedEmbeddings) throw new Error(`${a}: the loader requires output.weight (no tied head)`);
      return { ...c, nHeads: 0, nKvHeads: 0 };
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const x = c as Rwkv6Config;
      const r = x.rwkv6;
      return [
        [`${a}.vocab_size`, kv.u32(c.vocabSize)],
        [`${a}.context_length`, kv.u32(c.ctx)],
        [`${a}.embedding_length`, kv.u32(c.dim)],
        [`${a}.block_count`, kv.u32(c.nLayers)],
        ...(qwen2 ? [] : ([[`${a}.attention.layer_norm_epsilon`, kv.f32(c.normEps)], [`${a}.rescale_every_n_layers`, kv.u32(r.rescaleEvery)]] as [string, GgufValue][])),
        [`${a}.wkv.head_size`, kv.u32(r.headSize)],
        [`${a}.time_mix_extra_dim`, kv.u32(r.mixExtra)],
        [`${a}.time_decay_extra_dim`, kv.u32(r.decayExtra)],
        [`${a}.feed_forward_length`, kv.u32(c.ff)],
        ...(qwen2 ? ([[`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)], [`${a}.token_shift_count`, kv.u32(1)], [`${a}.attention.head_count_kv`, kv.u32(x.kvHeads ?? 0)]] as [string, GgufValue][]) : []),
        [`${a}.attention.head_count`, kv.u32(0)],
      ];
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const x = c as Rwkv6Config;
      const r = x.rwkv6;
      const d = c.dim;
      const kvw = (x.kvHeads ?? 0) === 0 ? d : (x.kvHeads ?? 0) * r.headSize;
      const lerp = (name: string, shape: number[], i: number) => f32Tensor(name, shape, { kind: 'normal', mean: 0.5, std: 0.2 }, i);
      const bias = (name: string, n: number, i: number) => f32Tensor(name, [n], { kind: 'normal', std: 0.1 }, i);
      const t: TensorSpec[] = [];
      if (qwen2) t.push(...embeddings(c));
      else {
        const [embd, outNorm, ...head] = embeddings(c);
        t.push(embd, ...layerNorm('token_embd_norm', d), outNorm, f32Tensor('output_norm.bias', [d], { kind: 'normal', std: 0.1 }), ...head);
      }
      for (let i = 0; i < c.nLayers; i++) {
        // The converter's rescaling of the two residual outputs: 2^-(block / rescale_every).
        const gain = residualGain(c) / (!qwen2 && r.rescaleEvery > 0 ? 2 ** Math.floor(i / r.rescaleEvery) : 1);
        if (qwen2) t.push(norm(`blk.${i}.attn_norm.weight`, d, i));
        else t.push(...layerNorm(`blk.${i}.attn_norm`, d, i), ...layerNorm(`blk.${i}.attn_norm_2`, d, i));
        t.push(lerp(`blk.${i}.time_mix_lerp_x.weight`, [d, 1, 1], i));
        t.push(f32Tensor(`blk.${i}.time_mix_w1.weight`, [d, 5 * r.mixExtra], linearInit(d), i));
        t.push(f32Tensor(`blk.${i}.time_mix_w2.weight`, [r.mixExtra, d, 5], linearInit(r.mixExtra, 0.5), i));
        t.push(lerp(`blk.${i}.time_mix_lerp_fused.weight`, [d, 1, 1, 5], i));
        if (!qwen2) t.push(f32Tensor(`blk.${i}.time_mix_first.weight`, [r.headSize, d / r.headSize], { kind: 'normal', std: 0.5 }, i));
        t.push(f32Tensor(`blk.${i}.time_mix_decay.weight`, [d], { kind: 'normal', mean: -1, std: 0.5 }, i));
        t.push(f32Tensor(`blk.${i}.time_mix_decay_w1.weight`, [d, r.decayExtra], linearInit(d), i));
        t.push(f32Tensor(`blk.${i}.time_mix_decay_w2.weight`, [r.decayExtra, d], linearInit(r.decayExtra, 0.5), i));
        t.push(linear(`blk.${i}.time_mix_key.weight`, d, kvw, 'attn_k', i), linear(`blk.${i}.time_mix_value.weight`, d, kvw, 'attn_v', i));
        t.push(linear(`blk.${i}.time_mix_receptance.weight`, d, d, 'attn_q', i), linear(`blk.${i}.time_mix_gate.weight`, d, d, 'attn_q', i));
        if (x.qkvBias) t.push(bias(`blk.${i}.time_mix_key.bias`, kvw, i), bias(`blk.${i}.time_mix_value.bias`, kvw, i), bias(`blk.${i}.time_mix_receptance.bias`, d, i));
        if (!qwen2) t.push(...layerNorm(`blk.${i}.time_mix_ln`, d, i));
        t.push(linear(`blk.${i}.time_mix_output.weight`, d, d, 'attn_output', i, gain));
        if (qwen2) {
          t.push(...denseFfn(c, i));
          continue;
        }
        t.push(lerp(`blk.${i}.channel_mix_lerp_k.weight`, [d, 1, 1], i), lerp(`blk.${i}.channel_mix_lerp_r.weight`, [d, 1, 1], i));
        t.push(linear(`blk.${i}.channel_mix_key.weight`, d, c.ff, 'ffn_up', i), linear(`blk.${i}.channel_mix_value.weight`, c.ff, d, 'ffn_down', i, gain));
        t.push(linear(`blk.${i}.channel_mix_receptance.weight`, d, d, 'ffn_gate', i));
      }
      return t;
    },
  };
}

export const rwkv6 = rwkv6Arch('rwkv6');
export const rwkv6qwen2 = rwkv6Arch('rwkv6qwen2');
