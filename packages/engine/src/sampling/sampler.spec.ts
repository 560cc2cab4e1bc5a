import vm from 'node:vm';

import { EngineError } from '../errors';
import llamaCppCases from './__fixtures__/llama-cpp-sampling.json';
import samplerCases from './__fixtures__/llama-cpp-samplers.json';
import { Mt19937 } from './rng';
import { createSampler, type SamplerParams } from './sampler';

const f32 = (xs: number[]) => new Float32Array(xs);
const logOf = (ps: number[]) => f32(ps.map(Math.log));

/** The sampling distribution's candidates (nProbs reports them all), ascending by id. */
function kept(logits: Float32Array, params: SamplerParams, history: number[] = []): number[] {
  const r = createSampler({ seed: 1, ...params, nProbs: 1000 }).sample(logits, history);
  return r.top!.map((t) => t.token).sort((a, b) => a - b);
}

/** The fixtures' logits for step `step`: the integer hash the generators (__fixtures__/gen-*.cpp) use. */
function logitsAt(step: number, n: number, scale: number): Float32Array {
  const mix = (x: number) => {
    x = (x ^ (x >>> 16)) >>> 0;
    x = Math.imul(x, 0x7feb352d) >>> 0;
    x = (x ^ (x >>> 15)) >>> 0;
    x = Math.imul(x, 0x846ca68b) >>> 0;
    return (x ^ (x >>> 16)) >>> 0;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const u = mix((Math.imul(step, 0x9e3779b9) ^ Math.imul(i, 0x85ebca6b)) >>> 0);
    out[i] = ((u % 2000001) / 100000 - 10) * scale;
  }
  return out;
}

function counts(params: SamplerParams, logits: Float32Array, draws: number, bins: (t: number) => number, nBins: number) {
  const s = createSampler(params);
  const c = new Array<number>(nBins).fill(0);
  for (let i = 0; i < draws; i++) c[bins(s.sample(logits).token)]++;
  return c;
}

function chiSquare(observed: number[], probs: number[]): number {
  const total = observed.reduce((a, b) => a + b, 0);
  return observed.reduce((acc, o, i) => acc + (o - total * probs[i]) ** 2 / (total * probs[i]), 0);
}

function softmax(xs: number[]): number[] {
  const max = Math.max(...xs);
  const e = xs.map((x) => Math.exp(x - max));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / sum);
}

function randomLogits(n: number, seed: number, scale = 4): Float32Array {
  const rng = new Mt19937(seed);
  const out = new Float32Array(n);
  // Sum of uniforms: roughly normal, so a few tokens stand out as in real logits.
  for (let i = 0; i < n; i++) out[i] = (rng.nextDouble() + rng.nextDouble() + rng.nextDouble() - 1.5) * scale;
  return out;
}

/** The llama.cpp chain in float64 over a sorted copy: the kept set, ascending by id. */
function referenceKept(logits: Float32Array, p: { topK?: number; topP?: number; minP?: number }): number[] {
  let ids = [...logits.keys()].sort((a, b) => logits[b] - logits[a] || a - b);
  if (p.topK) ids = ids.slice(0, p.topK);
  if (p.topP !== undefined && p.topP < 1) {
    const probs = softmax(ids.map((i) => logits[i]));
    let cum = 0;
    const cut = probs.findIndex((q) => (cum += q) >= p.topP!);
    if (cut >= 0) ids = ids.slice(0, cut + 1);
  }
  if (p.minP) {
    const threshold = logits[ids[0]] + Math.log(p.minP);
    ids = ids.filter((i, j) => j === 0 || logits[i] >= threshold);
  }
  return ids.sort((a, b) => a - b);
}

describe('createSampler: greedy', () => {
  it('picks the argmax, whatever the seed', () => {
    const logits = f32([0.5, 3, -1, 2.9, 1]);
    for (const seed of [1, 2, 3]) expect(createSampler({ temperature: 0, seed }).sample(logits).token).toBe(1);
  });

  it('breaks ties toward the lowest id and skips NaN', () => {
    expect(createSampler({ temperature: 0 }).sample(f32([NaN, 1, 7, 7, NaN, 7])).token).toBe(2);
  });

  it('reports logprob 0 and itself as the only candidate', () => {
    expect(createSampler({ temperature: 0, nProbs: 5 }).sample(f32([0, 1, 2]))).toEqual({
      token: 2,
      logprob: 0,
      top: [{ token: 2, logprob: 0 }],
    });
  });

  it('sees the penalized logits', () => {
    const s = createSampler({ temperature: 0, repetitionPenalty: 2 });
    expect(s.sample(f32([3, 2, 0]), [0])).toEqual({ token: 1, logprob: 0 });
  });

  it('is argmax on a 152k vocabulary too', () => {
    const logits = randomLogits(152064, 9);
    let best = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
    expect(createSampler({ temperature: 0, topK: 40, topP: 0.9 }).sample(logits).token).toBe(best);
  });
});

describe('createSampler: seeds', () => {
  const logits = randomLogits(500, 5, 1);
  const run = (params: SamplerParams, steps = 200) => {
    const s = createSampler(params);
    return Array.from({ length: steps }, () => s.sample(logits).token);
  };

  it('gives the same sequence for the same seed', () => {
    expect(run({ seed: 1234, temperature: 0.9 })).toEqual(run({ seed: 1234, temperature: 0.9 }));
    expect(run({ seed: 1234, topK: 40, topP: 0.95, minP: 0.05 })).toEqual(run({ seed: 1234, topK: 40, topP: 0.95, minP: 0.05 }));
  });

  it('gives different sequences for different seeds', () => {
    expect(run({ seed: 1234 })).not.toEqual(run({ seed: 1235 }));
  });

  it('replays after reset()', () => {
    const s = createSampler({ seed: 77 });
    const first = Array.from({ length: 50 }, () => s.sample(logits).token);
    s.reset();
    expect(Array.from({ length: 50 }, () => s.sample(logits).token)).toEqual(first);
  });

  it('draws a random seed when none is given and reports it', () => {
    const a = createSampler();
    const b = createSampler({ seed: a.params.seed });
    expect(Number.isInteger(a.params.seed)).toBe(true);
    expect(Array.from({ length: 50 }, () => a.sample(logits).token)).toEqual(Array.from({ length: 50 }, () => b.sample(logits).token));
  });
});

describe('createSampler: distribution', () => {
  // Chi-square critical values at p = 0.001; the seeds are fixed, so these are deterministic.
  const CHI2_3DF = 16.27;
  const CHI2_5DF = 20.52;
  const p4 = [0.1, 0.2, 0.3, 0.4];

  it('samples a small known distribution', () => {
    const c = counts({ seed: 11 }, logOf(p4), 40000, (t) => t, 4);
    expect(chiSquare(c, p4)).toBeLessThan(CHI2_3DF);
  });

  it('sharpens with temperature: T = 0.5 squares the probabilities', () => {
    const target = p4.map((p) => (p * p) / 0.3);
    const c = counts({ seed: 12, temperature: 0.5 }, logOf(p4), 40000, (t) => t, 4);
    expect(chiSquare(c, target)).toBeLessThan(CHI2_3DF);
  });

  it('renormalizes over the kept candidates (top-k 2)', () => {
    const c = counts({ seed: 13, topK: 2 }, logOf(p4), 20000, (t) => t, 4);
    expect(c[0] + c[1]).toBe(0);
    expect(chiSquare(c.slice(2), [3 / 7, 4 / 7])).toBeLessThan(10.83);
  });

  it('samples the whole vocabulary in id order when nothing truncates, penalties included', () => {
    const logits = new Float32Array(1000).fill(-3);
    logits.set([2, 1, 0.5, 1.5, 0], 100);
    const history = [101, 101, 103];
    const penalized = [...logits];
    penalized[101] = 1 / 1.3 - 2 * 0.2 - 0.3;
    penalized[103] = 1.5 / 1.3 - 0.2 - 0.3;
    const probs = softmax(penalized);
    const bin = (t: number) => (t >= 100 && t < 105 ? t - 100 : 5);
    const target = [0, 1, 2, 3, 4].map((i) => probs[100 + i]);
    target.push(1 - target.reduce((a, b) => a + b, 0));
    const s = createSampler({ seed: 14, repetitionPenalty: 1.3, frequencyPenalty: 0.2, presencePenalty: 0.3 });
    const c = new Array<number>(6).fill(0);
    for (let i = 0; i < 40000; i++) c[bin(s.sample(logits, history).token)]++;
    expect(chiSquare(c, target)).toBeLessThan(CHI2_5DF);
  });

  it('reports the logprob of the drawn token under the sampling distribution', () => {
    const s = createSampler({ seed: 15, temperature: 0.5, nProbs: 4 });
    const r = s.sample(logOf(p4));
    const target = p4.map((p) => (p * p) / 0.3);
    expect(r.logprob).toBeCloseTo(Math.log(target[r.token]), 5);
    expect(r.top!.map((t) => t.token)).toEqual([3, 2, 1, 0]);
    r.top!.forEach((t) => expect(t.logprob).toBeCloseTo(Math.log(target[t.token]), 5));
  });
});

describe('createSampler: truncation keeps exactly the right candidates', () => {
  const small = logOf([0.5, 0.3, 0.15, 0.05]);

  it('top-k keeps the k largest, ties to the lowest id', () => {
    expect(kept(f32([1, 5, 3, 5, 2, 4]), { topK: 3 })).toEqual([1, 3, 5]);
    expect(kept(f32([5, 5, 5]), { topK: 2 })).toEqual([0, 1]);
    expect(kept(f32([1, 2]), { topK: 10 })).toEqual([0, 1]);
  });

  it('top-p keeps the shortest prefix reaching p', () => {
    expect(kept(small, { topP: 0.45 })).toEqual([0]);
    expect(kept(small, { topP: 0.75 })).toEqual([0, 1]);
    expect(kept(small, { topP: 0.9 })).toEqual([0, 1, 2]);
    expect(kept(small, { topP: 0.99 })).toEqual([0, 1, 2, 3]);
    expect(kept(small, { topP: 1 })).toEqual([0, 1, 2, 3]);
  });

  it('min-p keeps tokens at least minP times as likely as the best', () => {
    expect(kept(small, { minP: 0.25 })).toEqual([0, 1, 2]);
    expect(kept(small, { minP: 0.5 })).toEqual([0, 1]);
    expect(kept(small, { minP: 0.7 })).toEqual([0]);
    expect(kept(f32([2, 2, 1]), { minP: 1 })).toEqual([0, 1]);
  });

  it('top-p and min-p see probabilities before temperature, as in llama.cpp', () => {
    expect(kept(small, { topP: 0.75, temperature: 5 })).toEqual([0, 1]);
    expect(kept(small, { minP: 0.5, temperature: 0.1 })).toEqual([0, 1]);
  });

  it('top-p after top-k renormalizes over the top k', () => {
    // Over the top 2, p = 0.625 / 0.375: 0.6 is reached by the first alone.
    expect(kept(small, { topK: 2, topP: 0.6 })).toEqual([0]);
    expect(kept(small, { topP: 0.6 })).toEqual([0, 1]);
  });

  it('penalties come first', () => {
    expect(kept(small, { topK: 2, repetitionPenalty: 100 }, [0])).toEqual([1, 2]);
  });

  it('the logit bias comes before everything, penalties included', () => {
    expect(kept(small, { topK: 2, logitBias: { 3: 10 } })).toEqual([0, 3]);
    expect(kept(small, { topK: 2, logitBias: { 0: -Infinity } })).toEqual([1, 2]);
    // The bias lifts token 3 above 0; the repetition penalty then divides its (positive) logit.
    const lifted = f32([2, 1, 0.5, -1]);
    expect(kept(lifted, { topK: 1, logitBias: { 3: 4 } })).toEqual([3]);
    expect(kept(lifted, { topK: 1, logitBias: { 3: 4 }, repetitionPenalty: 2 }, [3])).toEqual([0]);
  });

  it('a logit bias draws exactly as the biased logits would, greedy, sampled and in probabilities()', () => {
    const logits = randomLogits(32000, 9);
    const bias = { 5: 3.5, 17: -Infinity, 31999: 100, 40000: 7 };
    const biased = logits.slice();
    biased[5] += 3.5;
    biased[17] = -Infinity;
    biased[31999] += 100;
    for (const p of [{ temperature: 0 }, { temperature: 1.2, topK: 50 }, { temperature: 0.8, topP: 0.9 }, { temperature: 1, repetitionPenalty: 1.3 }] as SamplerParams[]) {
      const a = createSampler({ seed: 4, ...p, logitBias: bias });
      const b = createSampler({ seed: 4, ...p });
      const history = [5, 7, 31999];
      for (let i = 0; i < 20; i++) expect(a.sample(logits, history)).toEqual(b.sample(biased, history));
      expect(a.probabilities(logits, history)).toEqual(b.probabilities(biased, history));
    }
    expect(createSampler({ temperature: 0, logitBias: { 31999: 100 } }).sample(logits).token).toBe(31999);
  });

  it.each<[string, { topK?: number; topP?: number; minP?: number }]>([
    ['top-k', { topK: 40 }],
    ['top-p', { topP: 0.9 }],
    ['top-p with a long nucleus', { topP: 0.999 }],
    ['min-p', { minP: 0.05 }],
    ['top-p + min-p', { topP: 0.95, minP: 0.02 }],
    ['top-k + top-p + min-p', { topK: 200, topP: 0.95, minP: 0.05 }],
    ['top-k + min-p', { topK: 100, minP: 0.1 }],
  ])('%s on a 32k vocabulary matches a sort-everything reference', (_name, p) => {
    for (const seed of [1, 2, 3]) {
      const logits = randomLogits(32000, seed);
      expect(kept(logits, { ...p, nProbs: 1000 }).length).toBeGreaterThan(0);
      const ours = createSampler({ seed, ...p, nProbs: 1000 }).sample(logits).top!.map((t) => t.token);
      const ref = referenceKept(logits, p);
      if (ref.length <= 1000) expect(ours.sort((a, b) => a - b)).toEqual(ref);
      else expect(ours.length).toBe(1000);
    }
  });

  it('never draws outside the kept set', () => {
    const logits = randomLogits(5000, 4);
    const allowed = new Set(referenceKept(logits, { topK: 50, topP: 0.8, minP: 0.1 }));
    const s = createSampler({ seed: 3, topK: 50, topP: 0.8, minP: 0.1, temperature: 1.5 });
    for (let i = 0; i < 2000; i++) expect(allowed.has(s.sample(logits).token)).toBe(true);
  });
});

describe('createSampler: inputs', () => {
  it('does not modify the logits', () => {
    const logits = randomLogits(1000, 1);
    const copy = logits.slice();
    const s = createSampler({ seed: 1, temperature: 0.7, repetitionPenalty: 1.5, presencePenalty: 1 });
    s.sample(logits, [1, 2, 3]);
    expect(logits).toEqual(copy);
  });

  it('never picks a NaN or -Infinity token', () => {
    const logits = f32([NaN, -Infinity, 0, NaN, 0]);
    const s = createSampler({ seed: 2 });
    for (let i = 0; i < 200; i++) expect([2, 4]).toContain(s.sample(logits).token);
  });

  it('shares the mass among +Infinity tokens', () => {
    const s = createSampler({ seed: 2 });
    const seen = new Set(Array.from({ length: 100 }, () => s.sample(f32([Infinity, 5, Infinity])).token));
    expect([...seen].sort()).toEqual([0, 2]);
  });

  it('handles vocabularies of different sizes with one sampler', () => {
    const s = createSampler({ seed: 2, topK: 3 });
    expect(s.sample(f32([0, 9])).token).toBe(1);
    expect(s.sample(randomLogits(1000, 1)).token).toBeLessThan(1000);
  });

  it.each<[string, SamplerParams]>([
    ['greedy', { temperature: 0 }],
    ['sampling', {}],
    ['top-k', { topK: 5 }],
    ['top-p', { topP: 0.5 }],
    ['min-p', { minP: 0.5 }],
  ])('throws when no token can be sampled (%s)', (_name, p) => {
    const s = createSampler(p);
    expect(() => s.sample(f32([-Infinity, NaN]))).toThrow(/every logit is -Infinity or NaN/);
  });

  it('rejects empty or non-float32 logits', () => {
    const s = createSampler();
    expect(() => s.sample(new Float32Array(0))).toThrow(/must not be empty/);
    expect(() => s.sample([1, 2] as unknown as Float32Array)).toThrow(/Float32Array/);
    expect(() => s.sample(new Float64Array(2) as unknown as Float32Array)).toThrow(/Float32Array/);
  });

  it('accepts Float32Arrays from another realm (native addons, vm contexts)', () => {
    const foreign = vm.runInNewContext('new Float32Array([0, 5, 1])') as Float32Array;
    expect(foreign instanceof Float32Array).toBe(false);
    expect(createSampler({ temperature: 0 }).sample(foreign).token).toBe(1);
    expect(createSampler({ seed: 1, topP: 0.5 }).sample(foreign).token).toBe(1);
  });
});

describe('createSampler: parameter validation', () => {
  it.each<[SamplerParams, RegExp]>([
    [{ temperature: -0.1 }, /^temperature must be a number in \[0, 100\] \(0 = greedy\), got -0.1$/],
    [{ temperature: 101 }, /^temperature must be/],
    [{ temperature: NaN }, /^temperature must be .* got NaN$/],
    [{ temperature: '1' as unknown as number }, /^temperature must be .* got "1"$/],
    [{ topK: -1 }, /^topK must be an integer ≥ 0 \(0 = off\), got -1$/],
    [{ topK: 1.5 }, /^topK must be an integer/],
    [{ topP: 0 }, /^topP must be a number in \(0, 1\] \(1 = off\), got 0$/],
    [{ topP: 1.01 }, /^topP must be/],
    [{ minP: -0.01 }, /^minP must be a number in \[0, 1\]/],
    [{ minP: 2 }, /^minP must be/],
    [{ repetitionPenalty: 0 }, /^repetitionPenalty must be a number in \(0, 100\]/],
    [{ presencePenalty: 2.5 }, /^presencePenalty must be a number in \[-2, 2\]/],
    [{ frequencyPenalty: -3 }, /^frequencyPenalty must be a number in \[-2, 2\]/],
    [{ frequencyPenalty: Infinity }, /^frequencyPenalty must be/],
    [{ penaltyLastN: -2 }, /^penaltyLastN must be an integer ≥ -1/],
    [{ seed: 1.5 }, /^seed must be an integer \(any safe integer\), got 1.5$/],
    [{ seed: 2 ** 60 }, /^seed must be an integer/],
    [{ nProbs: 1001 }, /^nProbs must be an integer in \[0, 1000\]/],
    [{ logitBias: [1] as unknown as Record<number, number> }, /^logitBias must be an object of token id -> bias/],
    [{ logitBias: { '-1': 1 } }, /^logitBias keys must be token ids \(integers ≥ 0\), got "-1"$/],
    [{ logitBias: { ['x' as unknown as number]: 1 } }, /^logitBias keys must be token ids/],
    [{ logitBias: { 3: NaN } }, /^logitBias\[3\] must be a number \(-Infinity bans the token\), got NaN$/],
    [{ logitBias: { 3: Infinity } }, /^logitBias\[3\] must be a number/],
    [{ logitBias: { 3: '1' as unknown as number } }, /^logitBias\[3\] must be a number .* got "1"$/],
  ])('rejects %p', (params, message) => {
    let err: unknown;
    try {
      createSampler(params);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(EngineError);
    expect((err as EngineError).code).toBe('KAIL_E_INVALID_ARG');
    expect((err as EngineError).message).toMatch(message);
  });

  it('fills in neutral defaults', () => {
    expect(createSampler({ seed: 3 }).params).toEqual({
      temperature: 1,
      topK: 0,
      topP: 1,
      minP: 0,
      repetitionPenalty: 1,
      presencePenalty: 0,
      frequencyPenalty: 0,
      penaltyLastN: 64,
      seed: 3,
      nProbs: 0,
      logitBias: {},
      typicalP: 1,
      topNSigma: -1,
      xtcProbability: 0,
      xtcThreshold: 0.1,
      minKeep: 0,
      dynatempRange: 0,
      dynatempExponent: 1,
      dryMultiplier: 0,
      dryBase: 1.75,
      dryAllowedLength: 2,
      dryPenaltyLastN: 64,
      dryBreakers: [],
      mirostat: 0,
      mirostatTau: 5,
      mirostatEta: 0.1,
      samplers: ['penalties', 'dry', 'top_n_sigma', 'top_k', 'typ_p', 'top_p', 'min_p', 'xtc', 'temperature'],
      adaptiveTarget: -1,
      adaptiveDecay: 0.9,
    });
  });

  it('accepts the edges of every range', () => {
    expect(() =>
      createSampler({ temperature: 100, topK: 0, topP: 1, minP: 1, repetitionPenalty: 100, presencePenalty: -2, frequencyPenalty: 2, penaltyLastN: -1, seed: -5 }),
    ).not.toThrow();
  });
});

describe('createSampler: parity with llama.cpp', () => {
  // Tokens llama.cpp's chain picked for the same logits and seeds (see __fixtures__/gen-llama-cpp-sampling.cpp).
  interface Case extends Required<Omit<SamplerParams, 'nProbs'>> {
    name: string;
    nVocab: number;
    scale: number;
    tokens: number[];
  }
  const cases = llamaCppCases as Case[];


  it.each(cases.map((c) => [c.name, c] as const))('%s: the same tokens for the same seed', (_name, c) => {
    const { name, nVocab, scale, tokens, ...params } = c;
    const s = createSampler(params);
    const history: number[] = [];
    for (let step = 0; step < tokens.length; step++) history.push(s.sample(logitsAt(step, nVocab, scale), history).token);
    expect(history).toEqual(tokens);
  });
});

describe('createSampler: the full chain (DRY, top-n-sigma, typical, XTC, dynamic temperature, min_keep, Mirostat, adaptive-p), parity with llama.cpp', () => {
  // Tokens llama.cpp's chain picked for the same logits, prompt and seed (__fixtures__/gen-llama-cpp-samplers.cpp).

  it.each(samplerCases.chains.map((c) => [c.name, c] as const))('%s: the same tokens for the same seed', (_name, c) => {
    const s = createSampler({ ...c.params, seed: c.seed } as SamplerParams);
    const history = [...c.prompt];
    // (Each drawn token taken, as llama.cpp's accept takes it: adaptive-p learns from it.)
    const draw = (step: number, h: number[]) => {
      const t = s.sample(logitsAt(step, c.nVocab, c.scale), h).token;
      s.accept?.(t);
      return t;
    };
    for (let step = 0; step < c.tokens.length; step++) history.push(draw(step, history));
    expect(history.slice(c.prompt.length)).toEqual(c.tokens);
    // reset() replays the same draws (XTC's, Mirostat's and adaptive-p's state included).
    s.reset();
    const again = [...c.prompt];
    for (let step = 0; step < 8; step++) again.push(draw(step, again));
    expect(again.slice(c.prompt.length)).toEqual(c.tokens.slice(0, 8));
  });

  it('the fast chain and the full one agree where both apply (min_keep 1 changes nothing here)', () => {
    for (const params of [{ temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05 }, { temperature: 1, topP: 0.7 }, { temperature: 1.3, minP: 0.1 }]) {
      const fast = createSampler({ ...params, seed: 5 });
      const full = createSampler({ ...params, seed: 5, minKeep: 1 });
      for (let step = 0; step < 40; step++) {
        const row = logitsAt(step, 2000, 0.5);
        expect(full.sample(row).token).toBe(fast.sample(row).token);
      }
    }
  });

  it('probabilities() follows the full chain; stateful samplers refuse it and say so', () => {
    const s = createSampler({ temperature: 1, typicalP: 0.5, seed: 1, nProbs: 1000 });
    const row = logitsAt(3, 500, 0.5);
    const dense = s.probabilities(row);
    const kept = [...dense.keys()].filter((i) => dense[i] > 0).sort((a, b) => a - b);
    const drawn = s.sample(row).top!.map((t) => t.token).sort((a, b) => a - b);
    expect(kept).toEqual(drawn);
    expect(kept.length).toBeLessThan(500);
    expect(dense.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 5);
    expect(s.stateful).toBe(false);
    for (const p of [{ mirostat: 2 }, { xtcProbability: 0.5 }]) {
      const st = createSampler(p);
      expect(st.stateful).toBe(true);
      expect(() => st.probabilities(row)).toThrow(/XTC, Mirostat and adaptive-p/);
    }
  });

  it('refuses out-of-range values of the new samplers, naming them', () => {
    const bad: [SamplerParams, RegExp][] = [
      [{ typicalP: 1.5 }, /typicalP/],
      [{ topNSigma: NaN }, /topNSigma/],
      [{ xtcProbability: -0.1 }, /xtcProbability/],
      [{ xtcThreshold: 2 }, /xtcThreshold/],
      [{ minKeep: 1.5 }, /minKeep/],
      [{ dynatempRange: -1 }, /dynatempRange/],
      [{ dryMultiplier: -1 }, /dryMultiplier/],
      [{ dryBase: 0.5 }, /dryBase/],
      [{ dryAllowedLength: -1 }, /dryAllowedLength/],
      [{ dryPenaltyLastN: -2 }, /dryPenaltyLastN/],
      [{ dryBreakers: [[]] }, /dryBreakers/],
      [{ dryBreakers: [[1.5]] }, /dryBreakers/],
      [{ mirostat: 3 }, /mirostat must be/],
      [{ mirostatTau: -1 }, /mirostatTau/],
      [{ samplers: ['top_k', 'nucleus' as never] }, /samplers must be a list of at most 64 of penalties, dry/],
    ];
    for (const [p, re] of bad) expect(() => createSampler(p)).toThrow(re);
  });
});
