// The diffusion LMs' programs (llada, llada-moe, rnd1, dream through buildLlamaFamily with
// causal: false), the loader's refusals, their experts streamed, and the diffusion loop on a loaded
// model: progress, stopping, the file's mask token and shift_logits, and autoregressive generation
// refused. Numerics against llama.cpp: tools/src/parity/parity-diffusion.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram, ProgramOp } from '@kailstream/core-native';

import { generate } from '../../generate';
import { native } from '../../native';
import { diffusionGenerateWith, diffusionModelSettings } from '../diffusion';
import { EngineModel, planModel, type LoadModelOptions } from '../model';
import { opsOf, patchedCopy, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
const PRESETS = ['tiny-llada', 'tiny-dream', 'tiny-llada-moe', 'tiny-rnd1'];
beforeAll(() => {
  for (const p of PRESETS) files[p] = testModelFile(dir, p);
}, 300_000);
const prog = (p: string, edit?: (t: Map<string, GgufTensorInfo>) => void) => {
  const t = new Map(files[p].tensors);
  edit?.(t);
  return programOf(files[p].kv, t);
};
const tensor = (name: string, dims: number[]): GgufTensorInfo => ({ name, dims, type: 0, offset: 0, size: dims.reduce((a, b) => a * b, 4) }) as unknown as GgufTensorInfo;

describe('programs', () => {
  it.each(PRESETS)('%s: every attention op attends both ways', (p) => {
    const att = opsOf(prog(p), 'attention');
    expect(att).toHaveLength(2);
    expect(att.every((o) => o.params!.causal === false)).toBe(true);
  });

  it("llada: adjacent-pair RoPE; leaves out the attn_output / FFN biases and rope_freqs its loader reads", () => {
    const p = prog('tiny-llada', (t) => {
      t.set('rope_freqs.weight', tensor('rope_freqs.weight', [32]));
      t.set('blk.0.attn_output.bias', tensor('blk.0.attn_output.bias', [256]));
      t.set('blk.0.ffn_down.bias', tensor('blk.0.ffn_down.bias', [256]));
    });
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === false && !o.weights?.freq_factors)).toBe(true);
    expect(p.ops.some((o) => o.weights?.bias)).toBe(false);
  });

  it("dream: q/k/v biases, NeoX RoPE, the tied head without output.bias (its graph adds none)", () => {
    const p = prog('tiny-dream', (t) => t.set('output.bias', tensor('output.bias', [1024])));
    expect(opsOf(p, 'matmul').filter((o) => /attn_[qkv]\.bias$/.test(o.weights!.bias ?? ''))).toHaveLength(6);
    const head = opsOf(p, 'matmul').at(-1)!;
    expect([head.weights!.weight, head.weights!.bias]).toEqual(['token_embd.weight', undefined]);
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === true)).toBe(true);
  });

  it('llada-moe: per-head q/k norms, softmax top-4 not renormalized; rnd1: renormalized', () => {
    const l = prog('tiny-llada-moe');
    expect(opsOf(l, 'head_rms_norm')).toHaveLength(4);
    expect(opsOf(l, 'moe').map((o) => o.params!.norm_w)).toEqual([false, false]);
    expect(opsOf(prog('tiny-rnd1'), 'moe').map((o) => o.params!.norm_w)).toEqual([true, true]);
  });
});

describe('refusals', () => {
  const reshape = (t: Map<string, GgufTensorInfo>, name: string, dims: number[]) => t.set(name, { ...t.get(name)!, dims });
  it.each<[string, string, (t: Map<string, GgufTensorInfo>) => void, RegExp]>([
    ['an rnd1 file without attn_k_norm', 'tiny-rnd1', (t) => t.delete('blk.1.attn_k_norm.weight'), /blk\.1\.attn_k_norm\.weight/],
    ['a llada-moe file without its router', 'tiny-llada-moe', (t) => t.delete('blk.0.ffn_gate_inp.weight'), /'blk\.0\.ffn_gate_inp\.weight'/],
    ['llada-moe q/k norms of no width it knows', 'tiny-llada-moe', (t) => reshape(t, 'blk.0.attn_q_norm.weight', [48]), /attn_q_norm \[48\] .* are neither one head \(64\)/],
    ['a dream file without ffn_up', 'tiny-dream', (t) => t.delete('blk.1.ffn_up.weight'), /blk\.1\.ffn_up\.weight/],
    ['a llada-moe file without output.weight (its loader requires it; llada, rnd1 and dream tie)', 'tiny-llada-moe', (t) => t.delete('output.weight'), /'output\.weight'/],
  ])('refuses %s, naming it', (_w, p, edit, want) => {
    expect(() => prog(p, edit)).toThrow(want);
  });

  it('the native checks refuse a non-causal attention op over a window or past its buffers', () => {
    const f = writeTestModel(dir, 'tiny-llada');
    const load = (edit: (o: ProgramOp) => void) => {
      const q: ModelProgram = JSON.parse(JSON.stringify(prog('tiny-llada')));
      edit(q.ops.find((o) => o.op === 'attention')!);
      return () => new (native().Model)(f, q, { threads: 1, nCtx: 16 }).close();
    };
    expect(load(() => undefined)).not.toThrow();
    expect(load((o) => (o.params!.window = 8))).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/non-causal attention over a sliding window or chunks is not supported/) }));
    expect(load((o) => (o.params!.n_head_kv = 3))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/4 heads over 3 kv heads/) }));
  });

  it('EngineModel.load of a file whose tensor is renamed away fails with KAIL_E_BAD_MODEL; the file itself loads', () => {
    const f = writeTestModel(dir, 'tiny-llada');
    const bad = patchedCopy(f, `${dir}/llada-renamed.gguf`, 'blk.1.attn_v.weight', 'blk.1.attn_v.weighX');
    expect(() => EngineModel.load(bad, { threads: 1, nCtx: 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/blk\.1\.attn_v\.weight/) }));
    EngineModel.load(f, { threads: 1, nCtx: 32 }).close();
  });
});

describe('generation', () => {
  const PROMPT = [1, 17, 99, 3, 250, 7];
  const opts: LoadModelOptions = { threads: 2, nCtx: 64 };

  it('refuses autoregressive generation with KAIL_E_INVALID_ARG naming the diffusion loop', async () => {
    const m = EngineModel.load(writeTestModel(dir, 'tiny-llada'), opts);
    try {
      expect([m.diffusion, m.encoder, m.nBatch]).toEqual([true, false, 64]);
      await expect(generate(m, PROMPT, { maxTokens: 4 })).rejects.toMatchObject({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/diffusion language model \(llada\).*not token by token/) });
      // One pass from position 0, as an encoder's.
      await m.evaluate(0, PROMPT, 'all');
      await expect(m.evaluate(0, [5], 'all')).rejects.toMatchObject({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/already holds 6 positions/) });
    } finally {
      m.close();
    }
  });

  it('runs the loop with progress per step, stops when the callback says so, and refuses a canvas past the context', async () => {
    const m = EngineModel.load(writeTestModel(dir, 'tiny-dream'), opts);
    try {
      expect(diffusionModelSettings(m)).toEqual({ maskTokenId: 1021, shiftLogits: true });
      const seen: [number, number, number][] = [];
      const r = await diffusionGenerateWith(m, PROMPT, 12, { steps: 4, schedule: { kind: 'block', blockLength: 6 } }, { onStep: (s) => void seen.push([s.step, s.total, s.masked]) });
      // (A position whose most likely token is the mask token itself stays masked, as in llama.cpp
      // and the reference loops: random weights do that now and then.)
      expect(seen.map(([s, t]) => [s, t])).toEqual([[0, 4], [1, 4], [2, 4], [3, 4]]);
      expect(seen[0][2]).toBe(12);
      for (let i = 1; i < 4; i++) expect(seen[i][2]).toBeLessThan(seen[i - 1][2]);
      expect([r.steps, r.stopped, Array.from(r.canvas.slice(0, 6))]).toEqual([4, false, PROMPT]);
      const again = await diffusionGenerateWith(m, PROMPT, 12, { steps: 4, schedule: { kind: 'block', blockLength: 6 } });
      expect(Array.from(again.generated)).toEqual(Array.from(r.generated));
      const stop = await diffusionGenerateWith(m, PROMPT, 12, { steps: 4, schedule: { kind: 'block', blockLength: 6 } }, { onStep: (s) => s.step < 2 });
      expect([stop.steps, stop.stopped, Array.from(stop.generated.slice(6)).every((t) => t === 1021)]).toEqual([2, true, true]);
      await expect(diffusionGenerateWith(m, PROMPT, 60, { steps: 4, schedule: { kind: 'timestep', eps: 0.001 } })).rejects.toMatchObject({ code: 'KAIL_E_CONTEXT_OVERFLOW' });
    } finally {
      m.close();
    }
  });

  it('refuses to generate from a file without tokenizer.ggml.mask_token_id with KAIL_E_BAD_MODEL', async () => {
    const bad = patchedCopy(writeTestModel(dir, 'tiny-llada'), `${dir}/llada-nomask.gguf`, 'tokenizer.ggml.mask_token_id', 'tokenizer.ggml.mask_token_ix');
    const m = EngineModel.load(bad, opts);
    try {
      await expect(diffusionGenerateWith(m, PROMPT, 8, { steps: 2, schedule: { kind: 'timestep', eps: 0.001 } })).rejects.toMatchObject({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/needs tokenizer\.ggml\.mask_token_id/) });
    } finally {
      m.close();
    }
  });

  it.each(['tiny-dream', 'tiny-rnd1'])('%s: two canvases in one batch give the rows each gives alone (non-causal attention within its sequence)', async (preset) => {
    const m = EngineModel.load(writeTestModel(dir, preset), { ...opts, nSeqMax: 2 });
    try {
      const a = [...PROMPT, 1021, 1021, 1021];
      const b = [5, 6, 7, 1021, 1021];
      const alone = [await m.evaluate(0, a, 'all'), await m.evaluate(1, b, 'all')];
      m.truncate(0, 0);
      m.truncate(1, 0);
      const both = await m.forwardBatch({
        tokens: Int32Array.from([...a, ...b]),
        pos: Int32Array.from([...a.map((_, i) => i), ...b.map((_, i) => i)]),
        seq: Int32Array.from([...a.map(() => 0), ...b.map(() => 1)]),
        output: new Uint8Array(a.length + b.length).fill(1),
      });
      const V = m.nVocab;
      let worst = 0;
      for (const [k, rows] of alone.entries())
        for (let i = 0; i < rows.length; i++) worst = Math.max(worst, Math.abs(both[(k ? a.length * V : 0) + i] - rows[i]));
      // (Measured: bit-identical.)
      expect(worst).toBe(0);
    } finally {
      m.close();
    }
  });

  it.each(['tiny-llada-moe', 'tiny-rnd1'])('%s Q4_K: streamed experts (~2.5 per layer cached) give the in-memory logits and tokens', async (preset) => {
    const file = writeTestModel(dir, preset, 'Q4_K');
    const run = async (extra: LoadModelOptions) => {
      const m = EngineModel.load(file, { ...opts, ...extra });
      try {
        const logits = await m.evaluate(0, [...PROMPT, ...PROMPT], 'all');
        m.truncate(0, 0);
        const r = await diffusionGenerateWith(m, PROMPT, 8, { steps: 4, algorithm: 'entropy', schedule: { kind: 'timestep', eps: 0.001 } });
        return { logits, tokens: Array.from(r.generated), streamed: m.plan !== null };
      } finally {
        m.close();
      }
    };
    const mem = await run({});
    const p = planModel(file, { ...opts, ramBytes: 2 ** 40, ramReserveBytes: 0 });
    const st = await run({ ramBytes: p.fixedBytes + Math.round(2.5 * (p.cacheBytes / p.cacheExpertsPerLayer)), ramReserveBytes: 0 });
    expect([mem.streamed, st.streamed]).toEqual([false, true]);
    expect(Buffer.from(st.logits.buffer).equals(Buffer.from(mem.logits.buffer))).toBe(true);
    expect(st.tokens).toEqual(mem.tokens);
  });
});
