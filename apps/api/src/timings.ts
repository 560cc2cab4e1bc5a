// llama-server's `timings` object (result_timings::to_json): prompt and generation counts, times and
// speeds. Final answers carry it; with `timings_per_token` every streamed chunk does, from the
// engine's progress so far.
import type { common } from '@kailstream/proto';

export interface LlamaTimings {
  cache_n: number;
  prompt_n: number;
  prompt_ms: number;
  prompt_per_token_ms: number;
  prompt_per_second: number;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_token_ms: number;
  predicted_per_second: number;
}

/** From a response's usage and timings (the last message's, or a message's progress_usage / progress_timings). */
export function llamaTimings(usage: common.Usage | undefined, timings: common.Timings | undefined): LlamaTimings {
  const cached = usage?.cachedPromptTokens ?? 0;
  const promptN = (usage?.promptTokens ?? 0) - cached;
  const genN = usage?.completionTokens ?? 0;
  const promptMs = timings?.promptMs ?? 0;
  const genMs = timings?.generationMs ?? 0;
  return {
    cache_n: cached,
    prompt_n: promptN,
    prompt_ms: promptMs,
    prompt_per_token_ms: promptN > 0 ? promptMs / promptN : 0,
    prompt_per_second: promptMs > 0 ? (1000 * promptN) / promptMs : 0,
    predicted_n: genN,
    predicted_ms: genMs,
    predicted_per_token_ms: genN > 0 ? genMs / genN : 0,
    predicted_per_second: genMs > 0 ? (1000 * genN) / genMs : 0,
  };
}
