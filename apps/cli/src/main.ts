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
import { registerCreate } from './commands/create';
import { registerModels } from './commands/models';
import { registerShow } from './commands/show';
import { registerPull } from './commands/pull';
import { dataDir, resolveModelArg } from './paths';

export function buildProgram(): Command {
  const program = new Command();
  program
    .name('kail')
    .description('KailStream: local inference for Mixture-of-Experts models larger than memory')
    .version(VERSION, '-V, --version', 'print the version number (kail version: with the native kernel level and CPU/GPU features)')
    .showHelpAfterError()
    .exitOverride();
  // A model given by name (-m NAME, as `ollama run NAME`) is that file of the models directory, for
  // every command that loads a model from a file (chat's -m is an id on the server; serve's engine
  // looks names up itself). One found nowhere is left as given: the command's checks and its
  // loader name it (kail run says where it looked).
  program.hook('preAction', (_p, cmd) => {
    if (cmd.name() === 'chat' || cmd.name() === 'serve') return;
    const m: unknown = cmd.getOptionValue('model');
    if (typeof m === 'string') cmd.setOptionValueWithSource('model', resolveModelArg(m, dataDir(cmd.getOptionValue('dataDir')), { lenient: true }), cmd.getOptionValueSource('model'));
  });
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
  registerCreate(program);
  registerShow(program);
  registerPull(program);
  return program;
}

/**
 * llama.cpp's multi-letter short flags, which commander cannot declare, and its other names for
 * flags we spell otherwise, as our long ones (-ctk q8_0 is --cache-type-k q8_0, -md D.gguf --draft
 * D.gguf, --draft-max 8 --spec-k 8, --ctx-size=512 --ctx=512), except where the command (`own`:
 * its flags) defines the name itself. Nothing after `--` is touched.
 */
const LLAMA_SHORT_FLAGS: Record<string, string> = { '-hf': '--hf-repo', '-hff': '--hf-file', '-cnv': '--conversation', '-sys': '--system-prompt', '-sysf': '--system-prompt-file', '-ctk': '--cache-type-k', '-ctv': '--cache-type-v', '-ofreq': '--output-frequency', '--from-chunk': '--chunk', '-np': '--parallel', '-pg': '--pg', '-md': '--draft', '--model-draft': '--draft', '--spec-draft-model': '--draft', '--draft-max': '--spec-k', '--draft-n': '--spec-k', '--spec-draft-n-max': '--spec-k', '-to': '--timeout', '-hft': '--hf-token', '--no-webui': '--no-web', '--no-ui': '--no-web', '-no-cnv': '--no-conversation', '-st': '--single-turn', '--ctx-size': '--ctx', '--predict': '--n-predict', '-ctxcp': '--ctx-checkpoints', '--swa-checkpoints': '--ctx-checkpoints' };
/** llama.cpp's flags that take two words (FNAME SCALE, START END), joined as FNAME:SCALE, START:END. */
const LLAMA_TWO_WORD_FLAGS = new Set(['--control-vector-scaled', '--control-vector-layer-range', '--lora-scaled']);
export function llamaFlagAliases(argv: string[], own: ReadonlySet<string> = new Set()): string[] {
  const end = argv.indexOf('--');
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (end >= 0 && i >= end) out.push(a);
    // (Only when the second word is a number: FNAME:SCALE and START:END stay as they are.)
    else if (LLAMA_TWO_WORD_FLAGS.has(a) && i + 2 < (end >= 0 ? end : argv.length) && /^-?\d*\.?\d+(e-?\d+)?$/.test(argv[i + 2])) {
      out.push(a, `${argv[i + 1]}:${argv[i + 2]}`);
      i += 2;
    } else {
      const eq = a.startsWith('--') ? a.indexOf('=') : -1;
      const flag = eq > 0 ? a.slice(0, eq) : a;
      const alias = own.has(flag) ? undefined : LLAMA_SHORT_FLAGS[flag];
      out.push(alias === undefined ? a : alias + (eq > 0 ? a.slice(eq) : ''));
    }
  }
  return out;
}

/**
 * llama.cpp's flags for where weights and work go on a GPU, and for what is always on here, as
 * the guides for running MoE models with llama.cpp write them (`-ngl 99 -fa on --jinja -ot
 * ".ffn_.*_exps.=CPU"`), and ollama run's for what a process of its own needs not: accepted and dropped by commands that load a model and do not define
 * them, with a line saying why, so such a command line runs. `value`: the words each takes
 * ('onoff': an optional on/off/auto).
 */
const LLAMA_IGNORED_FLAGS: readonly { flags: readonly string[]; value: 0 | 1 | 'onoff'; why: string }[] = [
  { flags: ['-ngl', '--gpu-layers', '--n-gpu-layers'], value: 1, why: 'layers are computed on the CPU here; --vram gives streamed experts a cache in GPU memory' },
  { flags: ['-ot', '--override-tensor'], value: 1, why: 'non-expert weights stay in RAM and routed experts stream into a RAM cache here (--ram, --vram set the budgets)' },
  { flags: ['-cmoe', '--cpu-moe'], value: 0, why: 'experts are computed on the CPU here' },
  { flags: ['-ncmoe', '--n-cpu-moe'], value: 1, why: 'experts are computed on the CPU here' },
  { flags: ['-sm', '--split-mode', '-ts', '--tensor-split', '-mg', '--main-gpu', '-dev', '--device'], value: 1, why: 'there is no GPU split here: --vram uses GPU 0 for the expert cache' },
  { flags: ['-nkvo', '--no-kv-offload'], value: 0, why: 'the KV cache is in RAM here' },
  { flags: ['-fa', '--flash-attn'], value: 'onoff', why: 'the engine has one attention path here, no switch' },
  { flags: ['--jinja'], value: 0, why: "chat templates are always run as Jinja here (--chat-template replaces the file's)" },
  { flags: ['--no-mmap'], value: 0, why: 'models in memory are copied, not mapped, by default here (--mmap maps them)' },
  { flags: ['-cb', '--cont-batching'], value: 0, why: 'continuous batching is always on here' },
  { flags: ['--metrics', '--slots', '--props'], value: 0, why: '/metrics, /slots and /props are always served here' },
  { flags: ['--embedding', '--embeddings', '--rerank', '--reranking'], value: 0, why: 'embeddings (/v1/embeddings) and reranking (/v1/rerank, for a reranker model) are always served here' },
  { flags: ['-b', '--batch-size', '-ub', '--ubatch-size'], value: 1, why: 'batch sizes are the engine\'s own here' },
  { flags: ['--numa', '--poll', '--prio'], value: 1, why: 'threads are placed by the operating system here' },
  { flags: ['-tb', '--threads-batch'], value: 1, why: 'one thread count (-t) computes prompts and generation here' },
  { flags: ['--threads-http'], value: 1, why: "HTTP requests are served by the API process's event loop here" },
  { flags: ['-kvu', '--kv-unified', '-no-kvu', '--no-kv-unified'], value: 0, why: 'each slot has a KV cache of its own here (-c tokens)' },
  { flags: ['--cache-reuse'], value: 1, why: 'a request reuses the start of its prompt that a slot holds here (later chunks are not shifted into place)' },
  { flags: ['-cram', '--cache-ram'], value: 1, why: "there is no prompt cache in RAM beside the slots' KV caches here" },
  { flags: ['--mlock'], value: 0, why: 'memory is not locked here: a RAM budget (--ram) that fits keeps the model out of swap' },
  { flags: ['--no-warmup'], value: 0, why: 'there is no warmup pass here' },
  { flags: ['-fit', '--fit'], value: 'onoff', why: 'budgets, threads and I/O depth come from the hardware profile here (kail profile; --ram, --vram and --threads override it)' },
  { flags: ['-co', '--color'], value: 'onoff', why: "output is not colored here (a reasoning model's thinking is dimmed on a terminal)" },
  { flags: ['--log-disable'], value: 0, why: "kail's own lines go to stderr (2>/dev/null hides them)" },
  { flags: ['--log-file'], value: 1, why: "kail's own lines go to stderr (2>FILE keeps them)" },
  { flags: ['-v', '--verbose', '--log-verbose'], value: 0, why: "there is one log level here: kail's own lines, timings included, on stderr" },
  { flags: ['--nowordwrap'], value: 0, why: 'output is not word-wrapped here' },
  { flags: ['--keepalive'], value: 1, why: 'the model lives as long as this process here (kail serve keeps models loaded: its --keep-alive)' },
  { flags: ['-lv', '--verbosity', '--log-verbosity'], value: 1, why: "there is one log level here: kail's own lines on stderr" },
  { flags: ['--simple-io'], value: 0, why: 'input is read line by line here' },
  { flags: ['-ctxcp', '--ctx-checkpoints', '--swa-checkpoints'], value: 1, why: "a conversation keeps its model's state as the chat grows here (kail serve --ctx-checkpoints keeps checkpoints per slot)" },
];

/**
 * Drops the LLAMA_IGNORED_FLAGS that `known` (the command's own flags, directly or through
 * LLAMA_SHORT_FLAGS) does not hold, with their
 * values (`-ngl 99`, `--flash-attn=on`, `-fa` alone or with on/off/auto); returns what is left and
 * a line per flag dropped. Nothing after `--` is touched.
 */
export function dropIgnoredLlamaFlags(argv: readonly string[], known: ReadonlySet<string>): { argv: string[]; notes: string[] } {
  const end = argv.indexOf('--');
  const out: string[] = [];
  const notes: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const [flag, inline] = a.startsWith('--') && a.includes('=') ? [a.slice(0, a.indexOf('=')), true] : [a, false];
    const entry = end >= 0 && i >= end ? undefined : LLAMA_IGNORED_FLAGS.find((f) => f.flags.includes(flag));
    if (!entry || known.has(flag) || known.has(LLAMA_SHORT_FLAGS[flag] ?? '')) {
      out.push(a);
      continue;
    }
    let value = '';
    const next = argv[i + 1];
    const isNext = next !== undefined && (end < 0 || i + 1 < end);
    if (!inline && entry.value === 1 && isNext) value = argv[++i];
    else if (!inline && entry.value === 'onoff' && isNext && /^(on|off|auto|[01])$/.test(next)) value = argv[++i];
    notes.push(`kail: ${flag}${inline ? a.slice(flag.length) : value ? ` ${value}` : ''} ignored: ${entry.why}`);
  }
  return { argv: out, notes };
}

export async function runCli(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    // (Only for commands that load a model: their -m says so.)
    const cmd = program.commands.find((c) => c.name() === argv[0] || c.aliases().includes(argv[0]));
    const own = new Set((cmd?.options ?? []).flatMap((o) => [o.short, o.long].filter((f): f is string => !!f)));
    if (own.has('--model') || own.has('-m')) {
      const dropped = dropIgnoredLlamaFlags(argv, own);
      for (const n of dropped.notes) process.stderr.write(n + '\n');
      argv = dropped.argv;
    }
    await program.parseAsync(llamaFlagAliases(argv, own), { from: 'user' });
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
