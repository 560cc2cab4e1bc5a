import path from 'node:path';
import type { Command } from 'commander';
import { EXPERT_PACK_EXT, formatBytes, readPackHeader, repackModel } from '@kailstream/engine/core';
import fs from 'node:fs';

export function registerRepack(program: Command): void {
  program
    .command('repack')
    .description(
      'write an expert-major copy of the routed experts (an expert pack: one 4 KiB-aligned block per expert, gate+up+down together, one read each), ' +
        'striped over the --storage directories; the GGUF stays unchanged and needed. Use it with kail run/bench --storage DIR ...',
    )
    .requiredOption('-m, --model <file>', 'GGUF model file')
    .option('-o, --out <file>', `pack file (${EXPERT_PACK_EXT}); with --storage only its name is used, once in each directory (default: MODEL${EXPERT_PACK_EXT} next to the model)`)
    .option('--storage <dir>', 'a directory to hold one stripe, repeatable: experts are striped across all of them', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--json', 'print the stripe files as JSON')
    .action((o: { model: string; out?: string; storage: string[]; json?: boolean }) => {
      const base = path.basename(o.model).replace(/\.gguf$/i, '');
      let out = o.out ?? path.join(path.dirname(o.model), `${base}${EXPERT_PACK_EXT}`);
      if (!out.endsWith(EXPERT_PACK_EXT)) {
        if (/\.gguf$/i.test(out)) out = out.replace(/\.gguf$/i, EXPERT_PACK_EXT);
        else throw new Error(`-o must name a ${EXPERT_PACK_EXT} file, got '${out}'`);
      }
      const dirs = o.storage.length ? o.storage : [path.dirname(out)];
      const tty = process.stderr.isTTY;
      const log = (l: string) => process.stderr.write(tty ? `\r\x1b[K${l}` : `${l}\n`);
      const files = repackModel(o.model, path.basename(out), dirs, log);
      if (tty) process.stderr.write('\n');
      if (o.json) {
        process.stdout.write(JSON.stringify({ model: o.model, stripes: files }) + '\n');
        return;
      }
      const h = readPackHeader(files[0])!.header;
      const experts = h.layers.reduce((a, l) => a + l.stripe.length, 0);
      process.stdout.write(
        `expert pack of ${o.model}: ${experts} experts in ${h.layers.length} MoE layers, blocks of ${formatBytes(h.layers[0].blockBytes)}, ${files.length} stripe(s):\n` +
          files.map((f) => `  ${f} (${formatBytes(fs.statSync(f).size)})`).join('\n') +
          `\nrun with: kail run -m ${o.model} --ram BYTES ${dirs.map((d) => `--storage ${d}`).join(' ')}\n`,
      );
    });
}
