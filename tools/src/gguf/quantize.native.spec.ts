// `kail quantize` against llama.cpp's llama-quantize (llama_model_quantize in node-llama-cpp's
// libllama, through tools/src/parity/quant-ref): from the same F32/F16 file, every file type kail
// writes must come out byte for byte as llama.cpp's: the same per-tensor types (its mixes, the
// 8-expert and 70B rules, fallbacks for rows the block does not divide), tensor order, metadata
// and quantized blocks. Then what it refuses, and that nothing is left behind when it does.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel, fileTypeName } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { nmse } from '../parity/metrics';
import { llamaQuantizeBatch, type QuantRefOptions } from '../parity/quant-ref';
import { GgmlType } from './constants';
import { readGgufHeader } from './reader';
import { parseQuantFileType, quantizeModel, type QuantizeOptions } from './quantize';
import { ggufSplitPath, splitGguf } from './split';

type Case = [label: string, model: string, type: string, kail?: Partial<QuantizeOptions>, ref?: QuantRefOptions];

describe("kail quantize against llama.cpp's llama-quantize", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-quantize-'));
  const table: string[] = [];
  const models: Record<string, string> = {};
  // llama.cpp's side of every comparison below, written by one quant-ref process before them (one
  // start of libllama, ggml's i-quant tables built once), as imatrix.native.spec.ts does.
  let refSeconds = 0;
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nkail quantize vs llama-quantize (measured; same input file, 2 threads; llama.cpp's files all in one quant-ref process, ${refSeconds.toFixed(1)} s):\n${table.join('\n')}\n`);
  });

  beforeAll(() => {
    const write = (name: string, preset: string, fileType: 'F32' | 'F16' | 'Q8_0', over: Record<string, number | boolean> = {}) => {
      models[name] = path.join(dir, `${name}.gguf`);
      writeModel({ config: { ...getPreset(preset).config, ...over }, fileType, seed: 3, out: models[name] });
    };
    // 4 experts (2 used), not the preset's 16: the same branches of llama.cpp's mix rules
    // (n_expert >= 4, not Mixtral's 8) with 4/16 of the expert bytes, for the 40-odd cases below.
    write('qwen3moe-f16', 'tiny-qwen3moe', 'F16', { nExperts: 4, nExpertsUsed: 2 });
    // 8 experts: llama.cpp gives attn_v and attn_k Q8_0, attn_output Q5_K.
    write('mixtral-f32', 'tiny-mixtral', 'F32');
    // MLA: attn_kv_b counts as attn_v.
    write('deepseek2-f16', 'tiny-deepseek2-lite', 'F16');
    // Rows of 96: no K-quant block divides them, every one falls back (Q4_K -> Q5_0 ...).
    write('llama-odd-f32', 'tiny-llama', 'F32', { nLayers: 17, dim: 96 });
    // 80 blocks, GQA 4: llama.cpp's 70B rule (attn_v Q3_K/Q4_K -> Q5_K) and every use_more_bits layer.
    write('llama80-f16', 'tiny-llama', 'F16', { nLayers: 80, dim: 256, ff: 256, nHeads: 8, nKvHeads: 2 });
    write('llama-tied-f16', 'tiny-llama', 'F16', { tiedEmbeddings: true });
    write('qwen3moe-q8', 'tiny-qwen3moe', 'Q8_0', { nExperts: 4, nExpertsUsed: 2 });
    // Biased experts and attention sinks: MXFP4_MOE's home.
    write('gpt-oss-f16', 'tiny-gpt-oss', 'F16');
    splitGguf(models['qwen3moe-f16'], path.join(dir, 'qwen3moe-split'), 8);
    models['qwen3moe-split'] = path.join(dir, 'qwen3moe-split-00001-of-00004.gguf');
  }, 120_000);

  /** The first tensor whose bytes or type differ, for a useful failure. */
  function firstDifference(a: string, b: string): string {
    const ha = readGgufHeader(a);
    const hb = readGgufHeader(b);
    const ka = [...ha.kv.keys()].join(',');
    const kb = [...hb.kv.keys()].join(',');
    if (ka !== kb) return `metadata keys differ: ${ka} vs ${kb}`;
    for (let i = 0; i < Math.max(ha.tensors.length, hb.tensors.length); i++) {
      const x = ha.tensors[i];
      const y = hb.tensors[i];
      if (!x || !y || x.name !== y.name || x.type !== y.type) return `tensor ${i}: ${x?.name} ${x?.type} vs ${y?.name} ${y?.type}`;
    }
    return 'the tensor bytes differ';
  }

  const CASES: Case[] = [
    ...['Q4_K_M', 'Q3_K_S', 'Q3_K_M', 'Q3_K_L', 'Q4_K_S', 'Q5_K_S', 'Q5_K_M', 'Q6_K', 'Q2_K', 'Q8_0', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'F16', 'BF16', 'F32'].map(
      (t): Case => [t, 'qwen3moe-f16', t],
    ),
    // IQ3_S and IQ3_M need no imatrix (ggml's grid search weights by x^2 without one; IQ3_XS puts IQ3_XXS on attn_q, which does).
    ['IQ3_S', 'qwen3moe-f16', 'IQ3_S'],
    ['IQ3_M', 'qwen3moe-f16', 'IQ3_M'],
    ['IQ3_M', 'mixtral-f32', 'IQ3_M'],
    ['IQ4_NL', 'qwen3moe-f16', 'IQ4_NL'],
    ['IQ4_XS', 'qwen3moe-f16', 'IQ4_XS'],
    ['MXFP4_MOE', 'qwen3moe-f16', 'MXFP4_MOE'],
    ['MXFP4_MOE', 'gpt-oss-f16', 'MXFP4_MOE'],
    ...['Q4_K_M', 'Q3_K_M', 'Q2_K', 'Q4_K_S', 'Q5_K_M', 'Q6_K', 'IQ4_XS'].map((t): Case => [t, 'mixtral-f32', t]),
    ...['Q4_K_M', 'Q3_K_M', 'Q2_K', 'Q4_K_S', 'Q3_K_L'].map((t): Case => [t, 'deepseek2-f16', t]),
    ...['Q4_K_M', 'Q3_K_M', 'Q2_K', 'Q5_K_M', 'Q3_K_L', 'Q6_K', 'IQ4_XS'].map((t): Case => [t, 'llama-odd-f32', t]),
    ...['Q4_K_M', 'Q2_K', 'Q3_K_S'].map((t): Case => [t, 'llama80-f16', t]),
    ...['Q4_K_M', 'Q3_K_M', 'Q8_0'].map((t): Case => [t, 'llama-tied-f16', t]),
    ['Q4_K_M --pure', 'qwen3moe-f16', 'Q4_K_M', { pure: true }, { pure: true }],
    ['Q4_K_M --leave-output-tensor', 'qwen3moe-f16', 'Q4_K_M', { leaveOutputTensor: true }, { leaveOutputTensor: true }],
    ['Q4_K_M --output-tensor-type q8_0 --token-embedding-type q6_k', 'llama-tied-f16', 'Q4_K_M', { outputTensorType: GgmlType.Q8_0, tokenEmbeddingType: GgmlType.Q6_K }, { outputTensorType: GgmlType.Q8_0, tokenEmbeddingType: GgmlType.Q6_K }],
    [
      'Q4_K_M --tensor-type ffn_down_exps=q8_0 --tensor-type attn_.*=q4_0',
      'qwen3moe-f16',
      'Q4_K_M',
      { tensorTypes: [{ pattern: 'ffn_down_exps', type: GgmlType.Q8_0 }, { pattern: 'attn_.*', type: GgmlType.Q4_0 }] },
      { tensorTypes: [{ pattern: 'ffn_down_exps', type: GgmlType.Q8_0 }, { pattern: 'attn_.*', type: GgmlType.Q4_0 }] },
    ],
    ['Q4_K_M --allow-requantize (from Q8_0)', 'qwen3moe-q8', 'Q4_K_M', { allowRequantize: true }, { allowRequantize: true }],
    ['Q4_K_M from 4 split files', 'qwen3moe-split', 'Q4_K_M'],
    ['COPY', 'qwen3moe-f16', 'COPY', {}, { copy: true }],
    // --override-kv: a key the file has moves last with its new value, a new key is added; an int
    // is written as u32, a float as f32.
    [
      'Q4_K_M --override-kv (int, float, bool, str; old and new keys)',
      'qwen3moe-f16',
      'Q4_K_M',
      {
        kvOverrides: [
          { key: 'qwen3moe.expert_used_count', type: 'int', value: 1 },
          { key: 'general.name', type: 'str', value: 'renamed, with a comma' },
          { key: 'qwen3moe.rope.freq_base', type: 'float', value: 500000.5 },
          { key: 'kail.test.flag', type: 'bool', value: true },
        ],
      },
      {
        kvOverrides: [
          { key: 'qwen3moe.expert_used_count', u32: 1 },
          { key: 'general.name', str: 'renamed, with a comma' },
          { key: 'qwen3moe.rope.freq_base', f64: 500000.5 },
          { key: 'kail.test.flag', bool: true },
        ],
      },
    ],
    // The mix reads the overridden value: 4 experts instead of 8 drop the 8-expert rule (attn_v, attn_k Q8_0).
    ['Q4_K_M --override-kv llama.expert_count=int:4', 'mixtral-f32', 'Q4_K_M', { kvOverrides: [{ key: 'llama.expert_count', type: 'int', value: 4 }] }, { kvOverrides: [{ key: 'llama.expert_count', u32: 4 }] }],
    // --prune-layers: blocks dropped, the rest renumbered, block_count set last; the mix still counts the input's layers.
    ['Q4_K_M --prune-layers 1', 'qwen3moe-f16', 'Q4_K_M', { pruneLayers: [1] }, { pruneLayers: [1] }],
    ['Q4_K_M --prune-layers 70,3,3,10,40', 'llama80-f16', 'Q4_K_M', { pruneLayers: [70, 3, 3, 10, 40] }, { pruneLayers: [70, 3, 10, 40] }],
    ['Q4_K_M --prune-layers 0 from 4 split files', 'qwen3moe-split', 'Q4_K_M', { pruneLayers: [0] }, { pruneLayers: [0] }],
    ['Q3_K_M --prune-layers 0 (8 experts)', 'mixtral-f32', 'Q3_K_M', { pruneLayers: [0] }, { pruneLayers: [0] }],
    // The ternary and 1-/2-bit types: their token_embd in Q4_K (TQ1_0, TQ2_0, Q2_0; tied: the output's Q6_K),
    // rows the block does not divide in Q4_0 (TQ1_0, TQ2_0, Q2_0: the 96-wide llama), ggml's reference
    // quantizers for the blocks.
    ...['TQ1_0', 'TQ2_0', 'Q1_0', 'Q2_0'].map((t): Case => [t, 'qwen3moe-f16', t]),
    ...['TQ1_0', 'TQ2_0', 'Q1_0', 'Q2_0'].map((t): Case => [t, 'llama-tied-f16', t]),
    ...['TQ1_0', 'TQ2_0', 'Q2_0'].map((t): Case => [t, 'llama-odd-f32', t]),
    ['Q2_0 --pure', 'mixtral-f32', 'Q2_0', { pure: true }, { pure: true }],
    // NVFP4: llama-quantize has no default tensor type for its file type, so both write it through --tensor-type.
    [
      'Q8_0 --tensor-type .*=nvfp4',
      'qwen3moe-f16',
      'Q8_0',
      { tensorTypes: [{ pattern: '.*', type: GgmlType.NVFP4 }] },
      { tensorTypes: [{ pattern: '.*', type: GgmlType.NVFP4 }] },
    ],
    [
      'Q4_K_M --tensor-type ffn_.*=nvfp4 (tied)',
      'llama-tied-f16',
      'Q4_K_M',
      { tensorTypes: [{ pattern: 'ffn_.*', type: GgmlType.NVFP4 }] },
      { tensorTypes: [{ pattern: 'ffn_.*', type: GgmlType.NVFP4 }] },
    ],
    ['COPY --override-kv general.file_type=int:7', 'qwen3moe-f16', 'COPY', { kvOverrides: [{ key: 'general.file_type', type: 'int', value: 7 }] }, { copy: true, kvOverrides: [{ key: 'general.file_type', u32: 7 }] }],
  ];

  // --keep-split's cases (the test after them): llama.cpp's files under these prefixes.
  const KEEP_SPLIT: [model: string, splits: number][] = [['qwen3moe-split', 4], ['qwen3moe-f16', 1]];
  const refFile = (i: number) => path.join(dir, `r-${i}.gguf`);
  const keepSplitRef = (model: string) => path.join(dir, `ksr-${model}`);
  const refErrors = new Map<string, string | undefined>();
  beforeAll(async () => {
    const t0 = performance.now();
    const jobs = [
      ...CASES.map(([, model, type, , refOpts = {}], i) => ({ key: `case ${i}`, input: models[model], output: refFile(i), ftype: parseQuantFileType(type).ftype, opts: { threads: 2, ...refOpts } })),
      ...KEEP_SPLIT.map(([model]) => ({ key: `keep-split ${model}`, input: models[model], output: keepSplitRef(model), ftype: 15, opts: { keepSplit: true } })),
    ];
    const errors = await llamaQuantizeBatch(jobs);
    jobs.forEach((j, i) => refErrors.set(j.key, errors[i]));
    refSeconds = (performance.now() - t0) / 1000;
  }, 600_000);
  /** llama.cpp's file for a job of the batch above, or its error. */
  const refOk = (key: string, what: string) => {
    if (!refErrors.has(key)) throw new Error(`llama.cpp's ${what}: no result`);
    const error = refErrors.get(key);
    if (error !== undefined) throw new Error(`quant-ref: ${what}: ${error}`);
  };

  it.each(CASES.map(([label, model, type, kailOpts = {}], i) => [label, model, type, kailOpts, i] as const))('%s of %s: the same bytes as llama.cpp', (label, model, type, kailOpts, i) => {
    const ours = path.join(dir, `k-${model}-${type}.gguf`);
    refOk(`case ${i}`, `${label} of ${model}`);
    const theirs = refFile(i);
    const t0 = performance.now();
    const r = quantizeModel(models[model], ours, { type, threads: 2, ...kailOpts });
    const kailS = (performance.now() - t0) / 1000;
    const same = fs.readFileSync(ours).equals(fs.readFileSync(theirs));
    const types = [...new Set(r.tensors.map((t) => t.to))].join(' ');
    table.push(`  ${model.padEnd(16)} ${label.padEnd(64)} ${same ? 'identical' : 'DIFFERENT'} (${types}; ${(r.bytesOut / 1048576).toFixed(2)} MiB; kail ${kailS.toFixed(2)} s)`);
    if (!same) throw new Error(`${label} of ${model}: ${firstDifference(ours, theirs)}`);
    fs.rmSync(theirs);
    fs.rmSync(ours);
  }, 120_000);

  it('--keep-split writes one file per input split, each the same bytes as llama.cpp\'s', () => {
    for (const [model, n] of KEEP_SPLIT) {
      const r = quantizeModel(models[model], path.join(dir, `ks-${model}.gguf`), { type: 'Q4_K_M', threads: 2, keepSplit: true });
      refOk(`keep-split ${model}`, `Q4_K_M --keep-split of ${model}`);
      expect(r.outputs).toEqual(Array.from({ length: n }, (_, i) => ggufSplitPath(path.join(dir, `ks-${model}`), i + 1, n)));
      r.outputs.forEach((o, i) => {
        const ref = ggufSplitPath(keepSplitRef(model), i + 1, n);
        if (!fs.readFileSync(o).equals(fs.readFileSync(ref))) throw new Error(`${model} split ${i + 1}: ${firstDifference(o, ref)}`);
      });
      table.push(`  ${model.padEnd(16)} ${'Q4_K_M --keep-split'.padEnd(64)} identical (${n} file(s))`);
    }
  }, 120_000);

  it('gives the same bytes whatever the slab size (rows streamed a few at a time)', () => {
    const a = path.join(dir, 'slab-a.gguf');
    const b = path.join(dir, 'slab-b.gguf');
    quantizeModel(models['mixtral-f32'], a, { type: 'Q4_K_M', threads: 1 });
    quantizeModel(models['mixtral-f32'], b, { type: 'Q4_K_M', threads: 2, slabBytes: 64 * 1024 });
    expect(fs.readFileSync(a).equals(fs.readFileSync(b))).toBe(true);
  }, 120_000);

  it("writes models kail runs, whose logits stay near the F16 file's (closer with more bits)", async () => {
    const logitsOf = async (file: string) => {
      const m = EngineModel.load(file, { nCtx: 64 });
      try {
        return await m.evaluate(0, [1, 17, 99, 3, 250, 7], 'all');
      } finally {
        m.close();
      }
    };
    const f16 = await logitsOf(models['qwen3moe-f16']);
    const err: Record<string, number> = {};
    for (const type of ['Q8_0', 'Q4_K_M', 'Q2_K']) {
      const out = path.join(dir, `run-${type}.gguf`);
      quantizeModel(models['qwen3moe-f16'], out, { type });
      err[type] = nmse(await logitsOf(out), f16);
      fs.rmSync(out);
    }
    table.push(`  logits NMSE against the F16 file (qwen3moe, 6 tokens): ${Object.entries(err).map(([t, e]) => `${t} ${e.toExponential(2)}`).join(', ')}`);
    expect(err.Q8_0).toBeLessThan(err.Q4_K_M);
    expect(err.Q4_K_M).toBeLessThan(err.Q2_K);
    expect(err.Q2_K).toBeLessThan(0.5);
  }, 120_000);

  it('plans imatrix-only i-quant types with --dry-run and refuses to write them without one, naming why; nothing is left behind', () => {
    const plan = quantizeModel(models['mixtral-f32'], undefined, { type: 'IQ2_XXS', dryRun: true });
    expect(plan.needsImatrix).toBe(true);
    expect(plan.tensors.find((t) => t.name === 'blk.0.attn_v.weight')?.to).toBe('Q4_K');
    const out = path.join(dir, 'refused.gguf');
    expect(() => quantizeModel(models['mixtral-f32'], out, { type: 'IQ2_XXS' })).toThrow(/IQ2_XXS needs an importance matrix for blk\.0\.\w+\.weight/);
    // --pure puts IQ2_XS on output.weight too, which no rule exempts there: ggml cannot quantize it without importance values.
    expect(() => quantizeModel(models['mixtral-f32'], out, { type: 'IQ2_XS', pure: true })).toThrow(/needs an importance matrix|cannot be quantized without importance values/);
    expect(() => quantizeModel(models['qwen3moe-q8'], out, { type: 'Q4_K_M' })).toThrow(/already Q8_0: requantizing is off \(--allow-requantize/);
    expect(fs.readdirSync(dir).filter((f) => f.startsWith('refused'))).toEqual([]);
  });

  it("NVFP4 (kail's file type 39, which llama-quantize cannot write): every weight NVFP4 but the output (Q6_K); Q1_0 and NVFP4 refuse rows their block does not divide, as llama.cpp does", () => {
    const out = path.join(dir, 'nvfp4.gguf');
    const r = quantizeModel(models['qwen3moe-f16'], out, { type: 'NVFP4', threads: 2 });
    const types = new Map(r.tensors.map((t) => [t.name, t.to]));
    expect(types.get('output.weight')).toBe('Q6_K');
    expect(types.get('token_embd.weight')).toBe('NVFP4');
    expect(types.get('blk.0.attn_q.weight')).toBe('NVFP4');
    expect(types.get('blk.0.ffn_down_exps.weight')).toBe('NVFP4');
    expect(readGgufHeader(out).kv.get('general.file_type')?.value).toBe(39);
    fs.rmSync(out);
    for (const type of ['Q1_0', 'NVFP4']) expect(() => quantizeModel(models['llama-odd-f32'], out, { type })).toThrow(/no tensor type fallback is defined for type (Q1_0|NVFP4)/);
    expect(fs.existsSync(out)).toBe(false);
  }, 120_000);

  it('names file types as llama-quantize does', () => {
    expect([15, 14, 12, 7, 1, 0, 30, 38].map(fileTypeName)).toEqual(['Q4_K_M', 'Q4_K_S', 'Q3_K_M', 'Q8_0', 'F16', 'F32', 'IQ4_XS', 'MXFP4_MOE']);
    expect(fileTypeName(1024 + 15)).toBe('Q4_K_M (guessed)');
    expect([36, 37, 39, 40, 41].map(fileTypeName)).toEqual(['TQ1_0', 'TQ2_0', 'NVFP4', 'Q1_0', 'Q2_0']);
    expect(['TQ1_0', 'tq2_0', 'NVFP4', 'Q1_0', '41'].map((t) => parseQuantFileType(t).ftype)).toEqual([36, 37, 39, 40, 41]);
    expect(fileTypeName(99)).toBe('unknown (99)');
  });

  it('refuses bad arguments and bad files with errors that name them', () => {
    const out = path.join(dir, 'bad.gguf');
    expect(() => quantizeModel(models['qwen3moe-f16'], out, { type: 'Q4_K_Z' })).toThrow(/unknown quantization type 'Q4_K_Z'; known: Q1_0, Q2_0, Q4_0/);
    expect(() => quantizeModel(models['qwen3moe-f16'], models['qwen3moe-f16'], { type: 'Q8_0' })).toThrow(/is the input/);
    expect(() => quantizeModel(models['qwen3moe-f16'], out, { type: 'Q8_0', threads: 0 })).toThrow(/threads must be 1 to 1024/);
    expect(() => quantizeModel(path.join(dir, 'qwen3moe-split-00002-of-00004.gguf'), out, { type: 'Q8_0' })).toThrow(/is split 2 of 4: give the first split/);
    // A file cut inside its tensor data: the error names the tensor, and no output is left.
    const cut = path.join(dir, 'cut.gguf');
    const bytes = fs.readFileSync(models['qwen3moe-f16']);
    fs.writeFileSync(cut, bytes.subarray(0, bytes.length - 1000));
    expect(() => quantizeModel(cut, out, { type: 'Q8_0' })).toThrow(/runs past the end of the file|ends early/);
    fs.writeFileSync(cut, Buffer.from('not a gguf file at all'));
    expect(() => quantizeModel(cut, out, { type: 'Q8_0' })).toThrow(/not a GGUF file/);
    // Overrides a file cannot take: the kind of value, an int a u32 cannot hold, the layout keys.
    const q = (key: string, type: 'int' | 'float' | 'bool' | 'str', value: number | boolean | string) => () => quantizeModel(models['qwen3moe-f16'], out, { type: 'Q8_0', kvOverrides: [{ key, type, value }] });
    expect(q('qwen3moe.block_count', 'str', 'two')).toThrow(/the model's 'qwen3moe.block_count' is a number, not a string; use int: or float:/);
    expect(q('tokenizer.ggml.tokens', 'str', 'x')).toThrow(/'tokenizer.ggml.tokens' is an array/);
    expect(q('kail.test.count', 'int', -1)).toThrow(/written as a u32 \(0..4294967295\)/);
    expect(q('general.alignment', 'int', 64)).toThrow(/sets the file's layout keys/);
    expect(fs.existsSync(out)).toBe(false);
    expect(fs.readdirSync(dir).filter((f) => f.startsWith('bad.gguf'))).toEqual([]);
  });
});
