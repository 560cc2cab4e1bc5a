// Workspace tools. Each tool is a module under src/ with its own entry script.
export { writeModel, planModel, generateTensorF32, fillTensorRange, WEIGHT_RECIPE_VERSION } from './models/build';
export { writeLoraAdapter, loraTargets } from './models/lora';
export { writeControlVector } from './models/control-vector';
export { PullError, downloadFile, modelEndpoint, parseRepoRef, pickModelFiles, planRepoPull, planUrlPull, pulledModelId, runPull } from './models/pull';
export type { PullEvents, PullPlan, PullResult, RepoFile } from './models/pull';
export { checkOllamaStore, findOllamaModel, importOllamaModel, listOllamaModels, ollamaModelId, ollamaStoreDirs, parseOllamaName } from './models/ollama-store';
export type { OllamaModel, OllamaName } from './models/ollama-store';
export { writeOllamaStoreModel } from './models/ollama-store-testing';
export { HUB_COMMIT, startHubEmulator, type Hub } from './models/hub-emulator';
export type { WriteLoraOptions } from './models/lora';
export type { WriteModelOptions, WriteModelResult, WrittenTensor } from './models/build';
export { writeModelParallel } from './models/parallel';
export type { ParallelOptions } from './models/parallel';
export { PRESETS, getPreset, DEFAULT_PRESET_FOR_ARCH } from './models/presets';
export type { Preset } from './models/presets';
export type { ModelConfig, ArchDefinition, TensorSpec, TensorRole, WeightInit } from './models/arch';
export { registerArch, getArch, archNames } from './models/architectures';
export { FILE_TYPES, parseFileType, tensorType, useMoreBits } from './models/quant-plan';
export type { FileTypeName } from './models/quant-plan';
export type { QuantizeFn } from './models/quantizer';
export { buildVocab, VOCAB_KINDS, TokenType } from './models/vocab';
export type { Vocab, VocabKind } from './models/vocab';
export { GgufWriter, kv } from './gguf/writer';
export type { GgufValue, GgufTensorInfo, GgufWriterOptions } from './gguf/writer';
export { readGgufHeader, readGgufTensorBytes } from './gguf/reader';
export { exportLora, type ExportLoraOptions, type ExportLoraReport } from './gguf/export-lora';
export { ggufSplitFiles, ggufSplitPath, mergeGguf, planGgufSplit, splitGguf, type SplitOptions, type SplitPlan } from './gguf/split';
export { QUANT_FILE_TYPES, defaultQuantizedPath, parseQuantFileType, parseTensorType, quantizeModel, quantizeModelInWorker, quantizeSummary } from './gguf/quantize';
export type { QuantizeOptions, QuantizeReport, QuantizedTensor } from './gguf/quantize';
export { imatrixChunkCount, loadImatrix, mergeImatrixEntries, readImatrixFile, writeImatrixDat, writeImatrixGguf } from './gguf/imatrix';
export type { Imatrix, ImatrixEntry, ImatrixFile } from './gguf/imatrix';
export { imatrixStatistics, imatrixStatisticsLines, type ImatrixLayerStats, type ImatrixStatistics, type ImatrixTensorStats } from './gguf/imatrix-stats';
export type { GgufHeader, GgufReadTensor, GgufReadKv } from './gguf/reader';
export { GgmlType, GgufType, ggmlTypeTraits, ggmlTensorBytes, LlamaFileType, GGUF_DEFAULT_ALIGNMENT } from './gguf/constants';
export { encodeF16, encodeBf16, decodeF16, decodeBf16, f32ToF16Bits, f32ToBf16Bits } from './gguf/float-encode';
export {
  llamaLogits,
  llamaLogitsBatch,
  llamaTokenize,
  llamaDetokenize,
  llamaGenerateGreedy,
  llamaRefScript,
  readLogitsFiles,
} from './parity/llama-ref';
export type { LlamaLogits, LlamaRefOptions } from './parity/llama-ref';
export { llamaMtpRef, mtpRefBinary } from './parity/mtp-ref';
export type { MtpRef, MtpRefOptions } from './parity/mtp-ref';
