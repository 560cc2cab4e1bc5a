import fs from 'node:fs';
import path from 'node:path';
import { common, engine as pb } from '@kailstream/proto';

import { EngineError, toEngineError } from '../errors';
import { formatBytes } from '../model/byte-size';
import { profileDefaults, profileRamBudget, type HardwareProfile } from '../model/hardware-profile';
import { EngineModel, defaultRamBudget, draftLayersOf, moeStreamLayers, openGgufMetadata, planModel, summarize, type LoadModelOptions, type ModelSummary } from '../model/model';
import type { DiffusionOptions } from '../model/diffusion';
import { isLaterSplit, modelFileBytes, modelFiles, splitNameOf, splitPath } from '../model/split-files';
import { modelfileSidecar } from '../model/sidecar-files';
import { ChatTemplate, RESERVED_TEMPLATE_VARS, type ChatMessage } from '../tokenizer/chat-template';
import { dryBreakerSequences } from '../sampling/dry';
import { parseGbnf } from '../sampling/gbnf';
import { regexToGbnf } from '../sampling/regex-gbnf';
import { BatchEngine, grammarOf, type FinishReason, type GenerationRequest } from '../runtime/batch-engine';
import { readSlotFile, writeSlotFile } from '../runtime/slot-file';
import { lazyTriggers } from '../sampling/gbnf-lazy';
import { SpeculativeDecoder } from '../speculative/speculative-decoder';
import { HARMONY_TAGS, THINK_TAGS, type ReasoningBudgetSpec, type ReasoningTags } from '../sampling/reasoning-budget';
import { opensReasoning } from '../tokenizer/reasoning';
import type { ResolvedSamplerParams, SamplerParams, SamplerStage } from '../sampling/sampler';
import type { TokenLogprobs } from '../sampling/logprobs';
import { choicePattern, forcedToolCallPattern, lazyToolCallPattern, reasoningThenJsonPattern, toolCallSyntax, type OutputPattern, type ToolCallSyntax, type ToolDef } from '../sampling/tool-call-grammar';
import type { NativeExpertStreamStats } from '@kailstream/core-native';

/** A LoRA adapter file and its scale. */
export interface LoraSpec {
  path: string;
  scale: number;
}

/** The sidecar of a models-directory file that lists the LoRA adapters it loads with (ID.lora.json). */
function loraSidecar(modelFile: string): string {
  return modelFile.replace(/\.gguf$/, '') + '.lora.json';
}

function readLoraSidecar(modelFile: string): LoraSpec[] {
  const f = loraSidecar(modelFile);
  if (!fs.existsSync(f)) return [];
  const list = JSON.parse(fs.readFileSync(f, 'utf8')) as unknown;
  if (!Array.isArray(list) || !list.every((l) => typeof l?.path === 'string' && Number.isFinite(l?.scale)))
    throw new EngineError('KAIL_E_BAD_MODEL', `${f}: expected a list of {path, scale}`);
  return list as LoraSpec[];
}

/** Checks each adapter is a LoRA adapter for `modelFile`'s architecture, then writes the sidecar. */
function writeLoraSidecar(modelFile: string, lora: readonly LoraSpec[]): void {
  const model = openGgufMetadata(modelFile);
  const arch = model.metadata['general.architecture'];
  model.close();
  for (const l of lora) {
    if (!path.isAbsolute(l.path)) throw new EngineError('KAIL_E_INVALID_ARG', `LoRA adapter path must be absolute, got ${JSON.stringify(l.path)}`);
    if (!fs.existsSync(l.path)) throw new EngineError('KAIL_E_NOT_FOUND', `LoRA adapter ${l.path} does not exist on the engine's machine`);
    const a = openGgufMetadata(l.path);
    try {
      if (a.metadata['general.type'] !== 'adapter' || a.metadata['adapter.type'] !== 'lora')
        throw new EngineError('KAIL_E_INVALID_ARG', `${l.path} is not a LoRA adapter (general.type '${String(a.metadata['general.type'])}', adapter.type '${String(a.metadata['adapter.type'] ?? '')}')`);
      if (a.metadata['general.architecture'] !== arch)
        throw new EngineError('KAIL_E_INVALID_ARG', `LoRA adapter ${l.path} is for architecture '${String(a.metadata['general.architecture'])}', the model is '${String(arch)}'`);
    } finally {
      a.close();
    }
  }
  fs.writeFileSync(loraSidecar(modelFile), JSON.stringify(lora.map((l) => ({ path: l.path, scale: l.scale }))) + '\n');
}

/** A reranker's head, else KAIL_E_UNSUPPORTED naming the model. */
function rankHeadOf(m: { info: common.ModelInfo; model: EngineModel }): NonNullable<EngineModel['rankHead']> {
  if (!m.model.rankHead) throw new EngineError('KAIL_E_UNSUPPORTED', `model '${m.info.id}' is not a reranker (no rank pooling with a cls.output head)`);
  return m.model.rankHead;
}

/** What the engine gRPC service needs from whatever owns models and runs generation. */
export interface ModelHost {
  health(): { ok: boolean; detail: string };
  listModels(): common.ModelInfo[];
  loadModel(req: pb.LoadModelRequest): Promise<common.ModelInfo>;
  /** Unloads a model, cancelling what runs on it; with `ifIdle`, refuses (KAIL_E_BUDGET) while requests run or wait. */
  unloadModel(id: string, ifIdle?: boolean): Promise<void>;
  /** Sets a loaded model's default LoRA scales (named adapters at their scale, the others 0); its info after. */
  setLoraAdapters(id: string, lora: readonly { id: number; scale: number }[]): common.ModelInfo;
  /** llama-server's slot save / restore / erase (ModelHostOptions.slotSavePath). */
  slotAction(req: pb.SlotActionRequest): pb.SlotActionResponse;
  /** Yields response chunks; the last one carries finish reason and usage. Stops when signal aborts. */
  generate(req: pb.GenerateRequest, signal: AbortSignal): AsyncIterable<pb.GenerateResponse>;
  /** Cancels a running request by id; false when none is running. */
  cancel(requestId: string): boolean;
  telemetry(): pb.TelemetrySnapshot;
  /** GGUF files in the models directory with their header summaries. */
  listModelFiles(): Promise<pb.ListModelFilesResponse>;
  /** Removes ID.gguf from the models directory (unloading it first when idle); true when it was loaded. */
  deleteModelFile(id: string): Promise<boolean>;
  /** Makes ID.gguf of the models directory available as DEST.gguf too (a hard link, else a copy). */
  copyModelFile(id: string, dest: string, lora?: readonly LoraSpec[]): Promise<void>;
  /** Brings a GGUF file from elsewhere into the models directory as `dest` (checked first; a hard link where it can be). */
  importModelFile(source: string, dest: string, lora?: readonly LoraSpec[]): Promise<void>;
  /** Residency plan for a file under the given budgets (nothing is loaded). */
  planModel(req: pb.PlanModelRequest): Promise<pb.PlanModelResponse>;
  tokenize(req: pb.TokenizeRequest): pb.TokenizeResponse;
  detokenize(req: pb.DetokenizeRequest): string;
  close(): Promise<void>;
}

export interface LocalModelHostOptions {
  /** Concurrent sequences per model (continuous batching slots). Default 8. */
  seqsPerModel?: number;
  /** Default context length when a load request gives none. Default 4096. */
  defaultContext?: number;
  /** Compute threads when a load request gives none (0 = the native default: physical cores this process may run on, at most its CPU quota). */
  threads?: number;
  /**
   * RAM budget per model when a load request gives none (LoadModelRequest.ram_budget_bytes = 0).
   * Set: routed experts stream from storage into what the budget leaves. Default: unset, the
   * whole file is mapped (experts are read through the page cache).
   */
  defaultRamBudgetBytes?: number;
  /**
   * VRAM tier budget for a streaming model when a load request gives none (vram_budget_bytes = 0);
   * default: the hardware profile's first GPU, for the first streaming model.
   */
  defaultVramBudgetBytes?: number;
  /**
   * While streams decode, the longest a pass may spend on arriving prompts (BatchEngineOptions.
   * maxDecodeStallMs). Default 500 ms; 0 = no limit.
   */
  maxDecodeStallMs?: number;
  /**
   * Recurrent models: context checkpoints kept per slot (BatchEngineOptions.contextCheckpoints,
   * llama-server's --ctx-checkpoints). Default 2; 0 = off.
   */
  contextCheckpoints?: number;
  /** Directory ListModelFiles lists and relative load paths resolve against. Default: none. */
  modelsDir?: string;
  /**
   * Requests that may wait per model for a sequence slot (whose KV cache is reserved at the full
   * context) before new ones are refused with KAIL_E_BUDGET. Default 64.
   */
  maxWaitingPerModel?: number;
  /** Storage bandwidth (bytes/s) for telemetry; default: the profile's, else 0 (not profiled). */
  storageBandwidthBytesPerSecond?: number;
  /**
   * The hardware profile (`kail profile`): a load without a RAM budget takes the profile's (and
   * streams experts) when the file is larger than it, with the profiled I/O depth; PlanModel
   * without a budget plans against it; telemetry reports its storage bandwidth.
   */
  profile?: HardwareProfile;
  /** Where the profile was read from (for messages). */
  profileFile?: string;
  /**
   * A chat template for every model, in place of each file's (llama-server's --chat-template and
   * --chat-template-file): Jinja source, or 'chatml' for the ChatML default.
   */
  chatTemplate?: string;
  /** llama-server's --chat-template-kwargs: variables every chat is rendered with, under a request's own chat_template_kwargs. */
  chatTemplateKwargs?: Record<string, unknown>;
  /** Options passed to every EngineModel.load (I/O threads, direct I/O, prefetch, cache policy). */
  loadOptions?: Pick<LoadModelOptions, 'ioThreads' | 'directIo' | 'prefetch' | 'cachePolicy' | 'ramReserveBytes' | 'kvType' | 'kvTypeV' | 'swaFull' | 'kvOverrides' | 'rope'>;
  /**
   * llama-server's --context-shift: a generation that fills the context (or its context_window)
   * drops cached tokens after the request's n_keep and goes on (BatchEngine's contextShift).
   * Default off: it stops there, finish reason LENGTH.
   */
  contextShift?: boolean;
  /**
   * llama-server's --slot-save-path: the directory SlotAction saves slots to and restores them
   * from (created when missing). Unset: SlotAction is UNIMPLEMENTED.
   */
  slotSavePath?: string;
  /** A running request with no forward pass completed for this long makes health NOT_SERVING. Default 60000 ms. */
  stallTimeoutMs?: number;
  /**
   * llama-server's --pooling: what an EMBED_MODEL request pools, instead of each file's
   * pooling_type ('none': every token's row, GenerateResponse.embedding_per_token).
   */
  pooling?: 'none' | 'mean' | 'cls' | 'last';
}

interface Loaded {
  info: common.ModelInfo;
  model: EngineModel;
  engine: BatchEngine;
  spec: SpeculativeDecoder | null;
  chat?: ChatTemplate;
  /** Ollama templates requests named (GoTemplate's text -> parsed), the last few. */
  goChats?: Map<string, ChatTemplate>;
  /** Control tokens that are tool-call or reasoning markers (rendered into the output of requests with tools). */
  toolMarkerTokens?: ReadonlySet<number>;
  /** Control tokens that are reasoning markers (rendered into the output of chat requests). */
  reasoningMarkerTokens?: ReadonlySet<number>;
  /** How the chat template writes tool calls (for forced calls), found once. */
  toolCallSyntax?: ToolCallSyntax | { unsupported: string };
  /** DRY breaker strings -> the token sequences that spell them (one vocabulary pass per list). */
  dryBreakers?: Map<string, number[][]>;
  /** Forward passes seen at the last health check and when they last advanced. */
  lastSteps: number;
  lastProgress: number;
}

/** llama-server's default n_batch, the window its /infill fits prefix and suffix in. */
const INFILL_WINDOW = 2048;
/** Ollama templates (from requests) kept parsed per model. */
const GO_TEMPLATES_KEPT = 8;

const FINISH: Record<FinishReason, common.FinishReason> = {
  stop: common.FinishReason.FINISH_REASON_STOP,
  length: common.FinishReason.FINISH_REASON_LENGTH,
  cancelled: common.FinishReason.FINISH_REASON_CANCELLED,
  error: common.FinishReason.FINISH_REASON_ERROR,
};

/**
 * Proto sampling fields use 0 for "default"; the sampler wants explicit values. `breakers` turns
 * DRY's breaker strings into token sequences (the model's tokenizer); without it they are dropped.
 */
export function samplingFromProto(s: common.SamplingParams | undefined, breakers?: (strings: string[]) => number[][]): SamplerParams {
  if (!s) return { temperature: 0 };
  const x = s.extras;
  const extras: SamplerParams = x
    ? {
        typicalP: x.typicalP,
        topNSigma: x.topNSigma,
        xtcProbability: x.xtcProbability,
        xtcThreshold: x.xtcThreshold,
        minKeep: x.minKeep,
        dynatempRange: x.dynatempRange,
        dynatempExponent: x.dynatempExponent,
        dryMultiplier: x.dryMultiplier,
        dryBase: x.dryBase,
        dryAllowedLength: x.dryAllowedLength,
        dryPenaltyLastN: x.dryPenaltyLastN,
        dryBreakers: x.dryMultiplier !== 0 && breakers && x.drySequenceBreakers.length ? breakers(x.drySequenceBreakers) : [],
        mirostat: x.mirostat,
        mirostatTau: x.mirostatTau,
        mirostatEta: x.mirostatEta,
        ...(x.samplers.length ? { samplers: x.samplers as SamplerStage[] } : {}),
        adaptiveTarget: x.adaptiveTarget,
        adaptiveDecay: x.adaptiveDecay,
      }
    : {};
  return {
    ...extras,
    temperature: s.temperature,
    topK: s.topK,
    topP: s.topP > 0 && s.topP <= 1 ? s.topP : 1,
    minP: s.minP,
    repetitionPenalty: s.repetitionPenalty > 0 ? s.repetitionPenalty : 1,
    presencePenalty: s.presencePenalty,
    frequencyPenalty: s.frequencyPenalty,
    penaltyLastN: s.penaltyLastN || 64,
    seed: s.hasSeed ? s.seed : undefined,
    logitBias: s.logitBias,
  };
}

/**
 * The proto form of a sampler's resolved params (a slot's sampling, as /slots shows it): the seed
 * in use, no logit bias, the DRY breakers as the token sequences they became (their strings are
 * not kept).
 */
function samplingToProto(p: Readonly<ResolvedSamplerParams>): common.SamplingParams {
  const { temperature, topK, topP, minP, repetitionPenalty, presencePenalty, frequencyPenalty, penaltyLastN, seed } = p;
  const { typicalP, topNSigma, xtcProbability, xtcThreshold, minKeep, dynatempRange, dynatempExponent, dryMultiplier, dryBase, dryAllowedLength, dryPenaltyLastN, mirostat, mirostatTau, mirostatEta, adaptiveTarget, adaptiveDecay } = p;
  return {
    temperature, topK, topP, minP, repetitionPenalty, presencePenalty, frequencyPenalty, penaltyLastN, seed, hasSeed: true, logitBias: {},
    extras: {
      typicalP, topNSigma, xtcProbability, xtcThreshold, minKeep, dynatempRange, dynatempExponent, dryMultiplier, dryBase, dryAllowedLength, dryPenaltyLastN,
      drySequenceBreakers: [], mirostat, mirostatTau, mirostatEta, samplers: [...p.samplers], adaptiveTarget, adaptiveDecay,
    },
  };
}

/** A tool definition without its `strict` flags (top level or in `function`). */
function withoutStrict(t: unknown): unknown {
  if (t === null || typeof t !== 'object' || Array.isArray(t)) return t;
  const { strict: _, ...rest } = t as Record<string, unknown>;
  const f = rest.function;
  if (f !== null && typeof f === 'object' && !Array.isArray(f) && 'strict' in f) {
    const { strict: __, ...fn } = f as Record<string, unknown>;
    rest.function = fn;
  }
  return rest;
}

/** ID.gguf in a models directory; an id that is not a plain model id is an error naming `what`. */
export function modelsDirectoryFile(dir: string, id: string, what = 'id'): string {
  if (!/^[A-Za-z0-9_][A-Za-z0-9._:-]{0,199}$/.test(id)) throw new EngineError('KAIL_E_INVALID_ARG', `${what} must be a model id (letters, digits and . _ : -), got ${JSON.stringify(id)}`);
  return path.join(dir, `${id}.gguf`);
}

/** ID.gguf of a models directory, which must exist (KAIL_E_NOT_FOUND otherwise). */
export function existingModelFile(dir: string, id: string, what = 'id'): string {
  const file = modelsDirectoryFile(dir, id, what);
  if (!fs.existsSync(file)) throw new EngineError('KAIL_E_NOT_FOUND', `model '${id}' is not in the models directory`);
  return file;
}

/**
 * The GGUF files of a models directory (each split model once, as its first split), each with its
 * summary, or the error that kept it from being read; `loaded` holds the paths of loaded models.
 */
export function listModelsDirectory(dir: string, loaded: ReadonlySet<string> = new Set()): pb.ListModelFilesResponse {
  let names: string[];
  try {
    // A split model lists once, as its first split (the others load with it).
    names = fs.readdirSync(dir).filter((n) => n.toLowerCase().endsWith('.gguf') && !isLaterSplit(n)).sort();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { modelsDir: dir, files: [] };
    throw new EngineError('KAIL_E_IO', `cannot read the models directory ${dir}: ${(e as Error).message}`);
  }
  const files: pb.ModelFile[] = [];
  for (const name of names) {
    const full = path.join(dir, name);
    const id = name.replace(/\.gguf$/i, '');
    let size = 0;
    try {
      const st = fs.statSync(full);
      if (!st.isFile()) continue;
      size = modelFileBytes(full);
      const f = openGgufMetadata(full);
      try {
        const s = summarize(f);
        files.push({ path: full, id, sizeBytes: size, architecture: s.architecture, error: '', info: common.ModelInfo.fromPartial({ ...summaryInfo(id, full, s), loaded: loaded.has(full), loraAdapters: readLoraSidecar(full) }) });
      } finally {
        f.close();
      }
    } catch (e) {
      files.push({ path: full, id, sizeBytes: size, architecture: '', error: toEngineError(e).message, info: undefined });
    }
  }
  return { modelsDir: dir, files };
}

/** Deletes a model file of a models directory: every split, and its LoRA and Modelfile sidecars. */
export function removeModelFiles(file: string): void {
  const split = splitNameOf(file);
  if (split && split.no > 1) {
    const first = path.basename(splitPath(split.prefix, 1, split.count), '.gguf');
    throw new EngineError('KAIL_E_INVALID_ARG', `'${path.basename(file, '.gguf')}' is split ${split.no} of ${split.count} of the model '${first}': remove that, which removes every split`);
  }
  for (const f of modelFiles(file)) fs.unlinkSync(f);
  fs.rmSync(loraSidecar(file), { force: true });
  fs.rmSync(modelfileSidecar(file), { force: true });
}

/**
 * Makes ID.gguf of a models directory available as DEST.gguf too (a hard link, else a copy), with
 * `lora` as its adapters, else the source's, and the source's Modelfile settings; a split model is
 * refused (its files find each other by name).
 */
export function copyModelInDirectory(dir: string, id: string, dest: string, lora: readonly LoraSpec[] = []): void {
  const src = existingModelFile(dir, id, 'source');
  const dst = modelsDirectoryFile(dir, dest, 'destination');
  if (fs.existsSync(dst)) throw new EngineError('KAIL_E_ALREADY_EXISTS', `model '${dest}' is already in the models directory`);
  if (modelFiles(src).length > 1)
    throw new EngineError('KAIL_E_UNSUPPORTED', `model '${id}' is split over ${modelFiles(src).length} files, which find each other by name: copy them under a new prefix by hand`);
  const adapters = lora.length ? lora : readLoraSidecar(src);
  linkOrCopy(src, dst);
  if (fs.existsSync(modelfileSidecar(src))) fs.copyFileSync(modelfileSidecar(src), modelfileSidecar(dst));
  keepLora(dst, adapters);
}

/** Writes dst's adapter sidecar (nothing without adapters); a refused adapter takes dst (and its Modelfile sidecar) back out. */
function keepLora(dst: string, lora: readonly LoraSpec[]): void {
  if (!lora.length) return;
  try {
    writeLoraSidecar(dst, lora);
  } catch (e) {
    fs.rmSync(dst, { force: true });
    fs.rmSync(modelfileSidecar(dst), { force: true });
    throw e;
  }
}

/** A hard link where the file system allows one (no second copy of the weights), else a copy; never over an existing file. */
function linkOrCopy(src: string, dst: string): void {
  try {
    fs.linkSync(src, dst);
  } catch {
    fs.copyFileSync(src, dst, fs.constants.COPYFILE_EXCL);
  }
}

function responseFormatFromProto(req: pb.GenerateRequest): Pick<GenerationRequest, 'responseFormat' | 'jsonSchema'> {
  const f = req.responseFormat;
  if (f === pb.ResponseFormat.RESPONSE_FORMAT_TEXT) return { responseFormat: 'text' };
  if (f === pb.ResponseFormat.RESPONSE_FORMAT_JSON_OBJECT) return { responseFormat: 'json_object' };
  if (f === pb.ResponseFormat.RESPONSE_FORMAT_JSON_SCHEMA) {
    let schema: unknown;
    try {
      schema = JSON.parse(req.jsonSchema || '{"type":"object"}');
    } catch (e) {
      throw new EngineError('KAIL_E_INVALID_ARG', `json_schema is not valid JSON: ${(e as Error).message}`);
    }
    return { responseFormat: 'json_schema', jsonSchema: schema };
  }
  throw new EngineError('KAIL_E_INVALID_ARG', `unknown response format ${f}`);
}

const TOOL_MARKERS = new Set([
  '<tool_call>', '</tool_call>', '<arg_key>', '</arg_key>', '<arg_value>', '</arg_value>',
  '<｜tool▁calls▁begin｜>', '<｜tool▁calls▁end｜>', '<｜tool▁call▁begin｜>', '<｜tool▁call▁end｜>', '<｜tool▁sep｜>',
  '<|tool_calls_section_begin|>', '<|tool_calls_section_end|>', '<|tool_call_begin|>', '<|tool_call_argument_begin|>', '<|tool_call_end|>',
  '[TOOL_CALLS]', '[ARGS]', '[CALL_ID]',
  '<|python_tag|>',
  '<minimax:tool_call>', '</minimax:tool_call>', '<tool_calls>', '</tool_calls>', '<|tool_call|>',
]);
/** Reasoning markers, kept in a chat's output for the API to split off (llama.cpp's reasoning parser). */
const REASONING_MARKERS = new Set(['<think>', '</think>']);
/** Template variables chat_template_kwargs may not set: the request's own fields set them. */

function parseJsonField<T>(text: string, what: string, ok: (v: unknown) => boolean): T {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new EngineError('KAIL_E_INVALID_ARG', `${what} is not valid JSON: ${(e as Error).message}`);
  }
  if (!ok(v)) throw new EngineError('KAIL_E_INVALID_ARG', `${what} has the wrong shape`);
  return v as T;
}

/**
 * A proto chat message as the template sees it (OpenAI's fields). Tool call arguments, a JSON
 * string in OpenAI's API, become the object templates expect (`arguments | tojson`), as llama.cpp
 * passes them; arguments that are not a JSON object stay a string.
 */
function chatMessageFromProto(x: pb.ChatMessage): ChatMessage {
  const msg: ChatMessage = { role: x.role, content: x.content };
  if (x.name) msg.name = x.name;
  if (x.toolCallId) msg.tool_call_id = x.toolCallId;
  if (x.reasoningContent) msg.reasoning_content = x.reasoningContent;
  if (x.toolCallsJson) {
    const calls = parseJsonField<{ function?: { arguments?: unknown } }[]>(x.toolCallsJson, 'tool_calls', Array.isArray);
    msg.tool_calls = calls.map((c) => {
      const args = c?.function?.arguments;
      if (typeof args !== 'string') return c;
      try {
        const parsed: unknown = JSON.parse(args);
        if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) return { ...c, function: { ...c.function, arguments: parsed } };
      } catch {
        // not JSON: the template gets the string
      }
      return c;
    });
    if (!x.content) msg.content = null;
  }
  return msg;
}

/** The in-process model host: loads GGUF models and serves them with continuous batching. */
/** EngineModel.load, a budget refusal saying which loaded models hold the rest of the budget (`held`, when any do). */
function loadNamingHeld(held: string, file: string, opts: LoadModelOptions): EngineModel {
  try {
    return EngineModel.load(file, opts);
  } catch (e) {
    if (held && e instanceof EngineError && e.code === 'KAIL_E_BUDGET') throw new EngineError('KAIL_E_BUDGET', `${e.message} (${held})`);
    throw e;
  }
}

export class LocalModelHost implements ModelHost {
  private readonly models = new Map<string, Loaded>();
  private readonly requests = new Map<string, Loaded>();
  private readonly loading = new Set<string>();
  private tokensGenerated = 0;
  private closed = false;

  constructor(private readonly opts: LocalModelHostOptions = {}) {}

  /** Not serving while a running request has made no forward pass for stallTimeoutMs (a hung engine). */
  health() {
    if (this.closed) return { ok: false, detail: 'shutting down' };
    const now = Date.now();
    const limit = this.opts.stallTimeoutMs ?? 60_000;
    for (const [id, m] of this.models) {
      const st = m.engine.stats();
      if (st.steps !== m.lastSteps || st.running === 0) {
        m.lastSteps = st.steps;
        m.lastProgress = now;
      } else if (now - m.lastProgress > limit) {
        return { ok: false, detail: `model '${id}': ${st.running} running request(s), no forward pass finished for ${Math.round((now - m.lastProgress) / 1000)} s` };
      }
    }
    return { ok: true, detail: `${this.models.size} model(s) loaded` };
  }

  listModels(): common.ModelInfo[] {
    return [...this.models.values()].map((m) => m.info);
  }

  /** A load path: absolute as given; relative ones are looked up in the models directory first (with or without .gguf). */
  resolveModelPath(p: string): string {
    if (path.isAbsolute(p)) return p;
    const dir = this.opts.modelsDir;
    if (dir) {
      for (const c of [p, `${p}.gguf`]) {
        const full = path.resolve(dir, c);
        if (fs.existsSync(full)) return full;
      }
    }
    return path.resolve(p);
  }

  async loadModel(req: pb.LoadModelRequest): Promise<common.ModelInfo> {
    if (!req.path) throw new EngineError('KAIL_E_INVALID_ARG', 'path is required');
    if (this.closed) throw new EngineError('KAIL_E_INVALID_ARG', 'the engine is shutting down');
    const file = this.resolveModelPath(req.path);
    const id = req.id || path.basename(file).replace(/\.gguf$/i, '');
    if (this.models.has(id) || this.loading.has(id)) throw new EngineError('KAIL_E_ALREADY_EXISTS', `a model with id '${id}' is already loaded`);
    const lora: LoraSpec[] = req.lora.length ? req.lora.map((l) => ({ path: l.path, scale: l.scale })) : readLoraSidecar(file);
    let ram = req.ramBudgetBytes || 0;
    let ioThreads = this.opts.loadOptions?.ioThreads;
    const vramGiven = req.vramBudgetBytes || this.opts.defaultVramBudgetBytes || undefined;
    let vram = vramGiven;
    // The engine's RAM budget (its --ram, else the profile's) is shared by its models: the models
    // loaded already hold part of it (their plan's budget, or their whole file when in memory); a
    // new one gets what is left, streaming its experts when its file is larger. A request's own
    // budget is taken as it is.
    const engineRam = this.opts.defaultRamBudgetBytes;
    const profile = this.opts.profile;
    // (Where the loaded models left less than the budget: what they hold, for a refusal to name.)
    let heldNote = '';
    if (!ram && (engineRam || profile)) {
      const fileBytes = fs.existsSync(file) ? modelFileBytes(file) : 0;
      let given: number | undefined;
      if (engineRam || this.models.size) {
        const held = [...this.models.values()].map((m) => [m.info.id, m.model.plan ? m.model.plan.ramBytes : Number(m.info.fileBytes)] as const);
        const total = engineRam || profile!.defaults.ramBytes;
        // (A memory cgroup's headroom is measured now, with the loaded models already charged to it.)
        const left = Math.min(total - held.reduce((a, [, b]) => a + b, 0), engineRam || !held.length ? Infinity : profileRamBudget(profile!, '').bytes);
        if (left <= 0)
          throw new EngineError(
            'KAIL_E_BUDGET',
            `the ${engineRam ? "engine's" : 'profiled'} RAM budget (${formatBytes(total)}) is held by the loaded models (${held.map(([i, b]) => `${i}: ${formatBytes(b)}`).join(', ')}); unload one to load '${id}'`,
          );
        if (fileBytes > left) given = left;
        if (held.length)
          heldNote = `the loaded models (${held.map(([i, b]) => `${i}: ${formatBytes(b)}`).join(', ')}) hold the rest of the ${engineRam ? "engine's" : 'profiled'} RAM budget (${formatBytes(total)}); unloading one gives '${id}' more`;
      }
      if (profile && (!engineRam || given !== undefined)) {
        // The profile's GPU memory is shared the same way: a streaming model's VRAM tier takes what the
        // loaded models' tiers leave (each allocates at most one slot per expert of its own).
        const vramHeld = [...this.models.values()].reduce((a, m) => a + (m.model.plan?.vramCacheBytes ?? 0), 0);
        const d = profileDefaults(profile, this.opts.profileFile ?? 'profile.json', fileBytes, { ramBytes: given, ioThreads, vramBytes: vram }, vramHeld);
        ram = d.ramBytes ?? 0;
        ioThreads = d.ioThreads;
        vram = d.vramBytes;
      } else ram = given ?? 0;
    }
    this.loading.add(id);
    let model: EngineModel;
    let spec: SpeculativeDecoder | null = null;
    let engine: BatchEngine;
    try {
      // (An EAGLE-3 or DFlash draft reads the target's hidden states at its layers: the target's program gives them.)
      const draftLayers = req.draftPath ? draftLayersOf(this.resolveModelPath(req.draftPath)) : null;
      model = loadNamingHeld(heldNote, file, {
        ...this.opts.loadOptions,
        ...(draftLayers ? { extractLayers: draftLayers } : {}),
        // (An MTP block reads the hidden rows it is trained on: deepseek4's streams.)
        ...(req.mtpDecoding ? { nextnHidden: true } : {}),
        // The request's adapters, else those a models-directory file was created with (ID.lora.json).
        ...(lora.length ? { lora } : {}),
        ...(req.controlVectors.length
          ? { controlVectors: req.controlVectors.map((c) => ({ path: c.path, scale: c.scale })), controlVectorLayerRange: [req.controlVectorLayerStart, req.controlVectorLayerEnd] as [number, number] }
          : {}),
        ioThreads,
        nCtx: req.contextLength || this.opts.defaultContext || 4096,
        threads: req.threads || this.opts.threads || 0,
        nSeqMax: this.opts.seqsPerModel ?? 8,
        ramBytes: ram > 0 ? ram : undefined,
        // A request's VRAM budget always goes to the load (refused there without a RAM budget); the
        // engine's default and the profile's only where experts stream.
        ...(req.vramBudgetBytes ? { vramBytes: req.vramBudgetBytes } : vram && ram > 0 ? { vramBytes: vram } : {}),
        // What the profile (or the other models) leave may not hold one of this model's experts: then no tier.
        ...(!vramGiven ? { vramOptional: true } : {}),
      });
      // Speculative decoding: a draft model (loaded with the target's context and slots), prompt lookup, or the file's MTP block.
      try {
        spec = SpeculativeDecoder.fromConfig(
          model,
          { draftPath: req.draftPath ? this.resolveModelPath(req.draftPath) : undefined, lookup: req.lookupDecoding, mtp: req.mtpDecoding, k: req.speculativeK },
          { ...this.opts.loadOptions, threads: req.threads || this.opts.threads || 0 },
        );
        engine = new BatchEngine(model, { speculative: spec ?? undefined, maxDecodeStallMs: this.opts.maxDecodeStallMs, contextCheckpoints: this.opts.contextCheckpoints });
      } catch (e) {
        spec?.close();
        model.close();
        throw e;
      }
    } finally {
      this.loading.delete(id);
    }
    const info = common.ModelInfo.fromPartial({
      ...summaryInfo(id, file, model.summary),
      contextLength: model.nCtx,
      loaded: true,
      residency: residencyOf(model),
      ramBudgetBytes: model.plan ? model.plan.ramBytes : 0,
      slots: model.nSeqMax,
      kvType: model.kvType,
      kvTypeV: model.kvTypeV,
      loraAdapters: model.loraAdapters.map((l) => ({ path: l.path, scale: l.scale })),
      embeddingOnly: model.encoder,
    });
    const loaded: Loaded = { info, model, engine, spec, lastSteps: 0, lastProgress: Date.now() };
    try {
      // (An embedding model chats with nobody: no template.)
      info.chatTemplate = model.encoder ? '' : this.chatTemplate(loaded).source;
    } catch {
      // A template that does not parse: chat requests report why; the model serves text prompts.
      info.chatTemplate = this.opts.chatTemplate ?? model.tokenizer.vocab.chatTemplate ?? '';
    }
    this.models.set(id, loaded);
    return info;
  }

  setLoraAdapters(id: string, lora: readonly { id: number; scale: number }[]): common.ModelInfo {
    const m = this.models.get(id);
    if (!m) throw new EngineError('KAIL_E_NOT_FOUND', `model '${id}' is not loaded`);
    const n = m.model.loraAdapters.length;
    m.model.setDefaultLoraScales(loraScalesOf(lora, n) ?? new Array<number>(n).fill(0));
    m.info.loraAdapters = m.model.loraAdapters.map((l) => ({ path: l.path, scale: l.scale }));
    return m.info;
  }

  slotAction(req: pb.SlotActionRequest): pb.SlotActionResponse {
    const dir = this.opts.slotSavePath;
    if (!dir) throw new EngineError('KAIL_E_UNSUPPORTED', 'slot save and restore are off: start the server with --slot-save-path DIR');
    const m = this.get(req.model);
    const t0 = performance.now();
    const done = (nTokens: number, nBytes: number): pb.SlotActionResponse => ({ slot: req.slot, filename: req.filename, nTokens, nBytes, ms: performance.now() - t0 });
    if (req.action === pb.SlotActionKind.SLOT_ACTION_ERASE) return done(m.engine.eraseSlot(req.slot), 0);
    if (req.action !== pb.SlotActionKind.SLOT_ACTION_SAVE && req.action !== pb.SlotActionKind.SLOT_ACTION_RESTORE)
      throw new EngineError('KAIL_E_INVALID_ARG', 'the slot action must be save, restore or erase');
    // llama-server's fs_validate_filename, strictly: a plain name in the directory.
    if (!/^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$/.test(req.filename))
      throw new EngineError('KAIL_E_INVALID_ARG', `invalid slot file name '${req.filename}': letters, digits, '.', '_' and '-' only, no path`);
    const file = path.join(dir, req.filename);
    if (req.action === pb.SlotActionKind.SLOT_ACTION_SAVE) {
      const s = m.engine.saveSlot(req.slot);
      fs.mkdirSync(dir, { recursive: true });
      return done(s.tokens.length, writeSlotFile(file, m.model, s.tokens, s.lora, s.state));
    }
    const { header, state, bytes } = readSlotFile(file, m.model);
    m.engine.restoreSlot(req.slot, header.tokens, header.lora, state);
    return done(header.tokens.length, bytes);
  }

  async unloadModel(id: string, ifIdle = false): Promise<void> {
    const m = this.models.get(id);
    if (!m) throw new EngineError('KAIL_E_NOT_FOUND', `model '${id}' is not loaded`);
    if (ifIdle) {
      const st = m.engine.stats();
      if (st.running || st.waiting) throw new EngineError('KAIL_E_BUDGET', `model '${id}' is in use (${st.running} running, ${st.waiting} waiting): not unloaded`);
    }
    this.models.delete(id);
    await m.engine.close();
    m.spec?.close();
    m.model.close();
  }

  private dryBreakers(m: Loaded, strings: string[]): number[][] {
    const key = JSON.stringify(strings);
    const cache = (m.dryBreakers ??= new Map());
    let seqs = cache.get(key);
    if (!seqs) {
      if (strings.length > 64 || strings.some((b) => b.length === 0)) throw new EngineError('KAIL_E_INVALID_ARG', 'dry_sequence_breakers must be at most 64 non-empty strings');
      seqs = dryBreakerSequences(m.model.tokenizer, strings);
      if (seqs.length > 4096) throw new EngineError('KAIL_E_INVALID_ARG', `dry_sequence_breakers: ${seqs.length} token sequences spell these strings; at most 4096`);
      if (cache.size >= 16) cache.delete(cache.keys().next().value!);
      cache.set(key, seqs);
    }
    return seqs;
  }

  private get(id: string): Loaded {
    const m = this.models.get(id);
    if (!m) {
      const loaded = [...this.models.keys()];
      throw new EngineError('KAIL_E_NOT_FOUND', `model '${id}' is not loaded (loaded: ${loaded.length ? loaded.join(', ') : 'none'})`);
    }
    return m;
  }

  async *generate(req: pb.GenerateRequest, signal: AbortSignal): AsyncIterable<pb.GenerateResponse> {
    const m = this.get(req.model);
    const { tokens: prompt, reasoningOpen, budgetOpen } = this.prompt(m, req);
    if (prompt.length === 0) throw new EngineError('KAIL_E_INVALID_ARG', 'the prompt is empty');
    const maxWaiting = this.opts.maxWaitingPerModel ?? 64;
    const st = m.engine.stats();
    if (st.waiting >= maxWaiting)
      throw new EngineError(
        'KAIL_E_BUDGET',
        `model '${req.model}' is at capacity: ${st.running} running (all ${m.model.nSeqMax} sequence slots with their KV cache in use) and ${st.waiting} waiting; retry later`,
      );
    const id = req.requestId || `req-${Date.now()}-${Math.random().toString(36).slice(2)}`;
    if (this.requests.has(id)) throw new EngineError('KAIL_E_ALREADY_EXISTS', `a request with id '${id}' is already running`);
    // The request's own window (Ollama's num_ctx) inside the model's context (the batch engine checks the prompt against it).
    const window = req.contextWindow > 0 && req.contextWindow < m.model.nCtx ? req.contextWindow : 0;
    // With prompt_logprobs, 0 asks for the prompt's scores alone.
    const pooling = this.embedPooling(m, req.rerank ? pb.EmbedPooling.EMBED_RANK : req.embed);
    // A diffusion model's canvas with no length given (or Ollama's "until the end", 2^30): the rest
    // of one pass of at most 512 tokens, as kail run -n -1 (llama-diffusion-cli's default ubatch),
    // cut to whole blocks the steps divide (DiffusionOptions.fit).
    const diffusion = m.model.diffusion && !pooling;
    const fit = diffusion && (req.maxTokens === 0 || req.maxTokens >= 1 << 30);
    const maxTokens = req.promptOnly
      ? 0
      : fit
        ? Math.max(1, Math.min(m.model.nCtx, m.model.nBatch, 512) - prompt.length)
        : req.maxTokens || (req.promptLogprobs ? 0 : 256);
    const stream = m.engine.generate(
      {
        id,
        prompt,
        maxTokens,
        contextWindow: window || undefined,
        slot: req.hasIdSlot ? req.idSlot : undefined,
        contextShift: this.opts.contextShift ? { keep: req.nKeep, discard: req.nDiscard } : undefined,
        sampling: samplingFromProto(req.sampling, (b) => this.dryBreakers(m, b)),
        stop: req.stop.filter((s) => s.length > 0),
        logprobs: req.wantLogprobs || req.topLogprobs > 0,
        topLogprobs: req.topLogprobs,
        postSamplingProbs: req.postSamplingProbs,
        promptLogprobs: req.promptLogprobs,
        embed: pooling,
        ignoreEog: req.ignoreEos,
        minTokens: req.minTokens,
        stopTokens: req.stopTokenIds,
        includeStopString: req.includeStopStr,
        nIndent: req.nIndent,
        tMaxPredictMs: req.tMaxPredictMs,
        ...this.outputForm(m, req, reasoningOpen),
        // (Where a JSON format or forced calls hold the output from its first token, no <think>
        // opens it and the budget has nothing to count.)
        reasoningBudget: this.reasoningBudget(m, req, budgetOpen),
        preserveTokens: req.messages.length ? this.markerTokens(m, !!req.toolsJson) : undefined,
        loraScales: loraScalesOf(req.lora, m.model.loraAdapters.length),
        diffusion: diffusion ? { ...diffusionOptionsOf(req.diffusion), fit } : undefined,
      },
      signal,
    );
    this.requests.set(id, m);
    const tok = m.model.tokenizer;
    const rank = req.rerank || req.embed === pb.EmbedPooling.EMBED_RANK ? m.model.rankHead : null;
    const lpOf = (l: TokenLogprobs) => ({ token: l.token, text: tok.detokenize([l.token]), logprob: l.logprob });
    const topOf = (l: TokenLogprobs) => ({ candidates: l.top.map((t) => ({ token: t.token, text: tok.detokenize([t.token]), logprob: t.logprob })) });
    // OpenAI's echo for a prompt given as token ids: its text, once, on the first message.
    let promptText = req.echoPrompt ? m.model.tokenizer.detokenize(prompt) : '';
    try {
      for await (const c of stream) {
        this.tokensGenerated += c.tokens.length;
        const out: pb.GenerateResponse = {
          text: c.text,
          tokens: c.tokens,
          logprobs: (c.logprobs ?? []).map(lpOf),
          topLogprobs: (c.logprobs ?? []).map(topOf),
          finishReason: common.FinishReason.FINISH_REASON_UNSPECIFIED,
          usage: undefined,
          timings: undefined,
          reasoningOpen,
          promptText,
          // The prompt's first token, with nothing before it to score, then the scored ones.
          promptLogprobs: c.promptLogprobs ? [lpOf({ token: prompt[0], logprob: 0, top: [] }), ...c.promptLogprobs.map(lpOf)] : [],
          promptTopLogprobs: c.promptLogprobs ? [{ candidates: [] }, ...c.promptLogprobs.map(topOf)] : [],
          // (A rank request's embedding is the head's scores.)
          embedding: c.embedding ? Array.from(rank ? rank.apply(c.embedding) : c.embedding) : [],
          embeddingPerToken: !!c.embedding && !rank && pooling === 'none',
          stopWord: '',
          contextShifted: 0,
          idSlot: c.progress?.slot ?? -1,
          progressUsage: c.progress ? { promptTokens: c.progress.promptTokens, completionTokens: c.progress.completionTokens, cachedPromptTokens: c.progress.cachedPromptTokens } : undefined,
          progressTimings: c.progress ? { promptMs: c.progress.promptMs, generationMs: c.progress.generationMs, timeToFirstTokenMs: 0, queueMs: 0 } : undefined,
        };
        promptText = '';
        if (c.finish) {
          if (c.finish.reason === 'error' && c.finish.error) throw c.finish.error;
          out.finishReason = FINISH[c.finish.reason];
          out.stopWord = c.finish.stopWord ?? '';
          out.contextShifted = c.finish.contextShifted;
          out.idSlot = c.finish.slot;
          out.usage = { promptTokens: c.finish.promptTokens, completionTokens: c.finish.completionTokens, cachedPromptTokens: c.finish.cachedPromptTokens };
          out.timings = {
            promptMs: c.finish.promptMs,
            generationMs: c.finish.generationMs,
            timeToFirstTokenMs: c.finish.timeToFirstTokenMs,
            queueMs: c.finish.queueMs,
          };
        }
        yield out;
      }
    } finally {
      this.requests.delete(id);
    }
  }

  /**
   * A rerank request's prompt, as llama-server's format_prompt_rerank makes it: the file's rerank
   * template with {query} and {document} filled in (special tokens parsed), else [BOS] query [EOS]
   * [SEP] document [EOS], each mark where the vocabulary adds it (EOS: SEP where there is none).
   */
  private rerankPrompt(m: Loaded, r: pb.Rerank): number[] {
    rankHeadOf(m);
    const tok = m.model.tokenizer;
    const template = m.model.metadata.kv['tokenizer.chat_template.rerank'];
    if (typeof template === 'string' && template)
      return tok.tokenize(template.split('{query}').join(r.query).split('{document}').join(r.document), { addSpecial: false, parseSpecial: true });
    const v = tok.vocab;
    const eos = v.special.eos ?? v.special.sep;
    const out: number[] = [];
    if (v.addBos && v.special.bos !== null) out.push(v.special.bos);
    out.push(...tok.tokenize(r.query, { addSpecial: false, parseSpecial: false }));
    if (v.addEos && eos !== null) out.push(eos);
    if (v.addSep && v.special.sep !== null) out.push(v.special.sep);
    out.push(...tok.tokenize(r.document, { addSpecial: false, parseSpecial: false }));
    if (v.addEos && eos !== null) out.push(eos);
    return out;
  }

  /** The pooling of an embedding request: the file's pooling_type for EMBED_MODEL, else last (a decoder-only model, as vLLM). */
  private embedPooling(m: Loaded, e: pb.EmbedPooling): GenerationRequest['embed'] {
    switch (e) {
      case pb.EmbedPooling.EMBED_RANK:
        return rankHeadOf(m).last ? 'last' : 'cls';
      case pb.EmbedPooling.EMBED_NONE:
        return undefined;
      case pb.EmbedPooling.EMBED_MEAN:
        return 'mean';
      case pb.EmbedPooling.EMBED_LAST:
        return 'last';
      case pb.EmbedPooling.EMBED_CLS:
        return 'cls';
      case pb.EmbedPooling.EMBED_MODEL:
        return this.opts.pooling ?? m.model.defaultPooling;
      case pb.EmbedPooling.EMBED_TOKENS:
        return 'none';
      default:
        throw new EngineError('KAIL_E_INVALID_ARG', `unknown embedding pooling ${e}`);
    }
  }

  /** The request's prompt tokens, and whether a chat prompt leaves a reasoning block open. */
  private prompt(m: Loaded, req: pb.GenerateRequest): { tokens: number[]; reasoningOpen: boolean; budgetOpen: boolean } {
    if (req.suffix || req.infill) return { tokens: this.infillPrompt(m, req), reasoningOpen: false, budgetOpen: false };
    if (req.rerank) return { tokens: this.rerankPrompt(m, req.rerank), reasoningOpen: false, budgetOpen: false };
    if (req.messages.length) {
      const text = this.renderChat(m, req);
      // BOS (and EOS) where the vocabulary adds them, as llama-server tokenizes a chat prompt (the
      // template's own BOS was taken off the text, see ChatTemplate.render).
      const tokens = m.model.tokenizer.tokenize(text, { addSpecial: true, parseSpecial: true });
      // (A <think> block left open; budgetOpen: the block the reasoning budget counts, harmony's analysis channel for gpt-oss.)
      return { tokens, reasoningOpen: opensReasoning(text), budgetOpen: opensReasoning(text, reasoningTags(m)) };
    }
    if (req.promptTokens.length) return { tokens: req.promptTokens, reasoningOpen: false, budgetOpen: false };
    return { tokens: m.model.tokenizer.tokenize(req.prompt, { addSpecial: true, parseSpecial: true }), reasoningOpen: false, budgetOpen: false };
  }

  /** The chat template, parsed on first use (a template that does not parse fails only chat requests). */
  private chatTemplate(m: Loaded): ChatTemplate {
    if (!m.chat) m.chat = ChatTemplate.fromTokenizer(m.model.tokenizer, { override: this.opts.chatTemplate });
    return m.chat;
  }

  /** A request's Ollama template (a Modelfile's TEMPLATE), parsed once for the last few seen (with the model's BOS/EOS rules). */
  private goChatTemplate(m: Loaded, source: string): ChatTemplate {
    m.goChats ??= new Map();
    let chat = m.goChats.get(source);
    if (!chat) {
      try {
        chat = ChatTemplate.fromTokenizer(m.model.tokenizer, { override: source, format: 'go' });
      } catch (e) {
        throw new EngineError('KAIL_E_INVALID_ARG', (e as Error).message);
      }
      if (m.goChats.size >= GO_TEMPLATES_KEPT) m.goChats.delete(m.goChats.keys().next().value!);
      m.goChats.set(source, chat);
    }
    return chat;
  }

  /** Chat messages rendered with the model's template (or the request's Ollama template), followed by the assistant turn's opening. */
  private renderChat(m: Loaded, req: Pick<pb.GenerateRequest, 'model' | 'messages' | 'toolsJson' | 'chatTemplateKwargsJson' | 'continueFinalMessage' | 'goTemplate'>): string {
    const chat = req.goTemplate ? this.goChatTemplate(m, req.goTemplate) : this.chatTemplate(m);
    // (`strict` is the engine's, not the model's: llama.cpp does not show it either.)
    const tools = req.toolsJson ? parseJsonField<unknown[]>(req.toolsJson, 'tools', Array.isArray).map(withoutStrict) : undefined;
    if (tools?.length && !chat.caps.tools)
      throw new EngineError('KAIL_E_INVALID_ARG', `the ${req.goTemplate ? "request's Ollama template" : `chat template of model '${req.model}'`} does not show tools to the model, so it cannot call them`);
    const isObject = (v: unknown) => v !== null && typeof v === 'object' && !Array.isArray(v);
    const asked = req.chatTemplateKwargsJson ? parseJsonField<Record<string, unknown>>(req.chatTemplateKwargsJson, 'chat_template_kwargs', isObject) : undefined;
    for (const k of Object.keys(asked ?? {}))
      if (RESERVED_TEMPLATE_VARS.has(k)) throw new EngineError('KAIL_E_INVALID_ARG', `chat_template_kwargs cannot set '${k}' (the request sets it)`);
    // (The engine's --chat-template-kwargs under the request's.)
    const variables = this.opts.chatTemplateKwargs || asked ? { ...this.opts.chatTemplateKwargs, ...asked } : undefined;
    const messages = req.messages.map(chatMessageFromProto);
    if (!req.continueFinalMessage) return chat.render(messages, { addGenerationPrompt: true, tools, variables });
    // Continue the last (assistant) message, as transformers' continue_final_message does: the
    // chat rendered as history, cut right after that message's text (its end-of-turn dropped).
    const last = req.messages[req.messages.length - 1];
    if (!last || last.role !== 'assistant') throw new EngineError('KAIL_E_INVALID_ARG', 'continuing the final message needs the last message to be the assistant\'s');
    const text = last.content.trim();
    if (!text) throw new EngineError('KAIL_E_INVALID_ARG', 'continuing the final message needs text in the last assistant message');
    const rendered = chat.render(messages, { addGenerationPrompt: false, tools, variables });
    const at = rendered.lastIndexOf(text);
    if (at < 0) throw new EngineError('KAIL_E_INVALID_ARG', `the chat template of model '${req.model}' does not write the last assistant message's text as given, so it cannot be continued`);
    return rendered.slice(0, at + text.length);
  }

  /**
   * Fill-in-the-middle, as llama-server's /infill arranges it (format_prompt_infill):
   * the project's other files (Infill.extra), then [BOS] FIM_PRE prefix middle FIM_SUF suffix
   * FIM_MID, every text tokenized without parsing special tokens. The prefix is the prompt (text or
   * token ids). OpenAI's `suffix` alone takes the texts whole; with `infill` they are trimmed to
   * llama-server's window (see Infill in engine.proto).
   */
  private infillPrompt(m: Loaded, req: pb.GenerateRequest): number[] {
    const what = req.messages.length ? 'chat messages' : req.echoPrompt ? 'echo' : req.promptLogprobs ? 'prompt logprobs' : req.embed ? 'embeddings' : '';
    if (what) throw new EngineError('KAIL_E_INVALID_ARG', `fill-in-the-middle (suffix or infill) cannot be combined with ${what}`);
    const tok = m.model.tokenizer;
    const { fimPre, fimSuf, fimMid, fimRep, fimSep, bos } = tok.vocab.special;
    const missing = ([['FIM_PRE', fimPre], ['FIM_SUF', fimSuf], ['FIM_MID', fimMid]] as const).filter(([, id]) => id === null).map(([n]) => n);
    if (missing.length)
      throw new EngineError('KAIL_E_INVALID_ARG', `model '${req.model}' cannot fill in the middle: its vocabulary has no ${missing.join('/')} token (it needs a FIM-trained model)`);
    const text = (s: string) => tok.tokenize(s, { addSpecial: false, parseSpecial: false });
    let prefix = req.promptTokens.length ? req.promptTokens : text(req.prompt);
    let suffix = text(req.suffix);
    const head = tok.vocab.addBos && bos !== null ? [bos] : [];
    if (!req.infill) return [...head, fimPre!, ...prefix, fimSuf!, ...suffix, fimMid!];

    const middle = text(req.infill.middle);
    const extra: number[] = [];
    if (fimRep !== null) extra.push(fimRep, ...text('myproject\n'));
    for (const f of req.infill.extra) {
      if (fimSep !== null) extra.push(fimSep, ...text(`${f.filename || 'tmp'}\n`));
      else extra.push(...text('\n\n--- snippet ---\n\n'));
      extra.push(...text(f.text));
    }
    if (fimSep !== null) extra.push(fimSep, ...text('filename\n'));
    // llama-server fits prefix and suffix in one batch (its default 2048), 3:1; the files fill what
    // the context has left beyond that batch and twice the tokens to generate.
    const nCtx = m.model.nCtx;
    const nPredict = req.promptOnly ? 0 : req.maxTokens || 256;
    // A context no wider than that window keeps room for the answer (and BOS) too.
    const window = Math.max(0, Math.min(INFILL_WINDOW, nCtx - nPredict - 2));
    prefix = prefix.slice(Math.max(0, prefix.length - 3 * Math.floor(window / 4)));
    suffix = suffix.slice(0, Math.max(0, Math.floor(window / 4) - (2 + middle.length)));
    const nExtra = Math.min(Math.max(0, nCtx - window - 2 * nPredict), extra.length);
    return [...extra.slice(extra.length - nExtra), ...head, fimPre!, ...prefix, ...middle, fimSuf!, ...suffix, fimMid!];
  }

  /**
   * The request's output form: a JSON response format or forced tool calls. When the prompt left
   * the model's reasoning open, the reasoning runs free up to `</think>` (a reasoning budget, if
   * set, bounds it) and the form holds from the blank line after it, as llama.cpp's grammars do.
   */
  private outputForm(m: Loaded, req: pb.GenerateRequest, reasoningOpen: boolean): Pick<GenerationRequest, 'responseFormat' | 'jsonSchema' | 'pattern' | 'gbnf' | 'gbnfLazy'> {
    const format = responseFormatFromProto(req);
    if (req.grammar || req.regex) {
      // llama.cpp's grammar holds the output from its first token, reasoning included.
      const what = req.regex ? 'a regular expression' : 'a GBNF grammar';
      const other =
        req.grammar && req.regex ? 'a regular expression'
        : format.responseFormat !== 'text' ? 'a JSON response format'
        : req.outputChoices.length ? 'output choices'
        : req.toolChoice === pb.ToolChoice.TOOL_CHOICE_REQUIRED || req.toolChoice === pb.ToolChoice.TOOL_CHOICE_FUNCTION ? 'forced tool calls'
        : '';
      if (other) throw new EngineError('KAIL_E_INVALID_ARG', `${req.grammar && req.regex ? 'a GBNF grammar' : what} cannot be combined with ${other}`);
      const tok = m.model.tokenizer;
      const tokenize = (s: string) => tok.tokenize(s, { addSpecial: false, parseSpecial: true });
      const text = req.grammar || regexToGbnf(req.regex);
      const gbnf = parseGbnf(text, { tokenize, nVocab: m.model.nVocab });
      if (!req.grammarLazy) {
        if (req.grammarTriggers.length) throw new EngineError('KAIL_E_INVALID_ARG', 'grammar_triggers need grammar_lazy');
        return { responseFormat: 'text', gbnf };
      }
      const gbnfLazy = lazyTriggers(req.grammarTriggers, tokenize);
      for (const t of gbnfLazy.tokens)
        if (t < 0 || t >= m.model.nVocab) throw new EngineError('KAIL_E_INVALID_ARG', `grammar_triggers: token ${t} is outside the vocabulary (0..${m.model.nVocab - 1})`);
      return { responseFormat: 'text', gbnf, gbnfLazy };
    }
    if (req.grammarLazy || req.grammarTriggers.length) throw new EngineError('KAIL_E_INVALID_ARG', 'grammar_lazy and grammar_triggers need a grammar');
    if (req.outputChoices.length) {
      if (format.responseFormat !== 'text' || req.toolChoice === pb.ToolChoice.TOOL_CHOICE_REQUIRED || req.toolChoice === pb.ToolChoice.TOOL_CHOICE_FUNCTION)
        throw new EngineError('KAIL_E_INVALID_ARG', 'output choices cannot be combined with a JSON response format or forced tool calls');
      return { responseFormat: 'text', pattern: choicePattern(req.outputChoices, reasoningOpen) };
    }
    const pattern = this.forcedToolCalls(m, req, reasoningOpen);
    // With both, BatchEngine refuses the request, naming them.
    if (pattern) return { ...format, pattern };
    const grammar = reasoningOpen ? grammarOf(format) : null;
    return grammar ? { responseFormat: 'text', pattern: reasoningThenJsonPattern(grammar) } : format;
  }

  /**
   * The request's reasoning budget: the tokens forced when it is spent are the message and the
   * block's end tag (`</think>`; gpt-oss: `<|end|>`, after which it writes its final channel),
   * each tokenized with special tokens parsed (llama-server's forced sequence).
   */
  private reasoningBudget(m: Loaded, req: pb.GenerateRequest, open: boolean): ReasoningBudgetSpec | undefined {
    if (!req.hasReasoningBudget) return undefined;
    if (!req.messages.length) throw new EngineError('KAIL_E_INVALID_ARG', 'a reasoning budget needs chat messages (the chat template decides where reasoning starts)');
    const tok = m.model.tokenizer;
    const text = (s: string) => (s ? tok.tokenize(s, { addSpecial: false, parseSpecial: true }) : []);
    const tags = reasoningTags(m);
    return { tokens: req.reasoningBudget, forced: [...text(req.reasoningBudgetMessage), ...text(tags.close)], open, tags };
  }

  /** The pattern of a request's forced tool calls (tool_choice 'required' or a function), else undefined. */
  private forcedToolCalls(m: Loaded, req: pb.GenerateRequest, reasoning: boolean): OutputPattern | undefined {
    const c = req.toolChoice;
    if (c === pb.ToolChoice.TOOL_CHOICE_AUTO) return this.strictToolCalls(m, req);
    if (c !== pb.ToolChoice.TOOL_CHOICE_REQUIRED && c !== pb.ToolChoice.TOOL_CHOICE_FUNCTION) throw new EngineError('KAIL_E_INVALID_ARG', `unknown tool choice ${c}`);
    if (!req.messages.length || !m.chat) throw new EngineError('KAIL_E_INVALID_ARG', 'a forced tool call needs chat messages (the template shows the tools)');
    const syntax = (m.toolCallSyntax ??= toolCallSyntax(m.chat));
    if ('unsupported' in syntax)
      throw new EngineError('KAIL_E_INVALID_ARG', `model '${req.model}' cannot be held to a tool call (its chat template: ${syntax.unsupported}); use tool_choice 'auto'`);
    const tools = parseJsonField<ToolDef[]>(req.toolsJson || '[]', 'tools', Array.isArray);
    return forcedToolCallPattern(syntax, tools, { name: c === pb.ToolChoice.TOOL_CHOICE_FUNCTION ? req.toolChoiceFunction : undefined, parallel: !req.singleToolCall, reasoning });
  }

  /**
   * tool_choice auto with a strict tool (OpenAI's and Anthropic's `strict: true`): the answer is
   * free, but a tool call, once its marker appears, follows the tools' schemas (a lazy pattern).
   * Undefined without strict tools, with another output form, or for a template whose calls
   * cannot be held (they are then parsed from free text, as without strict).
   */
  private strictToolCalls(m: Loaded, req: pb.GenerateRequest): OutputPattern | undefined {
    if (!req.toolsJson || !req.messages.length || !m.chat || req.responseFormat !== pb.ResponseFormat.RESPONSE_FORMAT_TEXT || req.outputChoices.length) return undefined;
    let tools: ToolDef[];
    try {
      tools = JSON.parse(req.toolsJson) as ToolDef[];
    } catch {
      return undefined;
    }
    const strict = (t: unknown) => (t as { function?: { strict?: unknown }; strict?: unknown } | null)?.function?.strict === true || (t as { strict?: unknown } | null)?.strict === true;
    if (!Array.isArray(tools) || !tools.some(strict)) return undefined;
    const syntax = (m.toolCallSyntax ??= toolCallSyntax(m.chat));
    if ('unsupported' in syntax) return undefined;
    return lazyToolCallPattern(syntax, tools, !req.singleToolCall);
  }

  /**
   * Reasoning markers and (with tools) tool-call markers that a vocabulary may hold as control
   * tokens (Qwen's, GLM's, DeepSeek's, Kimi's, Llama 3's, MiniMax's, Granite's): the API's parsers need them in the text,
   * as llama.cpp's preserved tokens. One set of each kind per model.
   */
  private markerTokens(m: Loaded, tools: boolean): ReadonlySet<number> {
    const key = tools ? 'toolMarkerTokens' : 'reasoningMarkerTokens';
    let ids = m[key];
    if (!ids) {
      const v = m.model.tokenizer.vocab;
      const found = new Set<number>();
      for (let id = 0; id < v.nTokens; id++) {
        if (!v.isControl(id)) continue;
        const text = v.tokenText(id);
        if (REASONING_MARKERS.has(text) || (tools && TOOL_MARKERS.has(text))) found.add(id);
      }
      ids = m[key] = found;
    }
    return ids;
  }

  cancel(requestId: string): boolean {
    const m = this.requests.get(requestId);
    return m ? m.engine.cancel(requestId) : false;
  }

  tokenize(req: pb.TokenizeRequest): pb.TokenizeResponse {
    const m = this.get(req.model);
    const tok = m.model.tokenizer;
    // Chat messages: the prompt Generate would compute for them (template text, its special tokens parsed, BOS where the vocabulary adds it).
    const prompt = req.messages.length ? this.renderChat(m, req) : '';
    const tokens = req.messages.length
      ? tok.tokenize(prompt, { addSpecial: true, parseSpecial: true })
      : tok.tokenize(req.text, { addSpecial: req.addSpecial, parseSpecial: req.parseSpecial });
    // A piece as llama_token_to_piece gives it (special tokens' text included), as llama-server's with_pieces.
    const addedBos = (req.messages.length > 0 || req.addSpecial) && tok.vocab.addBos && tokens.length > 0;
    return { tokens, pieces: req.withPieces ? tokens.map((t) => Buffer.from(tok.tokenToPiece(t, { special: true }))) : [], prompt, reasoningOpen: !!prompt && opensReasoning(prompt), addedBos };
  }

  detokenize(req: pb.DetokenizeRequest): string {
    const m = this.get(req.model);
    for (const t of req.tokens)
      if (!Number.isInteger(t) || t < 0 || t >= m.model.nVocab) throw new EngineError('KAIL_E_INVALID_ARG', `token id ${t} is outside the vocabulary (0..${m.model.nVocab - 1})`);
    return m.model.tokenizer.detokenize(req.tokens, { special: req.renderSpecial });
  }

  async listModelFiles(): Promise<pb.ListModelFilesResponse> {
    const dir = this.opts.modelsDir;
    if (!dir) return { modelsDir: '', files: [] };
    return listModelsDirectory(dir, new Set([...this.models.values()].map((m) => m.info.path)));
  }

  /** The models directory, for a file operation; an engine without one says so. */
  private modelsDir(): string {
    if (!this.opts.modelsDir) throw new EngineError('KAIL_E_UNSUPPORTED', 'this engine has no models directory');
    return this.opts.modelsDir;
  }

  async deleteModelFile(id: string): Promise<boolean> {
    const file = existingModelFile(this.modelsDir(), id);
    let unloaded = false;
    for (const [mid, m] of this.models) {
      if (m.info.path !== file) continue;
      await this.unloadModel(mid, true);
      unloaded = true;
    }
    removeModelFiles(file);
    return unloaded;
  }

  async copyModelFile(id: string, dest: string, lora: readonly LoraSpec[] = []): Promise<void> {
    copyModelInDirectory(this.modelsDir(), id, dest, lora);
  }

  async importModelFile(source: string, dest: string, lora: readonly LoraSpec[] = []): Promise<void> {
    const dst = modelsDirectoryFile(this.modelsDir(), dest, 'destination');
    if (!path.isAbsolute(source)) throw new EngineError('KAIL_E_INVALID_ARG', `source path must be absolute, got ${JSON.stringify(source)}`);
    if (!fs.existsSync(source)) throw new EngineError('KAIL_E_NOT_FOUND', `${source} does not exist on the engine's machine`);
    if (fs.existsSync(dst)) throw new EngineError('KAIL_E_ALREADY_EXISTS', `model '${dest}' is already in the models directory`);
    // A readable GGUF header, or an error naming what is wrong with it.
    openGgufMetadata(source).close();
    // (One split alone would not load: its files find each other by name.)
    const files = modelFiles(source);
    if (files.length > 1)
      throw new EngineError('KAIL_E_UNSUPPORTED', `${path.basename(source)} is split over ${files.length} files, which find each other by name: copy them into the models directory as they are`);
    linkOrCopy(source, dst);
    keepLora(dst, lora);
  }

  async planModel(req: pb.PlanModelRequest): Promise<pb.PlanModelResponse> {
    if (!req.path) throw new EngineError('KAIL_E_INVALID_ARG', 'path is required');
    const file = this.resolveModelPath(req.path);
    // An unset budget plans against the profile's, else the share of what is available now that a
    // load takes when the model does not fit (autoStream).
    const ram =
      req.ramBudgetBytes ||
      this.opts.defaultRamBudgetBytes ||
      (this.opts.profile ? profileRamBudget(this.opts.profile, '').bytes : 0) ||
      defaultRamBudget().bytes;
    const vram = req.vramBudgetBytes || this.opts.defaultVramBudgetBytes || (this.opts.profile ? profileDefaults(this.opts.profile, '', Number.MAX_SAFE_INTEGER, { ramBytes: ram }).vramBytes : undefined);
    const p = planModel(file, {
      ...this.opts.loadOptions,
      ...(vram ? { vramBytes: vram } : {}),
      ramBytes: ram,
      nCtx: req.contextLength || this.opts.defaultContext || 4096,
      nSeqMax: this.opts.seqsPerModel ?? 8,
    });
    return {
      residency: { residentBytes: p.residentBytes, expertBytes: p.expertBytes, kvBytes: p.kvBytes, ramExpertCacheBytes: p.cacheBytes, vramExpertCacheBytes: p.vramCacheBytes },
      cacheExpertsPerLayer: Math.floor(p.cacheExpertsPerLayer),
      coldBytesPerToken: p.coldReadBytesPerToken,
      fits: p.fits,
      detail: p.fits ? `${file}: fits in ${p.ramBytes} bytes (reserve ${p.reserveBytes}, scratch ${p.scratchBytes})` : p.message,
      planJson: JSON.stringify(p),
    };
  }

  telemetry(): pb.TelemetrySnapshot {
    const models: pb.ModelTelemetry[] = [];
    for (const [id, m] of this.models) models.push(modelTelemetry(id, m));
    const sum = (f: (t: pb.ModelTelemetry) => number) => models.reduce((a, t) => a + f(t), 0);
    const tiers = new Map<string, pb.TierStats>([['ram', { tier: 'ram', budgetBytes: 0, usedBytes: 0, hits: 0, misses: 0 }]]);
    for (const t of models)
      for (const x of t.tiers) {
        const sum = tiers.get(x.tier) ?? tiers.set(x.tier, { tier: x.tier, budgetBytes: 0, usedBytes: 0, hits: 0, misses: 0 }).get(x.tier)!;
        sum.budgetBytes += x.budgetBytes;
        sum.usedBytes += x.usedBytes;
        sum.hits += x.hits;
        sum.misses += x.misses;
      }
    return {
      unixMs: Date.now(),
      tokensPerSecond: sum((t) => t.tokensPerSecond),
      tokensGenerated: this.tokensGenerated,
      bytesRead: sum((t) => t.bytesRead),
      ioStallSeconds: sum((t) => t.ioStallSeconds),
      runningRequests: sum((t) => t.runningRequests),
      tiers: models.length ? [...tiers.values()] : [],
      storageBandwidthBytesPerSecond: this.opts.storageBandwidthBytesPerSecond ?? profiledBandwidth(this.opts.profile),
      kvUsedBytes: sum((t) => t.kvUsedBytes),
      kvCapacityBytes: sum((t) => t.kvCapacityBytes),
      models,
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const id of [...this.models.keys()]) await this.unloadModel(id);
  }
}

/** The reasoning block's tags for a model: gpt-oss's analysis channel when its template writes harmony, else <think>. */
function reasoningTags(m: Loaded): ReasoningTags {
  return m.chat?.source.includes('<|channel|>') ? HARMONY_TAGS : THINK_TAGS;
}

/** One loaded model's telemetry: its tokens/s, cache tier, reads, KV, heatmap and speculation. */
function modelTelemetry(id: string, m: Loaded): pb.ModelTelemetry {
  const st = m.engine.stats();
  const ns = m.model.runtime.stats();
  const ram: pb.TierStats = { tier: 'ram', budgetBytes: 0, usedBytes: 0, hits: 0, misses: 0 };
  let vram: pb.TierStats | null = null;
  let bytesRead = 0;
  let stall = 0;
  if (ns.stream) {
    ram.budgetBytes = ns.stream.capacityBytes;
    ram.usedBytes = ns.stream.usedBytes;
    // The VRAM tier's hits are RAM fills copied from it; its misses, fills read from storage.
    if (ns.stream.vram.device) vram = { tier: 'vram', budgetBytes: ns.stream.vram.capacityBytes, usedBytes: ns.stream.vram.usedBytes, hits: 0, misses: 0 };
    for (const l of ns.stream.layers) {
      ram.hits += l.hits;
      ram.misses += l.misses;
      bytesRead += l.bytesRead;
      stall += l.stallSeconds;
      if (vram) {
        vram.hits += l.vramReads;
        vram.misses += l.reads;
      }
    }
  } else {
    // Mapped path: every expert is in RAM (through the page cache); each activation is a hit.
    ram.budgetBytes = m.model.summary.expertBytes;
    ram.usedBytes = m.model.summary.expertBytes;
    for (let i = 0; i < ns.expertCounts.length; i++) ram.hits += ns.expertCounts[i];
  }
  const nExpert = m.model.program.nExpert;
  const blocks = moeBlocks(m.model);
  const streamOf = moeStreamLayers(m.model.program);
  const experts: pb.LayerExpertCounts[] = [];
  for (let l = 0; l < m.model.program.nMoeLayers; l++)
    experts.push({ layer: blocks[l] ?? l, counts: Array.from(ns.expertCounts.subarray(l * nExpert, (l + 1) * nExpert)), resident: residentExperts(ns.stream, streamOf[l] ?? l, nExpert) });
  const x = st.speculative;
  const slots = m.engine.slotStates().map((s): pb.SlotState => ({
    ...s,
    sampling: s.sampling ? samplingToProto(s.sampling) : undefined,
  }));
  return {
    slots,
    model: id,
    tokensPerSecond: st.tokensPerSecond,
    runningRequests: st.running,
    bytesRead,
    ioStallSeconds: stall,
    tiers: vram ? [ram, vram] : [ram],
    kvUsedBytes: ns.kvBytes,
    kvCapacityBytes: m.model.runtime.kvCapacityBytes,
    experts,
    speculative: x
      ? { enabled: true, mode: x.mode, draftedTokens: x.draftedTokens, acceptedTokens: x.acceptedTokens, targetPasses: x.targetPasses, tokensPerPass: x.tokensPerPass, currentK: x.currentK, timeSavedSeconds: x.timeSavedSeconds }
      : { enabled: false, mode: '', draftedTokens: 0, acceptedTokens: 0, targetPasses: 0, tokensPerPass: 0, currentK: 0, timeSavedSeconds: 0 },
  };
}

/** Random-read bandwidth of the profile's default storage path (the best one measured otherwise). */
function profiledBandwidth(p: HardwareProfile | undefined): number {
  if (!p?.storage?.length) return 0;
  const chosen = p.storage.find((s) => s.path === p.defaults.storagePath);
  return chosen ? chosen.randomBytesPerSecond : Math.max(...p.storage.map((s) => s.randomBytesPerSecond));
}

/** The model block (blk.N) of each MoE op, in MoE-op order: leading dense blocks (DeepSeek) shift them. */
const moeBlockCache = new WeakMap<EngineModel, number[]>();
function moeBlocks(model: EngineModel): number[] {
  let b = moeBlockCache.get(model);
  if (!b) {
    b = [];
    for (const op of model.program.ops) {
      const moe = op.params?.moe_layer;
      const name = op.weights?.gate_exps ?? op.weights?.up_exps ?? '';
      const m = /^blk\.(\d+)\./.exec(name);
      if (typeof moe === 'number' && m) b[moe] = Number(m[1]);
    }
    moeBlockCache.set(model, b);
  }
  return b;
}

/** Header facts shared by ListModels and ListModelFiles. */
function summaryInfo(id: string, file: string, s: ModelSummary): Partial<common.ModelInfo> {
  return {
    id,
    path: path.resolve(file),
    architecture: s.architecture,
    parameterCount: s.parameterCount,
    fileBytes: s.fileBytes,
    contextLength: s.contextLength,
    expertCount: s.expertCount,
    expertUsedCount: s.expertUsedCount,
    layerCount: s.layerCount,
    tensorTypeBytes: s.tensorTypeBytes,
    fileType: s.fileType,
  };
}

/**
 * Where a loaded model's bytes live. Streaming: the resident weights copied into RAM, the expert
 * cache's budget and the KV reservation from the plan. Mapped: every weight is read through the
 * file mapping, so all experts count as RAM-resident.
 */
function residencyOf(model: EngineModel): common.ModelTierBytes {
  const s = model.summary;
  const kvBytes = model.runtime.kvCapacityBytes;
  const p = model.plan;
  if (p) return { residentBytes: p.residentBytes, expertBytes: p.expertBytes, kvBytes, ramExpertCacheBytes: p.cacheBytes, vramExpertCacheBytes: p.vramCacheBytes };
  return { residentBytes: s.residentBytes, expertBytes: s.expertBytes, kvBytes, ramExpertCacheBytes: s.expertBytes, vramExpertCacheBytes: 0 };
}

/** Experts of MoE layer l held in RAM now: all of them on the mapped path; the cache's entries when streaming. */
function residentExperts(stream: NativeExpertStreamStats | null, l: number, nExpert: number): number[] {
  if (!stream) return Array.from({ length: nExpert }, (_, i) => i);
  const r = stream.layers[l]?.resident;
  return r ? Array.from(r) : [];
}

/** A request's `lora` list (llama-server's: named adapters at their scale, the rest 0) as one scale per adapter; undefined when empty. */
export function loraScalesOf(list: readonly { id: number; scale: number }[], nAdapters: number): number[] | undefined {
  if (!list.length) return undefined;
  const scales = new Array<number>(nAdapters).fill(0);
  for (const { id, scale } of list) {
    if (id >= nAdapters) throw new EngineError('KAIL_E_INVALID_ARG', `lora: adapter id ${id} does not exist; the model has ${nAdapters} LoRA adapter${nAdapters === 1 ? '' : 's'}`);
    scales[id] = scale;
  }
  return scales;
}

/** A request's diffusion fields (0 / empty: kail run's defaults). */
function diffusionOptionsOf(d: pb.DiffusionOptions | undefined): DiffusionOptions {
  return { steps: d?.steps || undefined, algorithm: d?.algorithm || undefined, blockLength: d?.blockLength || undefined, eps: d?.hasEps ? d.eps : undefined };
}
