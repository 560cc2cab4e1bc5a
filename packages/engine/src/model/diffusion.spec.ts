// The diffusion loop (model/diffusion.ts) on hand-made logits whose right answers are known: each
// algorithm's choice of position, the schedules' counts and blocks, shift_logits, cfg, sampling
// with seeds, stopping. (Against llama.cpp's logits: tools/src/parity/parity-diffusion.native.spec.ts.)
import { DIFFUSION_DEFAULTS, blockTransferCounts, diffusionAlgorithmOf, diffusionGenerate, diffusionScheduleOf, transferCount, type CanvasLogits, type DiffusionParams } from './diffusion';

const V = 4;
const MASK = 3;

/** A pass whose row for each position is rows[position] (the same whatever the canvas holds). */
const fixed = (rows: number[][]): CanvasLogits => async (canvas) => {
  const out = new Float32Array(canvas.length * V);
  for (let i = 0; i < canvas.length; i++) out.set(rows[i] ?? [0, 0, 0, -9], i * V);
  return out;
};

const params = (over: Partial<DiffusionParams> = {}): DiffusionParams => ({
  ...DIFFUSION_DEFAULTS,
  maskTokenId: MASK,
  shiftLogits: false,
  schedule: { kind: 'block', blockLength: 64 },
  ...over,
});

/** The canvas after each step (the callback sees it before the next pass), and the final one. */
async function trace(prompt: number[], nGen: number, logits: CanvasLogits, p: DiffusionParams, v = V): Promise<number[][]> {
  const seen: number[][] = [];
  const r = await diffusionGenerate(prompt, nGen, v, logits, p, { onStep: (s) => void seen.push(Array.from(s.canvas)) });
  return [...seen.slice(1), Array.from(r.canvas)];
}

/** The first position a one-token-per-step run unmasks. */
async function firstPick(rows: number[][], algorithm: DiffusionParams['algorithm']): Promise<number> {
  const n = rows.length - 1;
  const [first] = await trace([0], n, fixed(rows), params({ algorithm, steps: n, schedule: { kind: 'block', blockLength: n } }));
  return first.findIndex((t, i) => i > 0 && t !== MASK);
}

describe('diffusion algorithms on known logits', () => {
  it('confidence unmasks the most probable token first, one per step under the block schedule', async () => {
    const rows = [[0, 0, 0, 0], [0, 2, 0, -5], [5, 0, 0, -5], [0, 0, 1, -5]];
    // p: position 1 0.786 (token 1), position 2 0.987 (token 0), position 3 0.575 (token 2).
    expect(await trace([0], 3, fixed(rows), params({ steps: 3 }))).toEqual([
      [0, MASK, 0, MASK],
      [0, 1, 0, MASK],
      [0, 1, 0, 2],
    ]);
  });

  it('entropy ranks by negative entropy, margin by the top-two gap: each picks where confidence does not', async () => {
    // Position 1: p 0.5 / 0.5 (entropy 0.69); position 2: p 0.71 with three of 0.10 (entropy 0.92).
    const ent = [[0, 0, 0, 0], [3, 3, -30, -30], [2, 0, 0, 0]];
    expect(await firstPick(ent, 'confidence')).toBe(2);
    expect(await firstPick(ent, 'entropy')).toBe(1);
    // Position 1: 0.525 / 0.475 (margin 0.05); position 2: 0.475 / 0.175 (margin 0.30).
    const mar = [[0, 0, 0, 0], [2, 1.9, -30, -30], [1, 0, 0, 0]];
    expect(await firstPick(mar, 'confidence')).toBe(1);
    expect(await firstPick(mar, 'margin')).toBe(2);
  });

  it('ties go to the earlier position', async () => {
    expect(await firstPick([[0, 0, 0, 0], [1, 0, 0, -9], [1, 0, 0, -9], [1, 0, 0, -9]], 'confidence')).toBe(1);
  });

  it('shift_logits reads position i from row i - 1 (row 0 for position 0)', async () => {
    const v = 8;
    const diag: CanvasLogits = async (canvas) => {
      const out = new Float32Array(canvas.length * v).fill(-1);
      for (let r = 0; r < canvas.length; r++) out[r * v + r] = 4;
      return out;
    };
    const run = async (shift: boolean) => Array.from((await diffusionGenerate([0], 3, v, diag, { ...params({ steps: 3, shiftLogits: shift }), maskTokenId: 7 })).generated);
    expect(await run(false)).toEqual([1, 2, 3]);
    expect(await run(true)).toEqual([0, 1, 2]);
  });

  it('the block schedule fills blocks left to right, however confident the later ones are', async () => {
    const rows = [[0, 0, 0, 0], [1, 0, 0, -9], [1, 0, 0, -9], [9, 0, 0, -9], [9, 0, 0, -9]];
    const t = await trace([0], 4, fixed(rows), params({ steps: 4, schedule: { kind: 'block', blockLength: 2 } }));
    expect(t.map((c) => c.map((x) => (x === MASK ? '_' : 'x')).join(''))).toEqual(['xx___', 'xxx__', 'xxxx_', 'xxxxx']);
  });

  it('the timestep schedule unmasks floor(remaining x (1 - s/t)) a step and everything at the last', async () => {
    // In float32, as llama.cpp computes it: step 1 keeps 6 x (1 - 0.5/0.75) = 1.9999999, so 1.
    expect([0, 1, 2, 3].map((s, i) => transferCount(s, 4, [8, 6, 4, 2][i], { kind: 'timestep', eps: 0 }, []))).toEqual([2, 1, 2, 2]);
    expect(transferCount(0, 4, 8, { kind: 'timestep', eps: 0.5 }, [])).toBe(1);
    expect(blockTransferCounts(5, 3)).toEqual([2, 2, 1]);
    const rows = Array.from({ length: 9 }, () => [1, 0, 0, -9]);
    const t = await trace([0], 8, fixed(rows), params({ steps: 4, schedule: { kind: 'timestep', eps: 0 } }));
    expect(t.map((c) => c.filter((x) => x === MASK).length)).toEqual([6, 5, 3, 0]);
  });

  it('classifier-free guidance mixes uncond + (s + 1)(cond - uncond), uncond the canvas with its prompt masked', async () => {
    const cfgRows: CanvasLogits = async (canvas) => {
      const uncond = canvas[0] === MASK;
      const out = new Float32Array(canvas.length * V);
      for (let i = 0; i < canvas.length; i++) out.set(uncond ? [0, 3, 0, -9] : [0, 2, 1.8, -9], i * V);
      return out;
    };
    const gen = async (cfgScale: number) => Array.from((await diffusionGenerate([0], 1, V, cfgRows, params({ steps: 1, cfgScale }))).generated);
    expect(await gen(0)).toEqual([1]);
    expect(await gen(1)).toEqual([2]);
  });
});

describe('determinism and seeds', () => {
  const noisy: CanvasLogits = async (canvas) => {
    // Rows that depend on the canvas, so each step's choice feeds the next pass.
    const out = new Float32Array(canvas.length * V);
    let h = 7;
    for (const t of canvas) h = (h * 31 + t + 1) % 1009;
    for (let i = 0; i < out.length; i++) out[i] = (i % V === MASK ? -4 : Math.sin(h + i * 1.7)) * 2;
    return out;
  };
  const gen = async (p: DiffusionParams) => Array.from((await diffusionGenerate([0, 1], 12, V, noisy, p)).generated);

  it('temperature 0 with a deterministic algorithm is a fixed function of the logits, whatever the seed', async () => {
    for (const algorithm of ['confidence', 'entropy', 'margin'] as const)
      for (const schedule of [{ kind: 'block', blockLength: 4 }, { kind: 'timestep', eps: 0.001 }] as const) {
        const a = await gen(params({ algorithm, schedule, steps: 6, seed: 1 }));
        expect(await gen(params({ algorithm, schedule, steps: 6, seed: 99 }))).toEqual(a);
        expect(a).not.toContain(MASK);
      }
  });

  it('seeded draws repeat with the seed and change with it (origin, random, temperature, alg_temp, gumbel)', async () => {
    for (const over of [{ algorithm: 'origin' }, { algorithm: 'random' }, { temperature: 1.5 }, { algTemp: 0.5 }, { temperature: 1, gumbelNoise: true }] as const) {
      const p = (seed: number) => params({ ...over, seed, steps: 6, schedule: { kind: 'timestep', eps: 0.001 } });
      const a = await gen(p(5));
      expect(await gen(p(5))).toEqual(a);
      const others = await Promise.all([6, 7, 8, 9].map((s) => gen(p(s))));
      expect(others.some((o) => o.join() !== a.join())).toBe(true);
      expect(a).not.toContain(MASK);
    }
  });

  it('top-k 1 and a tiny top-p keep only the most likely token at any temperature', async () => {
    // (One step, so every position is read from the same pass: with one candidate left every
    // confidence is 1, which would reorder the positions of a longer run.)
    const one = (over: Partial<DiffusionParams>) => gen(params({ ...over, steps: 1, schedule: { kind: 'timestep', eps: 0.001 } }));
    const greedy = await one({});
    for (const over of [{ topK: 1 }, { topP: 1e-6 }]) for (const seed of [1, 2, 3]) expect(await one({ ...over, temperature: 2, seed })).toEqual(greedy);
    expect((await Promise.all([1, 2, 3].map((seed) => one({ temperature: 2, seed })))).some((o) => o.join() !== greedy.join())).toBe(true);
  });

  it("onPass reports after each pass the canvas's settled start (no mask from the first generated position), under every schedule and algorithm", async () => {
    for (const over of [
      { schedule: { kind: 'block', blockLength: 4 } },
      { schedule: { kind: 'timestep', eps: 0.001 } },
      { algorithm: 'origin', schedule: { kind: 'block', blockLength: 4 } },
      { algorithm: 'random', schedule: { kind: 'timestep', eps: 0.001 } },
    ] as const) {
      const seen: { pass: number; settled: number; canvas: number[] }[] = [];
      const r = await diffusionGenerate([0, 1], 12, V, noisy, params({ ...over, steps: 6, seed: 3 }), { onPass: (s) => void seen.push({ pass: s.pass, settled: s.settled, canvas: Array.from(s.canvas) }) });
      expect(seen.map((s) => s.pass)).toEqual(Array.from({ length: r.steps }, (_, i) => i + 1));
      expect(seen.at(-1)!.canvas).toEqual(Array.from(r.canvas));
      for (const [i, s] of seen.entries()) {
        const gen = s.canvas.slice(2);
        const first = gen.indexOf(MASK);
        expect(s.settled).toBe(first < 0 ? 12 : first);
        // (Settled positions keep their tokens to the end.)
        expect(Array.from(r.generated).slice(0, s.settled)).toEqual(gen.slice(0, s.settled));
        if (i) expect(s.settled).toBeGreaterThanOrEqual(seen[i - 1].settled);
      }
    }
  });

  it('alg_temp draws positions without replacement: each step unmasks exactly its count', async () => {
    const seen: number[] = [];
    await diffusionGenerate([0, 1], 12, V, noisy, params({ algTemp: 2, steps: 4, schedule: { kind: 'block', blockLength: 12 } }), { onStep: (s) => void seen.push(s.masked) });
    expect(seen).toEqual([12, 9, 6, 3]);
  });
});

describe('stopping and refusals', () => {
  const rows = fixed(Array.from({ length: 8 }, () => [1, 0, 0, -9]));
  it('a callback returning false stops between steps: masks stay, the passes run are counted', async () => {
    const r = await diffusionGenerate([0], 6, V, rows, params({ steps: 3, schedule: { kind: 'block', blockLength: 6 } }), { onStep: (s) => s.step < 1 });
    expect([r.steps, r.stopped, Array.from(r.generated).filter((t) => t === MASK).length]).toEqual([1, true, 4]);
    const ac = new AbortController();
    ac.abort();
    const a = await diffusionGenerate([0], 6, V, rows, params({ steps: 3 }), { signal: ac.signal });
    expect([a.steps, a.stopped]).toEqual([0, true]);
  });

  it.each<[string, Partial<DiffusionParams>, number, RegExp]>([
    ['steps not a multiple of the blocks', { steps: 5, schedule: { kind: 'block', blockLength: 2 } }, 6, /multiple of the block count \(3/],
    ['eps out of range', { schedule: { kind: 'timestep', eps: 1 } }, 4, /eps must be in \[0, 1\)/],
    ['a mask token outside the vocabulary', { maskTokenId: 9 }, 4, /mask token id 9/],
    ['an unknown algorithm', { algorithm: 'best' as never }, 4, /unknown diffusion algorithm 'best'/],
    ['top-p 0', { topP: 0 }, 4, /top-p must be in \(0, 1\]/],
  ])('refuses %s with KAIL_E_INVALID_ARG', async (_w, over, nGen, want) => {
    await expect(diffusionGenerate([0], nGen, V, rows, params(over))).rejects.toMatchObject({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(want) });
  });

  it('refuses an empty prompt and a generated length below 1', async () => {
    await expect(diffusionGenerate([], 4, V, rows, params())).rejects.toMatchObject({ code: 'KAIL_E_INVALID_ARG' });
    await expect(diffusionGenerate([0], 0, V, rows, params())).rejects.toMatchObject({ code: 'KAIL_E_INVALID_ARG' });
  });
});

describe('diffusion settings by name (kail run\'s flags, the API\'s fields)', () => {
  it('takes algorithms by llama.cpp\'s number or by name, and picks the schedule by the file when none is given', () => {
    expect([diffusionAlgorithmOf('0'), diffusionAlgorithmOf(4), diffusionAlgorithmOf('entropy')]).toEqual(['origin', 'confidence', 'entropy']);
    expect(() => diffusionAlgorithmOf('7')).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/unknown diffusion algorithm '7'/) }));
    expect(diffusionScheduleOf({}, false)).toEqual({ kind: 'block', blockLength: 32 });
    expect(diffusionScheduleOf({}, true)).toEqual({ kind: 'timestep', eps: 0.001 });
    expect(diffusionScheduleOf({ eps: 0 }, false)).toEqual({ kind: 'timestep', eps: 0 });
    expect(() => diffusionScheduleOf({ eps: 0.1, blockLength: 4 }, false)).toThrow(/not both/);
  });
});
