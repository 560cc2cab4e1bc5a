import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseRoutingTrace, readRoutingTrace } from '@kailstream/engine/core';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 60_000 });
}

/** shared/fixtures/routing/mixtral-8x7b-gsm8k.jsonl, searched upward from here. */
function fixture(): string | null {
  for (let dir = __dirname; path.dirname(dir) !== dir; dir = path.dirname(dir)) {
    const f = path.join(dir, 'shared/fixtures/routing/mixtral-8x7b-gsm8k.jsonl');
    if (fs.existsSync(f)) return f;
  }
  return null;
}

describe('kail cache-sim', () => {
  const trace = fixture();

  (trace ? it : it.skip)('prints the JSON summary for the Mixtral trace, the default policy ahead of LRU', () => {
    const r = kail('cache-sim', '--trace', trace!, '--slots', '4', '--json');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(Object.keys(out).sort()).toEqual(['accesses', 'default_policy', 'hit_rate', 'slots']);
    expect(out.slots).toBe(4);
    expect(out.accesses).toBe(15778);
    expect(typeof out.default_policy).toBe('string');
    const rates = out.hit_rate as Record<string, number>;
    expect(Object.keys(rates)).toEqual(expect.arrayContaining(['lru', 'belady', out.default_policy]));
    for (const v of Object.values(rates)) expect(v).toBeGreaterThanOrEqual(0);
    for (const v of Object.values(rates)) expect(v).toBeLessThanOrEqual(rates.belady);
    expect(rates.lru).toBeCloseTo(0.5742, 4);
    expect(rates.belady).toBeCloseTo(0.7464, 4);
    expect(rates[out.default_policy]).toBeGreaterThan(rates.lru);
  });

  (trace ? it : it.skip)('prints a table by default and runs only the policies asked for (plus lru, the default, belady)', () => {
    const r = kail('cache-sim', '--trace', trace!, '--slots', '3', '--policy', 'lfu:half_life=8');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^trace: mixtral-8x7b-gsm8k\.jsonl: 7889 records, 247 tokens in 2 problem\(s\), 32 layers, 8 experts, top-2/);
    expect(r.stdout).toMatch(/^lru +42\.83% +6758 +0\.00$/m);
    expect(r.stdout).toMatch(/^lfu:half_life=8 +\d+\.\d\d%/m);
    expect(r.stdout).toMatch(/^belady +62\.18% +9810 +1\.00$/m);
    expect(r.stdout).toMatch(/ \*  +\d+\.\d\d%/);
    expect(r.stdout).not.toMatch(/^lrfu /m);
  });

  it('names the layers a trace has where they are not 0..n-1 (a DeepSeek trace: no router in its dense first layers)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cache-sim-'));
    const f = path.join(dir, 'ds.jsonl');
    const lines: string[] = [];
    for (let t = 0; t < 6; t++) for (const layer of [1, 2, 3, 4]) lines.push(JSON.stringify({ layer, token_idx: t, experts: [(t + layer) % 8, 8 + ((t * 3) % 8)] }));
    fs.writeFileSync(f, lines.join('\n') + '\n');
    const r = kail('cache-sim', '--trace', f, '--slots', '2');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^trace: ds\.jsonl: 24 records, 6 tokens in 1 problem\(s\), 4 layers \(1\.\.4\), 16 experts, top-2/);
    fs.rmSync(dir, { recursive: true });
  });

  it('reports bad input with a non-zero exit and a message', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cache-sim-'));
    const bad = path.join(dir, 'bad.jsonl');
    fs.writeFileSync(bad, '{"layer": 0, "token_idx": 0, "experts": [1, 2]}\n{"layer": 0, "token_idx": 1, "experts": [1, 1]}\n');
    const good = path.join(dir, 'good.jsonl');
    fs.writeFileSync(good, '{"layer": 0, "token_idx": 0, "experts": [1, 2]}\n');

    let r = kail('cache-sim', '--trace', bad, '--slots', '2');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('bad.jsonl:2: "experts" names an expert twice');
    r = kail('cache-sim', '--trace', path.join(dir, 'missing.jsonl'), '--slots', '2');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`cannot read routing trace ${path.join(dir, 'missing.jsonl')}: no such file (ENOENT)`);
    // Malformed traces (the command prints the parser's message): each line's problem named, a key left out as missing.
    const cases: [string, string][] = [
      ['{"layer": 0, "token_idx": 0, "experts": [1, 2]\n', 't.jsonl:1: not valid JSON'],
      ['{"layer": 0, "experts": [1]}\n', 't.jsonl:1: "token_idx" must be a non-negative integer, got nothing (the key is missing)'],
      ['{"token_idx": 0, "experts": [1]}\n', 't.jsonl:1: "layer" must be an integer in 0..4095, got nothing (the key is missing)'],
      ['{"layer": -1, "token_idx": 0, "experts": [1]}\n', 't.jsonl:1: "layer" must be an integer in 0..4095, got -1'],
      ['{"layer": 0, "token_idx": 0}\n', 't.jsonl:1: "experts" must be a non-empty array of expert ids, got nothing (the key is missing)'],
      ['[1, 2]\n', 't.jsonl:1: expected a JSON object per line'],
    ];
    for (const [text, message] of cases) expect(() => parseRoutingTrace(text, 't.jsonl')).toThrow(message);
    expect(() => readRoutingTrace(dir)).toThrow(`cannot read routing trace ${dir}: a directory, not a file (EISDIR)`);
    r = kail('cache-sim', '--trace', good, '--slots', '0');
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('--slots must be an integer');
    r = kail('cache-sim', '--trace', good, '--slots', '2', '--policy', 'fifo');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("unknown cache policy 'fifo'");
    r = kail('cache-sim', '--slots', '2');
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("required option '--trace <file>' not specified");
    fs.rmSync(dir, { recursive: true });
  });
});
