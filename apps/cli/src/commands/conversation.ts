// `kail run --conversation` (llama-cli's -cnv, `ollama run`'s prompt): a chat with a model loaded
// in this process, no server. Each turn renders the whole conversation with the model's chat
// template; the KV cache keeps the start it shares with the previous turn's prompt and answer, so
// only the new message (and whatever the template rewrote) is computed.
import { Writable } from 'node:stream';

import { ChatTemplate, generate, type ChatTemplateFormat, type ChatTemplateRenderOptions, type EngineModel, type GenerateOptions, type GenerateResult, type SamplerParams } from '@kailstream/engine/core';
import { opensReasoning, ReasoningSplitter } from '@kailstream/engine/reasoning';

import { chatLoop, type ChatReply, type ChatSettings, type Msg } from './chat';

export interface ConversationOptions {
  /** Tokens per answer; -1: until the model ends its turn or the context is full. */
  nPredict: number;
  sampling: SamplerParams;
  /** Speculation, a grammar, a JSON schema, context shift, stop strings: as for a single prompt. */
  generate: Pick<GenerateOptions, 'speculative' | 'grammar' | 'jsonSchema' | 'contextShift' | 'stop'>;
  /** How the template renders (thinking on or off, --chat-template-kwargs); /set think and /set nothink override enableThinking. */
  render?: Omit<ChatTemplateRenderOptions, 'addGenerationPrompt' | 'tools'>;
}

export interface ConversationTotals {
  turns: number;
  /** Prompt tokens of every turn, and how many of them an earlier turn's cache held. */
  promptTokens: number;
  promptCached: number;
  promptMs: number;
  genTokens: number;
  genMs: number;
}

/** A chat's `/set parameter` values (Ollama's names) as the engine's sampler settings. */
function sessionSampling(set: ChatSettings): Partial<SamplerParams> {
  const out: Partial<SamplerParams> = {
    temperature: set.temperature, topK: set.top_k, topP: set.top_p, minP: set.min_p, seed: set.seed,
    repetitionPenalty: set.repeat_penalty, penaltyLastN: set.repeat_last_n, presencePenalty: set.presence_penalty, frequencyPenalty: set.frequency_penalty,
  };
  return Object.fromEntries(Object.entries(out).filter(([, v]) => v !== undefined));
}

/**
 * The reply of a chat loop (chat.ts) computed by `model` in sequence 0. `onTurn` sees each turn's
 * result. With a sampling seed, turn i draws with seed + i (a new stream per answer, reproducible).
 */
export function conversationReply(
  model: EngineModel,
  template: ChatTemplate,
  o: ConversationOptions,
  onTurn: (r: GenerateResult, prompt: number[], turn: number) => void,
): { reply: ChatReply; totals: ConversationTotals } {
  const totals: ConversationTotals = { turns: 0, promptTokens: 0, promptCached: 0, promptMs: 0, genTokens: 0, genMs: 0 };
  // What sequence 0's cache holds: the last turn's prompt and answer.
  let held: number[] = [];
  const reply: ChatReply = async (messages, onText, signal, onReasoning, set = {}) => {
    const text = template.render(
      messages.map((m) => ({ role: m.role, content: m.content })),
      { ...o.render, addGenerationPrompt: true, ...(set.think !== undefined ? { enableThinking: set.think } : {}) },
    );
    // BOS where the vocabulary adds it, as llama-cli tokenizes the chat (the template's own was taken off the text).
    const prompt = model.tokenizer.tokenize(text, { addSpecial: true, parseSpecial: true });
    if (prompt.length >= model.nCtx)
      throw new Error(`the conversation is ${prompt.length} tokens and the context holds ${model.nCtx}: /clear starts over (or load with a larger -c)`);
    const nPredict = set.num_predict ?? o.nPredict;
    const maxTokens = nPredict < 0 ? model.nCtx - prompt.length : nPredict;
    const turn = totals.turns;
    const sampling = { ...o.sampling, ...sessionSampling(set) };
    if (sampling.seed !== undefined) sampling.seed += turn;
    // A reasoning model's <think> block (or gpt-oss's analysis channel) goes to onReasoning, the
    // answer to onText, as kail chat shows them; the history keeps the answer.
    const split = new ReasoningSplitter(opensReasoning(text));
    let answer = '';
    const show = (p: { reasoning: string; content: string }) => {
      if (p.reasoning) onReasoning?.(p.reasoning);
      if (p.content) onText(p.content);
      answer += p.content;
    };
    let r: GenerateResult;
    try {
      r = await generate(model, prompt, { ...o.generate, ...(set.stop ? { stop: set.stop } : {}), maxTokens, sampling, signal, onText: (t) => show(split.push(t)), cachedTokens: held });
      show(split.finish());
    } catch (e) {
      // (Whatever the cache holds now is not known: the next turn starts from an empty one.)
      held = [];
      model.truncate(0, 0);
      throw e;
    }
    held = r.cacheTokens;
    totals.turns++;
    totals.promptTokens += prompt.length;
    totals.promptCached += r.promptCached ?? 0;
    totals.promptMs += r.promptMs;
    totals.genTokens += r.tokens.length;
    totals.genMs += r.generationMs;
    onTurn(r, prompt, turn);
    return answer;
  };
  return { reply, totals };
}

/** The line printed when a conversation ends. */
export function conversationLine(t: ConversationTotals): string {
  const computed = t.promptTokens - t.promptCached;
  return (
    `conversation: ${t.turns} turn(s) | prompts: ${t.promptTokens} tokens, ${t.promptCached} kept from earlier turns, ${computed} computed` +
    (t.promptMs > 0 ? ` at ${(computed / (t.promptMs / 1000)).toFixed(1)} tokens/s` : '') +
    ` | answers: ${t.genTokens} tokens` +
    (t.genMs > 0 ? `, ${(t.genTokens / (t.genMs / 1000)).toFixed(1)} tokens/s` : '')
  );
}

/**
 * The conversation of `kail run --conversation` on stdin/stdout: answers stream to stdout (with
 * `json`, a JSON object per turn instead), notes and the closing line to stderr. A turn that
 * fails (a conversation longer than the context) says why and the chat goes on; the process then
 * ends with an error counting them.
 */
export async function runConversation(
  model: EngineModel,
  o: ConversationOptions,
  io: { json?: boolean; systemPrompt?: string; first?: string; singleTurn?: boolean; name: string; template?: string; templateFormat?: ChatTemplateFormat; opening?: readonly Msg[]; hideThinking?: boolean },
): Promise<void> {
  const { reply, totals } = conversationReply(model, ChatTemplate.fromTokenizer(model.tokenizer, { override: io.template, format: io.templateFormat }), o, (r, prompt, turn) => {
    if (io.json)
      process.stdout.write(
        JSON.stringify({
          turn,
          prompt_tokens: prompt,
          prompt_cached: r.promptCached ?? 0,
          tokens: r.tokens,
          text: r.text,
          finish_reason: r.finishReason,
          timings: { prompt_ms: r.promptMs, generation_ms: r.generationMs, prompt_tps: r.promptTps, gen_tps: r.genTps },
        }) + '\n',
      );
  });
  const tty = !!process.stdin.isTTY && !!process.stdout.isTTY;
  const out = io.json ? new Writable({ write: (_c, _e, done) => done() }) : process.stdout;
  const failures = await chatLoop(reply, { system: io.systemPrompt, opening: io.opening, first: io.first, singleTurn: io.singleTurn, banner: `chatting with ${io.name} in this process`, hideThinking: io.hideThinking }, process.stdin, out, process.stderr, tty && !io.json);
  if (!io.json) process.stderr.write(conversationLine(totals) + '\n');
  if (failures > 0) throw new Error(`${failures} turn(s) failed`);
}
