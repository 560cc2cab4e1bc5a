import path from 'node:path';
import { common, type engine as pb } from '@kailstream/proto';

import { EngineError } from '../errors';
import { EngineModel } from '../model/model';
import { ChatTemplate } from '../tokenizer/chat-template';
import { BatchEngine, type FinishReason } from '../runtime/batch-engine';
import type { SamplerParams } from '../sampling/sampler';

/** What the engine gRPC service needs from whatever owns models and runs generation. */
export interface ModelHost {
  health(): { ok: boolean; detail: string };
  listModels(): common.ModelInfo[];
  loadModel(req: pb.LoadModelRequest): Promise<common.ModelInfo>;
  unloadModel(id: string): Promise<void>;
  /** Yields response chunks; the last one carries finish reason and usage. Stops when signal aborts. */
  generate(req: pb.GenerateRequest, signal: AbortSignal): AsyncIterable<pb.GenerateResponse>;
  /** Cancels a running request by id; false when none is running. */
  cancel(requestId: string): boolean;
  telemetry(): pb.TelemetrySnapshot;
  close(): Promise<void>;
}

export interface LocalModelHostOptions {
  /** Concurrent sequences per model (continuous batching slots). Default 8. */
  seqsPerModel?: number;
  /** Default context length when a load request gives none. Default 4096. */
  defaultContext?: number;
  /** Compute threads when a load request gives none (0 = physical cores). */
  threads?: number;
}

interface Loaded {
  info: common.ModelInfo;
  model: EngineModel;
  engine: BatchEngine;
  chat?: ChatTemplate;
}

const FINISH: Record<FinishReason, common.FinishReason> = {
  stop: common.FinishReason.FINISH_REASON_STOP,
  length: common.FinishReason.FINISH_REASON_LENGTH,
  cancelled: common.FinishReason.FINISH_REASON_CANCELLED,
  error: common.FinishReason.FINISH_REASON_ERROR,
};

/** Proto sampling fields use 0 for "default"; the sampler wants explicit values. */
export function samplingFromProto(s: common.SamplingParams | undefined): SamplerParams {
  if (!s) return { temperature: 0 };
  return {
    temperature: s.temperature,
    topK: s.topK,
    topP: s.topP > 0 && s.topP <= 1 ? s.topP : 1,
    minP: s.minP,
    repetitionPenalty: s.repetitionPenalty > 0 ? s.repetitionPenalty : 1,
    presencePenalty: s.presencePenalty,
    frequencyPenalty: s.frequencyPenalty,
    penaltyLastN: s.penaltyLastN || 64,
    seed: s.hasSeed ? s.seed : undefined,
  };
}

/** The in-process model host: loads GGUF models and serves them with continuous batching. */
export class LocalModelHost implements ModelHost {
  private readonly models = new Map<string, Loaded>();
  private readonly requests = new Map<string, Loaded>();
  private tokensGenerated = 0;

  constructor(private readonly opts: LocalModelHostOptions = {}) {}

  health() {
    return { ok: true, detail: `${this.models.size} model(s) loaded` };
  }

  listModels(): common.ModelInfo[] {
    return [...this.models.values()].map((m) => m.info);
  }

  async loadModel(req: pb.LoadModelRequest): Promise<common.ModelInfo> {
    if (!req.path) throw new EngineError('KAIL_E_INVALID_ARG', 'path is required');
    const id = req.id || path.basename(req.path).replace(/\.gguf$/i, '');
    if (this.models.has(id)) throw new EngineError('KAIL_E_ALREADY_EXISTS', `a model with id '${id}' is already loaded`);
    const model = EngineModel.load(req.path, {
      nCtx: req.contextLength || this.opts.defaultContext || 4096,
      threads: req.threads || this.opts.threads || 0,
      nSeqMax: this.opts.seqsPerModel ?? 8,
    });
    const s = model.summary;
    const kvBytes = model.runtime.kvBytesPerToken * model.nCtx * model.nSeqMax;
    const info = common.ModelInfo.fromPartial({
      id,
      path: path.resolve(req.path),
      architecture: s.architecture,
      parameterCount: s.parameterCount,
      fileBytes: s.fileBytes,
      contextLength: model.nCtx,
      expertCount: s.expertCount,
      expertUsedCount: s.expertUsedCount,
      layerCount: s.layerCount,
      loaded: true,
      residency: { residentBytes: s.residentBytes, expertBytes: s.expertBytes, kvBytes, ramExpertCacheBytes: 0, vramExpertCacheBytes: 0 },
      tensorTypeBytes: s.tensorTypeBytes,
    });
    this.models.set(id, { info, model, engine: new BatchEngine(model) });
    return info;
  }

  async unloadModel(id: string): Promise<void> {
    const m = this.models.get(id);
    if (!m) throw new EngineError('KAIL_E_NOT_FOUND', `model '${id}' is not loaded`);
    this.models.delete(id);
    await m.engine.close();
    m.model.close();
  }

  async *generate(req: pb.GenerateRequest, signal: AbortSignal): AsyncIterable<pb.GenerateResponse> {
    const m = this.models.get(req.model);
    if (!m) {
      const loaded = [...this.models.keys()];
      throw new EngineError('KAIL_E_NOT_FOUND', `model '${req.model}' is not loaded (loaded: ${loaded.length ? loaded.join(', ') : 'none'})`);
    }
    const prompt = this.promptTokens(m, req);
    if (prompt.length === 0) throw new EngineError('KAIL_E_INVALID_ARG', 'the prompt is empty');
    const id = req.requestId || `req-${Date.now()}-${Math.random().toString(36).slice(2)}`;
    const stream = m.engine.generate(
      {
        id,
        prompt,
        maxTokens: req.maxTokens || 256,
        sampling: samplingFromProto(req.sampling),
        stop: req.stop.filter((s) => s.length > 0),
        logprobs: req.wantLogprobs || req.topLogprobs > 0,
        topLogprobs: req.topLogprobs,
      },
      signal,
    );
    this.requests.set(id, m);
    try {
      for await (const c of stream) {
        this.tokensGenerated += c.tokens.length;
        const out: pb.GenerateResponse = {
          text: c.text,
          tokens: c.tokens,
          logprobs: (c.logprobs ?? []).map((l) => ({ token: l.token, text: m.model.tokenizer.detokenize([l.token]), logprob: l.logprob })),
          topLogprobs: (c.logprobs ?? []).map((l) => ({
            candidates: l.top.map((t) => ({ token: t.token, text: m.model.tokenizer.detokenize([t.token]), logprob: t.logprob })),
          })),
          finishReason: common.FinishReason.FINISH_REASON_UNSPECIFIED,
          usage: undefined,
          timings: undefined,
        };
        if (c.finish) {
          if (c.finish.reason === 'error' && c.finish.error) throw c.finish.error;
          out.finishReason = FINISH[c.finish.reason];
          out.usage = { promptTokens: c.finish.promptTokens, completionTokens: c.finish.completionTokens };
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

  private promptTokens(m: Loaded, req: pb.GenerateRequest): number[] {
    if (req.messages.length) {
      if (!m.chat) m.chat = ChatTemplate.fromTokenizer(m.model.tokenizer);
      const text = m.chat.render(
        req.messages.map((x) => ({ role: x.role, content: x.content })),
        { addGenerationPrompt: true },
      );
      // The template writes BOS itself where the model wants it.
      return m.model.tokenizer.tokenize(text, { addSpecial: false, parseSpecial: true });
    }
    if (req.promptTokens.length) return req.promptTokens;
    return m.model.tokenizer.tokenize(req.prompt, { addSpecial: true, parseSpecial: true });
  }

  cancel(requestId: string): boolean {
    const m = this.requests.get(requestId);
    return m ? m.engine.cancel(requestId) : false;
  }

  telemetry(): pb.TelemetrySnapshot {
    let tps = 0;
    let running = 0;
    const experts: pb.LayerExpertCounts[] = [];
    let name = '';
    for (const [id, m] of this.models) {
      const st = m.engine.stats();
      tps += st.tokensPerSecond;
      running += st.running;
      if (!name) {
        name = id;
        const ns = m.model.runtime.stats();
        const nExpert = m.model.program.nExpert;
        for (let l = 0; l < m.model.program.nMoeLayers; l++)
          experts.push({ layer: l, counts: Array.from(ns.expertCounts.subarray(l * nExpert, (l + 1) * nExpert)), resident: [] });
      }
    }
    return {
      unixMs: Date.now(),
      tokensPerSecond: tps,
      tokensGenerated: this.tokensGenerated,
      bytesRead: 0,
      ioStallSeconds: 0,
      runningRequests: running,
      tiers: [],
      experts,
      model: name,
    };
  }

  async close(): Promise<void> {
    for (const id of [...this.models.keys()]) await this.unloadModel(id);
  }
}
