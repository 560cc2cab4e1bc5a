import { createHash } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { common, engine as pb, scheduler as spb } from '@kailstream/proto';

import type { EngineEntry, EnginePool } from './engine-pool';
import type { ModelLoader } from './model-loader';
import { RequestQueue, type QueueItem, type RequestQueueOptions } from './request-queue';

/** Most tokens a request's fairness cost counts (DRR quanta are 256 by default). */
const MAX_COST = 16384;

export interface DispatcherOptions extends RequestQueueOptions {
  /** Longest a request may wait in the queue when it has no deadline of its own (ms). Default 300000. */
  maxQueueWaitMs?: number;
  /** Load on demand (model-loader.ts): a model in an engine's models directory loads when a request names it. Default: off. */
  loader?: ModelLoader;
}

type SubmitCall = grpc.ServerWritableStream<spb.SubmitRequest, pb.GenerateResponse>;

interface Request extends QueueItem {
  call: SubmitCall;
  req: pb.GenerateRequest;
  /** ms since the epoch; 0 = none. */
  deadline: number;
  /** The deadline came from the caller (DEADLINE_EXCEEDED) rather than the queue-wait bound. */
  callerDeadline: boolean;
  enqueuedAt: number;
  timer?: NodeJS.Timeout;
  state: 'queued' | 'running' | 'done';
  engine?: EngineEntry;
  upstream?: grpc.ClientReadableStream<pb.GenerateResponse>;
  /** Why the scheduler stopped it, when it did. */
  stopped?: 'client' | 'deadline' | 'cancel';
  tokens: number;
  /** Conversation key (conversationKey): the engine that ran the conversation before is preferred. */
  affinity: string;
}

/**
 * What stays the same across a conversation's turns: the model and the messages up to the first
 * user message (a chat's next turn re-sends them), or the start of a plain prompt. An engine keeps
 * the KV cache of the sequences it ran (prefix reuse), so sending the next turn to the engine that
 * ran the previous one spares its prefill.
 */
export function conversationKey(req: pb.GenerateRequest): string {
  const firstUser = req.messages.findIndex((m) => m.role === 'user');
  const head = req.messages.length ? req.messages.slice(0, firstUser < 0 ? 1 : firstUser + 1) : [];
  const text = head.length ? head.map((m) => `${m.role}\u0000${m.content}`).join('\u0001') : req.prompt.slice(0, 512) || req.promptTokens.slice(0, 128).join(',');
  return createHash('sha256').update(req.model).update('\u0002').update(text).digest('base64url');
}

/** A gRPC error with the stable `kail-code` metadata other services use. */
export function grpcError(code: grpc.status, message: string, kailCode?: string, extra: Record<string, string> = {}): grpc.ServiceError {
  const metadata = new grpc.Metadata();
  if (kailCode) metadata.set('kail-code', kailCode);
  for (const [k, v] of Object.entries(extra)) metadata.set(k, v);
  return Object.assign(new Error(message), { code, details: message, metadata });
}

const cancelledChunk = (promptTokens = 0, completionTokens = 0): pb.GenerateResponse =>
  pb.GenerateResponse.fromPartial({ finishReason: common.FinishReason.FINISH_REASON_CANCELLED, usage: { promptTokens, completionTokens } });

/**
 * The scheduling loop: requests wait in a RequestQueue (priority, then deficit round robin per
 * tenant) until an engine that serves their model has a free slot; deadlines, cancellation and
 * client disconnects remove them from the queue or stop them on the engine; an engine that
 * fails mid-stream fails its requests with UNAVAILABLE naming it and is marked down.
 */
export class Dispatcher {
  readonly queue: RequestQueue<Request>;
  private readonly byId = new Map<string, Request>();
  private readonly running = new Map<string, Request>();
  private readonly maxQueueWaitMs: number;
  readonly loader: ModelLoader | undefined;
  private nextId = 1;
  /** Finish times (ms) of recent requests, for the Retry-After hint. */
  private readonly finished: number[] = [];

  constructor(
    readonly pool: EnginePool,
    opts: DispatcherOptions = {},
  ) {
    this.queue = new RequestQueue<Request>(opts);
    this.maxQueueWaitMs = opts.maxQueueWaitMs ?? 300_000;
    this.loader = opts.loader;
    if (this.loader) this.loader.inUse = (model) => this.inUse(model);
    pool.onChange(() => this.pump());
  }

  /** Whether requests for `model` run or wait here. */
  inUse(model: string): boolean {
    for (const r of this.byId.values()) if (r.req.model === model && r.state !== 'done') return true;
    return false;
  }

  get runningCount(): number {
    return this.running.size;
  }

  snapshot(): spb.QueueSnapshot {
    return { queued: this.queue.size, running: this.running.size, capacity: this.queue.maxQueued, queuedPerTenant: this.queue.queuedPerTenant() };
  }

  submit(call: SubmitCall): void {
    const fail = (e: grpc.ServiceError): void => {
      call.emit('error', e);
    };
    const g = call.request.generate;
    if (!g || !g.model) return fail(grpcError(grpc.status.INVALID_ARGUMENT, 'generate.model is required', 'KAIL_E_INVALID_ARG'));
    const req: pb.GenerateRequest = { ...g, requestId: g.requestId || `sched-${Date.now().toString(36)}-${this.nextId++}` };
    if (this.byId.has(req.requestId))
      return fail(grpcError(grpc.status.ALREADY_EXISTS, `a request with id '${req.requestId}' is already queued or running`, 'KAIL_E_ALREADY_EXISTS'));
    // The model is being unloaded (its keep-alive ran out, or it made room): once that is over,
    // submit again, which loads it back if it went.
    const leaving = this.loader?.whileLeaving(req.model);
    if (leaving) {
      void leaving.then(() => {
        if (!call.cancelled) this.submit(call);
      });
      return;
    }
    if (!this.pool.knows(req.model)) {
      if (!this.loader) return fail(grpcError(grpc.status.NOT_FOUND, `no engine serves model '${req.model}' (served: ${this.pool.modelIds().join(', ') || 'none'})`, 'KAIL_E_NOT_FOUND'));
      // Load it, then submit again (a caller gone meanwhile gets nothing).
      this.loader.ensure(req.model).then(
        () => {
          if (!call.cancelled) this.submit(call);
        },
        (e: grpc.ServiceError) => fail(e),
      );
      return;
    }
    const now = Date.now();
    const callerDeadline = call.request.deadlineUnixMs > 0;
    if (callerDeadline && call.request.deadlineUnixMs <= now)
      return fail(grpcError(grpc.status.DEADLINE_EXCEEDED, `request '${req.requestId}': its deadline passed before it was queued`));
    const r: Request = {
      id: req.requestId,
      tenant: call.request.tenant || 'anonymous',
      priority: call.request.priority,
      // The fairness cost is the tokens it may generate, up to MAX_COST: a request that may run on
      // (Ollama's num_predict -1 with a context shift, a client's max_tokens of billions) counts as a
      // long one, and DRR does not spin adding quanta until it is covered.
      cost: Math.min(MAX_COST, Math.max(1, req.maxTokens || 256)),
      call,
      req,
      deadline: callerDeadline ? call.request.deadlineUnixMs : 0,
      callerDeadline,
      enqueuedAt: now,
      state: 'queued',
      tokens: 0,
      affinity: conversationKey(req),
    };
    const refusal = this.queue.push(r);
    if (refusal) return fail(grpcError(grpc.status.RESOURCE_EXHAUSTED, refusal.message, 'KAIL_E_BUDGET', { 'retry-after-ms': String(this.retryAfterMs()) }));
    this.byId.set(r.id, r);
    this.loader?.touch(req.model, call.request.hasKeepAlive ? call.request.keepAliveMs : undefined);
    // The queue wait is bounded even without a deadline, so a request for a model whose engine
    // never comes back does not wait forever.
    const expireAt = Math.min(r.deadline || Infinity, now + this.maxQueueWaitMs);
    r.timer = setTimeout(() => this.expire(r), Math.max(0, expireAt - now));
    r.timer.unref();
    call.on('cancelled', () => this.stop(r, 'client'));
    this.pump();
  }

  /** Cancels a queued or running request by id: its stream ends with finish reason CANCELLED. */
  cancel(id: string): boolean {
    const r = this.byId.get(id);
    if (!r || r.state === 'done') return false;
    this.stop(r, 'cancel');
    return true;
  }

  /** Dispatches queued requests while engines have free slots. */
  pump(): void {
    for (;;) {
      const r = this.queue.pop((x) => !!this.pool.pick(x.req.model));
      if (!r) return;
      this.dispatch(r, this.pool.pick(r.req.model, this.lastEngine.get(r.affinity))!);
    }
  }

  /** Conversation key -> the engine that ran its latest turn (most recent last; bounded). */
  private readonly lastEngine = new Map<string, string>();

  private remember(key: string, engineId: string): void {
    this.lastEngine.delete(key);
    this.lastEngine.set(key, engineId);
    if (this.lastEngine.size > 10_000) this.lastEngine.delete(this.lastEngine.keys().next().value!);
  }

  private dispatch(r: Request, engine: EngineEntry): void {
    r.state = 'running';
    r.engine = engine;
    this.remember(r.affinity, engine.id);
    engine.running++;
    this.running.set(r.id, r);
    // Only the caller's deadline stays on the request once it runs.
    if (!r.callerDeadline && r.timer) {
      clearTimeout(r.timer);
      r.timer = undefined;
    }
    const up = engine.client.generate(r.req);
    r.upstream = up;
    up.on('data', (chunk: pb.GenerateResponse) => {
      // After a disconnect or an expired deadline nothing more goes to the caller; a cancel still gets the engine's last chunk.
      if (r.state !== 'running' || (r.stopped && r.stopped !== 'cancel')) return;
      r.tokens += chunk.tokens.length;
      r.call.write(chunk);
    });
    up.on('end', () => {
      if (r.state !== 'running') return;
      this.done(r);
      if (!r.stopped || r.stopped === 'cancel') r.call.end();
    });
    up.on('error', (e: grpc.ServiceError) => this.upstreamError(r, e));
  }

  private upstreamError(r: Request, e: grpc.ServiceError): void {
    if (r.state !== 'running') return;
    const engine = r.engine!;
    this.done(r);
    if (r.stopped === 'client') return;
    if (r.stopped === 'deadline') return; // answered in expire()
    if (r.stopped === 'cancel') {
      r.call.write(cancelledChunk(0, r.tokens));
      r.call.end();
      return;
    }
    const fromEngine = e.metadata?.get('kail-code').length > 0;
    if (!fromEngine && (e.code === grpc.status.UNAVAILABLE || e.code === grpc.status.INTERNAL || e.code === grpc.status.CANCELLED)) {
      // The connection broke (the engine process died or hung up): this engine is down until a probe says otherwise.
      const why = `engine ${engine.id} at ${engine.address} failed during request '${r.id}' after ${r.tokens} token(s): ${e.details || e.message}`;
      this.pool.markDown(engine, why);
      void this.pool.probe(engine);
      r.call.emit('error', grpcError(grpc.status.UNAVAILABLE, why, 'KAIL_E_IO'));
      return;
    }
    r.call.emit('error', e);
  }

  private done(r: Request): void {
    if (r.state === 'done') return;
    const wasRunning = r.state === 'running';
    r.state = 'done';
    if (r.timer) clearTimeout(r.timer);
    this.byId.delete(r.id);
    this.queue.remove(r.id);
    // The keep-alive counts from the end of the model's last request.
    this.loader?.touch(r.req.model);
    if (wasRunning) {
      this.running.delete(r.id);
      r.engine!.running--;
      const now = Date.now();
      this.finished.push(now);
      while (this.finished.length > 64 || (this.finished.length && now - this.finished[0] > 60_000)) this.finished.shift();
      setImmediate(() => this.pump());
    }
  }

  /** Stops a request the scheduler or its caller no longer wants. */
  private stop(r: Request, why: 'client' | 'deadline' | 'cancel'): void {
    if (r.state === 'done' || r.stopped) return;
    r.stopped = why;
    if (r.state === 'queued') {
      this.done(r);
      if (why === 'cancel') {
        r.call.write(cancelledChunk());
        r.call.end();
      }
      return;
    }
    // Running: the engine drops the sequence before its next forward pass.
    if (why === 'cancel') {
      const engine = r.engine!;
      engine.client.cancel({ requestId: r.id }, (err) => {
        if (err) r.upstream?.cancel();
      });
    } else {
      r.upstream?.cancel();
    }
  }

  private expire(r: Request): void {
    if (r.state === 'done') return;
    const waited = Date.now() - r.enqueuedAt;
    const msg =
      r.state === 'queued'
        ? r.callerDeadline
          ? `request '${r.id}': its deadline passed after ${waited} ms in the queue`
          : `request '${r.id}' waited ${waited} ms in the queue (the limit) without an engine free for model '${r.req.model}'`
        : `request '${r.id}': its deadline passed while running on ${r.engine!.id} (${r.tokens} token(s) generated); it was cancelled`;
    this.stop(r, 'deadline');
    r.call.emit('error', grpcError(grpc.status.DEADLINE_EXCEEDED, msg));
  }

  /** Rough time until a queue slot frees: queued requests over the recent completion rate. */
  private retryAfterMs(): number {
    const n = this.finished.length;
    if (n < 2) return 1000;
    const rate = (n - 1) / Math.max(1, this.finished[n - 1] - this.finished[0]); // per ms
    return Math.min(60_000, Math.max(500, Math.round(1 / rate)));
  }

  close(): void {
    for (const r of [...this.byId.values()]) {
      this.stop(r, 'client');
      this.done(r);
      r.call.emit('error', grpcError(grpc.status.UNAVAILABLE, 'the scheduler is shutting down'));
    }
  }
}
