import type { common, engine as pb } from '@kailstream/proto';

import { EngineError } from '../errors';

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

export interface LoadedModel {
  info: common.ModelInfo;
}

/**
 * The in-process model host: owns loaded models and their runtimes. Generation arrives with the
 * model engine; until a model is loaded every generate call fails with NOT_FOUND.
 */
export class LocalModelHost implements ModelHost {
  protected readonly models = new Map<string, LoadedModel>();
  private readonly started = Date.now();
  private tokensGenerated = 0;

  health() {
    return { ok: true, detail: `${this.models.size} model(s) loaded` };
  }

  listModels(): common.ModelInfo[] {
    return [...this.models.values()].map((m) => m.info);
  }

  async loadModel(req: pb.LoadModelRequest): Promise<common.ModelInfo> {
    throw new EngineError('KAIL_E_UNSUPPORTED', `cannot load ${req.path}: the model engine is not part of this build yet`);
  }

  async unloadModel(id: string): Promise<void> {
    if (!this.models.delete(id)) throw new EngineError('KAIL_E_NOT_FOUND', `model '${id}' is not loaded`);
  }

  // eslint-disable-next-line require-yield
  async *generate(req: pb.GenerateRequest): AsyncIterable<pb.GenerateResponse> {
    if (!this.models.has(req.model)) {
      const loaded = [...this.models.keys()];
      throw new EngineError('KAIL_E_NOT_FOUND', `model '${req.model}' is not loaded (loaded: ${loaded.length ? loaded.join(', ') : 'none'})`);
    }
    throw new EngineError('KAIL_E_UNSUPPORTED', 'generation is not part of this build yet');
  }

  cancel(): boolean {
    return false;
  }

  telemetry(): pb.TelemetrySnapshot {
    return {
      unixMs: Date.now(),
      tokensPerSecond: 0,
      tokensGenerated: this.tokensGenerated,
      bytesRead: 0,
      ioStallSeconds: 0,
      runningRequests: 0,
      tiers: [],
      experts: [],
      model: '',
    };
  }

  async close(): Promise<void> {
    this.models.clear();
    void this.started;
  }
}
