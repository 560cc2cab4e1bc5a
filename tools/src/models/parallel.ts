// writeModelParallel: the same file as writeModel, with work units generated and quantized on
// worker threads (one per core by default). Worth it for large models: generation and the native
// quantizer are single-threaded per call.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';

import { planWithSimulation, writeModel, writeModelWith } from './build';
import type { UnitRunner, WorkUnit, WriteModelOptions, WriteModelResult } from './build';
import type { BuildWorkerData, BuildWorkerReply } from './build-worker';

export interface ParallelOptions {
  /** Worker threads; default os.availableParallelism(). 1 writes on this thread. */
  threads?: number;
  /** Models with fewer parameters are written on this thread (workers cost a start-up). Default 16M. */
  minParams?: number;
}

/** The compiled worker script, when running from the build (not from TypeScript sources). */
export function buildWorkerScript(): string | undefined {
  const p = path.join(__dirname, 'build-worker.js');
  return fs.existsSync(p) ? p : undefined;
}

class WorkerPool implements UnitRunner {
  private readonly workers: { w: Worker; busy: boolean }[] = [];
  private readonly waiting = new Map<number, { resolve: (b: Uint8Array) => void; reject: (e: Error) => void; worker: number }>();
  private readonly queue: { id: number; unit: WorkUnit }[] = [];
  private nextId = 0;
  private failed: Error | undefined;

  constructor(script: string, n: number, data: BuildWorkerData) {
    for (let i = 0; i < n; i++) {
      const w = new Worker(script, { workerData: data });
      w.on('message', (m: BuildWorkerReply) => this.onReply(i, m));
      w.on('error', (e) => this.fail(e));
      w.on('exit', (code) => {
        if (code !== 0) this.fail(new Error(`model build worker exited with code ${code}`));
      });
      this.workers.push({ w, busy: false });
    }
  }

  run(unit: WorkUnit): Promise<Uint8Array> {
    if (this.failed) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      this.waiting.set(id, { resolve, reject, worker: -1 });
      this.queue.push({ id, unit });
      this.pump();
    });
  }

  private pump(): void {
    for (let i = 0; i < this.workers.length && this.queue.length > 0; i++) {
      const slot = this.workers[i];
      if (slot.busy) continue;
      const job = this.queue.shift()!;
      slot.busy = true;
      this.waiting.get(job.id)!.worker = i;
      slot.w.postMessage(job);
    }
  }

  private onReply(worker: number, m: BuildWorkerReply): void {
    this.workers[worker].busy = false;
    const p = this.waiting.get(m.id);
    if (p) {
      this.waiting.delete(m.id);
      if ('error' in m) p.reject(new Error(m.error));
      else p.resolve(m.bytes);
    }
    this.pump();
  }

  private fail(e: Error): void {
    this.failed ??= e;
    for (const p of this.waiting.values()) p.reject(e);
    this.waiting.clear();
    this.queue.length = 0;
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map(({ w }) => w.terminate()));
  }
}

/** writeModel on worker threads; falls back to this thread for small models or without a built worker. */
export async function writeModelParallel(opts: WriteModelOptions & ParallelOptions): Promise<WriteModelResult> {
  const threads = Math.max(1, opts.threads ?? os.availableParallelism());
  const script = buildWorkerScript();
  const { tensors } = planWithSimulation(opts);
  const params = tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0);
  // A custom quantizer cannot cross into workers.
  if (threads === 1 || !script || opts.quantize || params < (opts.minParams ?? 16e6)) return writeModel(opts);
  const data: BuildWorkerData = { seed: opts.seed, config: opts.config, fileType: opts.fileType, simulateType: opts.simulateType, expertPool: opts.expertPool };
  return writeModelWith(opts, new WorkerPool(script, threads, data), threads * 2);
}
