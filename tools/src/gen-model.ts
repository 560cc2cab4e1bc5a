// gen-model: writes a random-weight GGUF test model.
//   node tools/dist/gen-model.js --preset tiny-qwen3moe --type F32 --seed 1 --out /tmp/m.gguf
//   node tools/dist/gen-model.js --arch llama --dim 512 --layers 8 --type Q4_K_M --out m.gguf
//   node tools/dist/gen-model.js --preset tiny-llama --lora-rank 8 --out a.gguf   (a LoRA adapter for it)
//   node tools/dist/gen-model.js --inspect m.gguf
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { GgmlType, ggmlTypeTraits, GgufType } from './gguf/constants';
import { readGgufHeader } from './gguf/reader';
import { splitGguf } from './gguf/split';
import type { ModelConfig } from './models/arch';
import { archNames } from './models/architectures';
import { writeLoraAdapter } from './models/lora';
import { writeControlVector } from './models/control-vector';
import { commandIndexPath, lastCacheEntry, modelCacheDir } from './models/file-cache';
import { writeModelParallel } from './models/parallel';
import { DEFAULT_PRESET_FOR_ARCH, getPreset, PRESETS } from './models/presets';
import { FILE_TYPES, parseFileType } from './models/quant-plan';
import { VOCAB_KINDS } from './models/vocab';
import type { VocabKind } from './models/vocab';

const USAGE = `usage: gen-model (--preset NAME | --arch ARCH) --out FILE [options]
       gen-model --inspect FILE
       gen-model --list-presets

  --preset NAME       ${Object.keys(PRESETS).join(', ')}
  --arch ARCH         ${archNames().join(', ')} (starts from that arch's tiny preset)
  --type T            ${FILE_TYPES.join(', ')} (default F32)
  --seed N            weight seed (default 1)
  --out FILE          output path
  --layers N  --dim N  --ff N  --heads N  --kv-heads N  --head-dim N
  --experts N  --experts-used N  --expert-ff N  --shared-ff N
  --vocab N  --vocab-kind ${VOCAB_KINDS.join('|')}  --ctx N  --rope-base X  --norm-eps X
  --tied / --untied   tie output to token_embd or not
  --name S            general.name
  --chat-template-file F   tokenizer.chat_template from file F instead of the vocabulary's
  --alignment N       GGUF data alignment (default 32)
  --simulate-type T   write --type floats holding T's quantize->dequantize values (format checks)
  --expert-pool N     quantized expert tensors: rows drawn from a pool of N quantized random rows per
                      tensor (benchmark files of tens of GB in minutes; recorded in the file)
  --threads N         worker threads for generation and quantization (default: all cores)
  --lora-rank N       write a LoRA adapter of rank N for the model these options describe, instead
                      of the model (llama.cpp's GGUF adapter format, tools/src/models/lora.ts)
  --lora-alpha X      its adapter.lora.alpha (default 16)
  --lora-targets L    comma-separated: attn_q, ffn_down, ... (per block) or whole names
                      (output.weight, token_embd.weight); default the attention and dense-FFN
                      projections and output.weight
  --control-vector    write a control vector for the model these options describe, instead of the
                      model (llama.cpp's format: F32 direction.N per layer, tools/src/models/control-vector.ts)
  --cv-layers L       its layers, comma-separated (default 1 .. layers-1)
  --split-max-tensors N  write the model as llama.cpp's gguf-split does: OUT's name less .gguf
                      becomes the prefix of OUT-00001-of-0000K.gguf ..., at most N tensors per file
  --json              print the summary as JSON
  --quiet             no progress on stderr`;

const INT_OPTS: [string, keyof ModelConfig][] = [
  ['layers', 'nLayers'], ['dim', 'dim'], ['ff', 'ff'], ['heads', 'nHeads'], ['kv-heads', 'nKvHeads'],
  ['head-dim', 'headDim'], ['experts', 'nExperts'], ['experts-used', 'nExpertsUsed'], ['expert-ff', 'expertFf'],
  ['shared-ff', 'sharedFf'], ['vocab', 'vocabSize'], ['ctx', 'ctx'],
];

function parseIntStrict(name: string, s: string): number {
  if (!/^\d+$/.test(s)) throw new Error(`--${name} expects a non-negative integer, got '${s}'`);
  return Number(s);
}

function parseNum(name: string, s: string): number {
  const v = Number(s);
  if (!Number.isFinite(v)) throw new Error(`--${name} expects a number, got '${s}'`);
  return v;
}

export async function main(argv: string[]): Promise<number> {
  const strOpts = Object.fromEntries(
    [...INT_OPTS.map(([k]) => k), 'preset', 'arch', 'type', 'seed', 'out', 'vocab-kind', 'chat-template-file', 'rope-base', 'norm-eps', 'name', 'alignment', 'inspect', 'simulate-type', 'threads', 'expert-pool', 'lora-rank', 'lora-alpha', 'lora-targets', 'cv-layers', 'split-max-tensors'].map(
      (k) => [k, { type: 'string' as const }],
    ),
  );
  const { values } = parseArgs({
    args: argv,
    options: {
      ...strOpts,
      tied: { type: 'boolean' },
      untied: { type: 'boolean' },
      json: { type: 'boolean' },
      quiet: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
      'list-presets': { type: 'boolean' },
      'control-vector': { type: 'boolean' },
    },
    strict: true,
  });
  const v = values as Record<string, string | boolean | undefined>;
  if (v.help) {
    console.log(USAGE);
    return 0;
  }
  if (v['list-presets']) {
    for (const [name, p] of Object.entries(PRESETS)) console.log(`${name.padEnd(28)} ${p.description}`);
    return 0;
  }
  if (typeof v.inspect === 'string') {
    inspect(v.inspect, !!v.json);
    return 0;
  }
  if (!v.out || (!v.preset && !v.arch)) {
    console.error(USAGE);
    return 2;
  }
  let presetName = v.preset as string | undefined;
  if (!presetName) {
    presetName = DEFAULT_PRESET_FOR_ARCH[v.arch as string];
    if (!presetName) throw new Error(`no base preset for arch '${String(v.arch)}'; use --preset`);
  }
  const config: ModelConfig = getPreset(presetName).config;
  if (v.arch && v.arch !== config.arch) throw new Error(`--arch ${String(v.arch)} conflicts with preset ${presetName} (${config.arch})`);
  for (const [opt, field] of INT_OPTS) {
    const s = v[opt];
    if (typeof s === 'string') (config as unknown as Record<string, number>)[field] = parseIntStrict(opt, s);
  }
  if (typeof v['vocab-kind'] === 'string') {
    if (!(VOCAB_KINDS as readonly string[]).includes(v['vocab-kind'])) throw new Error(`--vocab-kind: one of ${VOCAB_KINDS.join(', ')}`);
    config.vocabKind = v['vocab-kind'] as VocabKind;
  }
  if (typeof v['chat-template-file'] === 'string') config.chatTemplate = fs.readFileSync(v['chat-template-file'], 'utf8');
  if (typeof v['rope-base'] === 'string') config.ropeBase = parseNum('rope-base', v['rope-base']);
  if (typeof v['norm-eps'] === 'string') config.normEps = parseNum('norm-eps', v['norm-eps']);
  if (v.tied) config.tiedEmbeddings = true;
  if (v.untied) config.tiedEmbeddings = false;
  if (typeof v.name === 'string') config.name = v.name;
  const fileType = parseFileType(typeof v.type === 'string' ? v.type : 'F32');
  const seed = typeof v.seed === 'string' ? parseIntStrict('seed', v.seed) : 1;
  const quiet = !!v.quiet || !!v.json;
  if (v['control-vector']) {
    const r = writeControlVector({
      config,
      out: path.resolve(v.out as string),
      layers: typeof v['cv-layers'] === 'string' ? v['cv-layers'].split(',').map((x) => parseIntStrict('cv-layers', x)) : undefined,
      seed,
    });
    if (v.json) console.log(JSON.stringify(r));
    else if (!quiet) process.stderr.write(`wrote control vector ${r.path} (layers ${r.layers.join(', ')})\n`);
    return 0;
  }
  if (typeof v['lora-rank'] === 'string') {
    const r = writeLoraAdapter({
      config,
      out: path.resolve(v.out as string),
      rank: parseIntStrict('lora-rank', v['lora-rank']),
      alpha: typeof v['lora-alpha'] === 'string' ? parseNum('lora-alpha', v['lora-alpha']) : undefined,
      targets: typeof v['lora-targets'] === 'string' ? v['lora-targets'].split(',') : undefined,
      type: fileType === 'F16' ? 'F16' : 'F32',
      seed,
    });
    if (v.json) console.log(JSON.stringify(r));
    else if (!quiet) process.stderr.write(`wrote LoRA adapter ${r.path} (${r.tensors.length} tensors adapted)\n`);
    return 0;
  }

  let lastReport = 0;
  const res = await writeModelParallel({
    threads: typeof v.threads === 'string' ? parseIntStrict('threads', v.threads) : undefined,
    config,
    fileType,
    seed,
    out: path.resolve(v.out as string),
    alignment: typeof v.alignment === 'string' ? parseIntStrict('alignment', v.alignment) : undefined,
    simulateType: typeof v['simulate-type'] === 'string' ? parseFileType(v['simulate-type']) : undefined,
    expertPool: typeof v['expert-pool'] === 'string' ? parseIntStrict('expert-pool', v['expert-pool']) : undefined,
    onTensor: quiet
      ? undefined
      : ({ index, count, name }) => {
          const now = Date.now();
          if (now - lastReport > 1000 || index + 1 === count) {
            process.stderr.write(`  [${index + 1}/${count}] ${name}\n`);
            lastReport = now;
          }
        },
  });
  const entry = lastCacheEntry();
  const cacheDir = modelCacheDir();
  if (entry && cacheDir && typeof v['split-max-tensors'] !== 'string') {
    // (This command line, less its --out pair, writes that cache file: see commandIndexPath.)
    const args = [...argv];
    const at = args.indexOf('--out');
    if (at >= 0) {
      args.splice(at, 2);
      const index = commandIndexPath(cacheDir, __filename, args);
      fs.writeFileSync(`${index}.tmp${process.pid}`, JSON.stringify({ entry }));
      fs.renameSync(`${index}.tmp${process.pid}`, index);
    }
  }
  let splits: string[] | undefined;
  if (typeof v['split-max-tensors'] === 'string') {
    // The whole file first, then its splits (its bytes, cut as gguf-split cuts them); the whole goes.
    const n = parseIntStrict('split-max-tensors', v['split-max-tensors']);
    splits = splitGguf(res.path, res.path.replace(/\.gguf$/i, ''), n);
    fs.rmSync(res.path, { force: true });
  }
  const typeCounts: Record<string, number> = {};
  for (const t of res.tensors) typeCounts[ggmlTypeTraits(t.type).name] = (typeCounts[ggmlTypeTraits(t.type).name] ?? 0) + 1;
  const summary = {
    path: res.path,
    bytes: res.bytes,
    params: res.params,
    seconds: Number(res.seconds.toFixed(2)),
    fileType,
    seed,
    tensorTypes: typeCounts,
    config: res.config,
    ...(splits ? { splits } : {}),
  };
  if (v.json) console.log(JSON.stringify(summary));
  else {
    console.log(
      `${res.path}: ${res.config.arch} ${fileType}, ${(res.params / 1e6).toFixed(1)}M params, ${(res.bytes / 2 ** 20).toFixed(1)} MiB, ` +
        `${res.tensors.length} tensors ${JSON.stringify(typeCounts)}, ${res.seconds.toFixed(1)} s`,
    );
    if (splits) console.log(`split into ${splits.length} files: ${splits.join(', ')}`);
  }
  return 0;
}

function inspect(file: string, json: boolean): void {
  const h = readGgufHeader(file);
  const kvOut: Record<string, unknown> = {};
  for (const [k, e] of h.kv) {
    if (e.type === GgufType.ARRAY) {
      const arr = e.value as unknown[];
      kvOut[k] = `[${GgufType[e.elemType!]} x ${arr.length}] ${JSON.stringify(arr.slice(0, 8), (_, x) => (typeof x === 'bigint' ? x.toString() : x))}${arr.length > 8 ? '…' : ''}`;
    } else kvOut[k] = typeof e.value === 'bigint' ? e.value.toString() : e.value;
  }
  const tensors = h.tensors.map((t) => ({ name: t.name, shape: t.shape, type: GgmlType[t.type] ?? t.type, bytes: t.bytes }));
  if (json) {
    console.log(JSON.stringify({ version: h.version, alignment: h.alignment, fileSize: h.fileSize, kv: kvOut, tensors }));
    return;
  }
  console.log(`GGUF v${h.version}, alignment ${h.alignment}, ${h.fileSize} bytes, ${h.kv.size} keys, ${h.tensors.length} tensors`);
  for (const [k, val] of Object.entries(kvOut)) {
    const s = typeof val === 'string' ? val : JSON.stringify(val);
    console.log(`  ${k} = ${s.length > 120 ? s.slice(0, 117) + '...' : s}`);
  }
  for (const t of tensors) console.log(`  ${t.name.padEnd(32)} ${String(t.type).padEnd(5)} [${t.shape.join(', ')}]`);
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => (process.exitCode = code),
    (e: unknown) => {
      console.error(`gen-model: ${(e as Error).message}`);
      process.exitCode = 1;
    },
  );
}
