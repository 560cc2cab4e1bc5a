// Granite Switch (`graniteswitch`, llama.cpp's src/models/granite-switch.cpp): a dense Granite
// decoder (fused attn_qkv, Granite's embedding / attention / residual / logit multipliers) whose
// every projection (q, k, v, attn_output, ffn_gate, ffn_up, ffn_down) adds a LoRA delta B_s (A_s x)
// picked per token from stacked adapters: `<proj>.lora_a` [n_in, rank, n_slots] and `.lora_b`
// [rank, n_out, n_slots], n_slots = adapters.count + 1, slot 0 the base model (zero). A token's slot
// comes from a one-head router attention over the activation tokens its sequence has seen so far;
// activation tokens are embedded as their substitutes. Keys: adapters.count, adapters.lora_rank,
// adapters.router_gain (optional, llama.cpp's default 15), adapters.token_ids_activate and
// adapters.token_ids_substitute (INT32 arrays, one per adapter).
import { checkHeads, embeddings, headDim, linear, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';
import type { GraniteConfig } from './granite';

export interface GraniteSwitchAdapters {
  /** Adapter i's activation token (its slot is i + 1). */
  activate: number[];
  /** The token each activation token is embedded as. */
  substitute: number[];
  rank: number;
  /** adapters.router_gain; absent: the key is not written (llama.cpp's default 15). */
  gain?: number;
  /** Every lora_b is zero: the base model with the adapters' tensors (a test's reference). */
  zeroDeltas?: boolean;
}

export type GraniteSwitchConfig = GraniteConfig & { adapters: GraniteSwitchAdapters };

/** The seven switched projections: [tensor prefix, n_in, n_out, role] of block i. */
function projections(c: ModelConfig): [string, number, number, TensorSpec['role']][] {
  const hd = headDim(c);
  const nQ = hd * c.nHeads;
  const nKv = hd * c.nKvHeads;
  return [
    ['attn_q', c.dim, nQ, 'attn_q'],
    ['attn_k', c.dim, nKv, 'attn_k'],
    ['attn_v', c.dim, nKv, 'attn_v'],
    ['attn_output', nQ, c.dim, 'attn_output'],
    ['ffn_gate', c.dim, c.ff, 'ffn_gate'],
    ['ffn_up', c.dim, c.ff, 'ffn_up'],
    ['ffn_down', c.ff, c.dim, 'ffn_down'],
  ];
}

export const graniteSwitch: ArchDefinition = {
  name: 'graniteswitch',
  ggufArch: 'graniteswitch',
  normalize(c: ModelConfig): ModelConfig {
    const g = c as GraniteSwitchConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    checkExperts(c, false);
    if (c.nExperts > 0) throw new Error('graniteswitch: a dense architecture');
    if (!g.scales || !(g.scales.logit > 0)) throw new Error('graniteswitch: needs scales with a positive logit scale (use a preset)');
    const a = g.adapters;
    if (!a || !Array.isArray(a.activate) || !Array.isArray(a.substitute)) throw new Error('graniteswitch: needs adapters (activate and substitute token ids; use a preset)');
    if (a.activate.length !== a.substitute.length) throw new Error(`graniteswitch: ${a.activate.length} activation tokens but ${a.substitute.length} substitutes (one per adapter)`);
    if (!(Number.isInteger(a.rank) && a.rank > 0)) throw new Error('graniteswitch: adapters.rank must be a positive integer');
    for (const id of [...a.activate, ...a.substitute])
      if (!(Number.isInteger(id) && id >= 0 && id < c.vocabSize)) throw new Error(`graniteswitch: token id ${id} is outside the vocabulary of ${c.vocabSize}`);
    if (new Set(a.activate).size !== a.activate.length) throw new Error('graniteswitch: activation tokens must be distinct');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const g = c as GraniteSwitchConfig;
    const a = 'graniteswitch';
    const s = g.scales;
    const m: [string, GgufValue][] = [
      ...baseMetadata(a, c),
      [`${a}.logit_scale`, kv.f32(s.logit)],
      [`${a}.residual_scale`, kv.f32(s.residual)],
      [`${a}.embedding_scale`, kv.f32(s.embedding)],
      [`${a}.attention.scale`, kv.f32(s.attention)],
      [`${a}.adapters.count`, kv.u32(g.adapters.activate.length)],
      [`${a}.adapters.lora_rank`, kv.u32(g.adapters.rank)],
      [`${a}.adapters.token_ids_activate`, kv.arr(GgufType.INT32, g.adapters.activate)],
      [`${a}.adapters.token_ids_substitute`, kv.arr(GgufType.INT32, g.adapters.substitute)],
    ];
    if (g.adapters.gain !== undefined) m.push([`${a}.adapters.router_gain`, kv.f32(g.adapters.gain)]);
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const g = c as GraniteSwitchConfig;
    const hd = headDim(c);
    const r = g.adapters.rank;
    const slots = g.adapters.activate.length + 1;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(
        norm(`${p}.attn_norm.weight`, c.dim, i),
        linear(`${p}.attn_qkv.weight`, c.dim, hd * (c.nHeads + 2 * c.nKvHeads), 'attn_v', i),
        linear(`${p}.attn_output.weight`, hd * c.nHeads, c.dim, 'attn_output', i, residualGain(c)),
        norm(`${p}.ffn_norm.weight`, c.dim, i),
        linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i),
        linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i),
        linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, residualGain(c)),
      );
      // Stacked adapters (F32: llama.cpp's quantizer keeps tensors whose names do not end in
      // "weight" as they are). Slot 0 is zero; a delta moves its projection by about half of it.
      for (const [name, nIn, nOut] of projections(c)) {
        t.push({ name: `${p}.${name}.lora_a`, shape: [nIn, r, slots], init: { kind: 'normal', std: 1 / Math.sqrt(nIn), zeroLead: nIn * r }, role: 'bias', layer: i });
        const b: TensorSpec['init'] = g.adapters.zeroDeltas ? { kind: 'const', value: 0 } : { kind: 'normal', std: 0.5 / Math.sqrt(r), zeroLead: r * nOut };
        t.push({ name: `${p}.${name}.lora_b`, shape: [r, nOut, slots], init: b, role: 'bias', layer: i });
      }
    }
    return t;
  },
};
