import fs from 'node:fs';
import type { Command } from 'commander';
import { formatBytes } from '@kailstream/engine/core';

/** llama-gguf-split's --split-max-size N(M|G): decimal megabytes or gigabytes. */
export function splitSize(v: string): number {
  const m = /^(\d+)([MG])$/.exec(v);
  if (!m || Number(m[1]) <= 0) throw new Error(`--split-max-size takes a positive whole number of M (megabytes) or G (gigabytes), e.g. 48G, got '${v}'`);
  return Number(m[1]) * (m[2] === 'M' ? 1e6 : 1e9);
}

export function registerGgufSplit(program: Command): void {
  program
    .command('gguf-split')
    .description(
      "llama-gguf-split: write a GGUF model as split files OUT-00001-of-0000N.gguf (the first with all the metadata, each with the split keys; at most --split-max-tensors tensors or --split-max-size bytes each), " +
        'or with --merge join a split model, given its first file, into OUT. kail runs split models as they are; this is for moving and publishing them',
    )
    .argument('<in>', 'the model (to split), or its first split (to merge)')
    .argument('<out>', 'the prefix of the split files, or the merged file')
    .option('--split', 'split IN (the default)')
    .option('--merge', 'merge the split model whose first file is IN into OUT')
    .option('--split-max-tensors <n>', 'at most this many tensors per split (default 128)', (v: string) => {
      if (!/^\d+$/.test(v) || Number(v) < 1) throw new Error(`--split-max-tensors takes a positive integer, got '${v}'`);
      return Number(v);
    })
    .option('--split-max-size <size>', 'at most this much tensor data per split: N followed by M or G (decimal: 1G = 10^9 bytes)', splitSize)
    .option('--no-tensor-first-split', 'the first split holds the metadata alone')
    .option('--dry-run', 'print the plan and write nothing')
    .option('--json', 'print one JSON object')
    .action((input: string, output: string, o: { split?: boolean; merge?: boolean; splitMaxTensors?: number; splitMaxSize?: number; tensorFirstSplit: boolean; dryRun?: boolean; json?: boolean }) => {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const tools = require('@kailstream/tools') as typeof import('@kailstream/tools');
      if (o.split && o.merge) throw new Error('either --split or --merge, not both');
      if (o.splitMaxTensors !== undefined && o.splitMaxSize !== undefined) throw new Error('either --split-max-tensors or --split-max-size, not both');
      if (o.merge) {
        if (o.splitMaxTensors !== undefined || o.splitMaxSize !== undefined || !o.tensorFirstSplit) throw new Error('--merge takes no split options');
        if (o.dryRun) {
          const { files, headers } = tools.ggufSplitFiles(input);
          const tensors = headers.reduce((a, h) => a + h.tensors.length, 0);
          if (o.json) process.stdout.write(JSON.stringify({ merge: true, dryRun: true, files, tensors, output }) + '\n');
          else process.stdout.write(`would merge ${files.length} splits, ${tensors} tensors, into ${output}\n`);
          return;
        }
        const r = tools.mergeGguf(input, output);
        if (o.json) process.stdout.write(JSON.stringify({ merge: true, files: r.files, tensors: r.tensors, output, bytes: fs.statSync(output).size }) + '\n');
        else process.stdout.write(`${output} merged from ${r.files.length} splits with ${r.tensors} tensors (${formatBytes(fs.statSync(output).size)})\n`);
        return;
      }
      const opts = { maxTensors: o.splitMaxTensors, maxBytes: o.splitMaxSize, noTensorFirstSplit: !o.tensorFirstSplit };
      const plan = tools.planGgufSplit(input, opts);
      const names = plan.splits.map((_, i) => tools.ggufSplitPath(output, i + 1, plan.splits.length));
      const lines = [`n_split: ${plan.splits.length}`, ...plan.splits.map((ids, i) => `split ${String(i + 1).padStart(5, '0')}: n_tensors = ${ids.length}, total_size = ${Math.floor(plan.bytes[i] / 1e6)}M`)];
      if (o.dryRun) {
        if (o.json) process.stdout.write(JSON.stringify({ dryRun: true, files: names, tensors: plan.splits.map((x) => x.length), bytes: plan.bytes }) + '\n');
        else process.stdout.write(lines.join('\n') + '\n');
        return;
      }
      const files = tools.splitGguf(input, output, plan);
      if (o.json) process.stdout.write(JSON.stringify({ files, tensors: plan.splits.map((x) => x.length), bytes: files.map((f) => fs.statSync(f).size) }) + '\n');
      else process.stdout.write([...lines, ...files.map((f) => `wrote ${f}`)].join('\n') + '\n');
    });
}
