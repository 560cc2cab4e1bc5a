// LoRA adapters for the project's test models, in llama.cpp's GGUF adapter format (what
// convert_lora_to_gguf.py writes): general.type "adapter", adapter.type "lora",
// adapter.lora.alpha, and for each adapted base tensor NAME a pair NAME.lora_a [n_in, rank] and
// NAME.lora_b [rank, n_out] (ggml order), so the delta is B (A x). The token embedding's pair is
// flipped as llama.cpp's converter writes it: lora_a [rank, n_vocab] (rows gathered per token) and
// lora_b [rank, n_embd]. Random weights, seeded per tensor name like the models'.
import { GgmlType } from '../gguf/constants';
import { encodeF16 } from '../gguf/float-encode';
import { GgufWriter, kv } from '../gguf/writer';
import type { ModelConfig } from './arch';
import { getArch } from './architectures';
import { planModel } from './build';
import { hashSeed, Xoshiro128 } from './rng';

export interface WriteLoraOptions {
  /** The base model's config (the same preset and options the model was written with). */
  config: ModelConfig;
  out: string;
  /** Rank of each pair. Default 8. */
  rank?: number;
  /** adapter.lora.alpha; the delta is scaled by alpha / rank (0: by the scale alone). Default 16. */
  alpha?: number;
  /**
   * Which base tensors get a pair, by the part of the name after `blk.N.` (attn_q, attn_v,
   * ffn_down, ...) or the whole name (output.weight, token_embd.weight). Default: every 2-D
   * attention and dense-FFN projection (attn_q/k/v/output, ffn_gate/up/down) and output.weight;
   * routed experts by ffn_gate_exps, ffn_up_exps, ffn_down_exps.
   */
  targets?: string[];
  /** Element type of the pairs. Default F32. */
  type?: 'F32' | 'F16';
  seed?: number;
  /** Standard deviation of lora_b's values (A's are 1/sqrt(n_in)). Default 0.05. */
  bStd?: number;
}

const DEFAULT_TARGETS = ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down', 'output.weight'];

/** The base tensors `targets` selects: [name, shape] of matrices, and of routed experts' stacks ([n_in, n_out, E]). */
export function loraTargets(config: ModelConfig, targets: string[] = DEFAULT_TARGETS): { name: string; shape: number[] }[] {
  const { tensors } = planModel(config, 'F32');
  const picked = tensors.filter((t) => {
    if ((t.shape.length !== 2 && !(t.shape.length === 3 && /_exps\.weight$/.test(t.name))) || !t.name.endsWith('.weight')) return false;
    const local = t.name.replace(/^blk\.\d+\./, '').replace(/\.weight$/, '');
    return targets.includes(t.name) || (t.name.startsWith('blk.') && targets.includes(local));
  });
  if (!picked.length) throw new Error(`no 2-D tensor of ${config.arch} matches the LoRA targets ${targets.join(', ')}`);
  return picked.map((t) => ({ name: t.name, shape: t.shape }));
}

/** Writes the adapter; returns its path and the base tensors it adapts. */
export function writeLoraAdapter(opts: WriteLoraOptions): { path: string; tensors: string[] } {
  const rank = opts.rank ?? 8;
  if (!Number.isInteger(rank) || rank < 1) throw new Error(`rank must be a positive integer, got ${rank}`);
  const type = opts.type ?? 'F32';
  const seed = opts.seed ?? 1;
  const arch = getArch(opts.config.arch);
  const base = loraTargets(opts.config, opts.targets);
  const w = new GgufWriter(opts.out);
  w.set('general.architecture', kv.str(arch.ggufArch));
  w.set('general.type', kv.str('adapter'));
  w.set('general.name', kv.str(`${opts.config.name}-lora-r${rank}`));
  w.set('adapter.type', kv.str('lora'));
  w.set('adapter.lora.alpha', kv.f32(opts.alpha ?? 16));
  // Routed experts' pairs are stacks of one pair per expert: [n_in, rank, E] and [rank, n_out, E].
  const pairs = base.map(({ name, shape: [nIn, nOut, ...experts] }) =>
    name === 'token_embd.weight'
      ? { name, a: [rank, nOut], b: [rank, nIn], aStd: 1, bStd: opts.bStd ?? 0.05 }
      : { name, a: [nIn, rank, ...experts], b: [rank, nOut, ...experts], aStd: 1 / Math.sqrt(nIn), bStd: opts.bStd ?? 0.05 },
  );
  const ggml = type === 'F16' ? GgmlType.F16 : GgmlType.F32;
  for (const p of pairs) {
    w.addTensor({ name: `${p.name}.lora_a`, shape: p.a, type: ggml });
    w.addTensor({ name: `${p.name}.lora_b`, shape: p.b, type: ggml });
  }
  w.begin();
  try {
    for (const p of pairs) {
      for (const [suffix, shape, std] of [['lora_a', p.a, p.aStd], ['lora_b', p.b, p.bStd]] as const) {
        const name = `${p.name}.${suffix}`;
        const v = new Float32Array(shape.reduce((x, y) => x * y, 1));
        new Xoshiro128(hashSeed(seed, name)).fillNormal(v, 0, std);
        w.writeTensorData(name, type === 'F16' ? encodeF16(v) : new Uint8Array(v.buffer));
      }
    }
    w.finish();
  } catch (e) {
    w.abort();
    throw e;
  }
  return { path: opts.out, tensors: pairs.map((p) => p.name) };
}
