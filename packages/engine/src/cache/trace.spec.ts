import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { EngineError } from '../errors';
import { parseRoutingTrace, readRoutingTrace } from './trace';

const rec = (o: Record<string, unknown>) => JSON.stringify(o);

function invalid(text: string): EngineError {
  try {
    parseRoutingTrace(text, 't.jsonl');
  } catch (e) {
    expect(e).toBeInstanceOf(EngineError);
    expect((e as EngineError).code).toBe('KAIL_E_INVALID_ARG');
    return e as EngineError;
  }
  throw new Error('expected a parse error');
}

describe('parseRoutingTrace', () => {
  it('orders records by problem, then token, then layer, numbering tokens across problems', () => {
    // Layer-major like the fixture, problem 1 listed first, token_idx restarting per problem.
    const text = [
      rec({ problem_id: 1, layer: 0, token_idx: 0, experts: [5, 6], gating_probs: [0.6, 0.4] }),
      rec({ problem_id: 0, layer: 1, token_idx: 1, experts: [3, 4], gating_probs: [0.5, 0.5] }),
      rec({ problem_id: 0, layer: 0, token_idx: 1, experts: [2, 3], gating_probs: [0.7, 0.3] }),
      rec({ problem_id: 0, layer: 1, token_idx: 0, experts: [1, 2], gating_probs: [0.9, 0.1] }),
      '',
      rec({ problem_id: 0, layer: 0, token_idx: 0, experts: [0, 1], gating_probs: [0.8, 0.2], dataset: 'x' }),
    ].join('\n');
    const t = parseRoutingTrace(text);
    expect(t).toMatchObject({ records: 5, tokens: 3, problems: 2, layers: 2, layerIds: [0, 1], experts: 7, k: 2 });
    expect(Array.from(t.token)).toEqual([0, 0, 1, 1, 2]);
    expect(Array.from(t.layer)).toEqual([0, 1, 0, 1, 0]);
    expect(Array.from(t.expertIds)).toEqual([0, 1, 1, 2, 2, 3, 3, 4, 5, 6]);
    expect(t.probs[0]).toBeCloseTo(0.8);
    expect(t.probs[9]).toBeCloseTo(0.4);
  });

  it('sorts numeric problem ids numerically and string ids by first appearance', () => {
    const num = parseRoutingTrace([10, 9, 2].map((p) => rec({ problem_id: p, layer: 0, token_idx: 0, experts: [p] })).join('\n'));
    expect(Array.from(num.expertIds)).toEqual([2, 9, 10]);
    const str = parseRoutingTrace(['b', 'a'].map((p, i) => rec({ problem_id: p, layer: 0, token_idx: 0, experts: [i] })).join('\n'));
    expect(Array.from(str.expertIds)).toEqual([0, 1]);
  });

  it('pads records with fewer experts and allows traces without probabilities or problems', () => {
    const t = parseRoutingTrace([rec({ layer: 0, token_idx: 0, experts: [3] }), rec({ layer: 0, token_idx: 1, experts: [1, 2, 0] })].join('\n'));
    expect(t.k).toBe(3);
    expect(Array.from(t.expertIds)).toEqual([3, -1, -1, 1, 2, 0]);
    expect(t.probs.length).toBe(0);
    expect(t.problems).toBe(1);
  });

  it('reads a trace without problem ids in file order, a (token, layer) pair seen again starting the next problem', () => {
    // Two prompts written one after the other, layer-major, token_idx restarting: no problem_id.
    const prompt = (base: number) =>
      [0, 1].flatMap((layer) => [0, 1, 2].map((t) => rec({ layer, token_idx: t, experts: [base + 10 * layer + t], probs: [1] })));
    const t = parseRoutingTrace([...prompt(0), ...prompt(100)].join('\n'));
    expect(t).toMatchObject({ records: 12, tokens: 6, problems: 2, layers: 2 });
    expect(Array.from(t.token)).toEqual([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]);
    expect(Array.from(t.expertIds)).toEqual([0, 10, 1, 11, 2, 12, 100, 110, 101, 111, 102, 112]);
    expect(t.probs.length).toBe(12);
    // With ids the same file is one problem per id, and a repeat within one is an error.
    const withIds = [...prompt(0).map((l) => l.replace('{', '{"problem_id":7,')), ...prompt(100).map((l) => l.replace('{', '{"problem_id":3,'))];
    expect(Array.from(parseRoutingTrace(withIds.join('\n')).expertIds).slice(0, 2)).toEqual([100, 110]);
  });

  it('normalises gating weights that sum above 1 (scaled, as DeepSeek-V3 writes them) and clamps rounding', () => {
    const t = parseRoutingTrace(
      [rec({ layer: 0, token_idx: 0, experts: [0, 1], gating_probs: [1.5, 1] }), rec({ layer: 0, token_idx: 1, experts: [2], gating_probs: [1.0000002] })].join('\n'),
    );
    expect(t.probs[0]).toBeCloseTo(0.6);
    expect(t.probs[1]).toBeCloseTo(0.4);
    expect(t.probs[2]).toBe(1);
  });

  it('names the line of malformed records', () => {
    const good = rec({ layer: 0, token_idx: 0, experts: [1, 2] });
    expect(invalid(`${good}\n{"layer": 0, "token_idx": 1, "experts": [1, 2]`).message).toMatch(/^t\.jsonl:2: not valid JSON/);
    expect(invalid(`${good}\n[1, 2]`).message).toMatch(/^t\.jsonl:2: expected a JSON object/);
    expect(invalid(rec({ layer: -1, token_idx: 0, experts: [1] })).message).toMatch(/^t\.jsonl:1: "layer" must be/);
    expect(invalid(rec({ layer: 0, token_idx: 1.5, experts: [1] })).message).toMatch(/"token_idx" must be/);
    expect(invalid(rec({ layer: 0, experts: [1] })).message).toMatch(/"token_idx" must be/);
    expect(invalid(rec({ layer: 0, token_idx: 0, experts: [] })).message).toMatch(/"experts" must be a non-empty array/);
    expect(invalid(rec({ layer: 0, token_idx: 0, experts: [1, 'a'] })).message).toMatch(/"experts" must hold integers/);
    expect(invalid(rec({ layer: 0, token_idx: 0, experts: [1, 1] })).message).toMatch(/names an expert twice/);
    expect(invalid(rec({ layer: 0, token_idx: 0, experts: [1, 2], gating_probs: [1] })).message).toMatch(/"gating_probs" must be an array as long/);
    expect(invalid(rec({ layer: 0, token_idx: 0, experts: [1], gating_probs: [-0.5] })).message).toMatch(/non-negative numbers, got -0.5/);
    expect(invalid(rec({ layer: 0, token_idx: 0, experts: [1], gating_probs: ['0.5'] })).message).toMatch(/non-negative numbers, got "0.5"/);
    expect(invalid(rec({ layer: 0, token_idx: 0, experts: [1], problem_id: [1] })).message).toMatch(/"problem_id" must be/);
    expect(invalid(`${good}\n\n${rec({ layer: 0, token_idx: 1, experts: [1], gating_probs: [1] })}`).message).toMatch(
      /^t\.jsonl:3: "gating_probs" present here but missing on line 1/,
    );
    expect(
      invalid(`${rec({ problem_id: 0, layer: 0, token_idx: 0, experts: [1, 2] })}\n${rec({ problem_id: 0, layer: 0, token_idx: 0, experts: [3, 4] })}`).message,
    ).toMatch(/^t\.jsonl:2: repeats problem 0 token 0 layer 0 of line 1/);
    expect(invalid(rec({ layer: 0, token_idx: 0, experts: [1, 2], routing_weights: [0.5] })).message).toMatch(/"routing_weights" must be an array as long/);
    expect(invalid('\n  \n').message).toMatch(/no records/);
  });

  it('reads files and reports unreadable ones as KAIL_E_IO', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-trace-'));
    const file = path.join(dir, 'r.jsonl');
    fs.writeFileSync(file, rec({ layer: 0, token_idx: 0, experts: [1] }) + '\n');
    expect(readRoutingTrace(file).records).toBe(1);
    expect(() => readRoutingTrace(path.join(dir, 'missing.jsonl'))).toThrow(expect.objectContaining({ code: 'KAIL_E_IO' }));
    fs.rmSync(dir, { recursive: true });
  });
});
