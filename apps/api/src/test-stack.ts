// The real stack in one process for the API's tests: an engine gRPC server with tiny generated
// models (each with an optional chat template), a scheduler in front of it, and the API.
import fs from 'node:fs';
import path from 'node:path';
import { engine as pb } from '@kailstream/proto';
import { LocalModelHost, startEngineServer, type RunningEngineServer } from '@kailstream/engine';
import { tempDir, writeTestModel } from '@kailstream/engine/testing';
import { startSchedulerServer, type RunningSchedulerServer, type SchedulerServerOptions } from '@kailstream/scheduler';

import { parseApiConfig } from './env';
import { startApi, type RunningApi } from './server';

export interface TestModel {
  id: string;
  /** A chat template (Jinja text) written into the file; the model's default otherwise. */
  template?: string;
  contextLength?: number;
  /** The project's preset to write (default tiny-qwen3moe). */
  preset?: string;
  /** LoRA adapters written for the model (gen-model --lora-rank, seeded by their index) and loaded with it. */
  lora?: { rank: number; scale?: number }[];
}

export interface TestStackOptions {
  /** Sequences per model (2). */
  seqsPerModel?: number;
  /** Context of a model without its own contextLength (1024). */
  defaultContext?: number;
  scheduler?: Omit<SchedulerServerOptions, 'engines'>;
  /** API config fields besides the port and the scheduler's address. */
  api?: Record<string, unknown>;
  /**
   * Ids of models written (not loaded) into the engine's models directory, <dir>/models/ID.gguf,
   * with the scheduler loading on demand.
   */
  onDemand?: string[];
  /** Give the API the stack's directory as its data directory (blobs, Ollama's Modelfiles). */
  apiDataDir?: boolean;
  /** The engine runs with --context-shift (ModelHostOptions.contextShift). */
  contextShift?: boolean;
  /** The engine runs with --pooling (ModelHostOptions.pooling). */
  pooling?: 'none' | 'mean' | 'cls' | 'last';
  /** The engine runs with --slot-save-path <dir>/slots (ModelHostOptions.slotSavePath). */
  slotSave?: boolean;
}

export interface TestStack {
  /** A temporary directory for the models and anything else; removed by close(). */
  dir: string;
  host: LocalModelHost;
  /** Each model's file, by id. */
  files: Record<string, string>;
  engine: RunningEngineServer;
  sched: RunningSchedulerServer;
  api: RunningApi;
  /** POST with a JSON body (a string is sent as it is); the status and the parsed answer. */
  post(p: string, body: unknown, headers?: Record<string, string>): Promise<{ status: number; body: Record<string, any> }>;
  /** A streamed answer's server-sent events as [event name or null, parsed data]; `stream: true` added to the body. */
  events(p: string, body: object, headers?: Record<string, string>): Promise<[string | null, Record<string, any>][]>;
  close(): Promise<void>;
}

/** Server-sent events: each `data:` line parsed as JSON, with its `event:` name (null without one); `[DONE]` skipped. */
export function sseEvents(text: string): [string | null, Record<string, any>][] {
  const out: [string | null, Record<string, any>][] = [];
  for (const block of text.split('\n\n')) {
    let name: string | null = null;
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) name = line.slice(7);
      else if (line.startsWith('data: ') && line !== 'data: [DONE]') out.push([name, JSON.parse(line.slice(6))]);
    }
  }
  return out;
}

export async function startTestStack(models: TestModel[], o: TestStackOptions = {}): Promise<TestStack> {
  const dir = tempDir();
  const modelsDir = path.join(dir, 'models');
  for (const id of o.onDemand ?? []) {
    fs.mkdirSync(modelsDir, { recursive: true });
    fs.copyFileSync(writeTestModel(dir, 'tiny-qwen3moe', 'F32'), path.join(modelsDir, `${id}.gguf`));
  }
  const host = new LocalModelHost({ seqsPerModel: o.seqsPerModel ?? 2, defaultContext: o.defaultContext ?? 1024, contextShift: o.contextShift, pooling: o.pooling, ...(o.slotSave ? { slotSavePath: path.join(dir, 'slots') } : {}), ...(o.onDemand ? { modelsDir } : {}) });
  const files: Record<string, string> = {};
  for (const m of models) {
    let extra: string[] = [];
    if (m.template !== undefined) {
      const file = path.join(dir, `${m.id}.jinja`);
      fs.writeFileSync(file, m.template);
      extra = ['--chat-template-file', file];
    }
    const file = (files[m.id] = writeTestModel(dir, m.preset ?? 'tiny-qwen3moe', 'F32', 1, extra));
    const lora = (m.lora ?? []).map((l, i) => ({ path: writeTestModel(dir, 'tiny-qwen3moe', 'F32', 100 + i, ['--lora-rank', String(l.rank)]), scale: l.scale ?? 1 }));
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: m.id, threads: 2, lora, ...(m.contextLength ? { contextLength: m.contextLength } : {}) }));
  }
  // (What started is stopped again if a later step fails, so that a failed start-up cannot hang jest.)
  const engine = await startEngineServer(host, { port: 0 });
  let sched: RunningSchedulerServer | undefined;
  let api: RunningApi;
  try {
    sched = await startSchedulerServer({ probeIntervalMs: 200, loadOnDemand: !!o.onDemand, ...o.scheduler, engines: [`127.0.0.1:${engine.port}`] });
    api = await startApi(parseApiConfig({ ...o.api, ...(o.apiDataDir ? { dataDir: dir } : {}), port: 0, schedulerAddress: `127.0.0.1:${sched.port}` }));
  } catch (e) {
    await sched?.close(100);
    await engine.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  const scheduler = sched;
  const send = (p: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${api.url}${p}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return {
    dir, host, files, engine, sched: scheduler, api,
    post: async (p, body, headers) => {
      const r = await send(p, body, headers);
      return { status: r.status, body: (await r.json()) as Record<string, any> };
    },
    events: async (p, body, headers) => {
      const r = await send(p, { ...body, stream: true }, headers);
      const type = r.headers.get('content-type') ?? '';
      if (!type.includes('text/event-stream')) throw new Error(`${p} answered ${r.status} ${type}, not an event stream: ${await r.text()}`);
      return sseEvents(await r.text());
    },
    close: async () => {
      await api.close();
      await scheduler.close(100);
      await engine.close(100);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
