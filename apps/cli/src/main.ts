import { Command, CommanderError } from 'commander';
import { VERSION } from '@kailstream/engine/core';

import { registerVersion } from './commands/version';
import { registerServe } from './commands/serve';
import { registerModelCommands } from './commands/model-commands';
import { registerCacheSim } from './commands/cache-sim';
import { registerKeys } from './commands/keys';
import { registerPs } from './commands/ps';
import { registerStop } from './commands/stop';
import { registerChat } from './commands/chat';
import { registerProfile } from './commands/profile';
import { registerRepack } from './commands/repack';
import { registerQuantize } from './commands/quantize';
import { registerGgufSplit } from './commands/gguf-split';
import { registerExportLora } from './commands/export-lora';
import { registerEmbed } from './commands/embed';
import { registerModels } from './commands/models';
import { registerPull } from './commands/pull';

export function buildProgram(): Command {
  const program = new Command();
  program
    .name('kail')
    .description('KailStream: local inference for Mixture-of-Experts models larger than memory')
    .version(VERSION, '-V, --version-flag', 'print the version number')
    .showHelpAfterError()
    .exitOverride();
  registerVersion(program);
  registerServe(program);
  registerModelCommands(program);
  registerCacheSim(program);
  registerKeys(program);
  registerPs(program);
  registerStop(program);
  registerChat(program);
  registerProfile(program);
  registerRepack(program);
  registerQuantize(program);
  registerGgufSplit(program);
  registerExportLora(program);
  registerEmbed(program);
  registerModels(program);
  registerPull(program);
  return program;
}

/**
 * llama.cpp's multi-letter short flags, which commander cannot declare, spelled as our long ones
 * (-ctk q8_0 is --cache-type-k q8_0). Nothing after `--` is touched.
 */
const LLAMA_SHORT_FLAGS: Record<string, string> = { '-hf': '--hf-repo', '-hff': '--hf-file', '-cnv': '--conversation', '-sys': '--system-prompt', '-sysf': '--system-prompt-file', '-ctk': '--cache-type-k', '-ctv': '--cache-type-v', '-ofreq': '--output-frequency', '--from-chunk': '--chunk', '-np': '--parallel', '-pg': '--pg' };
/** llama.cpp's flags that take two words (FNAME SCALE, START END), joined as FNAME:SCALE, START:END. */
const LLAMA_TWO_WORD_FLAGS = new Set(['--control-vector-scaled', '--control-vector-layer-range', '--lora-scaled']);
export function llamaFlagAliases(argv: string[]): string[] {
  const end = argv.indexOf('--');
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (end >= 0 && i >= end) out.push(a);
    // (Only when the second word is a number: FNAME:SCALE and START:END stay as they are.)
    else if (LLAMA_TWO_WORD_FLAGS.has(a) && i + 2 < (end >= 0 ? end : argv.length) && /^-?\d*\.?\d+(e-?\d+)?$/.test(argv[i + 2])) {
      out.push(a, `${argv[i + 1]}:${argv[i + 2]}`);
      i += 2;
    } else out.push(LLAMA_SHORT_FLAGS[a] ?? a);
  }
  return out;
}

export async function runCli(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(llamaFlagAliases(argv), { from: 'user' });
    return 0;
  } catch (e) {
    if (e instanceof CommanderError) return e.exitCode;
    process.stderr.write(`kail: ${(e as Error).message}\n`);
    return 1;
  }
}

if (require.main === module || process.argv[1]?.endsWith('kail.js') || process.argv[1]?.endsWith('/kail')) {
  runCli(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
