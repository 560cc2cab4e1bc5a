// The supervisor restarts a dead engine: a stream in flight fails with UNAVAILABLE naming the
// engine, the engine comes back on its address with the model it had (loaded at run time, not
// from its command line), the scheduler sees it serving again and the next request succeeds.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import * as grpc from '@grpc/grpc-js';
import { writeTestModel } from '@kailstream/engine/testing';
import { common, engine as pb, scheduler as spb } from '@kailstream/proto';

import { SERVICE_ENTRIES } from './paths';
import { EngineKeeper, freePort, Supervisor, type RunningService } from './supervisor';

function unary<Req, Res>(fn: (req: Req, cb: (err: grpc.ServiceError | null, res: Res) => void) => unknown, req: Req): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, (err, res) => (err ? reject(err) : resolve(res))));
}

describe('Supervisor with an engine that dies mid-stream', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-sup-'));
  const sup = new Supervisor(() => undefined);
  let sched: spb.SchedulerServiceClient;
  let keeper: EngineKeeper;

  beforeAll(async () => {
    const model = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    fs.renameSync(model, path.join(dir, 'tiny.gguf'));
    const adapter = writeTestModel(dir, 'tiny-qwen3moe', 'F32', 7, ['--lora-rank', '4']);
    const port = await freePort();
    let schedAddress: string | undefined;
    keeper = new EngineKeeper(`127.0.0.1:${port}`, () => schedAddress, { pollMs: 200 });
    const engine = await sup.start({
      name: 'engine',
      command: process.execPath,
      args: [SERVICE_ENTRIES.engine, '--port', String(port), '--ctx', '4096', '--seqs', '2', '--models-dir', dir],
      restart: true,
      onExit: keeper.onExit,
      afterRestart: keeper.afterRestart,
    });
    const s = await sup.start({ name: 'scheduler', command: process.execPath, args: [SERVICE_ENTRIES.scheduler, '--port', '0', '--engine', engine.address, '--probe-interval-ms', '200'] });
    schedAddress = s.address;
    sched = new spb.SchedulerServiceClient(s.address, grpc.credentials.createInsecure());
    // Loaded at run time through the scheduler, so only the keeper knows to reload it.
    await unary(sched.loadModel.bind(sched), spb.LoadModelRequest.fromPartial({ load: { path: 'tiny', id: 'tiny', lora: [{ path: adapter, scale: 0.5 }] } }));
    keeper.start();
    await keeper.record();
  }, 120_000);

  afterAll(async () => {
    keeper.stop();
    sched?.close();
    await sup.stopAll();
    fs.rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('fails the stream, restarts the engine with its model, and serves the next request', async () => {
    expect(keeper.remembered().map((m) => [m.id, m.lora.length])).toEqual([['tiny', 1]]);
    const engine = sup.services.get('engine')!;
    const stream = sched.submit(spb.SubmitRequest.fromPartial({ generate: { requestId: 'long', model: 'tiny', prompt: 'Once', maxTokens: 4000, ignoreEos: true } }));
    const result = new Promise<grpc.ServiceError | undefined>((resolve) => {
      stream.on('data', () => undefined);
      stream.on('end', () => resolve(undefined));
      stream.on('error', resolve);
    });
    await new Promise<void>((resolve) => stream.once('data', () => resolve()));
    const restarted = new Promise<RunningService>((resolve) => sup.once('restarted', resolve));
    engine.child.kill('SIGKILL');

    const err = await result;
    expect(err?.code).toBe(grpc.status.UNAVAILABLE);
    expect(err?.details).toContain(`engine engine-1 at ${engine.address} failed during request 'long'`);

    const again = await restarted;
    expect(again.address).toBe(engine.address);
    expect(again.child.pid).not.toBe(engine.child.pid);
    expect(again.restarts).toBe(1);
    // The scheduler reports the engine serving with its model again.
    const engines = await unary<spb.ListEnginesRequest, spb.ListEnginesResponse>(sched.listEngines.bind(sched), {});
    expect(engines.engines).toHaveLength(1);
    expect(engines.engines[0].status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
    expect(engines.engines[0].models).toEqual(['tiny']);
    // With the LoRA adapter it was loaded with, at its scale.
    const models = await unary<spb.ListModelsRequest, spb.ListModelsResponse>(sched.listModels.bind(sched), {});
    expect(models.models.find((m) => m.id === 'tiny')?.loraAdapters.map((l) => l.scale)).toEqual([0.5]);

    const chunks: pb.GenerateResponse[] = [];
    await new Promise<void>((resolve, reject) => {
      const s = sched.submit(spb.SubmitRequest.fromPartial({ generate: { requestId: 'next', model: 'tiny', prompt: 'Hi', maxTokens: 4 } }));
      s.on('data', (c: pb.GenerateResponse) => chunks.push(c));
      s.on('end', resolve);
      s.on('error', reject);
    });
    expect(chunks.at(-1)?.usage?.completionTokens).toBeGreaterThan(0);
  }, 60_000);
});

describe('grpcToken (kail serve beyond loopback)', () => {
  it('creates a private token in the data directory once and reuses it', () => {
    const { grpcToken } = require('./commands/serve') as typeof import('./commands/serve');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-token-'));
    try {
      const t = grpcToken(dir);
      expect(t).toMatch(/^[A-Za-z0-9_-]{32}$/);
      expect(fs.statSync(path.join(dir, 'grpc-token')).mode & 0o777).toBe(0o600);
      expect(grpcToken(dir)).toBe(t);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('engine service with a hardware profile it cannot read', () => {
  it('starts and serves without it, saying why, instead of staying down', async () => {
    const { spawn } = require('node:child_process') as typeof import('node:child_process');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-badprofile-'));
    fs.writeFileSync(path.join(dir, 'profile.json'), '{"format": "kailstream-hardware-profile", "defaults": ');
    const child = spawn(process.execPath, [SERVICE_ENTRIES.engine, '--port', '0', '--data-dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    try {
      const end = Date.now() + 60_000;
      while (!out.includes('\n') && child.exitCode === null && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
      expect(child.exitCode).toBeNull();
      const address = JSON.parse(out.split('\n')[0]).address as string;
      expect(err).toMatch(/engine: ignoring the hardware profile: hardware profile .*profile\.json is not JSON: .*; run kail profile again/);
      const c = new pb.EngineServiceClient(address, grpc.credentials.createInsecure());
      const h = await unary<common.HealthRequest, common.HealthResponse>(c.health.bind(c), {});
      expect(h.status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
      c.close();
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => (child.exitCode !== null ? r(null) : child.once('exit', r)));
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
