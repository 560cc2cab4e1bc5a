import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import {
  ChatTemplate,
  DEFAULT_RAM_RESERVE_BYTES,
  EngineModel,
  draftLayersOf,
  isGemma4AssistantFile,
  parseLoraFlags,
  parseControlVectorFlags,
  KV_TYPES,
  type KvType,
  SpeculativeDecoder,
  Tokenizer,
  benchmark,
  benchmarkParallel,
  benchmarkSpeculative,
  type ParallelBenchResult,
  formatBytes,
  generate,
  hellaswagScore,
  multipleChoiceScore,
  parseHellaswag,
  parseRopeFlags,
  parseChatTemplateKwargsFlag,
  readChatTemplateFlags,
  ROPE_FLAGS,
  perplexityStrided,
  readMultipleChoice,
  type RopeFlag,
  parseWinogrande,
  winograndeScore,
  kvCacheReport,
  openGgufMetadata,
  type KvCacheReport,
  parseByteSize,
  perplexity,
  klDivergence,
  kldChunkLine,
  kldStatsLines,
  KLD_CHUNK_HEADER,
  openBaseLogits,
  computeImatrix,
  planModel,
  profileDefaults,
  profileRamBudget,
  defaultRamBudget,
  parseRamBudget,
  parseVramBudget,
  modelFileBytes,
  readHardwareProfile,
  hardwareProfilePath,
  vramTierDropped,
  USAGE_HISTORY_SUBDIR,
  summarize,
  summarizeStream,
  routingStats,
  type RoutingStats,
  type GenerateResult,
  type LoadModelOptions,
  type ResidencyPlan,
  type SamplerParams,
  type SamplerStage,
  DEFAULT_SAMPLERS,
  createSampler,
  type SpeculativeStats,
  DEFAULT_DRY_BREAKERS,
  dryBreakerSequences,
  parseGbnf,
  compileJsonSchema,
  isEncoderArchitecture,
  kvTypesFromFlags,
  parseKvOverrides,
  applyKvOverrides,
  describeKvOverride,
  type KvOverride,
  parseRoutingTrace,
  simulateCache,
} from '@kailstream/engine/core';
import { opensReasoning, ReasoningSplitter } from '@kailstream/engine/reasoning';

import { createProgress, type Progress } from '../progress';
import { BENCH_OUTPUTS, benchCsv, benchJsonl, benchMarkdown, intRangeList, pgPairs, rowTests, type BenchOutput, type BenchRow, type BenchTest } from './bench-output';
import { answerDisplay } from './chat';
import { addDiffusionOptions, runDiffusion, type DiffusionOpts } from './diffusion-run';
import { runConversation } from './conversation';
import { applyModelfileParameters, readModelfileSettings } from './run-modelfile';
import { servedCopyOf } from './models';
import { pullOrLocal } from './pull';
import { processEscapes } from '../escapes';
import { checkOutputPath, dataDir, resolveModelArg } from '../paths';

export function int(name: string, min: number, max = Number.MAX_SAFE_INTEGER) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be an integer in ${min}..${max}, got '${v}'`);
    return n;
  };
}
/**
 * All of stdin when it is a shell pipe or a redirected file, as `ollama run` reads it ('' when it
 * is a terminal, /dev/null, or a socket: a parent process's pipe that may never close).
 */
async function pipedStdin(): Promise<string> {
  let st: fs.Stats;
  try {
    st = fs.fstatSync(0);
  } catch {
    return '';
  }
  if (!st.isFIFO() && !st.isFile()) return '';
  const chunks: Buffer[] = [];
  for await (const c of fs.createReadStream('', { fd: 0, autoClose: false })) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * --seed: 0..2^32-1, or -1 for a random one (llama.cpp's -s -1), which the command then sees as
 * no seed (commander turns a parser's undefined into '', so it is cleared before the action).
 */
export function addSeedOption(cmd: Command, description: string, defaultValue?: number): Command {
  cmd.option('-s, --seed <s>', description, int('--seed', -1, 2 ** 32 - 1), defaultValue);
  return cmd.hook('preAction', (_self, action) => {
    if (action.getOptionValue('seed') === -1) action.setOptionValue('seed', undefined);
  });
}
/** "1,4,16": sequence counts for `kail bench --parallel`. */
function intList(name: string, min: number, max: number) {
  return (v: string) => {
    const parts = v.split(',').map((x) => x.trim());
    const check = int(name, min, max);
    try {
      return parts.map(check);
    } catch {
      throw new Error(`${name} must be a comma-separated list of integers in ${min}..${max}, got '${v}'`);
    }
  };
}
export function num(name: string, min: number, max: number) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n < min || n > max) throw new Error(`${name} must be a number in ${min}..${max}, got '${v}'`);
    return n;
  };
}

/** --ram / --vram: a byte size or a share ("80%") of the memory available now / GPU 0's free memory. */
export function budget(name: string, parse: (v: string) => number) {
  return (v: string) => {
    let n: number;
    try {
      n = parse(v);
    } catch (e) {
      throw new Error(`${name}: ${(e as Error).message}`);
    }
    // (A RAM budget of nothing holds no model: said here, not as the loader's ramBytes.)
    if (name === '--ram' && !(n > 0)) throw new Error(`--ram: '${v}' is no budget; give a positive size (8G, 512M) or share (80%), or leave --ram out`);
    return n;
  };
}

/**
 * --cache-policy, checked by the expert cache's own parser (the simulator's, on a one-access trace)
 * when the flag is read: a bad name or option is an error even where no expert streams.
 */
function cachePolicy(v: string): string {
  if (v.split(':')[0] === 'belady') throw new Error(`--cache-policy ${v}: belady needs the future trace; it is offline, for kail cache-sim only`);
  try {
    simulateCache(parseRoutingTrace('{"layer": 0, "token_idx": 0, "experts": [0]}', '--cache-policy'), 1, [v]);
  } catch (e) {
    throw new Error(`--cache-policy: ${(e as Error).message}`);
  }
  return v;
}

function bytes(name: string) {
  return (v: string) => {
    try {
      return parseByteSize(v);
    } catch (e) {
      throw new Error(`${name}: ${(e as Error).message}`);
    }
  };
}

const VRAM_HELP =
  'GPU memory (8G, 512M, bytes, or a share of GPU 0\'s free memory such as 90%) for a second expert cache under --ram: experts read from storage are kept there too, and RAM misses are copied back from it instead of read again (needs --ram and a CUDA device; default: the hardware profile\'s usable GPU memory when experts stream, else none)';

/** Flags of the expert-streaming budget, shared by run, bench and plan. */
interface StreamOpts extends CacheTypeOpts, RopeFlagOpts {
  lora: string[];
  loraScaled: string[];
  controlVector: string[];
  controlVectorScaled: string[];
  controlVectorLayerRange?: [number, number];
  swaFull?: boolean;
  overrideKv: string[];
  mmap?: boolean;
  ram?: number;
  vram?: number;
  reserve?: number;
  ioThreads?: number;
  directIo: boolean;
  prefetch: boolean;
  cachePolicy?: string;
  storage: string[];
  usageDir?: string;
  readSize?: number;
}

/** --cache-type: the KV cache's element type (llama.cpp's -ctk/-ctv, both at once; Ollama's OLLAMA_KV_CACHE_TYPE). */
export const CACHE_TYPE_HELP = `KV cache type: ${KV_TYPES.join(', ')} (q8_0 about half the memory of f16, q4_0 about a quarter)`;
export function cacheType(v: string, flag = '--cache-type'): KvType {
  if (!(KV_TYPES as readonly string[]).includes(v)) throw new Error(`${flag} must be ${KV_TYPES.join(', ')}, got '${v}'`);
  return v as KvType;
}
/** --cache-type for both, and K's and V's apart (llama.cpp's -ctk/-ctv, each defaulting to --cache-type). */
export interface CacheTypeOpts {
  /** Unset: f16 (f32 for an embedding model, which keeps K and V for one pass only). */
  cacheType?: KvType;
  cacheTypeK?: KvType;
  cacheTypeV?: KvType;
}
export function addCacheTypeOptions(cmd: Command, help = CACHE_TYPE_HELP): Command {
  return cmd
    .option('--cache-type <type>', `${help}; default f16 (f32 for an embedding model)`, (v: string) => cacheType(v))
    .option('--cache-type-k <type>', "K rows' type, also -ctk as llama.cpp spells it; default --cache-type", (v: string) => cacheType(v, '--cache-type-k'))
    .option('--cache-type-v <type>', "V rows' type, also -ctv; default --cache-type (MLA models keep one latent cache: K's and V's must match)", (v: string) => cacheType(v, '--cache-type-v'));
}
/** The load options' KV types from the flags. */
export function kvTypesOf(o: CacheTypeOpts): { kvType?: KvType; kvTypeV?: KvType } {
  return kvTypesFromFlags(o.cacheType, o.cacheTypeK, o.cacheTypeV);
}

/** --control-vector-layer-range START:END (llama.cpp's two words are joined so by llamaFlagAliases). */
function layerRange(v: string): [number, number] {
  const m = /^(-?\d+):(-?\d+)$/.exec(v);
  if (!m) throw new Error(`--control-vector-layer-range takes START END (integers), got '${v.replace(':', ' ')}'`);
  return [Number(m[1]), Number(m[2])];
}

export const OVERRIDE_KV_HELP =
  "metadata read in place of the file's, llama.cpp's --override-kv KEY=TYPE:VALUE with TYPE int, float, bool or str (comma-separated for several; repeatable), e.g. qwen3moe.expert_used_count=int:4";
/** --override-kv, repeatable: each value a comma-separated list (parsed by kvOverridesOf). */
export function addOverrideKvOption(cmd: Command): Command {
  return cmd.option('--override-kv <KEY=TYPE:VALUE>', OVERRIDE_KV_HELP, (v: string, acc: string[]) => [...acc, v], [] as string[]);
}
/** The load options' overrides from the flag, each said on stderr as llama.cpp logs it. */
export function kvOverridesOf(values: readonly string[] | undefined, log: (line: string) => void): { kvOverrides?: KvOverride[] } {
  const kvOverrides = parseKvOverrides(values ?? []);
  for (const o of kvOverrides) log(`kail: ${describeKvOverride(o)}`);
  return kvOverrides.length ? { kvOverrides } : {};
}

/** llama.cpp's RoPE context flags (engine model/rope-options.ts), shared by the commands that load a model and by serve. */
export function addRopeOptions(cmd: Command, what = ''): Command {
  return cmd
    .option('--rope-scaling <type>', `RoPE frequency scaling: none, linear or yarn (default: the model's)${what}`)
    .option('--rope-scale <n>', 'RoPE context scaling factor: the context grows by N (a frequency scale of 1/N)')
    .option('--rope-freq-base <n>', "RoPE base frequency (default: the model's)")
    .option('--rope-freq-scale <n>', 'RoPE frequency scale: the context grows by 1/N')
    .option('--yarn-orig-ctx <n>', "YaRN: the model's original context (default: the model's)")
    .option('--yarn-ext-factor <n>', 'YaRN extrapolation mix (default: 1 with yarn, else 0)')
    .option('--yarn-beta-fast <n>', 'YaRN low correction dimension (default 32)')
    .option('--yarn-beta-slow <n>', 'YaRN high correction dimension (default 1)');
}
export interface RopeFlagOpts {
  ropeScaling?: string;
  ropeScale?: string;
  ropeFreqBase?: string;
  ropeFreqScale?: string;
  yarnOrigCtx?: string;
  yarnExtFactor?: string;
  yarnBetaFast?: string;
  yarnBetaSlow?: string;
}
/** The flags' text values under llama.cpp's names (parseRopeFlags, or forwarding to the engine service). */
export function ropeFlagValues(o: RopeFlagOpts): Partial<Record<RopeFlag, string>> {
  // (commander's key of --yarn-orig-ctx is yarnOrigCtx.)
  const given = ROPE_FLAGS.map((f) => [f, (o as Record<string, string | undefined>)[f.replace(/-(\w)/g, (_, c: string) => c.toUpperCase())]] as const);
  return Object.fromEntries(given.filter(([, v]) => v !== undefined));
}

function addStreamOptions(cmd: Command): Command {
  return addRopeOptions(addOverrideKvOption(addCacheTypeOptions(cmd)))
    .option('--lora <files>', "LoRA adapter (a GGUF adapter file; comma-separated for several), applied at scale 1; repeatable", (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--lora-scaled <file:scale>', 'LoRA adapter with its scale, FNAME:SCALE (comma-separated for several); repeatable', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--control-vector <file>', "control vector (llama.cpp's format: direction.N per layer), added at strength 1; repeatable", (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--control-vector-scaled <file:scale>', "control vector with a strength; llama.cpp's FNAME SCALE (two words) works too; repeatable", (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--control-vector-layer-range <start:end>', "layers the control vectors apply to, inclusive (llama.cpp's START END works too; default all)", layerRange)
    .option('--swa-full', "sliding-window layers keep every position instead of a ring (llama.cpp's --swa-full): more KV memory; gpt-oss can then shift its context")
    .option('--mmap', "in memory, compute from the file's mapping (llama.cpp's default) instead of a copy in huge pages: starts faster, runs slower")
    .option('--ram <bytes>', 'RAM budget for the whole model (8G, 512M, bytes, or a share of the memory available now such as 80%): routed experts stream from storage into what it leaves', budget('--ram', parseRamBudget))
    .option('--vram <bytes>', VRAM_HELP, budget('--vram', parseVramBudget))
    .option('--reserve <bytes>', `part of --ram held back for this process (default ${formatBytes(DEFAULT_RAM_RESERVE_BYTES)})`, bytes('--reserve'))
    .option('--io-threads <n>', 'expert reads in flight (default 4)', int('--io-threads', 1, 64))
    .option('--no-direct-io', 'read experts through the page cache (then drop it) instead of O_DIRECT')
    .option('--no-prefetch', "do not read the next layer's predicted experts early")
    .option('--cache-policy <name>', "expert cache eviction: lru, lfu, lrfu or context, options after a colon (default: context)", cachePolicy)
    .option('--storage <path>', 'read experts from the expert pack (kail repack) in this directory or file, repeatable (one per stripe); needs --ram', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--usage-dir <dir>', `where per-model expert usage histories live (default: <data dir>/${USAGE_HISTORY_SUBDIR})`)
    .option('--read-size <bytes>', 'largest single expert read; larger reads are cut into parts read in parallel (default: uncut, or the hardware profile\'s)', bytes('--read-size'));
}


/**
 * What a load with streamLoadOptions chose by itself, said on stderr: experts streamed, or weights
 * computed from the file's mapping, because a copy would not fit; or no VRAM tier because the
 * profile's GPU memory holds none of the experts.
 */
function sayLoadChoices(model: EngineModel, o: StreamOpts, log: (l: string) => void): void {
  if (model.autoRamBytes)
    log(
      `kail: ${path.basename(model.path)} (${formatBytes(model.summary.fileBytes)}) and its KV cache do not fit the memory available, so its experts stream from storage ` +
        `within --ram ${formatBytes(model.autoRamBytes)} (80% of it); kail profile measures the storage for --io-threads and --read-size, --mmap computes from the file's mapping instead`,
    );
  if (model.weightsMapped && !o.mmap)
    log(`kail: ${path.basename(model.path)} (${formatBytes(model.summary.fileBytes)}) and its KV cache do not fit the memory available, so its weights are computed from the file's mapping, as with --mmap (slower); --ram streams its experts instead`);
  if (vramTierDropped(model))
    log(`kail: no VRAM tier: ${formatBytes(model.plan!.vramBytes)} of GPU memory holds none of this model's experts (${formatBytes(model.plan!.expertEntryBytes)} each)`);
}

/**
 * Load options from the streaming flags, with the hardware profile's defaults (<data dir>/profile.json)
 * for --ram and --io-threads when absent; each default taken is said on stderr with its reason.
 */
function streamLoadOptions(o: StreamOpts, modelPath: string, dir: string, usageHistory: boolean, log: (l: string) => void): LoadModelOptions {
  let ramBytes = o.ram;
  let ioThreads = o.ioThreads;
  let readBytes = o.readSize;
  let vramBytes = o.vram;
  // (The profile's defaults size the file: a missing one is named here, as the load would name it.)
  if (!fs.existsSync(modelPath)) throw new Error(`model file not found: ${modelPath}`);
  const profile = readHardwareProfile(dir);
  if (profile) {
    const d = profileDefaults(profile, hardwareProfilePath(dir), modelFileBytes(modelPath), { ramBytes, ioThreads, readBytes, vramBytes });
    ramBytes = d.ramBytes;
    if (ramBytes !== undefined) ioThreads = d.ioThreads;
    readBytes = d.readBytes;
    vramBytes = d.vramBytes;
    for (const l of d.lines) log(`kail: ${l}`);
  }
  const lora = parseLoraFlags(o.lora ?? [], o.loraScaled ?? []);
  const controlVectors = parseControlVectorFlags(o.controlVector ?? [], o.controlVectorScaled ?? []);
  const rope = parseRopeFlags(ropeFlagValues(o));
  return {
    ...kvTypesOf(o),
    ...kvOverridesOf(o.overrideKv, log),
    ...(rope ? { rope } : {}),
    ...(lora.length ? { lora } : {}),
    ...(controlVectors.length ? { controlVectors, controlVectorLayerRange: o.controlVectorLayerRange } : {}),
    ...(o.swaFull ? { swaFull: true } : {}),
    ...(o.mmap ? { mmap: true } : {}),
    ramBytes,
    ramReserveBytes: o.reserve,
    ...(vramBytes ? { vramBytes } : {}),
    // The profile's budget: one too small for an expert gives no tier (said by sayVramDropped).
    ...(vramBytes && o.vram === undefined ? { vramOptional: true } : {}),
    ioThreads,
    directIo: o.directIo,
    prefetch: o.prefetch,
    cachePolicy: o.cachePolicy,
    storage: o.storage.length ? o.storage : undefined,
    readBytes,
    usageHistoryDir: usageHistory ? (o.usageDir ?? path.join(dir, USAGE_HISTORY_SUBDIR)) : undefined,
  };
}

/** One line about expert streaming after a run; '' on the in-memory path. */
function streamLine(model: EngineModel, tokens: number): string {
  const st = model.runtime.stats().stream;
  if (!st || !model.plan) return '';
  const s = summarizeStream(st);
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  return (
    `experts: ${s.accesses} asked, hit rate ${pct(s.hitRate)} (+${pct(s.accesses ? s.missesInflight / s.accesses : 0)} being prefetched), read ${formatBytes(s.bytesRead)}` +
    `${tokens ? ` (${formatBytes(s.bytesRead / tokens)}/token)` : ''} in ${s.readSeconds.toFixed(2)} s of I/O, stalled ${s.stallSeconds.toFixed(2)} s, ` +
    `prefetch precision ${pct(s.prefetchPrecision)} recall ${pct(s.prefetchRecall)} | cache ${formatBytes(s.usedBytes)} used, ` +
    `${formatBytes(s.peakBytes)} peak of ${formatBytes(s.capacityBytes)}, ${st.policy} | ${s.directIo ? 'O_DIRECT' : s.ioNote}` +
    (s.vramDevice
      ? ` | VRAM tier ${s.vramDevice}: ${s.vramReads} RAM misses copied from it (${formatBytes(s.vramBytes)} in ${s.vramSeconds.toFixed(2)} s), ` +
        `${formatBytes(s.vramUsedBytes)} of ${formatBytes(s.vramCapacityBytes)} held${st.vram.error ? `, off: ${st.vram.error}` : ''}`
      : '')
  );
}

/** Flags of speculative decoding, shared by run and bench. */
interface SpecOpts {
  draft?: string;
  lookup?: boolean;
  mtp?: boolean;
  specK: number;
  specAdapt: boolean;
}

function addSpecOptions(cmd: Command): Command {
  return cmd
    .option('--draft <file>', 'speculative decoding with this draft GGUF (same vocabulary, checked); loaded in RAM. An EAGLE-3 draft (llama.cpp\'s eagle3 files) drafts from the target\'s hidden states at its three layers; a Gemma 4 assistant draft (gemma4-assistant files) over the target\'s KV cache')
    .option('--lookup', 'speculative decoding with prompt-lookup (n-gram) drafts from the context, no draft model')
    .option('--mtp', "speculative decoding with the model file's own multi-token-prediction block (DeepSeek-V3/V4, Qwen3.5, Nemotron 3) as the draft")
    .option('--spec-k <n>', 'drafted tokens per target pass to start from (1..32)', int('--spec-k', 1, 32), 4)
    .option('--no-spec-adapt', 'keep --spec-k fixed instead of following the acceptance rate');
}

/**
 * Target load options for --draft / --mtp: an EAGLE-3 or DFlash draft reads the target's hidden
 * states at its layers, which the target's program gives then; an MTP block reads the hidden rows it is
 * trained on (nextnHidden: deepseek4's hyper-connection streams).
 */
function draftTargetOptions(o: SpecOpts): { extractLayers?: number[]; nextnHidden?: boolean } {
  if (o.mtp) return { nextnHidden: true };
  const layers = o.draft ? draftLayersOf(o.draft) : null;
  return layers ? { extractLayers: layers } : {};
}

/** The decoder for --draft / --lookup / --mtp, or null; the draft model is returned to be closed. */
function loadSpeculation(target: EngineModel, o: SpecOpts, threads: number | undefined): { spec: SpeculativeDecoder | null; draft: EngineModel | null } {
  if ([o.draft, o.lookup, o.mtp].filter(Boolean).length > 1) throw new Error('give one of --draft FILE, --lookup and --mtp');
  if (!o.draft && !o.lookup && !o.mtp) return { spec: null, draft: null };
  const draft = o.draft
    ? // (An EAGLE-3 draft without token_embd / output of its own takes the target's; a Gemma 4
      // assistant draft attends over the target's KV cache, with its slots and batch.)
      isGemma4AssistantFile(o.draft)
      ? EngineModel.load(o.draft, { threads, nCtx: target.nCtx, nSeqMax: target.nSeqMax, nBatch: target.nBatch, kvSource: target })
      : EngineModel.load(o.draft, { threads, nCtx: target.nCtx, ...(target.extractLayers ? { embeddingsFrom: target.path } : {}) })
    : o.mtp
      ? EngineModel.load(target.path, { threads, nCtx: target.nCtx, nSeqMax: target.nSeqMax, mtp: true })
      : null;
  try {
    const how = o.mtp ? { mtp: draft! } : { draft: draft ?? undefined, lookup: !draft };
    return { spec: new SpeculativeDecoder(target, { ...how, k: o.specK, adaptive: o.specAdapt }), draft };
  } catch (e) {
    draft?.close();
    throw e;
  }
}

function specLine(s: SpeculativeStats): string {
  return (
    `speculative (${s.mode}): drafted ${s.draftedTokens}, accepted ${s.acceptedTokens} (${(100 * s.acceptanceRate).toFixed(1)}%), ` +
    `${s.targetPasses} target passes, ${s.tokensPerPass.toFixed(2)} tokens/pass, k now ${s.currentK}, ` +
    `draft ${s.draftSeconds.toFixed(2)} s + verify ${s.verifySeconds.toFixed(2)} s, est. time saved ${s.timeSavedSeconds.toFixed(2)} s`
  );
}

/** The built-in default model: a tiny Qwen3-MoE the project writes itself (no download). */
export function ensureDemoModel(dir: string, log: (l: string) => void): string {
  // (The writer is loaded here, for --demo only.)
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { getPreset, writeModel, WEIGHT_RECIPE_VERSION } = require('@kailstream/tools') as typeof import('@kailstream/tools');
  const file = path.join(dir, 'models', `kail-demo-tiny-qwen3moe-f32-r${WEIGHT_RECIPE_VERSION}.gguf`);
  if (fs.existsSync(file)) return file;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  log(`writing the built-in demo model to ${file} ...`);
  const tmp = `${file}.partial`;
  let bar: Progress | undefined;
  writeModel({
    config: getPreset('tiny-qwen3moe').config, fileType: 'F32', seed: 1, out: tmp,
    onTensor: (t) => (bar ??= createProgress({ label: 'tensors', total: t.count })).update(t.index + 1, t.name),
  });
  bar?.done();
  fs.renameSync(tmp, file);
  return file;
}

/** llama-cli's sampler flags beyond temperature, top-k/p and min-p (defaults: llama.cpp's). */
interface SamplerOpts {
  repeatPenalty: number;
  repeatLastN: number;
  presencePenalty: number;
  frequencyPenalty: number;
  typical: number;
  topNsigma: number;
  xtcProbability: number;
  xtcThreshold: number;
  minKeep: number;
  dynatempRange: number;
  dynatempExp: number;
  dryMultiplier: number;
  dryBase: number;
  dryAllowedLength: number;
  dryPenaltyLastN: number;
  drySequenceBreaker: string[];
  /** llama.cpp's --escape (default) / --no-escape. */
  escape?: boolean;
  mirostat: number;
  mirostatLr: number;
  mirostatEnt: number;
  samplers?: string[];
  adaptiveTarget: number;
  adaptiveDecay: number;
}

function addSamplerOptions(cmd: Command): Command {
  const collect = (v: string, prev: string[]) => [...prev, v];
  return cmd
    .option('--repeat-penalty <x>', 'penalise repeated tokens (1 = off)', num('--repeat-penalty', 0.000001, 100), 1)
    .option('--repeat-last-n <n>', 'tokens the penalties look back over (0 = off, -1 = the whole context)', int('--repeat-last-n', -1), 64)
    .option('--presence-penalty <x>', 'presence penalty (0 = off)', num('--presence-penalty', -2, 2), 0)
    .option('--frequency-penalty <x>', 'frequency penalty (0 = off)', num('--frequency-penalty', -2, 2), 0)
    .option('--typical <p>', 'locally typical sampling (1 = off)', num('--typical', 0, 1), 1)
    .option('--top-nsigma <n>', 'keep tokens within n standard deviations of the best logit (-1 = off)', num('--top-nsigma', -1e9, 1e9), -1)
    .option('--xtc-probability <p>', 'XTC: chance to drop the likely tokens (0 = off)', num('--xtc-probability', 0, 1), 0)
    .option('--xtc-threshold <p>', 'XTC: probability threshold (> 0.5 = off)', num('--xtc-threshold', 0, 1), 0.1)
    .option('--min-keep <n>', 'fewest candidates the samplers leave (0 = no minimum)', int('--min-keep', 0, 2 ** 31 - 1), 0)
    .option('--dynatemp-range <r>', 'dynamic temperature range (0 = off)', num('--dynatemp-range', 0, 100), 0)
    .option('--dynatemp-exp <x>', 'dynamic temperature exponent', num('--dynatemp-exp', 0, 100), 1)
    .option('--dry-multiplier <x>', 'DRY repetition penalty multiplier (0 = off)', num('--dry-multiplier', 0, 100), 0)
    .option('--dry-base <x>', 'DRY base', num('--dry-base', 1, 100), 1.75)
    .option('--dry-allowed-length <n>', 'DRY: repeats this long go unpenalised', int('--dry-allowed-length', 0, 2 ** 31 - 1), 2)
    .option('--dry-penalty-last-n <n>', 'DRY: tokens to scan (0 = off, -1 = the whole context)', int('--dry-penalty-last-n', -1, 2 ** 31 - 1), 64)
    .option('--dry-sequence-breaker <s>', "a DRY sequence breaker, repeatable ('none': none; default: \\n : \" *)", collect, [])
    .option('--mirostat <v>', 'Mirostat sampling: 0 = off, 1, 2 (replaces top-k/top-p/min-p and the penalties)', int('--mirostat', 0, 2), 0)
    .option('--mirostat-lr <eta>', 'Mirostat learning rate', num('--mirostat-lr', 0, 10), 0.1)
    .option('--mirostat-ent <tau>', 'Mirostat target entropy', num('--mirostat-ent', 0, 100), 5)
    .option('--samplers <list>', `the chain's order, names separated by ';' (${[...DEFAULT_SAMPLERS, 'adaptive_p'].join(';')})`, (v: string) => v.split(/[;,]/).map((x) => x.trim()).filter(Boolean))
    .option('--adaptive-target <p>', 'adaptive-p (with adaptive_p in --samplers): draw tokens near this probability (negative = off)', num('--adaptive-target', -1, 1), -1)
    .option('--adaptive-decay <d>', 'adaptive-p: decay of its running average (0 to 0.99)', num('--adaptive-decay', 0, 0.99), 0.9);
}

/** The sampler parameters of llama-cli's flags (DRY breakers turned into token sequences with the model's tokenizer). */
function samplerParams(o: SamplerOpts, tok: EngineModel['tokenizer']): SamplerParams {
  const off = o.repeatLastN === 0;
  const breakers = o.drySequenceBreaker.length ? o.drySequenceBreaker.filter((b) => b !== 'none').map((b) => (o.escape === false ? b : processEscapes(b))) : [...DEFAULT_DRY_BREAKERS];
  return {
    repetitionPenalty: off ? 1 : o.repeatPenalty,
    presencePenalty: off ? 0 : o.presencePenalty,
    frequencyPenalty: off ? 0 : o.frequencyPenalty,
    penaltyLastN: off ? 64 : o.repeatLastN,
    typicalP: o.typical,
    topNSigma: o.topNsigma,
    xtcProbability: o.xtcProbability,
    xtcThreshold: o.xtcThreshold,
    minKeep: o.minKeep,
    dynatempRange: o.dynatempRange,
    dynatempExponent: o.dynatempExp,
    dryMultiplier: o.dryMultiplier,
    dryBase: o.dryBase,
    dryAllowedLength: o.dryAllowedLength,
    dryPenaltyLastN: o.dryPenaltyLastN,
    dryBreakers: o.dryMultiplier !== 0 && breakers.length ? dryBreakerSequences(tok, breakers) : [],
    mirostat: o.mirostat,
    mirostatTau: o.mirostatEnt,
    mirostatEta: o.mirostatLr,
    ...(o.samplers ? { samplers: o.samplers as SamplerStage[] } : {}),
    adaptiveTarget: o.adaptiveTarget,
    adaptiveDecay: o.adaptiveDecay,
  };
}

interface RunOpts extends SamplerOpts {
  model?: string;
  hfRepo?: string;
  hfFile?: string;
  hfToken?: string;
  offline?: boolean;
  prompt?: string;
  file?: string;
  nPredict: number;
  chat?: boolean;
  conversation?: boolean;
  singleTurn?: boolean;
  systemPrompt?: string;
  systemPromptFile?: string;
  reversePrompt: string[];
  chatTemplate?: string;
  chatTemplateFile?: string;
  chatTemplateKwargs?: string;
  think?: string | boolean;
  format?: string;
  hidethinking?: boolean;
  temp: number;
  seed?: number;
  topK: number;
  topP: number;
  minP: number;
  threads?: number;
  ctx?: number;
  json?: boolean;
  demo?: boolean;
  dataDir?: string;
  grammar?: string;
  grammarFile?: string;
  jsonSchema?: string;
  jsonSchemaFile?: string;
  contextShift?: boolean;
  keep?: number;
  ignoreEos?: boolean;
  promptCache?: string;
  promptCacheRo?: boolean;
  promptCacheAll?: boolean;
}

const collectText = (v: string, prev: string[]) => [...prev, v];

/** A text file given with -f, as llama.cpp's tools read it: one trailing newline dropped. */
function readPromptFile(file: string): string {
  return readTextFile(file, '-f').replace(/\n$/, '');
}

/** A text file a flag names, or an error naming the flag and why it cannot be read. */
function readTextFile(file: string, flag: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new Error(`${flag}: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

/**
 * An encoder-decoder's (t5) plan: the KV cache at its most (the whole context a prompt, encoding)
 * and after, and the weights read once per prompt against those read per generated token.
 */
function encoderDecoderPlanLines(e: NonNullable<ResidencyPlan['encoderDecoder']>, nCtx: number): { kv: string; weights: string } {
  const b = formatBytes;
  return {
    kv:
      `                 (per sequence: ${b(e.kvEncoderBytesPerToken + e.kvCrossBytesPerToken)} per prompt token while it encodes, encoder + cross-attention rows; ` +
      `then ${b(e.kvCrossBytesPerToken)} per prompt token, cross-attention, + ${b(e.kvDecoderBytesPerToken)} per generated token, decoder; prompt + generated <= ${nCtx})`,
    weights: `weights read     ${b(e.promptWeightBytes)} once per prompt (encoder, ${e.encoderLayers} layers, and the cross-attention K/V), ${b(e.tokenWeightBytes)} per generated token (decoder, ${e.decoderLayers} layers)`,
  };
}

function planLines(file: string, p: ResidencyPlan): string[] {
  const b = formatBytes;
  const lines = [
    `model            ${file}`,
    `RAM budget       ${b(p.ramBytes)} (${p.ramBytes} bytes)`,
    `  reserve        ${b(p.reserveBytes)} (this process: runtime, tokenizer, heaps)`,
    `  resident       ${b(p.residentBytes)} (${p.residentTensors} non-expert tensors, copied into RAM at load)`,
    `  KV cache       ${b(p.kvBytes)} (${p.nCtx} tokens x ${p.nSeqMax} sequence${p.nSeqMax > 1 ? 's' : ''})`,
    ...(p.encoderDecoder ? [encoderDecoderPlanLines(p.encoderDecoder, p.nCtx).kv] : []),
    `  scratch        ${b(p.scratchBytes)} (batch of ${p.nBatch} tokens)`,
    ...(p.loraBytes ? [`  LoRA           ${b(p.loraBytes)} (adapter pairs, mapped)`] : []),
    ...(p.encoderDecoder ? [encoderDecoderPlanLines(p.encoderDecoder, p.nCtx).weights] : []),
  ];
  if (p.nMoeLayers) {
    // A block can hold more than one MoE op (GroveMoE: routed and chunk experts), each with its own
    // expert count; the plan counts each op as a MoE layer.
    const uniform = p.nExpertMin === p.nExpert;
    lines.push(
      `  expert cache   ${b(p.cacheBytes)}: ${p.cacheExperts} experts of ${b(p.expertEntryBytes)}, ${p.cacheExpertsPerLayer.toFixed(1)} per MoE layer`,
      uniform
        ? `experts          ${b(p.expertBytes)} on storage: ${p.nMoeLayers} MoE layers x ${p.nExpert} experts, ${p.nExpertUsed} used per token`
        : `experts          ${b(p.expertBytes)} on storage: ${p.nExpertTotal} experts in ${p.nMoeLayers} MoE layers of ${p.nExpertMin} to ${p.nExpert} ` +
          `(a block may hold more than one), up to ${p.nExpertUsed} used per layer and token`,
      `cold read/token  ${b(p.coldReadBytesPerToken)} (${uniform ? '' : 'up to '}${p.nExpertUsed} experts x ${p.nMoeLayers} layers, nothing cached)`,
    );
    if (p.vramBytes)
      lines.push(
        p.vramCacheBytes < p.vramBytes && p.vramCacheExperts === p.nExpertTotal
          ? `VRAM tier        ${b(p.vramCacheBytes)} of the ${b(p.vramBytes)} budget: all ${p.vramCacheExperts} experts (slots of ${b(p.expertEntryBytes)}; the rest is not taken)`
          : `VRAM tier        ${b(p.vramBytes)}: ${p.vramCacheExperts} experts (slots of ${b(p.expertEntryBytes)}; copies of what is read, RAM misses copied back from it)`,
      );
  } else {
    lines.push('experts          none (dense model: everything is resident)');
  }
  lines.push(p.fits ? 'fits             yes' : `fits             no: ${b(p.shortfallBytes)} short`);
  return lines;
}

/**
 * The template options of `--think [level]` (ollama run's) and `--chat-template-kwargs` (llama.cpp's):
 * thinking on or off (enable_thinking), or a reasoning effort (gpt-oss's reasoning_effort); the
 * kwargs are the other variables.
 */
export function thinkRender(think: string | boolean | undefined, kwargs: string | undefined): { enableThinking?: boolean; variables?: Record<string, unknown> } {
  const variables: Record<string, unknown> = kwargs !== undefined ? parseChatTemplateKwargsFlag(kwargs) : {};
  const out: { enableThinking?: boolean; variables?: Record<string, unknown> } = {};
  if (think !== undefined) {
    const v = String(think).toLowerCase();
    if (v === 'true') out.enableThinking = true;
    else if (v === 'false') out.enableThinking = false;
    else if (['high', 'medium', 'low'].includes(v)) {
      out.enableThinking = true;
      variables.reasoning_effort ??= v;
    } else throw new Error(`--think takes true, false, high, medium or low, got '${think}'`);
  }
  if (Object.keys(variables).length) out.variables = variables;
  return out;
}

export function registerModelCommands(program: Command): void {
  const run = program
    .command('run')
    .description('generate text from a prompt, streaming it; then print prompt and generation tokens/s')
    .argument('[model]', "a model, as ollama run takes it: a name of the models directory (what kail pull fetched; kail list shows them) or a GGUF file; with no prompt, a conversation (-cnv)")
    .argument('[prompt...]', 'after the model: a user message, answered once through the chat template (as ollama run MODEL PROMPT)')
    .option('-m, --model <file>', 'GGUF model file (or a name of the models directory)')
    .option('--hf-repo <USER/REPO[:QUANT]>', "a Hugging Face repository's GGUF instead, pulled into the data directory's models/ first as kail pull does (kept there for the next run; llama-cli's -hf, also -hf)")
    .option('--hf-file <file>', "with --hf-repo: that file of the repository (llama-cli's -hff, also -hff)")
    .option('--hf-token <token>', "with --hf-repo: Hugging Face access token for a gated or private repository (llama.cpp's -hft; default $HF_TOKEN)")
    .option('--offline', "with --hf-repo: no network, the file of the models directory the pick finds (llama.cpp's --offline)")
    .option('-p, --prompt <text>', 'prompt text (with --conversation: the first user message)', 'Once upon a time')
    .option('-f, --file <file>', "read the prompt from this file (one trailing newline dropped, as llama-cli's -f)")
    .option('-n, --n-predict <n>', 'tokens to generate (-1: until the end of the turn or a full context; the default with --conversation)', int('--n-predict', -1), 64)
    .option('--chat', "wrap the prompt in the model's chat template as a user message")
    .option(
      '--conversation',
      "chat with the model in this process (llama-cli's -cnv, also -cnv): each line of stdin is a user message (a trailing \\ or a \"\"\" block continues it), the answer streams, the KV cache keeps the conversation between turns; /clear, /bye",
    )
    .option('--no-conversation', "no conversation: `kail run MODEL` without a prompt completes -p's default text once (llama-cli's -no-cnv, also -no-cnv)")
    .option('--single-turn', "a conversation of one turn: answer -p (or, without it, the first message from stdin), then exit (llama-cli's -st, also -st)")
    .option('--system-prompt <text>', 'with --chat or --conversation: the system message (also -sys)')
    .option('--system-prompt-file <file>', 'the system message from a file (also -sysf)')
    .option('--chat-template <jinja>', "with --chat or --conversation: a chat template in place of the model's (llama.cpp's): Jinja source, or chatml")
    .option('--chat-template-file <file>', "with --chat or --conversation: a chat template from a file in place of the model's")
    .option('--chat-template-kwargs <json>', 'with --chat or --conversation: more chat template variables, a JSON object (llama.cpp\'s), e.g. \'{"enable_thinking": false}\'')
    .option('--think [level]', "with --chat or --conversation: a thinking model thinks before it answers (ollama run's --think): true, false (--think=false), or high, medium, low (its reasoning effort); default: the template's own")
    .option('-r, --reverse-prompt <text>', "stop once the output writes this text, and print it (llama-cli's; repeatable); in --conversation it ends the answer", collectText, [])
    .option('-e, --escape', "process escapes (\\n, \\t, \\xHH …) in the prompt, the reverse prompts and DRY's sequence breakers, as llama.cpp does (the default)")
    .option('--no-escape', 'take the prompt and reverse prompts as written')
    .option('--temp <t>', 'temperature (0 = greedy)', num('--temp', 0, 100), 0)
    .option('--top-k <k>', 'top-k (0 = off)', int('--top-k', 0), 40)
    .option('--top-p <p>', 'top-p (1 = off)', num('--top-p', 0, 1), 0.95)
    .option('--min-p <p>', 'min-p (0 = off)', num('--min-p', 0, 1), 0.05)
    .option('-t, --threads <n>', 'compute threads (default: the physical cores this process may run on, at most its cgroup CPU quota)', int('--threads', 1, 1024))
    .option('-c, --ctx <n>', 'context length', int('--ctx', 1, 1 << 20))
    .option('--context-shift', "when prompt and output fill the context, drop half of the cached tokens after --keep and go on (llama-cli's --context-shift)")
    .option('--no-context-shift', 'a generation that fills the context ends there (the default)')
    .option('--keep <n>', 'with --context-shift: prompt tokens kept at the start (-1 = all; a BOS besides)', int('--keep', -1), 0)
    .option('--prompt-cache <file>', "reuse the prompt's KV cache from this file where it holds a start of the prompt, and write the prompt's cache to it (llama-cli's --prompt-cache)")
    .option('--prompt-cache-ro', 'with --prompt-cache: read the file, never write it')
    .option('--prompt-cache-all', 'with --prompt-cache: write the generated tokens\' cache to it too, at the end (llama-cli\'s)')
    .option('--ignore-eos', 'never draw end-of-generation tokens: generate all -n tokens (llama-cli\'s --ignore-eos)')
    .option('--json', 'print one JSON object (token ids, text, timings) instead of streaming')
    .option('--grammar <gbnf>', "hold the output to a GBNF grammar (llama.cpp's format)")
    .option('--grammar-file <file>', 'hold the output to the GBNF grammar in this file')
    .option('-j, --json-schema <schema>', 'hold the output to one JSON value of this JSON Schema (llama-cli\'s -j)')
    .option('--format <json|schema>', "ollama run's --format: json holds the output to a JSON object; a JSON Schema to a value of it (as -j)")
    .option('--hidethinking', "ollama run's: a reasoning model's thinking is not shown, on a terminal either")
    .option('--verbose', "ollama run's: the timings (always printed here, on stderr)")
    .option('--json-schema-file <file>', 'hold the output to one JSON value of the JSON Schema in this file')
    .option('--demo', 'use the built-in demo model (written on first use into the data directory)')
    .option('--no-usage-history', "neither warm the expert cache from this model's usage history nor update it")
    .option('--data-dir <dir>', 'data directory (hardware profile, usage histories, demo model)');
  addSeedOption(run, 'sampling seed (-1: a random one, the default)');
  addDiffusionOptions(addSamplerOptions(addSpecOptions(addStreamOptions(run)))).action(async (named: string | undefined, words: string[], o: RunOpts & StreamOpts & SpecOpts & DiffusionOpts & { usageHistory: boolean }, cmd: Command) => {
    const log = (l: string) => process.stderr.write(l + '\n');
    const dir = dataDir(o.dataDir);
    // `kail run MODEL [PROMPT…]`, as `ollama run`: a prompt is one chat answer, none a conversation.
    if (named !== undefined) {
      if (o.model !== undefined || o.hfRepo !== undefined || o.demo) throw new Error('give the model once: as the first argument, or with -m, -hf or --demo');
      // (hf.co/USER/REPO[:QUANT], as `ollama run` takes it: pulled first, as -hf.)
      if (/^(https?:\/\/)?(hf\.co|huggingface\.co)\//i.test(named) && !fs.existsSync(named)) o.hfRepo = named;
      else o.model = resolveModelArg(named, dir);
      const flagged = cmd.getOptionValueSource('prompt') === 'cli' || o.file !== undefined;
      // As ollama run: text piped in (a shell pipe or a file on stdin) goes before the prompt's words.
      const piped = o.conversation === undefined && !o.singleTurn && !flagged ? await pipedStdin() : '';
      if (piped) words.unshift(piped);
      if (words.length) {
        if (flagged) throw new Error('give the prompt once: after the model, or with -p or -f');
        cmd.setOptionValueWithSource('prompt', words.join(' '), 'cli');
        o.prompt = words.join(' ');
        if (!o.conversation) o.chat = true;
      } else if (!flagged && o.conversation === undefined) o.conversation = true;
    }
    if (o.singleTurn) {
      if (o.conversation === false) throw new Error('--single-turn is a conversation of one turn: not with --no-conversation');
      o.conversation = true;
    }
    if ([o.model, o.hfRepo, o.demo].filter((x) => x !== undefined && x !== false).length > 1) throw new Error('give one of -m FILE.gguf, -hf USER/REPO[:QUANT] and --demo');
    for (const [flag, v] of [['--hf-file', o.hfFile], ['--hf-token', o.hfToken], ['--offline', o.offline]] as const) if (v !== undefined && o.hfRepo === undefined) throw new Error(`${flag} goes with --hf-repo`);
    if (o.hfToken !== undefined) process.env.HF_TOKEN = o.hfToken;
    const modelPath = o.model !== undefined ? resolveModelArg(o.model, dir) : (o.hfRepo !== undefined ? (await pullOrLocal(dir, o.hfRepo, o.hfFile, { offline: o.offline })).path : o.demo ? ensureDemoModel(dir, log) : undefined);
    if (!modelPath) throw new Error('give a model with -m FILE.gguf (or -hf USER/REPO[:QUANT]), or --demo for the built-in one');
    // A model made by kail create (ID.modelfile.json beside it): its settings, as ollama run applies them.
    const mf = readModelfileSettings(modelPath, log);
    // (Its system prompt, messages and template apply to chats only, under the flags.)
    const chatting = !!(o.chat || o.conversation);
    if (mf) {
      const params = applyModelfileParameters(cmd, mf.parameters ?? {});
      const parts = [...(chatting && mf.system ? ['system prompt'] : []), ...(chatting && mf.template ? ['template'] : []), ...(chatting && mf.messages ? [`${mf.messages.length} message(s)`] : []), ...params.applied];
      if (parts.length && !o.json) log(`${path.basename(modelPath)}: its Modelfile settings: ${parts.join(', ')}`);
      for (const n of params.notes) log(`note: ${n}`);
    }
    const promptGiven = cmd.getOptionValueSource('prompt') === 'cli';
    if (o.file !== undefined && promptGiven) throw new Error('give the prompt with -p or -f, not both');
    // (As llama.cpp's: escapes in the prompt, from -p or -f, unless --no-escape; not in the system prompt.)
    const esc = (t: string) => (o.escape === false ? t : processEscapes(t));
    const userText = esc(o.file !== undefined ? readPromptFile(o.file) : o.prompt ?? '');
    if (o.systemPromptFile !== undefined && o.systemPrompt !== undefined) throw new Error('give the system prompt with -sys or -sysf, not both');
    const systemFlag = o.systemPromptFile !== undefined ? readTextFile(o.systemPromptFile, '--system-prompt-file').replace(/\n$/, '') : o.systemPrompt;
    if (systemFlag !== undefined && !o.chat && !o.conversation) throw new Error('--system-prompt goes with --chat or --conversation');
    const systemPrompt = systemFlag ?? (chatting ? mf?.system : undefined);
    const opening = chatting ? mf?.messages : undefined;
    const templateFlag = readChatTemplateFlags(o.chatTemplate, o.chatTemplateFile);
    const templateOverride = templateFlag ?? (chatting ? mf?.template : undefined);
    const templateFormat = templateFlag === undefined && templateOverride !== undefined ? ('go' as const) : undefined;
    const render = thinkRender(o.think, o.chatTemplateKwargs);
    if (Object.keys(render).length && !o.chat && !o.conversation) throw new Error('--think and --chat-template-kwargs go with --chat or --conversation');
    if (templateFlag !== undefined && !o.chat && !o.conversation) throw new Error('--chat-template goes with --chat or --conversation');
    const reverse = o.reversePrompt.map(esc);
    if (reverse.some((t) => !t)) throw new Error('--reverse-prompt takes a non-empty text');
    if (o.conversation && o.promptCache) throw new Error('--prompt-cache is for one prompt: --conversation keeps its cache between turns itself');
    // (In a conversation -n defaults to the whole turn, as llama-cli's; so does `kail run MODEL PROMPT`'s answer, as ollama run's.)
    // (A Modelfile's num_predict counts as given.)
    const nPredict = (o.conversation || words.length) && !['cli', 'config'].includes(cmd.getOptionValueSource('nPredict') ?? '') ? -1 : o.nPredict;
    // (ollama run's --format: json is any JSON object, as Ollama's format "json"; else a schema, as -j.)
    if (o.format !== undefined) {
      if (o.jsonSchema !== undefined) throw new Error('give one of --format and --json-schema');
      o.jsonSchema = o.format.trim() === 'json' ? '{"type": "object"}' : o.format;
    }
    const forms = (['grammar', 'grammarFile', 'jsonSchema', 'jsonSchemaFile'] as const).filter((k) => o[k] !== undefined);
    if (forms.length > 1) throw new Error('give one of --grammar, --grammar-file, --json-schema (--format) and --json-schema-file');
    const grammarText = o.grammarFile !== undefined ? readTextFile(o.grammarFile, '--grammar-file') : o.grammar;
    const schemaFlag = o.jsonSchemaFile !== undefined ? '--json-schema-file' : o.format !== undefined ? '--format' : '--json-schema';
    const schemaText = o.jsonSchemaFile !== undefined ? readTextFile(o.jsonSchemaFile, '--json-schema-file') : o.jsonSchema;
    let schema: unknown;
    if (schemaText !== undefined)
      try {
        schema = JSON.parse(schemaText);
      } catch (e) {
        throw new Error(`${schemaFlag}: not JSON: ${(e as Error).message}`);
      }
    const jsonSchema = schemaText === undefined ? undefined : compileJsonSchema(schema, { anyValue: true });
    // (A server on this data directory with the model loaded: this run computes with a copy of its own.)
    const served = await servedCopyOf(dir, modelPath);
    if (served) log(`note: kail serve on ${dir} has this model loaded as '${served}'; kail run loads it again in this process (kail chat -m ${served} talks to the server's copy)`);
    // The native load is one synchronous call: a start line and a done line with its time.
    const loading = o.json ? undefined : createProgress({ label: `loading ${path.basename(modelPath)}`, total: 0 });
    const model = EngineModel.load(modelPath, { threads: o.threads, nCtx: o.ctx, ...draftTargetOptions(o), ...streamLoadOptions(o, modelPath, dir, o.usageHistory, log) });
    loading?.done(`loaded ${path.basename(modelPath)}`);
    sayLoadChoices(model, o, log);
    let draft: EngineModel | null = null;
    try {
      // A diffusion model (llada, dream, ...) unmasks a canvas over --diffusion-steps passes instead.
      if (model.diffusion) {
        if (o.conversation) throw new Error(`${path.basename(modelPath)} is a diffusion model: give a prompt (-p or after the model); --conversation decodes token by token`);
        return await runDiffusion(
          model,
          o,
          { text: userText, chat: !!o.chat, systemPrompt, opening, template: templateOverride, templateFormat, render, nPredict, temperature: o.temp, topK: o.topK, topP: o.topP, seed: o.seed, json: !!o.json, modelPath, reversePrompt: reverse },
          log,
        );
      }
      const refusal = model.generationRefusal(path.basename(modelPath));
      if (refusal) throw refusal;
      const sp = loadSpeculation(model, o, o.threads);
      draft = sp.draft;
      const tok = model.tokenizer;
      const grammar = grammarText === undefined ? undefined : parseGbnf(grammarText, { tokenize: (s) => tok.tokenize(s, { addSpecial: false, parseSpecial: true }), nVocab: model.nVocab });
      const sampling: SamplerParams = { temperature: o.temp, topK: o.topK, topP: o.topP, minP: o.minP, seed: o.seed, ...samplerParams(o, model.tokenizer) };
      if (o.ignoreEos) {
        const bias: Record<number, number> = { ...(sampling.logitBias ?? {}) };
        for (let id = 0; id < model.nVocab; id++) if (model.tokenizer.isEog(id)) bias[id] = -Infinity;
        sampling.logitBias = bias;
      }
      createSampler(sampling); // bad sampler settings fail here, before any output
      if (!o.json) {
        log(`model: ${path.basename(modelPath)} (${model.hparams.arch}, ${model.hparams.nLayer} layers${model.hparams.nExpert ? `, ${model.hparams.nExpert} experts / ${model.hparams.nExpertUsed} used` : ''}), ${model.runtime.nThreads} threads` +
            (model.plan ? `, RAM budget ${formatBytes(model.plan.ramBytes)}: ${formatBytes(model.plan.residentBytes)} resident, expert cache ${formatBytes(model.plan.cacheBytes)}` : ''),
        );
        if (model.usageHistoryNote && model.plan) log(model.usageHistoryNote);
      }
      const options = { speculative: sp.spec ?? undefined, grammar, jsonSchema, contextShift: o.contextShift ? { keep: o.keep ?? 0 } : undefined, stop: reverse.length ? reverse : undefined };
      if (o.conversation)
        return await runConversation(model, { nPredict, sampling, generate: options, render }, { json: o.json, systemPrompt, opening, first: promptGiven || o.file !== undefined ? userText : undefined, singleTurn: o.singleTurn, name: path.basename(modelPath), template: templateOverride, templateFormat, hideThinking: o.hidethinking });
      let text = userText;
      if (o.chat) {
        const messages = [...(systemPrompt !== undefined ? [{ role: 'system' as const, content: systemPrompt }] : []), ...(opening ?? []), { role: 'user' as const, content: text }];
        text = ChatTemplate.fromTokenizer(model.tokenizer, { override: templateOverride, format: templateFormat }).render(messages, { ...render, addGenerationPrompt: true });
      }
      // (BOS where the vocabulary adds it, chat or not, as llama-cli: the template's own was taken off the text.)
      const prompt = model.tokenizer.tokenize(text, { addSpecial: true, parseSpecial: !!o.chat });
      // (`kail run MODEL PROMPT` prints the answer alone, as ollama run does.)
      if (!o.json && !words.length) process.stdout.write(text);
      // (`kail run MODEL PROMPT`, as ollama run: a reasoning model's thinking dimmed on a terminal, not in a pipe.)
      const shown = words.length ? answerDisplay(process.stdout, process.stderr, !!process.stderr.isTTY && !o.hidethinking) : null;
      const split = shown ? new ReasoningSplitter(opensReasoning(text)) : null;
      const show = (p: { reasoning: string; content: string }) => {
        if (p.reasoning) shown?.reasoning?.(p.reasoning);
        if (p.content) shown?.text(p.content);
      };
      const r: GenerateResult = await generate(model, prompt, {
        maxTokens: nPredict < 0 ? Math.max(0, model.nCtx - prompt.length) : nPredict,
        sampling,
        onText: o.json ? undefined : split ? (t) => show(split.push(t)) : (t) => process.stdout.write(t),
        ...options,
        promptCache: o.promptCache ? { file: o.promptCache, readOnly: o.promptCacheRo, all: o.promptCacheAll } : undefined,
      });
      if (split && !o.json) show(split.finish());
      shown?.end();
      if (o.json) {
        const stream = model.runtime.stats().stream;
        process.stdout.write(
          JSON.stringify({
            model: modelPath,
            prompt_tokens: prompt,
            tokens: r.tokens,
            text: r.text,
            finish_reason: r.finishReason,
            ...(r.stopWord !== undefined ? { stopping_word: r.stopWord } : {}),
            context_shifted: r.contextShifted ?? 0,
            prompt_cached: r.promptCached ?? 0,
            timings: { prompt_ms: r.promptMs, generation_ms: r.generationMs, prompt_tps: r.promptTps, gen_tps: r.genTps },
            stream: stream ? summarizeStream(stream) : null,
            speculative: r.speculative ?? null,
          }) + '\n',
        );
      } else {
        // (llama-cli prints the reverse prompt that stopped it.)
        process.stdout.write((r.stopWord ?? '') + '\n');
        if (o.promptCache) log(`prompt cache ${o.promptCache}: ${r.promptCached ?? 0} of ${r.promptTokens} prompt tokens reused${o.promptCacheRo ? ' (read-only)' : ', the prompt\'s cache written'}`);
        log(`prompt: ${r.promptTokens} tokens, ${r.promptTps.toFixed(1)} tokens/s | generation: ${r.tokens.length} tokens, ${r.genTps.toFixed(1)} tokens/s | ${r.finishReason}` + (r.contextShifted ? ` | context shifted: ${r.contextShifted} tokens dropped` : ''));
        const sl = streamLine(model, r.promptTokens + r.tokens.length);
        if (sl) log(sl);
        if (r.speculative) log(specLine(r.speculative));
      }
    } finally {
      draft?.close();
      model.close();
    }
  });

  const bench = program
    .command('bench')
    .description('prompt and generation tokens/s, like llama-bench')
    .requiredOption('-m, --model <file>', 'GGUF model file')
    .option('-p, --n-prompt <list>', "prompt tokens (default 512); as llama-bench's, a list (128,512) or range (64-512*2, 0-96+32), repeatable: a row per value; 0: generation alone", intRangeList('--n-prompt', 0, 1 << 20))
    .option('-n, --n-gen <list>', 'generated tokens (default 128), after the row\'s prompt; a list or range as -p', intRangeList('--n-gen', 0, 1 << 20))
    .option('-t, --threads <n>', 'compute threads (default: the physical cores this process may run on, at most its cgroup CPU quota)', int('--threads', 1, 1024))
    .option('--feed <kind>', 'what each decode step feeds: greedy or random', 'greedy')
    .option('-r, --reps <n>', 'repetitions (median reported)', int('--reps', 1, 100), 1)
    .option('--pg <pp,tg>', "prompt and generation timed as one test, pp512+tg128 (llama-bench's -pg, also -pg); repeatable", pgPairs)
    .option('-d, --n-depth <list>', "context depth (llama-bench's -d): this many tokens fill the cache first, untimed, so pp and tg are measured at that depth; a list or range as -p, e.g. 0,4096,16384", intRangeList('--n-depth', 0, 1 << 20))
    .option('--temp <t>', 'with --draft/--lookup/--mtp: sampling temperature (0 = greedy)', num('--temp', 0, 100), 0)
    .option('--usage-history', "warm the expert cache from the model's usage history and update it (off by default, so runs compare)")
    .option('--routing-stats', 'after the benchmark, feed 64 random tokens and print how spread the routing is (experts used per layer, shared by consecutive tokens)')
    .option('--data-dir <dir>', 'data directory (hardware profile, usage histories)')
    .option(
      '--parallel <list>',
      'decode this many sequences together, one row per count (llama-batched-bench -npl), e.g. 1,4,16: -p and -n are per sequence, each pass gives every sequence one token',
      intList('--parallel', 1, 256),
    )
    .option('-o, --output <format>', `text, md (llama-bench's table), csv, json or jsonl (a test per line, as llama-bench's)`, 'text')
    .option('--json', 'print one JSON object (-o json)');
  addSeedOption(bench, 'with --draft/--lookup/--mtp: sampling seed (-1: a random one)', 1);
  addSpecOptions(addStreamOptions(bench)).action(
    async (
      o: {
        model: string;
        nPrompt?: number[];
        nGen?: number[];
        threads?: number;
        feed: string;
        reps: number;
        temp: number;
        seed: number;
        output: string;
        json?: boolean;
        usageHistory?: boolean;
        dataDir?: string;
        routingStats?: boolean;
        parallel?: number[];
        nDepth?: number[];
        pg?: [number, number][];
      } & StreamOpts &
        SpecOpts,
    ) => {
      if (o.feed !== 'greedy' && o.feed !== 'random') throw new Error(`--feed must be greedy or random, got '${o.feed}'`);
      if (!(BENCH_OUTPUTS as readonly string[]).includes(o.output)) throw new Error(`--output must be one of ${BENCH_OUTPUTS.join(', ')}, got '${o.output}'`);
      if (o.json && o.output !== 'text' && o.output !== 'json') throw new Error(`--json and --output ${o.output} say different things`);
      const output = (o.json ? 'json' : o.output) as BenchOutput;
      const prompts = o.nPrompt ?? [512];
      let gens = o.nGen ?? [128];
      const log = (l: string) => process.stderr.write(l + '\n');
      // An embedding model generates nothing: its bench is prompt processing alone (as llama-bench's
      // pp for one), the prompt one sequence in one pass.
      const meta = openGgufMetadata(o.model);
      const arch = String(meta.metadata['general.architecture'] ?? '');
      meta.close();
      if (isEncoderArchitecture(arch)) {
        if (o.parallel || o.draft || o.lookup || o.mtp || o.routingStats || o.nDepth?.some((d) => d > 0))
          throw new Error(`${arch} is an embedding model: kail bench measures its prompt processing only (no --parallel, --draft, --lookup, --mtp, --routing-stats or --n-depth)`);
        gens = [0];
        if (prompts.includes(0)) throw new Error(`${arch} is an embedding model: its bench is prompt processing, so -p must be at least 1`);
      }
      const depths = o.nDepth ?? [0];
      if ((o.parallel || o.draft || o.lookup || o.mtp) && depths.some((d) => d > 0)) throw new Error('--n-depth does not combine with --parallel, --draft, --lookup or --mtp');
      const pgs = isEncoderArchitecture(arch) ? [] : (o.pg ?? []);
      const combos = depths.flatMap((depth) => [
        ...prompts.flatMap((p) => gens.filter((n) => p + n > 0).map((n) => ({ depth, p, n, combined: false }))),
        ...pgs.map(([p, n]) => ({ depth, p, n, combined: true })),
      ]);
      if (o.pg && (o.parallel || o.draft || o.lookup || o.mtp)) throw new Error('-pg does not combine with --parallel, --draft, --lookup or --mtp');
      if (!combos.length) throw new Error('nothing to measure: -p and -n are both 0');
      if (o.parallel || o.draft || o.lookup || o.mtp) {
        if (prompts.length > 1 || gens.length > 1) throw new Error('-p and -n take one value each with --parallel, --draft, --lookup or --mtp');
        if (output !== 'text' && output !== 'json') throw new Error(`--output ${output} is for the pp/tg rows: --parallel, --draft, --lookup and --mtp print text or json`);
        if (!prompts[0]) throw new Error('--parallel, --draft, --lookup and --mtp need a prompt: -p at least 1');
      }
      const nPrompt = prompts[0];
      const nGen = gens[0];
      if (o.parallel) {
        if (o.draft || o.lookup || o.mtp || o.routingStats) throw new Error('--parallel does not combine with --draft, --lookup, --mtp or --routing-stats');
        const most = Math.max(...o.parallel);
        const pm = EngineModel.load(o.model, { threads: o.threads, nCtx: nPrompt + nGen + 1, nSeqMax: most, ...streamLoadOptions(o, o.model, dataDir(o.dataDir), !!o.usageHistory, log) });
        sayLoadChoices(pm, o, log);
        try {
          const r = await benchmarkParallel(pm, { parallel: o.parallel, promptTokens: nPrompt, genTokens: nGen, feed: o.feed as 'greedy' | 'random', reps: o.reps });
          process.stdout.write(output === 'json' ? JSON.stringify(r) + '\n' : parallelTable(r));
        } finally {
          pm.close();
        }
        return;
      }
      // (A row without a prompt evaluates one token first; an encoder's prompt is its whole pass.)
      const longest = Math.max(...combos.map((c) => c.depth + Math.max(1, c.p) + c.n + (isEncoderArchitecture(arch) ? 0 : 1)));
      const model = EngineModel.load(o.model, { threads: o.threads, nCtx: Math.max(longest, o.routingStats ? 65 : 1), ...draftTargetOptions(o), ...streamLoadOptions(o, o.model, dataDir(o.dataDir), !!o.usageHistory, log) });
      sayLoadChoices(model, o, log);
      try {
        if (o.draft || o.lookup || o.mtp)
          return await benchSpeculative(model, { ...o, nPrompt, nGen, json: output === 'json' }, () =>
            EngineModel.load(o.model, { threads: o.threads, nCtx: nPrompt + nGen + 1, ...draftTargetOptions(o), ...streamLoadOptions(o, o.model, dataDir(o.dataDir), false, () => undefined) }),
          );
        const rows: BenchRow[] = [];
        for (const c of combos) rows.push({ ...(await benchmark(model, { promptTokens: c.p, genTokens: c.n, feed: o.feed, reps: o.reps, depth: c.depth })), ...(c.combined ? { combined: true } : {}) });
        let routing: RoutingStats | null = null;
        if (o.routingStats) {
          model.truncate(0, 0);
          routing = await routingStats(model, 64, 1);
        }
        const ctx = { summary: model.summary, backend: model.plan ? 'CPU, experts streamed' : 'CPU' };
        // (One row: one object, as before -d; several: a row each.)
        const r = rows[0];
        if (output === 'json') process.stdout.write(JSON.stringify(rows.length > 1 ? { rows, ...(routing ? { routing } : {}) } : routing ? { ...r, routing } : r) + '\n');
        else if (output === 'md') process.stdout.write(benchMarkdown(rows, ctx) + (routing ? `\n${routingLine(routing)}` : ''));
        else if (output === 'csv') process.stdout.write(benchCsv(rows, ctx));
        else if (output === 'jsonl') process.stdout.write(benchJsonl(rows, ctx) + (routing ? JSON.stringify({ routing }) + '\n' : ''));
        else
          process.stdout.write(
            `${path.basename(o.model)} (${r.arch}), ${r.threads} threads, feed ${r.feed}, median of ${r.reps}\n` +
              rows
                .map((x) => {
                  // (The tests' names as -o md/csv/jsonl give them: the generation follows the prompt, so its depth counts it.)
                  const st = x.stream;
                  const line = (t: BenchTest) => `${t.test}: ${t.ts.toFixed(2)} tokens/s\n`;
                  const tests = rowTests(x);
                  if (x.combined) return line(tests[0]);
                  const gen = tests.find((t) => t.n_gen > 0);
                  return (
                    tests.filter((t) => t.n_gen === 0).map(line).join('') +
                    (isEncoderArchitecture(arch) ? 'tg: none (an embedding model generates no text)\n' : gen ? line(gen) : '') +
                    (st && gen
                      ? `experts (generation${x.depth ? ` @ d${gen.n_depth}` : ''}): hit rate ${(100 * st.hit_rate).toFixed(1)}% (+${(100 * st.inflight_rate).toFixed(1)}% being prefetched when asked), ${formatBytes(st.bytes_read_per_token)} read per token, ` +
                        `stalled ${st.stall_s.toFixed(2)} s, prefetch precision ${(100 * st.prefetch_precision).toFixed(1)}% recall ` +
                        `${(100 * st.prefetch_recall).toFixed(1)}%, cache ${formatBytes(st.cache_bytes)} (budget ${formatBytes(st.ram_bytes)}, ${st.policy}), ` +
                        `${st.direct_io ? 'O_DIRECT' : 'buffered reads'}` +
                        (st.vram_device ? `; VRAM tier ${formatBytes(st.vram_capacity_bytes)} on ${st.vram_device}: ${formatBytes(st.vram_bytes_per_token)} per token copied back (${st.vram_s.toFixed(2)} s)` : '') +
                        '\n'
                      : '')
                  );
                })
                .join('') +
              (routing ? routingLine(routing) : ''),
          );
      } finally {
        model.close();
      }
    },
  );

  function routingLine(routing: RoutingStats): string {
    return (
      `routing over ${routing.tokens} random tokens: each MoE layer used >= ${(100 * routing.minUsedShare).toFixed(0)}% of its ${routing.nExpert} experts; ` +
      `consecutive tokens shared ${routing.meanConsecutiveShared.toFixed(2)} of ${routing.nExpertUsed} on average (worst layer ${routing.maxConsecutiveShared.toFixed(2)})\n`
    );
  }

  function parallelTable(r: ParallelBenchResult): string {
    const streamed = r.rows.some((x) => x.stream_bytes_read_per_token !== null);
    const lines = [
      `${path.basename(r.model)} (${r.arch}), ${r.threads} threads, feed ${r.feed}, pp${r.prompt_tokens} + tg${r.gen_tokens} per sequence, median of ${r.reps}`,
      `| sequences | pp tokens/s | tg tokens/s | ms per pass | tg speedup | experts per layer per pass | weight bytes per token |${streamed ? ' read from storage per token |' : ''}`,
      `|---|---|---|---|---|---|---|${streamed ? '---|' : ''}`,
      ...r.rows.map(
        (x) =>
          `| ${x.sequences} | ${x.prompt_tps.toFixed(1)} | ${x.gen_tps.toFixed(2)} | ${x.pass_ms.toFixed(1)} | ${x.speedup === null ? '-' : `${x.speedup.toFixed(2)}x`} | ` +
          `${x.experts_per_layer ? x.experts_per_layer.toFixed(1) : '-'} | ${formatBytes(x.weight_bytes_per_token)} |` +
          (streamed ? ` ${x.stream_bytes_read_per_token === null ? '-' : formatBytes(x.stream_bytes_read_per_token)} |` : ''),
      ),
    ];
    return lines.join('\n') + '\n';
  }

  /**
   * `kail bench --draft/--lookup`: the same random prompt generated without and with speculation
   * (generation timed alone, end-of-generation ignored), tokens/s, acceptance, tokens per pass
   * and, under --ram, expert bytes read per token. The speculative run gets a freshly loaded
   * target, so both start from a cold expert cache.
   */
  async function benchSpeculative(
    model: EngineModel,
    o: { model: string; nPrompt: number; nGen: number; threads?: number; temp: number; seed: number; json?: boolean } & SpecOpts,
    reload: () => EngineModel,
  ) {
    // Refuse a bad draft before spending time on the baseline.
    loadSpeculation(model, o, o.threads).draft?.close();
    let fresh: EngineModel | null = null;
    let draft: EngineModel | null = null;
    try {
      let s = o.seed >>> 0 || 1;
      const prompt = Array.from({ length: o.nPrompt }, () => {
        s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
        return s % model.nVocab;
      });
      const sampling = { temperature: o.temp, seed: o.seed };
      const base = await benchmarkSpeculative(model, { prompt, genTokens: o.nGen, sampling });
      fresh = reload();
      const loaded = loadSpeculation(fresh, o, o.threads);
      draft = loaded.draft;
      const sp = await benchmarkSpeculative(fresh, { prompt, genTokens: o.nGen, sampling, speculative: loaded.spec! });
      if (o.json) {
        process.stdout.write(JSON.stringify({ model: o.model, draft: o.draft ?? null, lookup: !!o.lookup, mtp: !!o.mtp, prompt_tokens: o.nPrompt, temperature: o.temp, baseline: base, speculative: sp }) + '\n');
        return;
      }
      const bpt = (r: typeof base) => (r.bytesReadPerToken === null ? '' : `, ${formatBytes(r.bytesReadPerToken)} expert reads/token`);
      const st = sp.speculative!;
      process.stdout.write(
        `${path.basename(o.model)} (${model.hparams.arch}), ${model.runtime.nThreads} threads, ${o.temp === 0 ? 'greedy' : `temperature ${o.temp}`}, ` +
          `${o.draft ? `draft ${path.basename(o.draft)}` : o.mtp ? 'MTP block' : 'prompt lookup'}, k ${o.specK}${o.specAdapt ? ' (adaptive)' : ''}\n` +
          `tg${o.nGen} baseline:    ${base.tokensPerSecond.toFixed(2)} tokens/s${bpt(base)}\n` +
          `tg${o.nGen} speculative: ${sp.tokensPerSecond.toFixed(2)} tokens/s${bpt(sp)} (${(sp.tokensPerSecond / base.tokensPerSecond).toFixed(2)}x)\n` +
          `acceptance ${(100 * st.acceptanceRate).toFixed(1)}% (${st.acceptedTokens}/${st.draftedTokens}), ${st.tokensPerPass.toFixed(2)} tokens/pass, k now ${st.currentK}\n`,
      );
    } finally {
      draft?.close();
      fresh?.close();
    }
  }

  const plan = program
    .command('plan')
    .description('what a RAM budget holds with experts streaming from storage: resident, KV, cache capacity, cold bytes per token (exit 1 when it does not fit)')
    .requiredOption('-m, --model <file>', 'GGUF model file')
    .option('--ram <bytes>', "RAM budget (8G, 512M, bytes, or a share of the memory available now such as 80%); default: the hardware profile's (kail profile)", budget('--ram', parseRamBudget))
    .option('--vram <bytes>', VRAM_HELP, budget('--vram', parseVramBudget))
    .option('--data-dir <dir>', 'data directory (hardware profile)')
    .option('-c, --ctx <n>', 'context length (default: the model\'s, at most 4096)', int('--ctx', 1, 1 << 20))
    .option('--seqs <n>', 'concurrent sequences', int('--seqs', 1, 1024), 1)
    .option('--batch <n>', 'most tokens per forward pass', int('--batch', 1, 1 << 16), 512)
    .option('--reserve <bytes>', `part of --ram held back for the process (default ${formatBytes(DEFAULT_RAM_RESERVE_BYTES)})`, bytes('--reserve'));
  addOverrideKvOption(addCacheTypeOptions(plan))
    .option('--lora <files>', 'LoRA adapter the model loads with (counted in the budget); repeatable', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--lora-scaled <file:scale>', 'the same with a scale, FNAME:SCALE', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--swa-full', "sliding-window layers keep every position (llama.cpp's --swa-full): their KV counted at the full context")
    .option('--json', 'print one JSON object')
    .action((o: CacheTypeOpts & { model: string; ram?: number; vram?: number; ctx?: number; seqs: number; batch: number; reserve?: number; json?: boolean; dataDir?: string; lora: string[]; loraScaled: string[]; swaFull?: boolean; overrideKv: string[] }) => {
      let ram = o.ram;
      let vram = o.vram;
      if (ram === undefined || vram === undefined) {
        const dir = dataDir(o.dataDir);
        const profile = readHardwareProfile(dir);
        if (!profile && ram === undefined) {
          // As a load without a profile streams a MoE model that does not fit.
          const d = defaultRamBudget();
          ram = d.bytes;
          process.stderr.write(`kail: --ram ${formatBytes(ram)}: ${d.why} (no ${hardwareProfilePath(dir)}: kail profile measures the machine)\n`);
        }
        if (profile) {
          // The plan always streams: the profile's budgets, as a streaming run would take them.
          if (ram === undefined) {
            const b = profileRamBudget(profile, hardwareProfilePath(dir));
            ram = b.bytes;
            process.stderr.write(`kail: --ram ${formatBytes(ram)} ${b.why}\n`);
          }
          const d = profileDefaults(profile, hardwareProfilePath(dir), Number.MAX_SAFE_INTEGER, { ramBytes: ram, vramBytes: vram });
          if (vram === undefined && d.vramBytes !== undefined) process.stderr.write(`kail: ${d.lines.find((l) => l.startsWith('--vram'))}\n`);
          vram = d.vramBytes;
        }
      }
      const p = planModel(o.model, { ramBytes: ram!, ...(vram ? { vramBytes: vram } : {}), nCtx: o.ctx, nSeqMax: o.seqs, nBatch: o.batch, ramReserveBytes: o.reserve, ...kvTypesOf(o), lora: parseLoraFlags(o.lora, o.loraScaled), swaFull: o.swaFull, ...kvOverridesOf(o.overrideKv, (l) => process.stderr.write(l + '\n')) });
      if (o.json) process.stdout.write(JSON.stringify(p) + '\n');
      else process.stdout.write(planLines(o.model, p).join('\n') + '\n');
      if (!p.fits) throw new Error(p.message);
    });

  /**
   * llama-perplexity's batch: chunks of nCtx share a pass, a sequence each, as many as a batch of
   * `batch` tokens holds (-b 2048 -c 512: four per pass; under --ram a MoE model then reads each
   * expert once for four chunks); a batch smaller than a chunk splits it.
   */
  function chunkedLoad(nCtx: number, batch: number): { nCtx: number; nBatch: number; nSeqMax: number } {
    const perPass = Math.max(1, Math.floor(batch / nCtx));
    return { nCtx, nBatch: perPass > 1 ? perPass * nCtx : Math.min(batch, nCtx), nSeqMax: perPass };
  }

  /** A model file's vocabulary size from its metadata: the output (or token embedding) matrix's rows. */
  function vocabOfFile(file: string): number {
    const f = openGgufMetadata(file);
    try {
      const t = f.tensors.find((x) => x.name === 'output.weight') ?? f.tensors.find((x) => x.name === 'token_embd.weight');
      const tokens = f.metadata['tokenizer.ggml.tokens'];
      return t?.dims[1] ?? (Array.isArray(tokens) ? tokens.length : 0);
    } finally {
      f.close();
    }
  }

  /** `kail perplexity`'s flags. */
  interface PerplexityFlags extends StreamOpts {
    model: string;
    file?: string;
    ctx: number;
    chunks?: number;
    threads?: number;
    batch: number;
    dataDir?: string;
    json?: boolean;
    klDivergenceBase?: string;
    saveAllLogits?: string;
    klDivergence?: boolean;
    hellaswag?: boolean;
    hellaswagTasks: number;
    winogrande?: boolean;
    winograndeTasks: number;
    multipleChoice?: boolean;
    multipleChoiceTasks: number;
    parallel: number;
    pplStride?: number;
    pplOutputType: number;
  }

  /** `kail perplexity --ppl-stride N`: llama-perplexity's strided perplexity. */
  async function stridedPerplexity(
    o: PerplexityFlags & { pplStride: number },
    log: (l: string) => void,
  ): Promise<void> {
    if (!o.file) throw new Error('--ppl-stride needs -f TEXT');
    const text = readPromptFile(o.file);
    // -c + stride / 2, as llama-perplexity enlarges its context. (Its context is also -c times
    // -b / -c when that exceeds 1, and its -b defaults to 2048: to match a run of it, pass that product as -c.)
    const chunkLen = o.ctx + Math.floor(o.pplStride / 2);
    const model = EngineModel.load(o.model, { threads: o.threads, nCtx: chunkLen, nBatch: Math.min(o.batch, chunkLen), ...streamLoadOptions(o, o.model, dataDir(o.dataDir), false, log) });
    sayLoadChoices(model, o, log);
    try {
      const tokens = model.tokenizer.tokenize(text, { addSpecial: true });
      if (!o.json) log(`${path.basename(o.file)}: ${tokens.length} tokens; chunks of ${chunkLen} every ${o.pplStride}, the last ${o.pplStride} of each scored`);
      const r = await perplexityStrided(model, tokens, {
        chunkLen,
        stride: o.pplStride,
        maxChunks: o.chunks,
        nBatch: o.batch,
        onChunk: o.json
          ? undefined
          : o.pplOutputType === 1
            ? (_i, _n, start, p) => process.stdout.write(`${String(start).padStart(8)}  ${p.toFixed(4)}\n`)
            : (i, n, _start, p) => process.stderr.write(`[${i}]${p.toFixed(4)},${i === n ? '\n' : ''}`),
      });
      if (o.json) process.stdout.write(JSON.stringify({ model: o.model, file: o.file, tokens: tokens.length, stride: o.pplStride, ...r }) + '\n');
      else
        process.stdout.write(
          `Final estimate: PPL = ${r.ppl.toFixed(4)} +/- ${r.pplError.toFixed(5)}\n${r.chunks} chunks of ${r.nCtx} tokens every ${o.pplStride}, ${r.tokensScored} scored, ${r.tokensPerSecond.toFixed(1)} tokens/s (${r.seconds.toFixed(1)} s)\n`,
        );
    } finally {
      model.close();
    }
  }

  /** `kail perplexity --hellaswag|--winogrande`: llama-perplexity's multiple-choice scores. */
  async function choiceScore(o: PerplexityFlags, log: (l: string) => void): Promise<void> {
    const mode = o.hellaswag ? '--hellaswag' : o.winogrande ? '--winogrande' : '--multiple-choice';
    if ([o.hellaswag, o.winogrande, o.multipleChoice].filter(Boolean).length > 1) throw new Error('--hellaswag, --winogrande and --multiple-choice are separate runs: give one');
    if (o.klDivergence || o.klDivergenceBase || o.saveAllLogits || o.chunks) throw new Error(`${mode} does not combine with --kl-divergence, --kl-divergence-base, --save-all-logits or --chunks`);
    if (!o.file) throw new Error(`${mode} needs -f FILE: the tasks`);
    const raw = fs.readFileSync(o.file);
    // (The file is read before the model loads: a malformed one costs no load.)
    // (As llama-perplexity reads -f: one trailing newline dropped, so Winogrande's reader, which
    // takes only lines a newline ends, leaves out a file's last line, as llama.cpp's does.)
    const hs = o.hellaswag ? parseHellaswag(readPromptFile(o.file), o.file) : null;
    const wg = o.winogrande ? parseWinogrande(readPromptFile(o.file), o.file) : null;
    const mc = o.multipleChoice ? readMultipleChoice(raw, o.multipleChoiceTasks, o.file) : null;
    const nSeq = Math.max(4, o.parallel);
    const model = EngineModel.load(o.model, { threads: o.threads, nCtx: o.ctx, nSeqMax: nSeq, nBatch: Math.min(o.batch, nSeq * o.ctx), ...streamLoadOptions(o, o.model, dataDir(o.dataDir), false, log) });
    sayLoadChoices(model, o, log);
    try {
      const tokensPerPass = nSeq * o.ctx;
      const onTask = o.json ? undefined : (_done: number, _n: number, line: string) => process.stdout.write(line + '\n');
      if (hs) {
        if (!o.json) {
          log(`${path.basename(o.file)}: ${hs.length} HellaSwag tasks; scoring ${Math.min(o.hellaswagTasks, hs.length)} drawn at random, as llama-perplexity draws them`);
          process.stdout.write('\ntask\tacc_norm\t95% confidence interval\n');
        }
        const r = await hellaswagScore(model, hs, o.hellaswagTasks, { tokensPerPass, onTask });
        if (o.json) process.stdout.write(JSON.stringify({ model: o.model, file: o.file, hellaswag: r }) + '\n');
        else
          process.stdout.write(
            `\nHellaSwag acc_norm over ${r.tasks} tasks: ${(100 * r.accuracy).toFixed(4)}% [${(100 * r.interval[0]).toFixed(4)}%, ${(100 * r.interval[1]).toFixed(4)}%] (95%, Wilson) (${r.seconds.toFixed(1)} s of forward passes)\n`,
          );
      } else if (wg) {
        if (!o.json) {
          const n = o.winograndeTasks > 0 ? Math.min(o.winograndeTasks, wg.tasks.length) : wg.tasks.length;
          log(`${path.basename(o.file)}: ${wg.tasks.length} Winogrande tasks (${wg.skipped.length} line(s) skipped${wg.skipped.length ? `, e.g. line ${wg.skipped[0].line}: ${wg.skipped[0].why}` : ''}); scoring ${n}`);
          process.stdout.write('\n');
        }
        const r = await winograndeScore(model, wg, o.winograndeTasks, { tokensPerPass, onTask });
        if (o.json) process.stdout.write(JSON.stringify({ model: o.model, file: o.file, winogrande: r }) + '\n');
        else process.stdout.write(`\nFinal Winogrande score(${r.tasks} tasks): ${(100 * r.accuracy).toFixed(4)} +/- ${r.sigma.toFixed(4)} (${r.seconds.toFixed(1)} s of forward passes)\n`);
      } else if (mc) {
        if (!o.json) {
          log(`${path.basename(o.file)}: ${mc.available} tasks; scoring ${mc.tasks.length}${mc.tasks.length < mc.available ? ' drawn at random, as llama-perplexity draws them' : ''}`);
          process.stdout.write('\ntask\tacc_norm\n');
        }
        const r = await multipleChoiceScore(model, mc.tasks, { tokensPerPass, onTask });
        if (o.json) process.stdout.write(JSON.stringify({ model: o.model, file: o.file, multipleChoice: r }) + '\n');
        else
          process.stdout.write(
            `\nFinal result: ${(100 * r.accuracy).toFixed(4)} +/- ${(100 * r.sigma).toFixed(4)}\n` +
              `Random chance: ${(100 * r.chance).toFixed(4)} +/- ${(100 * Math.sqrt((r.chance * (1 - r.chance)) / (r.tasks - 1))).toFixed(4)}\n(${r.tasks} tasks, ${r.seconds.toFixed(1)} s of forward passes)\n`,
          );
      }
    } finally {
      model.close();
    }
  }

  const ppl = program
    .command('perplexity')
    .description(
      "perplexity of a text file, computed as llama-perplexity computes it (chunks of --ctx tokens, the second half of each scored), so the two compare on one model file; " +
        'with --kl-divergence-base FILE it also saves the log-probabilities at every scored position, and a later run of another model with --kl-divergence compares with them (KL divergence, Δp, same top token), as llama-perplexity does',
    )
    .requiredOption('-m, --model <file>', 'GGUF model file')
    .option('-f, --file <text>', 'text file to score (at least two chunks of tokens); not with --kl-divergence, which takes the tokens from the base file')
    .option('-c, --ctx <n>', 'tokens per chunk (with --kl-divergence: the base file\'s)', int('--ctx', 4, 1 << 20), 512)
    .option('--chunks <n>', 'score at most this many chunks (default: all)', int('--chunks', 1, 1 << 30))
    .option('--kl-divergence-base <file>', "llama-perplexity's base log-probabilities file (also --save-all-logits): written by this run, or read with --kl-divergence")
    .option('--save-all-logits <file>', 'the same as --kl-divergence-base')
    .option('--kl-divergence', "compare this model's distributions with the base file's (llama-perplexity's --kl-divergence): the file's chunks, its tokens")
    .option('-t, --threads <n>', 'compute threads (default: the physical cores this process may run on, at most its cgroup CPU quota)', int('--threads', 1, 1024))
    .option('-b, --batch <n>', "tokens per forward pass: chunks share one when it holds several, a sequence each, as llama-perplexity's -b (-b 2048 -c 512: four)", int('--batch', 1, 1 << 16), 512)
    .option('--ppl-stride <n>', "llama-perplexity's strided perplexity: chunks of -c + N/2 tokens start every N tokens, each scoring its last N (llama-perplexity multiplies -c by -b/-c when that exceeds 1, and its -b defaults to 2048: give that product as -c to match it)", int('--ppl-stride', 1, 1 << 20))
    .option('--ppl-output-type <t>', 'with --ppl-stride: 0 prints [chunk]ppl, on stderr; 1 prints each chunk\'s start and the running perplexity a line each, as llama-perplexity\'s', int('--ppl-output-type', 0, 1), 0)
    .option('--hellaswag', "llama-perplexity's HellaSwag score (acc_norm) of -f, a file of 6 lines per task (context, right ending 0-3, four endings)")
    .option('--hellaswag-tasks <n>', 'tasks drawn from the file, as llama-perplexity draws them (default 400)', int('--hellaswag-tasks', 1, 1 << 30), 400)
    .option('--winogrande', "llama-perplexity's Winogrande score of -f, a CSV of index,sentence with _,option1,option2,answer")
    .option('--winogrande-tasks <n>', 'tasks drawn from the file, as llama-perplexity draws them (default: all, in order)', int('--winogrande-tasks', 0, 1 << 30), 0)
    .option('--multiple-choice', "llama-perplexity's multiple-choice score of -f, its binary task file (ARC, MMLU, TruthfulQA sets)")
    .option('--multiple-choice-tasks <n>', 'tasks drawn from the file, as llama-perplexity draws them (default: all, in order)', int('--multiple-choice-tasks', 0, 1 << 30), 0)
    .option('--parallel <n>', "with --hellaswag/--winogrande/--multiple-choice: sequences (a candidate each; also -np): tasks share a pass while their candidates and -c x N tokens fit, as llama-perplexity's (at least 4)", int('--parallel', 1, 1024), 4)
    .option('--data-dir <dir>', 'data directory (hardware profile)')
    .option('--json', 'print one JSON object');
  addStreamOptions(ppl).action(
    async (o: PerplexityFlags) => {
      const log = (l: string) => process.stderr.write(l + '\n');
      if (o.pplStride && (o.hellaswag || o.winogrande || o.multipleChoice || o.klDivergence || o.klDivergenceBase || o.saveAllLogits))
        throw new Error('--ppl-stride is a perplexity run of its own: not with --hellaswag, --winogrande, --multiple-choice or the KL-divergence options');
      if (o.hellaswag || o.winogrande || o.multipleChoice) return choiceScore(o, log);
      if (o.pplStride) return stridedPerplexity({ ...o, pplStride: o.pplStride }, log);
      const baseFile = o.klDivergenceBase ?? o.saveAllLogits;
      if (o.klDivergenceBase && o.saveAllLogits && o.klDivergenceBase !== o.saveAllLogits) throw new Error('--kl-divergence-base and --save-all-logits name two files; they are one option');
      if (o.klDivergence) {
        if (!baseFile) throw new Error('--kl-divergence needs --kl-divergence-base FILE: the base model\'s log-probabilities, saved by a perplexity run of the base model with it');
        if (o.file) throw new Error('--kl-divergence takes its tokens from the base file; leave out -f');
        const head = openBaseLogits(baseFile);
        const nCtx = head.nCtx;
        const model = EngineModel.load(o.model, { threads: o.threads, ...chunkedLoad(nCtx, o.batch), ...streamLoadOptions(o, o.model, dataDir(o.dataDir), false, log) });
        sayLoadChoices(model, o, log);
        try {
          if (!o.json) {
            log(`${path.basename(baseFile)}: ${head.nChunk} chunks of ${nCtx} tokens, the last ${nCtx - Math.floor(nCtx / 2) - 1} of each compared`);
            process.stdout.write(`${KLD_CHUNK_HEADER}\n`);
          }
          const r = await klDivergence(model, head, {
            maxChunks: o.chunks,
            nBatch: o.batch,
            onChunk: o.json ? undefined : (i, _n, run) => process.stdout.write(kldChunkLine(i, run) + '\n'),
          });
          if (o.json) process.stdout.write(JSON.stringify({ model: o.model, ...r }) + '\n');
          else process.stdout.write(`\n${kldStatsLines(r.stats).join('\n')}\n${r.chunks} chunks of ${r.nCtx} tokens, ${r.stats.positions} positions compared (${r.seconds.toFixed(1)} s of forward passes)\n`);
        } finally {
          model.close();
        }
        return;
      }
      if (!o.file) throw new Error('perplexity needs -f TEXT (or --kl-divergence with --kl-divergence-base)');
      const text = readPromptFile(o.file);
      if (baseFile) checkOutputPath(baseFile, o.klDivergenceBase ? '--kl-divergence-base' : '--save-all-logits');
      const model = EngineModel.load(o.model, { threads: o.threads, ...chunkedLoad(o.ctx, o.batch), ...streamLoadOptions(o, o.model, dataDir(o.dataDir), false, log) });
      sayLoadChoices(model, o, log);
      try {
        const tokens = model.tokenizer.tokenize(text, { addSpecial: true });
        if (!o.json) log(`${path.basename(o.file)}: ${tokens.length} tokens; chunks of ${o.ctx}, the last ${o.ctx - Math.floor(o.ctx / 2) - 1} of each scored${baseFile ? `; saving the log-probabilities to ${baseFile}` : ''}`);
        const r = await perplexity(model, tokens, {
          nCtx: o.ctx,
          maxChunks: o.chunks,
          nBatch: o.batch,
          saveLogits: baseFile,
          onChunk: o.json ? undefined : (i, n, p) => process.stderr.write(`[${i}]${p.toFixed(4)},${i === n ? '\n' : ''}`),
        });
        if (o.json) process.stdout.write(JSON.stringify({ model: o.model, file: o.file, tokens: tokens.length, ...r, ...(baseFile ? { klDivergenceBase: baseFile } : {}) }) + '\n');
        else
          process.stdout.write(
            `Final estimate: PPL = ${r.ppl.toFixed(4)} +/- ${r.pplError.toFixed(5)}\n` +
              `${r.chunks} chunks of ${r.nCtx} tokens, ${r.tokensScored} scored, ${r.tokensPerSecond.toFixed(1)} tokens/s (${r.seconds.toFixed(1)} s)\n` +
              (baseFile ? `log-probabilities saved to ${baseFile} (${formatBytes(fs.statSync(baseFile).size)}); compare another model with: kail perplexity -m OTHER.gguf --kl-divergence-base ${baseFile} --kl-divergence\n` : ''),
          );
      } finally {
        model.close();
      }
    },
  );

  const imx = program
    .command('imatrix')
    .description(
      "llama-imatrix: an importance matrix of a model over a text file (per weight, each input column's mean squared activation, per expert for MoE experts), " +
        'for kail quantize --imatrix (or llama-quantize); chunks of --ctx tokens as llama-imatrix cuts them, with the perplexity of their second halves. ' +
        '--in-file adds existing imatrix files (combining them, or continuing one); with no -f they are only combined',
    )
    .option('-m, --model <file>', 'GGUF model file (F16/BF16/F32 is best: the one you will quantize); needed with -f')
    .option('-f, --file <text>', 'calibration text (at least two chunks of tokens)')
    .option('--in-file <imatrix>', 'an imatrix file (GGUF or .dat) whose statistics are added first (repeatable)', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('-o, --output <file>', 'output file', 'imatrix.gguf')
    .option('--output-format <fmt>', "gguf (llama.cpp's current format) or dat (the legacy one); default: dat when --output ends in .dat, else gguf")
    .option('-c, --ctx <n>', 'tokens per chunk (also the chunk size legacy --in-file counts are in)', int('--ctx', 4, 1 << 20), 512)
    .option('--chunks <n>', 'at most this many chunks (default: all)', int('--chunks', 1, 1 << 30))
    .option('--chunk <n>', "skip the text's first N chunks (llama-imatrix's --chunk; also --from-chunk)", int('--chunk', 0, 1 << 30))
    .option('--output-frequency <n>', 'write the output every N chunks, so a long run that stops keeps what it computed (also -ofreq; llama-imatrix\'s default 10)', int('--output-frequency', 1, 1 << 30), 10)
    .option('--save-frequency <n>', 'also keep a copy every N chunks, as OUTPUT.at_<chunks> (0 = none)', int('--save-frequency', 0, 1 << 30), 0)
    .option('--show-statistics', "print statistics of one imatrix file (--in-file) per tensor and per layer, and exit (llama-imatrix's --show-statistics)")
    .option('--parse-special', 'read special-token text in the calibration file (e.g. <|im_start|>) as those tokens, as llama-imatrix\'s --parse-special')
    .option('--process-output', "also collect output.weight's statistics (llama-imatrix's --process-output)")
    .option('--no-ppl', 'do not compute the perplexity')
    .option('-t, --threads <n>', 'compute threads (default: the physical cores this process may run on, at most its cgroup CPU quota)', int('--threads', 1, 1024))
    .option('-b, --batch <n>', "tokens per forward pass: chunks share one when it holds several, a sequence each, as llama-imatrix's -b (-b 2048 -c 512: four; a streamed expert is read once for them; the same statistics)", int('--batch', 1, 1 << 16), 512)
    .option('--data-dir <dir>', 'data directory (hardware profile)')
    .option('--json', 'print one JSON object');
  addStreamOptions(imx).action(
    async (
      o: {
        model?: string;
        file?: string;
        inFile: string[];
        output: string;
        outputFormat?: string;
        ctx: number;
        chunks?: number;
        chunk?: number;
        outputFrequency: number;
        saveFrequency: number;
        showStatistics?: boolean;
        parseSpecial?: boolean;
        processOutput?: boolean;
        ppl: boolean;
        threads?: number;
        batch: number;
        dataDir?: string;
        json?: boolean;
      } & StreamOpts,
    ) => {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const tools = require('@kailstream/tools') as typeof import('@kailstream/tools');
      if (o.showStatistics) {
        if (o.inFile.length !== 1 || o.file) throw new Error('--show-statistics reads one imatrix file: give it with --in-file (and no -f)');
        const st = tools.imatrixStatistics(tools.readImatrixFile(o.inFile[0]), o.ctx);
        if (o.json) process.stdout.write(JSON.stringify({ file: o.inFile[0], ...st }) + '\n');
        else process.stdout.write(tools.imatrixStatisticsLines(o.inFile[0], st).join('\n') + '\n');
        return;
      }
      const format = o.outputFormat ?? (o.output.endsWith('.dat') ? 'dat' : 'gguf');
      if (format !== 'gguf' && format !== 'dat') throw new Error(`--output-format must be gguf or dat, got '${format}'`);
      if (!o.file && !o.inFile.length) throw new Error('imatrix: give a calibration text (-f) with a model (-m), or imatrix files to combine (--in-file)');
      if (o.file && !o.model) throw new Error('imatrix: -f needs a model (-m)');
      checkOutputPath(o.output, '--output');
      const log = (l: string) => process.stderr.write(l + '\n');
      // As llama-imatrix: the --in-file statistics first, then what this run collects; datasets in that order.
      const entries = new Map<string, import('@kailstream/tools').ImatrixEntry>();
      const datasets: string[] = [];
      for (const f of o.inFile) {
        const r = tools.readImatrixFile(f);
        tools.mergeImatrixEntries(entries, r, o.ctx, f);
        datasets.push(...r.datasets);
        if (!o.json) log(`${f}: ${r.entries.size} entries${r.legacy ? ' (legacy format)' : ''}, ${r.chunkCount} chunks`);
      }
      let r: Awaited<ReturnType<typeof computeImatrix>> | undefined;
      let tokens = 0;
      if (o.file && o.model) {
        const text = readPromptFile(o.file);
        const chunked = chunkedLoad(o.ctx, o.batch);
        const lo = streamLoadOptions(o, o.model, dataDir(o.dataDir), false, log);
        // Every row's logits come back to this process, a pass at a time, and the heap holds more
        // than one pass's while the next replaces them (measured: about 2.6 times a pass's at
        // 2048 rows): three passes' worth is held back from a RAM budget on top of the reserve,
        // so the expert cache shrinks instead of the process outgrowing the budget.
        const passLogits = 3 * chunked.nSeqMax * o.ctx * vocabOfFile(o.model) * 4;
        const model = EngineModel.load(o.model, { threads: o.threads, ...chunked, ...lo, ramReserveBytes: (lo.ramReserveBytes ?? DEFAULT_RAM_RESERVE_BYTES) + passLogits });
        sayLoadChoices(model, o, log);
        if (model.plan && !o.json) log(`kail: ${formatBytes(passLogits)} of the RAM budget held for a pass's logits (every row, as llama-imatrix asks for them)`);
        try {
          const toks = model.tokenizer.tokenize(text, { addSpecial: true, parseSpecial: !!o.parseSpecial });
          tokens = toks.length;
          if (!o.json) log(`${path.basename(o.file)}: ${toks.length} tokens; computing over chunks of ${o.ctx}`);
          // As llama-imatrix: the output (the --in-file statistics and this run's so far) every
          // --output-frequency chunks, and with --save-frequency a copy named by its chunk count.
          // With chunks sharing a pass, as llama-imatrix does then: after a pass of `step` chunks
          // ending at chunk i, when a multiple of the frequency lies within it.
          const save = (i: number, n: number, snapshot: () => Map<string, import('@kailstream/tools').ImatrixEntry>, step: number) => {
            if (!step) return;
            const out = o.outputFrequency && i % o.outputFrequency < step && i < n;
            const copy = o.saveFrequency > 0 && i % o.saveFrequency < step;
            if (!out && !copy) return;
            const now = new Map([...entries].map(([k, e]) => [k, { sums: Float32Array.from(e.sums), counts: [...e.counts] }]));
            tools.mergeImatrixEntries(now, { entries: snapshot(), legacy: false }, o.ctx, o.model!);
            const data = { entries: now, datasets: [...datasets, o.file!], chunkCount: tools.imatrixChunkCount(now, o.ctx), chunkSize: o.ctx };
            // (Through a temporary name: a run stopped while writing leaves the last whole file.)
            const write = (file: string) => {
              if (format === 'dat') tools.writeImatrixDat(`${file}.tmp`, data);
              else tools.writeImatrixGguf(`${file}.tmp`, data);
              fs.renameSync(`${file}.tmp`, file);
            };
            if (out) write(o.output);
            if (copy) write(`${o.output}.at_${data.chunkCount}`);
          };
          r = await computeImatrix(model, toks, {
            nCtx: o.ctx,
            maxChunks: o.chunks,
            fromChunk: o.chunk,
            nBatch: o.batch,
            processOutput: o.processOutput,
            computePpl: o.ppl,
            onChunk: (i, n, p, snapshot, step) => {
              if (!o.json) process.stderr.write(`[${i}]${Number.isNaN(p) ? '' : p.toFixed(4)},${i === n ? '\n' : ''}`);
              save(i, n, snapshot, step);
            },
          });
        } finally {
          model.close();
        }
        tools.mergeImatrixEntries(entries, { entries: r.entries, legacy: false }, o.ctx, o.model);
        datasets.push(o.file);
      }
      const chunkCount = tools.imatrixChunkCount(entries, o.ctx);
      const data = { entries, datasets, chunkCount, chunkSize: o.ctx };
      if (format === 'dat') tools.writeImatrixDat(o.output, data);
      else tools.writeImatrixGguf(o.output, data);
      const partial = [...entries].filter(([, e]) => e.counts.some((c) => c === 0)).length;
      const ppl = r ? r.ppl : NaN;
      const summary = { model: o.model ?? null, file: o.file ?? null, inFiles: o.inFile, output: o.output, format, tokens, chunks: chunkCount, nCtx: o.ctx, entries: entries.size, partialEntries: partial, ppl, seconds: r?.seconds ?? 0 };
      if (o.json) process.stdout.write(JSON.stringify(summary) + '\n');
      else
        process.stdout.write(
          `wrote ${o.output} (${format}): ${entries.size} entries from ${chunkCount} chunks of ${o.ctx} tokens` +
            (r ? ` (${r.chunks} computed in ${r.seconds.toFixed(1)} s)` : '') +
            (partial ? `; ${partial} with experts no token reached (they quantize as if unweighted)` : '') +
            (Number.isNaN(ppl) ? '' : `\nFinal estimate: PPL = ${ppl.toFixed(4)}`) +
            '\n',
        );
    },
  );

  program
    .command('logits')
    .description('write raw logits for every position: n_tokens x n_vocab little-endian float32 (the parity interface)')
    .requiredOption('-m, --model <file>', 'GGUF model file')
    .requiredOption('--tokens <ids>', 'comma-separated token ids')
    .requiredOption('--out <file>', 'output .f32 file; FILE.json gets n_tokens and n_vocab')
    .option('--kv <type>', 'KV cache type: f32 (exact) or f16', 'f32')
    .option('-t, --threads <n>', 'compute threads', int('--threads', 1, 1024))
    .option('--batch <n>', 'tokens per forward pass', int('--batch', 1, 1 << 16), 512)
    .action(async (o: { model: string; tokens: string; out: string; kv: string; threads?: number; batch: number }) => {
      // (Number('') is 0: an empty list or item is refused, not read as token 0.)
      if (!o.tokens.trim()) throw new Error('--tokens is empty: give comma-separated token ids');
      const tokens = o.tokens.split(',').map((s) => {
        const n = s.trim() === '' ? NaN : Number(s.trim());
        if (!Number.isInteger(n) || n < 0) throw new Error(`--tokens: '${s}' is not a token id`);
        return n;
      });
      if (o.kv !== 'f32' && o.kv !== 'f16') throw new Error(`--kv must be f32 or f16, got '${o.kv}'`);
      checkOutputPath(o.out, '--out');
      const model = EngineModel.load(o.model, { threads: o.threads, kvType: o.kv, nCtx: Math.max(tokens.length, 16) });
      try {
        const logits = await model.evaluate(0, tokens, 'all', o.batch);
        fs.writeFileSync(o.out, Buffer.from(logits.buffer, logits.byteOffset, logits.byteLength));
        fs.writeFileSync(`${o.out}.json`.replace(/\.f32\.json$/, '.json'), JSON.stringify({ n_tokens: tokens.length, n_vocab: model.nVocab }) + '\n');
      } finally {
        model.close();
      }
    });

  program
    .command('tokenize')
    .description('print the token ids of a text (a JSON array); works on vocabulary-only GGUF files')
    .requiredOption('-m, --model <file>', 'GGUF model or vocabulary file')
    .argument('<text>', 'text to tokenize')
    .option('--no-add-special', 'do not add BOS/EOS the model asks for')
    .option('--parse-special', 'treat special-token text (e.g. <|im_start|>) as special tokens')
    .option('--override-kv <KEY=TYPE:VALUE>', OVERRIDE_KV_HELP, (v: string, acc: string[]) => [...acc, v], [] as string[])
    .action(async (text: string, o: { model: string; addSpecial: boolean; parseSpecial?: boolean; overrideKv: string[] }) => {
      const { kvOverrides } = kvOverridesOf(o.overrideKv, (l) => process.stderr.write(l + '\n'));
      const file = openGgufMetadata(o.model);
      try {
        const tok = Tokenizer.fromMetadata(applyKvOverrides(file.metadata, kvOverrides));
        process.stdout.write(JSON.stringify(tok.tokenize(text, { addSpecial: o.addSpecial, parseSpecial: !!o.parseSpecial })) + '\n');
      } finally {
        file.close();
      }
    });

  const inspect = program
    .command('inspect')
    .description('print architecture, parameter count, tensor types, expert sizes and bytes per token')
    .argument('<file>', 'GGUF model file, or the name of one in the models directory (as ollama show NAME)');
  addCacheTypeOptions(inspect)
    .option('--json', 'print one JSON object')
    .action((given: string, o: CacheTypeOpts & { json?: boolean }) => {
      const file = resolveModelArg(given, dataDir());
      const f = openGgufMetadata(file);
      try {
        if (f.metadata['general.type'] === 'adapter') {
          // A LoRA adapter (llama.cpp's GGUF adapter format): what it adapts, not a model summary.
          const pairs = f.tensors.filter((t) => t.name.endsWith('.lora_a')).map((t) => t.name.slice(0, -7));
          const ranks = [...new Set(f.tensors.filter((t) => t.name.endsWith('.lora_b')).map((t) => t.dims[0]))].sort((x, y) => x - y);
          const adapter = {
            path: file,
            architecture: String(f.metadata['general.architecture'] ?? ''),
            adapterType: String(f.metadata['adapter.type'] ?? ''),
            alpha: Number(f.metadata['adapter.lora.alpha'] ?? 0),
            ranks,
            pairs: pairs.length,
            targets: [...new Set(pairs.map((n) => n.replace(/^blk\.\d+\./, 'blk.N.')))],
          };
          if (o.json) process.stdout.write(JSON.stringify({ adapter }) + '\n');
          else
            process.stdout.write(
              [
                `file            ${file}`,
                `adapter         ${adapter.adapterType || '?'} for ${adapter.architecture}, rank ${ranks.join('/')}, alpha ${adapter.alpha} (scale x alpha / rank = ${ranks.map((r) => (adapter.alpha ? adapter.alpha / r : 1).toFixed(3)).join('/')} x the adapter scale)`,
                `pairs           ${pairs.length}: ${adapter.targets.join(', ')}`,
                `use             kail run -m MODEL.gguf --lora ${file}  (or --lora-scaled ${file}:SCALE)`,
              ].join('\n') + '\n',
            );
          return;
        }
        const s = summarize(f);
        // Files the engine cannot run (vocabulary-only, unknown architectures, or a cache type
        // the model cannot take) have no KV line.
        let kv: KvCacheReport | undefined;
        try {
          const t = kvTypesOf(o);
          kv = kvCacheReport(f, t.kvType, t.kvTypeV);
        } catch {
          kv = undefined;
        }
        if (o.json) {
          process.stdout.write(JSON.stringify({ ...s, kvCache: kv ?? null }) + '\n');
          return;
        }
        const kib = (b: number) => `${(b / 1024).toFixed(2)} KiB`;
        const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;
        const lines = [
          `file            ${s.path} (${gib(s.fileBytes)})`,
          `architecture    ${s.architecture}`,
          `parameters      ${(s.parameterCount / 1e9).toFixed(3)} B`,
          `layers          ${s.encoderDecoder ? `${s.encoderDecoder.encoderLayers} encoder, ${s.encoderDecoder.decoderLayers} decoder` : s.layerCount}`,
          `context         ${s.contextLength}`,
          `experts         ${s.expertCount ? `${s.expertCount} per layer, ${s.expertUsedCount} used per token` : 'none (dense)'}`,
          // (general.file_type, as llama-quantize names it; a file may lack it.)
          ...(s.fileType ? [`file type       ${s.fileType}`] : []),
          `tensor types    ${Object.entries(s.tensorTypeBytes).map(([t, b]) => `${t} ${gib(b)}`).join(', ')}`,
          `resident        ${gib(s.residentBytes)} (non-expert weights)`,
          `routed experts  ${gib(s.expertBytes)}${s.bytesPerExpert ? ` (${(s.bytesPerExpert / 2 ** 20).toFixed(2)} MiB each)` : ''}`,
          s.encoderDecoder
            ? `bytes/token     ${gib(s.bytesPerToken)} of weights read per generated token (the decoder's; ${gib(s.encoderDecoder.promptWeightBytes)} once per prompt: the encoder's and the cross-attention K/V)`
            : `bytes/token     ${gib(s.bytesPerToken)} of weights read per token`,
        ];
        if (kv) {
          // (A model without attention, mamba / mamba2: nothing per token, the recurrent states are the whole cache.)
          if (kv.bytesPerToken === 0 && kv.recurrentBytesPerSequence) lines.push('kv cache        none (no attention layers)');
          else if (kv.encoderDecoder) {
            const e = kv.encoderDecoder;
            lines.push(
              `kv cache        ${kib(kv.bytesPerToken)} per generated token (${kv.kvTypeV === kv.kvType ? kv.kvType : `K ${kv.kvType}, V ${kv.kvTypeV}`}, decoder self-attention, ${e.decoderLayers} layers)`,
              `                + ${kib(e.crossBytesPerPromptToken)} per prompt token (cross-attention, ${e.crossLayers} layers), and ${kib(e.encoderBytesPerPromptToken)} per prompt token while it encodes (encoder, ${e.encoderLayers} layers; freed after)`,
            );
          } else lines.push(`kv cache        ${kib(kv.bytesPerToken)} per token (${kv.kvTypeV === kv.kvType ? kv.kvType : `K ${kv.kvType}, V ${kv.kvTypeV}`}, all layers)`);
          if (kv.ringBytesPerSequence) lines.push(`kv rings        ${kib(kv.ringBytesPerSequence)} per sequence (the window's rows and the compressors' F32 rows, whatever the context)`);
          if (kv.recurrentBytesPerSequence) lines.push(`recurrent state ${kib(kv.recurrentBytesPerSequence)} per sequence (F32: the convolution, delta-net, lightning-attention and SSM layers; whatever the context)`);
          if (kv.mla)
            lines.push(
              `                MLA latent cache (kv_lora ${kv.mla.kvLora} + rope ${kv.mla.qkRope} per layer); a per-head cache of ${kv.mla.nHead} heads ` +
                `would hold ${kib(kv.mla.naiveShared)} (${kv.mla.ratioShared.toFixed(1)}x), ${kib(kv.mla.naiveFull)} with the rope key per head (${kv.mla.ratioFull.toFixed(1)}x)`,
            );
        }
        process.stdout.write(lines.join('\n') + '\n');
      } finally {
        f.close();
      }
    });
}
