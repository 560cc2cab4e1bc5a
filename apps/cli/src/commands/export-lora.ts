import fs from 'node:fs';
import type { Command } from 'commander';
import { formatBytes, parseLoraFlags } from '@kailstream/engine/core';

export function registerExportLora(program: Command): void {
  program
    .command('export-lora')
    .description(
      "llama-export-lora: merge LoRA adapters into a model, so it runs without --lora: each paired tensor becomes W + scale x alpha/rank x B A, " +
        'computed in F32 and written as F16 (F32 where the base is F32); the others are copied as they are',
    )
    .requiredOption('-m, --model <file>', 'the base model (GGUF, one file)')
    .requiredOption('-o, --output <file>', 'the merged model')
    .option('--lora <files>', 'LoRA adapter at scale 1 (comma-separated for several); repeatable', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--lora-scaled <file:scale>', "LoRA adapter with its scale, FNAME:SCALE (llama.cpp's FNAME SCALE works too); repeatable", (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('-t, --threads <n>', 'threads for converting to and from F32')
    .option('-v, --verbose', 'a line per merged tensor')
    .option('--json', 'print one JSON object')
    .action((o: { model: string; output: string; lora: string[]; loraScaled: string[]; threads?: string; verbose?: boolean; json?: boolean }) => {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const tools = require('@kailstream/tools') as typeof import('@kailstream/tools');
      const lora = parseLoraFlags(o.lora, o.loraScaled).map((l) => ({ path: l.path, scale: l.scale ?? 1 }));
      let threads: number | undefined;
      if (o.threads !== undefined) {
        threads = Number(o.threads);
        if (!Number.isInteger(threads) || threads < 1 || threads > 1024) throw new Error(`--threads must be an integer from 1 to 1024, got '${o.threads}'`);
      }
      const r = tools.exportLora(o.model, o.output, { lora, threads, log: o.verbose && !o.json ? (l) => process.stderr.write(`${l}\n`) : undefined });
      const size = fs.statSync(o.output).size;
      if (o.json) process.stdout.write(JSON.stringify({ ...r, bytes: size }) + '\n');
      else
        process.stdout.write(
          `wrote ${o.output} (${formatBytes(size)}): ${r.merged} tensors merged with ${lora.length} adapter(s), ${r.copied} copied` +
            (r.unused.length ? `; ${r.unused.length} adapter tensors have no base tensor and were ignored (${r.unused.slice(0, 3).join(', ')}${r.unused.length > 3 ? ', ...' : ''})` : '') +
            '\n',
        );
    });
}
