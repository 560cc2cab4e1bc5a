import path from 'node:path';
import type { Command } from 'commander';
import { describeKvOverride, formatBytes, parseKvOverride } from '@kailstream/engine/core';
import type { QuantizeReport } from '@kailstream/tools';

import { createProgress, type Progress } from '../progress';

interface QuantizeFlags {
  allowRequantize?: boolean;
  leaveOutputTensor?: boolean;
  pure?: boolean;
  outputTensorType?: string;
  tokenEmbeddingType?: string;
  tensorType: string[];
  imatrix?: string;
  includeWeights: string[];
  excludeWeights: string[];
  overrideKv: string[];
  pruneLayers?: number[];
  dryRun?: boolean;
  keepSplit?: boolean;
  threads?: string;
  json?: boolean;
  verbose?: boolean;
}

/** Positional arguments as llama-quantize takes them: IN [OUT] TYPE [NTHREADS]. */
export function quantizeArgs(args: string[], isType: (s: string) => boolean): { input: string; output?: string; type: string; threads?: string } {
  if (args.length < 2 || args.length > 4) throw new Error(`quantize takes IN.gguf [OUT.gguf] TYPE [NTHREADS], got ${args.length} argument(s)`);
  const [input, second, ...rest] = args;
  if (isType(second)) {
    if (rest.length > 1) throw new Error(`quantize: after the type '${second}' only a thread count may follow, got ${rest.join(' ')}`);
    return { input, type: second, threads: rest[0] };
  }
  if (rest.length === 0) throw new Error(`quantize: '${second}' is not a quantization type (kail quantize --help lists them)`);
  return { input, output: second, type: rest[0], threads: rest[1] };
}

export function registerQuantize(program: Command): void {
  program
    .command('quantize')
    .description(
      "llama-quantize: write IN.gguf (F32/F16/BF16; a quantized file with --allow-requantize) as TYPE (Q4_K_M, Q8_0, ...) with llama.cpp's per-tensor mix, " +
        'byte for byte what llama.cpp writes, with or without an importance matrix (--imatrix); the file streams through in slabs, so a model larger than memory quantizes. ' +
        'OUT defaults to ggml-model-TYPE.gguf beside IN. Types: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS IQ3_S IQ3_M MXFP4_MOE TQ1_0 TQ2_0 Q1_0 Q2_0 NVFP4 F16 BF16 F32 COPY, ' +
        'and with --imatrix also Q2_K_S IQ3_XS IQ3_XXS IQ2_M IQ2_S IQ2_XS IQ2_XXS IQ1_M IQ1_S (aliases Q3_K Q4_K Q5_K)',
    )
    .argument('<args...>', 'IN.gguf [OUT.gguf] TYPE [NTHREADS]')
    .option('--allow-requantize', 'quantize tensors that are already quantized (quality suffers)')
    .option('--leave-output-tensor', 'leave output.weight as it is')
    .option('--pure', "every quantizable tensor in TYPE's default type, without the mix")
    .option('--output-tensor-type <type>', 'type of output.weight (a ggml type: Q8_0, Q6_K, F16, ...)')
    .option('--token-embedding-type <type>', 'type of token_embd.weight')
    .option('--tensor-type <regex=type>', 'tensors whose name matches the regex take the type (first match wins; repeatable), e.g. ffn_down_exps=q6_k', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--imatrix <file>', "importance matrix (kail imatrix's or llama-imatrix's, GGUF or legacy .dat): weights each column's rounding error by the activations it sees")
    .option('--include-weights <name>', 'use the imatrix only for tensors whose name contains this (repeatable)', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--exclude-weights <name>', 'do not use the imatrix for tensors whose name contains this (repeatable)', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--override-kv <KEY=TYPE:VALUE>', "metadata written into the output in place of the file's (TYPE int, float, bool or str; an int is written as u32), and read so by the mix; repeatable, one per flag as llama-quantize takes it", (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--prune-layers <ids>', "leave out these blocks (comma-separated numbers): the later ones are renumbered and block_count set to what remains, as llama-quantize's --prune-layers", (v: string) =>
      v.split(',').map((x) => {
        if (!/^\s*\d+\s*$/.test(x)) throw new Error(`--prune-layers takes comma-separated block numbers, got '${x}' in '${v}'`);
        return Number(x);
      }),
    )
    .option('--dry-run', 'print the types and sizes without writing')
    .option('--keep-split', 'as many output files as the input has: OUT less .gguf becomes the prefix of OUT-0000i-of-0000N.gguf')
    .option('-t, --threads <n>', 'quantizer threads (default: the CPUs this process may use)')
    .option('-v, --verbose', 'a line per tensor: its type before and after, and sizes')
    .option('--json', 'print the report as JSON')
    .action((args: string[], o: QuantizeFlags) => {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const tools = require('@kailstream/tools') as typeof import('@kailstream/tools');
      const isType = (s: string) => {
        try {
          tools.parseQuantFileType(s);
          return !/^\d+$/.test(s);
        } catch {
          return false;
        }
      };
      const a = quantizeArgs(args, isType);
      const ft = tools.parseQuantFileType(a.type);
      const threadsText = o.threads ?? a.threads;
      let threads: number | undefined;
      if (threadsText !== undefined) {
        threads = Number(threadsText);
        if (!Number.isInteger(threads) || threads < 1 || threads > 1024) throw new Error(`quantize: threads must be an integer from 1 to 1024, got '${threadsText}'`);
      }
      const tensorTypes = o.tensorType.map((spec) => {
        const eq = spec.indexOf('=');
        if (eq <= 0 || eq === spec.length - 1) throw new Error(`--tensor-type wants REGEX=TYPE, got '${spec}'`);
        const pattern = spec.slice(0, eq).toLowerCase();
        try {
          new RegExp(pattern);
        } catch (e) {
          throw new Error(`--tensor-type '${spec}': ${(e as Error).message}`);
        }
        return { pattern, type: tools.parseTensorType(spec.slice(eq + 1)) };
      });
      // (One override per flag, as llama-quantize's string_parse_kv_override takes it: commas are the value's.)
      const kvOverrides = o.overrideKv.map((v) => parseKvOverride(v));
      if (!o.json) for (const ov of kvOverrides) process.stderr.write(`kail: ${describeKvOverride(ov)}\n`);
      const output = o.dryRun ? undefined : (a.output ?? tools.defaultQuantizedPath(a.input, ft.name));
      // (Made at the first slab, when the amount is known: a dry run or a refusal draws none.)
      let bar: Progress | undefined;
      const showBar = !o.json && !o.verbose;
      const report: QuantizeReport = tools.quantizeModel(a.input, output, {
        type: a.type,
        threads,
        allowRequantize: o.allowRequantize,
        leaveOutputTensor: o.leaveOutputTensor,
        pure: o.pure,
        outputTensorType: o.outputTensorType === undefined ? undefined : tools.parseTensorType(o.outputTensorType),
        tokenEmbeddingType: o.tokenEmbeddingType === undefined ? undefined : tools.parseTensorType(o.tokenEmbeddingType),
        tensorTypes,
        imatrix: o.imatrix,
        includeWeights: o.includeWeights,
        excludeWeights: o.excludeWeights,
        kvOverrides,
        pruneLayers: o.pruneLayers,
        dryRun: o.dryRun,
        keepSplit: o.keepSplit,
        log: o.verbose && !o.json ? (l) => process.stderr.write(`${l}\n`) : undefined,
        progress: showBar
          ? (done, total, name) => (bar ??= createProgress({ label: `quantizing ${path.basename(a.input)} to ${ft.name}`, total, format: formatBytes })).update(done, name)
          : undefined,
      });
      bar?.done();
      if (o.json) {
        process.stdout.write(JSON.stringify(report) + '\n');
        return;
      }
      const counts = new Map<string, number>();
      for (const t of report.tensors) counts.set(t.to, (counts.get(t.to) ?? 0) + 1);
      const lines = [
        ...tools.quantizeSummary(report),
        `tensor types: ${[...counts].map(([t, n]) => `${t} ${n}`).join(', ')}`,
        report.outputs.length ? `wrote ${report.outputs.join(', ')} (${formatBytes(report.bytesOut)} of tensors)` : 'dry run: nothing written',
      ];
      process.stdout.write(lines.join('\n') + '\n');
    });
}
