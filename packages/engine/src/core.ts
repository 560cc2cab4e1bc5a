// The engine without its gRPC service: models, generation, sampling, tokenizers, caches. What a
// process that computes in place imports (the CLI's run, bench, plan...): it loads neither grpc-js
// nor the generated contracts, which take longer to load than the rest of the engine.
export { native, systemInfo } from './native';
export { fileTypeName, LLAMA_FILE_TYPES } from './model/file-type';
export type { SystemInfo } from '@kailstream/core-native';
export { EngineError, fsErrorText, toEngineError } from './errors';
export { checkInputFile, checkOutputFile } from './file-checks';
export type { EngineErrorCode } from './errors';
export { VERSION } from './version';
export { BatchEngine } from './runtime/batch-engine';
export type { BatchEngineOptions, GenerationChunk, GenerationRequest } from './runtime/batch-engine';
export { contextShiftSpan, type ContextShift } from './runtime/context-shift';
export { readSlotFile, writeSlotFile, type SlotFileHeader } from './runtime/slot-file';
export { parseControlVectorFlags, readControlVectors, type ControlVectorSpec } from './model/control-vector';
export { applyKvOverrides, describeKvOverride, formatKvOverride, parseKvOverride, parseKvOverrides, type KvOverride, type KvOverrideType } from './model/kv-override';
export { DEFAULT_RAM_RESERVE_BYTES, DEFAULT_RAM_SHARE, EngineModel, defaultRamBudget, draftLayersOf, eagle3LayersOf, isGemma4AssistantFile, KV_TYPES, kvBytesPerValue, kvCacheReport, kvRowBytes, kvTypesFromFlags, memoryNow, openGgufMetadata, parseLoraFlags, parseRamBudget, parseVramBudget, planModel, summarize, vramTierDropped, type KvCacheReport, type KvType } from './model/model';
export type { LoadModelOptions, MemoryNow, ModelSummary, ResidencyPlan } from './model/model';
export { ROPE_FLAGS, ROPE_SCALINGS, applyRopeOptions, checkRopeOptions, parseRopeFlags, ropeOptionArgs, type RopeFlag, type RopeOptions, type RopeScaling } from './model/rope-options';
export { formatBytes, parseByteSize } from './model/byte-size';
export { summarizeStream } from './model/stream-summary';
export { isLaterSplit, modelFileBytes, modelFiles, splitNameOf, splitPath } from './model/split-files';
export { modelfileSidecar } from './model/sidecar-files';
export { NllAccumulator, perplexity, perplexityChunks, perplexityStrided, type PerplexityOptions, type PerplexityResult, type StridedPerplexityOptions } from './model/perplexity';
export { evaluateChoiceTasks, sharedStart, type ChoiceEvalOptions, type ChoiceRows } from './model/choice-eval';
export {
  drawTaskIndices,
  hellaswagPick,
  hellaswagScore,
  multipleChoiceScore,
  readMultipleChoice,
  writeMultipleChoice,
  parseHellaswag,
  parseWinogrande,
  selectHellaswag,
  selectWinogrande,
  wilson95,
  winograndePick,
  winograndeScore,
  type ChoiceRunOptions,
  type HellaswagResult,
  type HellaswagTask,
  type MultipleChoiceResult,
  type MultipleChoiceTask,
  type WinograndeResult,
  type WinograndeTask,
} from './model/choice-scores';
export { encodeLogProbs, KldAccumulator, klDivergence, kldChunkLine, kldStats, kldStatsLines, KLD_CHUNK_HEADER, logProbWords, openBaseLogits, scoredPerChunk, type KlDivergenceResult, type KldStats } from './model/kl-divergence';
export { computeImatrix, type ImatrixOptions, type ImatrixResult } from './model/imatrix';
export type { StreamSummary } from './model/stream-summary';
export type { NativeExpertLayerStats as ExpertLayerStats, NativeExpertStreamStats as ExpertStreamStats } from '@kailstream/core-native';
export { SUPPORTED_ARCHITECTURES, isDiffusionArchitecture, isEncoderArchitecture } from './model/architectures';
export { DIFFUSION_ALGORITHMS, DIFFUSION_DEFAULTS, DiffusionTextStream, blockTransferCounts, diffusionAlgorithmOf, diffusionGenerate, diffusionGenerateWith, diffusionModelSettings, diffusionPlan, diffusionScheduleOf, modelCanvasLogits, resolveDiffusionParams, transferCount } from './model/diffusion';
export type { CanvasLogits, DiffusionAlgorithm, DiffusionOptions, DiffusionParams, DiffusionPass, DiffusionPiece, DiffusionResult, DiffusionSchedule, DiffusionStep } from './model/diffusion';
export { mlaKvBytesPerToken } from './model/architectures/deepseek2';
export type { MlaKvShape } from './model/architectures/deepseek2';
export { generate } from './generate';
export { embdCosine, embdNormalize } from './runtime/embedding';
export type { GenerateOptions, GenerateResult } from './generate';
export { createSampler, DEFAULT_SAMPLERS, type SamplerStage } from './sampling/sampler';
export { DEFAULT_DRY_BREAKERS, dryBreakerSequences } from './sampling/dry';
export type { ResolvedSamplerParams, SampleResult, Sampler, SamplerParams, TokenLogprob } from './sampling/sampler';
export { logprobs } from './sampling/logprobs';
export type { TokenLogprobs } from './sampling/logprobs';
export { StopMatcher } from './sampling/stop';
export { GbnfRecognizer, parseGbnf } from './sampling/gbnf';
export { regexToGbnf } from './sampling/regex-gbnf';
export { compileJsonSchema } from './sampling/json-schema';
export type { JsonGrammar } from './sampling/json-schema';
export type { GbnfGrammar, GbnfOptions } from './sampling/gbnf';
export type { StopMatcherOptions, StopStep } from './sampling/stop';
export { Tokenizer, TokenPrefixDecoder, TokenStreamDecoder } from './tokenizer/tokenizer';
export type { DetokenizeOptions, PieceOptions, TokenizeOptions } from './tokenizer/tokenizer';
export { SUPPORTED_TOKENIZER_MODELS, TokenAttr, TokenType, Vocab } from './tokenizer/vocab';
export type { SpecialTokens, VocabMetadata, VocabType } from './tokenizer/vocab';
export { PRE_TOKENIZER_NAMES } from './tokenizer/pre-tokenizers';
export { Utf8StreamDecoder } from './tokenizer/detokenize';
export { CHATML_TEMPLATE, ChatTemplate, parseChatTemplateKwargsFlag, readChatTemplateFlags } from './tokenizer/chat-template';
export type { ChatMessage, ChatTemplateCaps, ChatTemplateFormat, ChatTemplateRenderOptions, ChatTemplateTokens } from './tokenizer/chat-template';
export { TokenizerError } from './tokenizer/errors';
export type { TokenizerErrorCode } from './tokenizer/errors';
export { benchmark, benchmarkParallel } from './bench';
export type { BenchOptions, BenchResult, ParallelBenchOptions, ParallelBenchResult, ParallelBenchRow } from './bench';
export { parseRoutingTrace, readRoutingTrace } from './cache/trace';
export type { RoutingTrace } from './cache/trace';
export { cachePolicies, defaultCachePolicy, simulateCache } from './cache/simulate';
export type { CacheSimulation } from './cache/simulate';
export { SpeculativeDecoder, SpeculativeSequence, chooseK, speculativeStatsToProto } from './speculative/speculative-decoder';
export { dflashRow } from './model/architectures/dflash';
export type { Draft, SpeculativeOptions, SpeculativeStats, VerifyResult } from './speculative/speculative-decoder';
export { lookupDraft } from './speculative/ngram-lookup';
export type { LookupOptions } from './speculative/ngram-lookup';
export { checkVocabCompatible } from './speculative/vocab-check';
export {
  DEFAULT_USAGE_DECAY,
  USAGE_HISTORY_SUBDIR,
  mergeUsage,
  modelIdentity,
  readUsageHistory,
  usageHistoryPath,
  warmOrder,
  writeUsageHistory,
} from './cache/usage-history';
export type { UsageHistory, WarmOrder } from './cache/usage-history';
export {
  HARDWARE_PROFILE_FILE,
  hardwareProfilePath,
  measureHardware,
  profileDefaults,
  profileRamBudget,
  readHardwareProfile,
  writeHardwareProfile,
} from './model/hardware-profile';
export type { HardwareProfile, ProfileDefaults, ProfileOptions, StorageProfile } from './model/hardware-profile';
export { benchmarkSpeculative } from './speculative/spec-benchmark';
export type { SpecBenchOptions, SpecBenchResult } from './speculative/spec-benchmark';
export { repackModel } from './model/model';
export { EXPERT_PACK_EXT, readPackHeader, resolveExpertPack } from './model/expert-pack';
export type { ExpertPackHeader } from './model/expert-pack';
export { routingStats } from './model/routing-stats';
export type { RoutingStats } from './model/routing-stats';
export { cgroupMemoryLimit, createMemoryCgroup, evictFromPageCache, rereadIntoPageCache } from './model/memory-cgroup';
export type { CgroupMemoryLimit, MemoryCgroup } from './model/memory-cgroup';
