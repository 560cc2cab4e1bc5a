// kail quantize from the command line: llama-quantize's positional form (IN [OUT] TYPE [NTHREADS]),
// its default output name, plain progress lines off a terminal, a report as JSON, and errors for
// bad arguments. (Byte-for-byte parity with llama.cpp: tools/src/gguf/quantize.native.spec.ts.)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getPreset, ggufSplitPath, quantizeModel, splitGguf, writeModel } from '@kailstream/tools';

import { quantizeArgs } from './commands/quantize';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });
}

describe('quantizeArgs', () => {
  const isType = (s: string) => ['Q4_K_M', 'Q8_0'].includes(s.toUpperCase());
  it('reads IN TYPE, IN TYPE N, IN OUT TYPE and IN OUT TYPE N', () => {
    expect(quantizeArgs(['a.gguf', 'q4_k_m'], isType)).toEqual({ input: 'a.gguf', type: 'q4_k_m', threads: undefined });
    expect(quantizeArgs(['a.gguf', 'Q8_0', '4'], isType)).toEqual({ input: 'a.gguf', type: 'Q8_0', threads: '4' });
    expect(quantizeArgs(['a.gguf', 'b.gguf', 'Q8_0'], isType)).toEqual({ input: 'a.gguf', output: 'b.gguf', type: 'Q8_0', threads: undefined });
    expect(quantizeArgs(['a.gguf', 'b.gguf', 'Q8_0', '2'], isType)).toEqual({ input: 'a.gguf', output: 'b.gguf', type: 'Q8_0', threads: '2' });
  });
  it('refuses too few or too many arguments, and a second word that is neither type nor followed by one', () => {
    expect(() => quantizeArgs(['a.gguf'], isType)).toThrow(/IN\.gguf \[OUT\.gguf\] TYPE \[NTHREADS\], got 1/);
    expect(() => quantizeArgs(['a', 'b', 'c', 'd', 'e'], isType)).toThrow(/got 5/);
    expect(() => quantizeArgs(['a.gguf', 'b.gguf'], isType)).toThrow(/'b\.gguf' is not a quantization type/);
    expect(() => quantizeArgs(['a.gguf', 'Q8_0', '2', '3'], isType)).toThrow(/only a thread count may follow/);
  });
});

describe('kail quantize', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cli-quantize-'));
  const model = path.join(dir, 'moe-f16.gguf');
  beforeAll(() => {
    writeModel({ config: getPreset('tiny-qwen3moe').config, fileType: 'F16', seed: 5, out: model });
  }, 60_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('writes ggml-model-TYPE.gguf beside the input by default, with plain progress lines, and the result runs', () => {
    const r = kail('quantize', model, 'q4_k_m', '2');
    expect(r.stderr).toBe(r.stderr.replace(/\r/g, ''));
    expect(r.status).toBe(0);
    const out = path.join(dir, 'ggml-model-Q4_K_M.gguf');
    expect(r.stdout).toMatch(/model size {2}= [\d.]+ MiB \([\d.]+ BPW\)\nquant size {2}= [\d.]+ MiB \([\d.]+ BPW\)/);
    expect(r.stdout).toContain(`wrote ${out}`);
    expect(r.stdout).toMatch(/tensor types: .*Q4_K \d+/);
    expect(r.stderr).toMatch(/quantizing moe-f16\.gguf to Q4_K_M .*100%/);
    const run = kail('run', '-m', out, '-p', 'Hello', '-n', '4', '-t', '2', '--json');
    expect(run.status).toBe(0);
    expect(JSON.parse(run.stdout).tokens).toHaveLength(4);
    // kail inspect names the file type as llama-quantize does.
    expect(kail('inspect', out).stdout).toMatch(/^file type {7}Q4_K_M$/m);
    expect(JSON.parse(kail('inspect', '--json', model).stdout).fileType).toBe('F16');
  });

  it('--json reports each tensor; --dry-run writes nothing', () => {
    const out = path.join(dir, 'q8.gguf');
    const r = kail('quantize', '--json', '--threads', '1', model, out, 'Q8_0');
    expect(r.status).toBe(0);
    const rep = JSON.parse(r.stdout);
    expect(rep.typeName).toBe('Q8_0');
    expect(rep.ftype).toBe(7);
    expect(rep.tensors.find((t: { name: string }) => t.name === 'blk.0.attn_q.weight')).toMatchObject({ from: 'F16', to: 'Q8_0' });
    expect(fs.statSync(out).size).toBeGreaterThan(rep.bytesOut);
    const dry = kail('quantize', '--dry-run', model, path.join(dir, 'never.gguf'), 'Q2_K');
    expect(dry.status).toBe(0);
    expect(dry.stdout).toContain('dry run: nothing written');
    expect(fs.existsSync(path.join(dir, 'never.gguf'))).toBe(false);
  });

  it('--keep-split writes a split input as the same number of files, which kail runs as one model', () => {
    const prefix = path.join(dir, 'split-src');
    const splits = splitGguf(model, prefix, 10);
    const r = kail('quantize', '--keep-split', splits[0], path.join(dir, 'split-q8.gguf'), 'Q8_0');
    expect(r.status).toBe(0);
    const outs = splits.map((_, i) => ggufSplitPath(path.join(dir, 'split-q8'), i + 1, splits.length));
    expect(r.stdout).toContain(`wrote ${outs.join(', ')}`);
    const run = kail('run', '-m', outs[0], '-p', 'Hello', '-n', '4', '-t', '2', '--json');
    expect(run.status).toBe(0);
    expect(JSON.parse(run.stdout).tokens).toHaveLength(4);
  });

  it('--override-kv writes the values into the output, and a run with the same override computes as that file', () => {
    const plain = path.join(dir, 'plain-q8.gguf');
    const over = path.join(dir, 'over-q8.gguf');
    expect(kail('quantize', model, plain, 'Q8_0').status).toBe(0);
    const r = kail('quantize', '--override-kv', 'qwen3moe.expert_used_count=int:1', '--override-kv', 'general.name=str:one expert, Q8_0', model, over, 'Q8_0');
    expect(r.status).toBe(0);
    expect(r.stderr).toContain("metadata override (int) 'qwen3moe.expert_used_count' = 1");
    expect(JSON.parse(kail('inspect', '--json', over).stdout).expertUsedCount).toBe(1);
    expect(JSON.parse(kail('inspect', '--json', plain).stdout).expertUsedCount).toBe(4);
    const tokens = (m: string, ...flags: string[]) => {
      const run = kail('run', '-m', m, '-p', 'Hello there', '-n', '12', '-t', '2', '--json', ...flags);
      expect(run.status).toBe(0);
      return JSON.parse(run.stdout).tokens as number[];
    };
    const one = tokens(over);
    expect(tokens(plain, '--override-kv', 'qwen3moe.expert_used_count=int:1')).toEqual(one);
    // (llama.cpp's comma list works too.)
    expect(tokens(plain, '--override-kv', 'qwen3moe.expert_used_count=int:1,"general.name=str:a, b"')).toEqual(one);
    expect(tokens(plain)).not.toEqual(one);
    const bad = kail('run', '-m', plain, '-n', '1', '--override-kv', 'qwen3moe.expert_used_count=str:1');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/the model's 'qwen3moe.expert_used_count' is a number, not a string; use int: or float:/);
  });

  it('--prune-layers leaves blocks out; the smaller model runs', () => {
    const out = path.join(dir, 'pruned.gguf');
    const r = kail('quantize', '--prune-layers', '0', model, out, 'Q8_0');
    expect(r.status).toBe(0);
    const info = JSON.parse(kail('inspect', '--json', out).stdout);
    expect(info.layerCount).toBe(1);
    expect(JSON.parse(kail('quantize', '--json', '--dry-run', '--prune-layers', '0', model, 'Q8_0').stdout).tensors.some((t: { name: string }) => t.name.startsWith('blk.1.'))).toBe(false);
    const run = kail('run', '-m', out, '-p', 'Hello', '-n', '4', '-t', '2', '--json');
    expect(run.status).toBe(0);
    expect(JSON.parse(run.stdout).tokens).toHaveLength(4);
  });

  it('refuses bad arguments naming them', () => {
    const truncated = path.join(dir, 'truncated.gguf');
    fs.writeFileSync(truncated, fs.readFileSync(model).subarray(0, 100));
    const cases: [string[], RegExp][] = [
      [[model, path.join(dir, 'x.gguf'), 'Q9_K'], /unknown quantization type 'Q9_K'/],
      [[model, 'Q8_0', 'many'], /threads must be an integer from 1 to 1024, got 'many'/],
      [['--tensor-type', 'ffn_down', model, 'Q8_0'], /--tensor-type wants REGEX=TYPE, got 'ffn_down'/],
      [['--tensor-type', 'ffn_down=q7_k', model, 'Q8_0'], /unknown tensor type 'q7_k'/],
      [['--tensor-type', '(=q8_0', model, 'Q8_0'], /--tensor-type '\(=q8_0': Invalid regular expression/],
      [[path.join(dir, 'missing.gguf'), 'Q8_0'], /^kail: cannot read .*missing\.gguf: no such file \(ENOENT\)$/m],
      [[model, dir, 'Q8_0'], /quantize: the output .* is a directory; name a file/],
      [['--imatrix', model, model, path.join(dir, 'x.gguf'), 'Q8_0'], /no \.in_sum2\/\.counts tensors: a model, not an imatrix file/],
      [['--override-kv', 'qwen3moe.expert_used_count=int:x', model, path.join(dir, 'x.gguf'), 'Q8_0'], /--override-kv 'qwen3moe.expert_used_count=int:x': 'x' is not an integer/],
      [['--prune-layers', '1,x', model, path.join(dir, 'x.gguf'), 'Q8_0'], /--prune-layers takes comma-separated block numbers, got 'x' in '1,x'/],
      [['--prune-layers', '5', model, path.join(dir, 'x.gguf'), 'Q8_0'], /--prune-layers: 5 is not a block of this model \(qwen3moe.block_count is 2: 0..1\)/],
      [['--prune-layers', '0,1', model, path.join(dir, 'x.gguf'), 'Q8_0'], /would prune every one of the model's 2 blocks/],
      [['--override-kv', 'qwen3moe.block_count=bool:true', model, path.join(dir, 'x.gguf'), 'Q8_0'], /'qwen3moe.block_count' is a number, not a boolean/],
    ];
    for (const [args, message] of cases) {
      const r = kail('quantize', ...args);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(message);
    }
    // (The same refusals of files in-process, as the command prints them.)
    const q = (input: string, output: string, imatrix?: string) => () => quantizeModel(input, output, { type: 'Q8_0', imatrix });
    expect(q(dir, path.join(dir, 'x.gguf'))).toThrow(/is a directory, not a GGUF file/);
    expect(q(truncated, path.join(dir, 'x.gguf'))).toThrow(/truncated\.gguf: GGUF truncated/);
    expect(q(model, path.join(dir, 'none', 'x.gguf'))).toThrow(/quantize: the output .*x\.gguf: cannot write in .*none: no such file \(ENOENT\)/);
    expect(q(model, path.join(dir, 'x.gguf'), path.join(dir, 'none.imatrix'))).toThrow(/imatrix .*none\.imatrix: cannot open: no such file \(ENOENT\)/);
    expect(q(model, path.join(dir, 'x.gguf'), dir)).toThrow(/imatrix .* is a directory, not an imatrix file/);
    expect(fs.existsSync(path.join(dir, 'x.gguf'))).toBe(false);
  });
});
