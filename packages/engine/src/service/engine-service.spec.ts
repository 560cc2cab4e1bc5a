import * as grpc from '@grpc/grpc-js';
import { common, engine as pb } from '@kailstream/proto';

import { createEngineClient, startEngineServer, type RunningEngineServer } from './engine-service';
import { LocalModelHost } from './model-host';
import { systemInfo } from '../native';

function unary<Req, Res>(fn: (req: Req, cb: (err: grpc.ServiceError | null, res: Res) => void) => unknown, req: Req): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, (err, res) => (err ? reject(err) : resolve(res))));
}

describe('engine gRPC service', () => {
  let running: RunningEngineServer;
  let client: pb.EngineServiceClient;

  beforeAll(async () => {
    running = await startEngineServer(new LocalModelHost(), { host: 'localhost', port: 0 });
    client = createEngineClient(`localhost:${running.port}`);
  });

  afterAll(async () => {
    client.close();
    await running.close(100);
  });

  it('answers health through the generated client', async () => {
    const res = await unary<common.HealthRequest, common.HealthResponse>(client.health.bind(client), {});
    expect(res.status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
    expect(res.version).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('lists models (none loaded yet)', async () => {
    const res = await unary<pb.ListModelsRequest, pb.ListModelsResponse>(client.listModels.bind(client), {});
    expect(res.models).toEqual([]);
  });

  it('maps a generate for an unknown model to NOT_FOUND with the stable code', async () => {
    const stream = client.generate(pb.GenerateRequest.fromPartial({ requestId: 'x', model: 'nope', prompt: 'hi' }));
    const err = await new Promise<grpc.ServiceError>((resolve) => stream.on('error', resolve));
    expect(err.code).toBe(grpc.status.NOT_FOUND);
    expect(err.metadata.get('kail-code')).toEqual(['KAIL_E_NOT_FOUND']);
    expect(err.details).toContain("'nope' is not loaded");
  });

  it('serves grpc.health.v1 and server reflection', async () => {
    const protoLoader = await import('@grpc/proto-loader');
    const path = await import('node:path');
    const healthProto = path.join(path.dirname(require.resolve('grpc-health-check/package.json')), 'proto/health/v1/health.proto');
    const def = protoLoader.loadSync(healthProto, { enums: String });
    const Health = (grpc.loadPackageDefinition(def) as any).grpc.health.v1.Health;
    const h = new Health(`localhost:${running.port}`, grpc.credentials.createInsecure());
    const res = await unary<any, any>(h.check.bind(h), { service: 'kailstream.engine.v1.EngineService' });
    expect(res.status).toBe('SERVING');
    h.close();

    const reflProto = path.join(path.dirname(require.resolve('@grpc/reflection/package.json')), 'build/proto/grpc/reflection/v1/reflection.proto');
    const rdef = protoLoader.loadSync(reflProto, { keepCase: true });
    const Reflection = (grpc.loadPackageDefinition(rdef) as any).grpc.reflection.v1.ServerReflection;
    const r = new Reflection(`localhost:${running.port}`, grpc.credentials.createInsecure());
    const call = r.ServerReflectionInfo();
    const services = await new Promise<string[]>((resolve, reject) => {
      call.on('data', (msg: any) => {
        resolve(msg.list_services_response.service.map((s: any) => s.name));
        call.end();
      });
      call.on('error', reject);
      call.write({ list_services: '' });
    });
    expect(services).toContain('kailstream.engine.v1.EngineService');
    r.close();
  });
});

describe('engine gRPC service with a loaded model', () => {
  const { tempDir, writeTestModel } = require('../testing') as typeof import('../testing');
  const fs = require('node:fs') as typeof import('node:fs');
  const dir = tempDir();
  let running: RunningEngineServer;
  let client: pb.EngineServiceClient;

  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    running = await startEngineServer(new LocalModelHost({ seqsPerModel: 4, defaultContext: 512, modelsDir: dir }), { port: 0 });
    client = createEngineClient(`127.0.0.1:${running.port}`);
    const res = await unary<pb.LoadModelRequest, pb.LoadModelResponse>(client.loadModel.bind(client), pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny' }));
    expect(res.model?.architecture).toBe('qwen3moe');
  }, 60_000);

  afterAll(async () => {
    client.close();
    await running.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('lists the loaded model with its residency', async () => {
    const res = await unary<pb.ListModelsRequest, pb.ListModelsResponse>(client.listModels.bind(client), {});
    expect(res.models.map((m) => m.id)).toEqual(['tiny']);
    expect(res.models[0].residency?.expertBytes).toBeGreaterThan(0);
  });

  it('streams a generation with usage on the last message', async () => {
    const stream = client.generate(pb.GenerateRequest.fromPartial({ requestId: 'g1', model: 'tiny', prompt: 'Hello', maxTokens: 8, wantLogprobs: true, topLogprobs: 2 }));
    const chunks: pb.GenerateResponse[] = [];
    await new Promise<void>((resolve, reject) => {
      stream.on('data', (c: pb.GenerateResponse) => chunks.push(c));
      stream.on('end', resolve);
      stream.on('error', reject);
    });
    const last = chunks.at(-1)!;
    expect(last.usage?.completionTokens).toBeGreaterThan(0);
    expect([common.FinishReason.FINISH_REASON_LENGTH, common.FinishReason.FINISH_REASON_STOP]).toContain(last.finishReason);
    const toks = chunks.flatMap((c) => c.tokens);
    expect(toks.length).toBe(last.usage?.completionTokens);
    expect(chunks.flatMap((c) => c.topLogprobs).every((t) => t.candidates.length === 2)).toBe(true);
  });

  it('answers a bad load with INVALID_ARGUMENT and keeps serving', async () => {
    const err = await unary(client.loadModel.bind(client), pb.LoadModelRequest.fromPartial({ path: __filename })).catch((e) => e as grpc.ServiceError);
    expect((err as grpc.ServiceError).code).toBe(grpc.status.INVALID_ARGUMENT);
    const h = await unary<common.HealthRequest, common.HealthResponse>(client.health.bind(client), {});
    expect(h.status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
  });

  it('tokenizes and detokenizes with the model vocabulary', async () => {
    const t = await unary<pb.TokenizeRequest, pb.TokenizeResponse>(client.tokenize.bind(client), pb.TokenizeRequest.fromPartial({ model: 'tiny', text: 'Hello world' }));
    expect(t.tokens.length).toBeGreaterThan(0);
    const d = await unary<pb.DetokenizeRequest, pb.DetokenizeResponse>(client.detokenize.bind(client), pb.DetokenizeRequest.fromPartial({ model: 'tiny', tokens: t.tokens }));
    expect(d.text).toBe('Hello world');
    const bad = await unary(client.detokenize.bind(client), pb.DetokenizeRequest.fromPartial({ model: 'tiny', tokens: [1 << 30] })).catch((e) => e as grpc.ServiceError);
    expect((bad as grpc.ServiceError).code).toBe(grpc.status.INVALID_ARGUMENT);
    expect((bad as grpc.ServiceError).details).toContain('outside the vocabulary');
  });

  it('lists the files of the models directory with their headers', async () => {
    fs.writeFileSync(`${dir}/broken.gguf`, 'not a gguf');
    const res = await unary<pb.ListModelFilesRequest, pb.ListModelFilesResponse>(client.listModelFiles.bind(client), {});
    expect(res.modelsDir).toBe(dir);
    const good = res.files.find((f) => f.id === 'tiny-qwen3moe-F32-1')!;
    expect(good.architecture).toBe('qwen3moe');
    expect(good.info?.loaded).toBe(true);
    expect(good.info?.expertCount).toBeGreaterThan(0);
    const broken = res.files.find((f) => f.id === 'broken')!;
    expect(broken.architecture).toBe('');
    expect(broken.error).not.toBe('');
  });

  it('plans a file by its name in the models directory and refuses a budget too small, naming the shortfall', async () => {
    const big = await unary<pb.PlanModelRequest, pb.PlanModelResponse>(client.planModel.bind(client), pb.PlanModelRequest.fromPartial({ path: 'tiny-qwen3moe-F32-1', ramBudgetBytes: 2 ** 32 }));
    expect(big.fits).toBe(true);
    expect(big.residency?.residentBytes).toBeGreaterThan(0);
    expect(big.coldBytesPerToken).toBeGreaterThan(0);
    expect(JSON.parse(big.planJson).fits).toBe(true);
    const small = await unary<pb.PlanModelRequest, pb.PlanModelResponse>(client.planModel.bind(client), pb.PlanModelRequest.fromPartial({ path: 'tiny-qwen3moe-F32-1', ramBudgetBytes: 1024 }));
    expect(small.fits).toBe(false);
    expect(small.detail).toMatch(/\d/);
  });

  it('plans a VRAM tier, and refuses one it cannot have (no RAM budget; no CUDA device) with a clear error, serving on', async () => {
    const p = await unary<pb.PlanModelRequest, pb.PlanModelResponse>(
      client.planModel.bind(client),
      pb.PlanModelRequest.fromPartial({ path: 'tiny-qwen3moe-F32-1', ramBudgetBytes: 2 ** 32, vramBudgetBytes: 2 ** 24 }),
    );
    const plan = JSON.parse(p.planJson);
    expect(plan.vramCacheExperts).toBe(Math.min(Math.floor(2 ** 24 / plan.expertEntryBytes), plan.nExpertTotal));
    expect(p.residency?.vramExpertCacheBytes).toBe(plan.vramCacheExperts * plan.expertEntryBytes);
    const load = (req: Partial<pb.LoadModelRequest>) => unary<pb.LoadModelRequest, pb.LoadModelResponse>(client.loadModel.bind(client), pb.LoadModelRequest.fromPartial(req));
    await expect(load({ path: 'tiny-qwen3moe-F32-1', id: 'v0', vramBudgetBytes: 2 ** 24 })).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringMatching(/needs a RAM budget/) });
    if (systemInfo().cudaDevices.length === 0)
      await expect(load({ path: 'tiny-qwen3moe-F32-1', id: 'v1', ramBudgetBytes: 2 ** 32, vramBudgetBytes: 2 ** 24 })).rejects.toMatchObject({
        details: expect.stringMatching(/a VRAM tier needs (the CUDA backend|a CUDA device)/),
      });
    const list = await unary<pb.ListModelsRequest, pb.ListModelsResponse>(client.listModels.bind(client), pb.ListModelsRequest.fromPartial({}));
    expect(list.models.map((m) => m.id)).not.toContain('v1');
  });

  it('loads a model under a RAM budget (experts stream) and reports its residency and cache tier in telemetry', async () => {
    const plan = JSON.parse(
      (await unary<pb.PlanModelRequest, pb.PlanModelResponse>(client.planModel.bind(client), pb.PlanModelRequest.fromPartial({ path: 'tiny-qwen3moe-F32-1', ramBudgetBytes: 2 ** 32 }))).planJson,
    );
    // Fixed part plus about two experts per MoE layer, reserve included.
    const ram = plan.fixedBytes + 2 * plan.nMoeLayers * plan.expertEntryBytes;
    const res = await unary<pb.LoadModelRequest, pb.LoadModelResponse>(
      client.loadModel.bind(client),
      pb.LoadModelRequest.fromPartial({ path: 'tiny-qwen3moe-F32-1', id: 'streamed', ramBudgetBytes: ram }),
    );
    expect(res.model?.residency?.ramExpertCacheBytes).toBeGreaterThan(0);
    expect(res.model?.ramBudgetBytes).toBe(ram);
    expect(res.model?.residency?.ramExpertCacheBytes).toBeLessThan(res.model!.residency!.expertBytes);
    const stream = client.generate(pb.GenerateRequest.fromPartial({ requestId: 's1', model: 'streamed', prompt: 'Hello there', maxTokens: 6 }));
    await new Promise<void>((resolve, reject) => {
      stream.on('data', () => undefined);
      stream.on('end', resolve);
      stream.on('error', reject);
    });
    const tel = client.watchTelemetry({ intervalMs: 100 });
    const snaps: pb.TelemetrySnapshot[] = [];
    await new Promise<void>((resolve) => {
      tel.on('data', (s: pb.TelemetrySnapshot) => {
        snaps.push(s);
        if (snaps.length === 1) {
          tel.cancel();
          resolve();
        }
      });
      tel.on('error', () => resolve());
    });
    const snap = snaps[0];
    expect(snap.kvCapacityBytes).toBeGreaterThan(0);
    expect(snap.kvUsedBytes).toBeGreaterThan(0);
    expect(snap.kvUsedBytes).toBeLessThanOrEqual(snap.kvCapacityBytes);
    expect(snap.tiers[0].tier).toBe('ram');
    expect(snap.bytesRead).toBeGreaterThan(0);
    // Both models report on their own, in load order: 'tiny' mapped (every expert resident, nothing
    // read), 'streamed' under its budget. The engine-wide figures are their sums.
    expect(snap.models.map((m) => m.model)).toEqual(['tiny', 'streamed']);
    const [mapped, streamed] = snap.models;
    expect(mapped.bytesRead).toBe(0);
    expect(streamed.bytesRead).toBe(snap.bytesRead);
    expect(mapped.kvCapacityBytes + streamed.kvCapacityBytes).toBe(snap.kvCapacityBytes);
    expect(mapped.tiers[0].budgetBytes + streamed.tiers[0].budgetBytes).toBe(snap.tiers[0].budgetBytes);
    expect(streamed.tiers[0].misses).toBeGreaterThan(0);
    for (const l of mapped.experts) expect(l.resident.length).toBe(l.counts.length);
    // The generation ran on 'streamed' only: its heatmap counts it, the other one's does not.
    const total = (m: pb.ModelTelemetry) => m.experts.reduce((n, l) => n + l.counts.reduce((a, c) => a + c, 0), 0);
    expect(total(streamed)).toBeGreaterThan(0);
    const resident = streamed.experts.reduce((n, l) => n + l.resident.length, 0);
    expect(resident).toBeGreaterThan(0);
    // What the cache holds fits its budget: at most the plan's experts (about two per layer).
    expect(resident * plan.expertEntryBytes).toBeLessThanOrEqual(streamed.tiers[0].budgetBytes);
    for (const l of streamed.experts) expect(l.resident.every((e) => e >= 0 && e < l.counts.length)).toBe(true);
    await unary(client.unloadModel.bind(client), { id: 'streamed', ifIdle: false });
  });

  it('loads with prompt-lookup speculative decoding and reports its counters in telemetry', async () => {
    await unary(client.loadModel.bind(client), pb.LoadModelRequest.fromPartial({ path: 'tiny-qwen3moe-F32-1', id: 'spec', lookupDecoding: true, speculativeK: 3 }));
    try {
      const stream = client.generate(pb.GenerateRequest.fromPartial({ requestId: 'sp', model: 'spec', prompt: 'a b c a b c a b c a b', maxTokens: 12, ignoreEos: true }));
      await new Promise<void>((resolve, reject) => {
        stream.on('data', () => undefined);
        stream.on('end', resolve);
        stream.on('error', reject);
      });
      const tel = client.watchTelemetry({ intervalMs: 100 });
      const snap = await new Promise<pb.TelemetrySnapshot>((resolve) => tel.on('data', resolve));
      tel.cancel();
      tel.on('error', () => undefined);
      const byId = new Map(snap.models.map((m) => [m.model, m]));
      expect(byId.get('spec')!.speculative).toMatchObject({ enabled: true, mode: 'lookup' });
      expect(byId.get('spec')!.speculative!.targetPasses).toBeGreaterThan(0);
      // Speculation is the 'spec' model's, not the engine's: the other loaded model has none.
      expect(byId.get('tiny')!.speculative!.enabled).toBe(false);
    } finally {
      await unary(client.unloadModel.bind(client), { id: 'spec', ifIdle: false });
    }
  });

  it("serves deepseek4 with its own MTP block as the draft (the target giving the streams it reads): the tokens plain decoding gives", async () => {
    const file = writeTestModel(dir, 'tiny-deepseek4', 'Q8_0');
    const tokensOf = async (model: string) => {
      const stream = client.generate(pb.GenerateRequest.fromPartial({ requestId: `ds4-${model}`, model, prompt: 'Hello world, the expert', maxTokens: 12, ignoreEos: true, sampling: { temperature: 0 } }));
      const toks: number[] = [];
      await new Promise<void>((resolve, reject) => {
        stream.on('data', (c: pb.GenerateResponse) => toks.push(...c.tokens));
        stream.on('end', resolve);
        stream.on('error', reject);
      });
      return toks;
    };
    await unary(client.loadModel.bind(client), pb.LoadModelRequest.fromPartial({ path: file, id: 'ds4', contextLength: 128 }));
    await unary(client.loadModel.bind(client), pb.LoadModelRequest.fromPartial({ path: file, id: 'ds4-mtp', contextLength: 128, mtpDecoding: true, speculativeK: 3 }));
    try {
      const plain = await tokensOf('ds4');
      expect(plain).toHaveLength(12);
      expect(await tokensOf('ds4-mtp')).toEqual(plain);
      const tel = client.watchTelemetry({ intervalMs: 100 });
      const snap = await new Promise<pb.TelemetrySnapshot>((resolve) => tel.on('data', resolve));
      tel.cancel();
      tel.on('error', () => undefined);
      const spec = snap.models.find((m) => m.model === 'ds4-mtp')!.speculative!;
      expect(spec).toMatchObject({ enabled: true, mode: 'mtp' });
      expect(spec.targetPasses).toBeGreaterThan(0);
    } finally {
      await unary(client.unloadModel.bind(client), { id: 'ds4', ifIdle: false });
      await unary(client.unloadModel.bind(client), { id: 'ds4-mtp', ifIdle: false });
    }
  }, 60_000);

  it('refuses a draft model and lookup together', async () => {
    const err = await unary(client.loadModel.bind(client), pb.LoadModelRequest.fromPartial({ path: 'tiny-qwen3moe-F32-1', id: 'both', lookupDecoding: true, draftPath: 'tiny-qwen3moe-F32-1' })).catch((e) => e as grpc.ServiceError);
    expect((err as grpc.ServiceError).code).toBe(grpc.status.INVALID_ARGUMENT);
    expect((err as grpc.ServiceError).details).toContain('give one of a draft model, lookup decoding and MTP drafting');
  });
});

describe('engine admission: sequence slots with their KV reserved, a bounded wait, prompts past the context', () => {
  const { tempDir, writeTestModel } = require('../testing') as typeof import('../testing');
  const fs = require('node:fs') as typeof import('node:fs');
  const dir = tempDir();
  let running: RunningEngineServer;
  let client: pb.EngineServiceClient;

  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    // One sequence slot and one waiting place.
    running = await startEngineServer(new LocalModelHost({ seqsPerModel: 1, maxWaitingPerModel: 1, defaultContext: 4096 }), { port: 0 });
    client = createEngineClient(`127.0.0.1:${running.port}`);
    await unary(client.loadModel.bind(client), pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny' }));
  }, 60_000);

  afterAll(async () => {
    client.close();
    await running.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const start = (id: string, extra: Partial<pb.GenerateRequest>) => {
    const s = client.generate(pb.GenerateRequest.fromPartial({ requestId: id, model: 'tiny', prompt: 'Hello', ...extra }));
    const done = new Promise<{ chunks: pb.GenerateResponse[]; error?: grpc.ServiceError }>((resolve) => {
      const chunks: pb.GenerateResponse[] = [];
      s.on('data', (c: pb.GenerateResponse) => chunks.push(c));
      s.on('end', () => resolve({ chunks }));
      s.on('error', (error: grpc.ServiceError) => resolve({ chunks, error }));
    });
    return { s, done };
  };

  it('runs one, lets one wait, refuses the next with RESOURCE_EXHAUSTED naming the slots, then serves the waiter', async () => {
    const a = start('a', { maxTokens: 4000, ignoreEos: true });
    await new Promise((r) => a.s.once('data', r));
    // Two more at once: whichever reaches the engine first waits, the other is refused at once.
    // (Not b, a fixed pause, then c: a loaded machine could let c arrive first.)
    const [b, c] = [start('b', { maxTokens: 3 }).done, start('c', { maxTokens: 3 }).done];
    const refused = await Promise.race([b, c]);
    expect(refused.error?.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(refused.error?.details).toContain("model 'tiny' is at capacity: 1 running (all 1 sequence slots with their KV cache in use) and 1 waiting");
    expect((await unary<pb.CancelRequest, pb.CancelResponse>(client.cancel.bind(client), { requestId: 'a' })).cancelled).toBe(true);
    expect((await a.done).chunks.at(-1)?.finishReason).toBe(common.FinishReason.FINISH_REASON_CANCELLED);
    const [rb, rc] = await Promise.all([b, c]);
    const waiter = rb === refused ? rc : rb;
    expect(waiter.error).toBeUndefined();
    expect(waiter.chunks.at(-1)?.usage?.completionTokens).toBeGreaterThan(0);
  }, 30_000);

  it('refuses a prompt longer than the context with OUT_OF_RANGE and keeps serving', async () => {
    const long = await start('long', { prompt: '', promptTokens: Array.from({ length: 5000 }, () => 5), maxTokens: 1 }).done;
    expect(long.error?.code).toBe(grpc.status.OUT_OF_RANGE);
    expect(long.error?.details).toContain('the context holds 4096');
    const ok = await start('ok', { maxTokens: 2 }).done;
    expect(ok.error).toBeUndefined();
  }, 30_000);
});

describe('LocalModelHost KV cache type', () => {
  const { tempDir, writeTestModel } = require('../testing') as typeof import('../testing');
  const fs = require('node:fs') as typeof import('node:fs');
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it("loads with the engine's --cache-type and says so in ModelInfo (kv_type), its KV bytes counted in that type", async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const kv: Record<string, number> = {};
    for (const [kvType, kvTypeV] of [['f16', undefined], ['q8_0', undefined], ['q8_0', 'q4_0']] as const) {
      const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256, loadOptions: { kvType, kvTypeV } });
      try {
        const info = await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'm' }));
        expect([info.kvType, info.kvTypeV]).toEqual([kvType, kvTypeV ?? kvType]);
        kv[`${kvType}/${kvTypeV ?? kvType}`] = Number(info.residency!.kvBytes);
      } finally {
        await host.close();
      }
    }
    expect(kv['q8_0/q8_0'] / kv['f16/f16']).toBeCloseTo(34 / 64, 6);
    // -ctk q8_0 -ctv q4_0: K rows at 34 bytes per 32 values, V rows at 18.
    expect(kv['q8_0/q4_0'] / kv['f16/f16']).toBeCloseTo((34 + 18) / 128, 6);
  }, 30_000);
});

describe("LocalModelHost with the engine's --chat-template", () => {
  const { tempDir, writeTestModel } = require('../testing') as typeof import('../testing');
  const fs = require('node:fs') as typeof import('node:fs');
  const { readChatTemplateFlags } = require('../tokenizer/chat-template') as typeof import('../tokenizer/chat-template');
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it("renders every model's chats with it in place of the file's, and says so in ModelInfo", async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const custom = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}";
    for (const [template, want] of [
      [custom, '[system] Be brief.\n[user] Hi\n[assistant] '],
      ['chatml', '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n'],
    ]) {
      const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256, chatTemplate: template });
      try {
        const info = await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'm' }));
        expect(info.chatTemplate).toBe(template === 'chatml' ? require('../tokenizer/chat-template').CHATML_TEMPLATE : template);
        const r = host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'm', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] }));
        expect(r.prompt).toBe(want);
      } finally {
        await host.close();
      }
    }
  }, 30_000);

  it('a chat prompt starts with one BOS where the vocabulary adds one, whether the template writes it or not (llama-server tokenizes it with add_special)', async () => {
    const file = writeTestModel(dir, 'tiny-llama', 'F32');
    for (const template of ['{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}', '{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}']) {
      const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256, chatTemplate: template });
      try {
        await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'm' }));
        const bos = host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'm', text: '', addSpecial: true })).tokens;
        expect(bos).toHaveLength(1);
        const r = host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'm', messages: [{ role: 'user', content: 'Hi' }] }));
        expect(r.prompt).toBe('[user] Hi\n');
        const plain = host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'm', text: r.prompt, parseSpecial: true })).tokens;
        expect(r.tokens).toEqual([bos[0], ...plain]);
        // It says so (a client going on from earlier tokens drops it); without add_special, no BOS.
        expect(r.addedBos).toBe(true);
        expect(host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'm', text: 'Hi' })).addedBos).toBe(false);
        // Generate computes the same prompt.
        let promptTokens = -1;
        for await (const msg of host.generate(pb.GenerateRequest.fromPartial({ requestId: `bos-${template.length}`, model: 'm', messages: [{ role: 'user', content: 'Hi' }], maxTokens: 1 }), new AbortController().signal))
          if (msg.usage) promptTokens = msg.usage.promptTokens;
        expect(promptTokens).toBe(r.tokens.length);
      } finally {
        await host.close();
      }
    }
  });

  it("--chat-template-kwargs: variables every chat renders with, under a request's own; checked as llama-server's flag", async () => {
    const { parseChatTemplateKwargsFlag } = require('../tokenizer/chat-template') as typeof import('../tokenizer/chat-template');
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const template = "{% for m in messages %}{{ m.content }}{% endfor %}|think={{ enable_thinking }}|style={{ style | default('none') }}";
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256, chatTemplate: template, chatTemplateKwargs: parseChatTemplateKwargsFlag('{"enable_thinking": false, "style": "terse"}') });
    try {
      await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'm' }));
      const render = (kwargs?: object) => host.tokenize(pb.TokenizeRequest.fromPartial({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], chatTemplateKwargsJson: kwargs ? JSON.stringify(kwargs) : '' })).prompt;
      expect(render()).toBe('Hi|think=False|style=terse');
      expect(render({ enable_thinking: true })).toBe('Hi|think=True|style=terse');
    } finally {
      await host.close();
    }
    expect(() => parseChatTemplateKwargsFlag('enable_thinking=false')).toThrow("--chat-template-kwargs takes a JSON object, got 'enable_thinking=false'");
    expect(() => parseChatTemplateKwargsFlag('[1]')).toThrow(/takes a JSON object/);
    expect(() => parseChatTemplateKwargsFlag('{"messages": []}')).toThrow("--chat-template-kwargs cannot set 'messages' (each request sets it)");
  }, 30_000);

  it('the flags: a file or the text, checked to parse; both, an unreadable file or a broken template is an error naming the flag', () => {
    const f = `${dir}/t.jinja`;
    fs.writeFileSync(f, '{{ messages[0].content }}');
    expect(readChatTemplateFlags(undefined, f)).toBe('{{ messages[0].content }}');
    expect(readChatTemplateFlags('chatml', undefined)).toBe('chatml');
    expect(readChatTemplateFlags(undefined, undefined)).toBeUndefined();
    expect(() => readChatTemplateFlags('x', f)).toThrow(/not both/);
    expect(() => readChatTemplateFlags(undefined, `${dir}/missing.jinja`)).toThrow(/--chat-template-file: cannot read .*missing.jinja: ENOENT/);
    expect(() => readChatTemplateFlags('{% for %}', undefined)).toThrow(/--chat-template: cannot parse chat template/);
    expect(() => readChatTemplateFlags('  ', undefined)).toThrow(/--chat-template: the template is empty/);
  });
});

describe("LocalModelHost with the engine's --ram", () => {
  const { tempDir, writeTestModel } = require('../testing') as typeof import('../testing');
  const fs = require('node:fs') as typeof import('node:fs');
  const { planModel } = require('../model/model') as typeof import('../model/model');
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('shares the budget among its models: in memory while files fit what is left, then streaming within the rest, then refused', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const size = fs.statSync(file).size;
    const plan = planModel(file, { ramBytes: 2 ** 40, nCtx: 256, nSeqMax: 1, ramReserveBytes: 0 });
    const stream = plan.fixedBytes + 2 * plan.nMoeLayers * plan.expertEntryBytes;
    expect(stream).toBeLessThan(size);
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256, defaultRamBudgetBytes: 2 * size + stream, loadOptions: { ramReserveBytes: 0 } });
    try {
      const load = (id: string, ramBudgetBytes = 0) => host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id, ramBudgetBytes }));
      expect((await load('a')).ramBudgetBytes).toBe(0);
      expect((await load('b')).ramBudgetBytes).toBe(0);
      // What a and b leave is less than the file: c streams its experts within it.
      const c = await load('c');
      expect(c.ramBudgetBytes).toBe(stream);
      expect(c.residency!.ramExpertCacheBytes).toBeLessThan(c.residency!.expertBytes);
      await expect(load('d')).rejects.toThrow(/the engine's RAM budget .* is held by the loaded models \(a: .*, b: .*, c: .*\); unload one to load 'd'/);
      // A request's own budget is its own.
      expect((await load('e', stream)).ramBudgetBytes).toBe(stream);
      // b, c and e leave less than the smallest streaming plan: refused, saying what holds the rest.
      await host.unloadModel('a');
      await expect(load('d')).rejects.toThrow(/is .* short: .*\(the loaded models \(b: .*, c: .*, e: .*\) hold the rest of the engine's RAM budget .*; unloading one gives 'd' more\)/);
      await host.unloadModel('e');
      expect((await load('d')).ramBudgetBytes).toBe(0);
    } finally {
      await host.close();
    }
  }, 60_000);
});

describe('LocalModelHost with a hardware profile', () => {
  const { tempDir, testHardwareProfile, writeTestModel } = require('../testing') as typeof import('../testing');
  const fs = require('node:fs') as typeof import('node:fs');
  const { planModel } = require('../model/model') as typeof import('../model/model');
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('streams a model larger than the profiled budget, plans against it and reports the storage bandwidth', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const plan = planModel(file, { ramBytes: 2 ** 40, nCtx: 256, nSeqMax: 1, ramReserveBytes: 0 });
    const budget = plan.fixedBytes + 2 * plan.nMoeLayers * plan.expertEntryBytes;
    expect(budget).toBeLessThan(fs.statSync(file).size);
    const profile = testHardwareProfile(dir, budget);
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256, profile, loadOptions: { ramReserveBytes: 0 } });
    try {
      const info = await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'p' }));
      expect(info.ramBudgetBytes).toBe(budget);
      expect(info.residency!.ramExpertCacheBytes).toBeLessThan(info.residency!.expertBytes);
      const planned = await host.planModel(pb.PlanModelRequest.fromPartial({ path: file }));
      expect(JSON.parse(planned.planJson).ramBytes).toBe(budget);
      expect(host.telemetry().storageBandwidthBytesPerSecond).toBe(2.5e9);
      // The budget is the engine's: with 'p' holding all of it, another model is refused, naming it; once 'p' is gone it loads.
      await expect(host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'q' }))).rejects.toThrow(/profiled RAM budget .* is held by the loaded models \(p: .*\); unload one to load 'q'/);
      await host.unloadModel('p');
      expect((await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'q' }))).ramBudgetBytes).toBe(budget);
    } finally {
      await host.close();
    }
  }, 30_000);

  it('takes no VRAM tier from a profiled GPU whose memory holds none of the model\'s experts', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const plan = planModel(file, { ramBytes: 2 ** 40, nCtx: 256, nSeqMax: 1, ramReserveBytes: 0 });
    const budget = plan.fixedBytes + 2 * plan.nMoeLayers * plan.expertEntryBytes;
    const gpu = { index: 0, name: 'Test GPU', totalBytes: 2 ** 30, freeBytes: 2 ** 29, usableBytes: plan.expertEntryBytes - 1 };
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256, profile: { ...testHardwareProfile(dir, budget), gpus: [gpu] }, loadOptions: { ramReserveBytes: 0 } });
    try {
      // Given as a budget, the same bytes are refused by the load, naming them.
      await expect(host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'v', vramBudgetBytes: gpu.usableBytes }))).rejects.toThrow(/cannot hold one expert/);
      const info = await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'p' }));
      expect(info.ramBudgetBytes).toBe(budget);
      expect(Number(info.residency!.vramExpertCacheBytes)).toBe(0);
    } finally {
      await host.close();
    }
  }, 30_000);
});

describe('telemetry layer numbers', () => {
  const { tempDir, writeTestModel } = require('../testing') as typeof import('../testing');
  const fs = require('node:fs') as typeof import('node:fs');
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('names each MoE layer by its model block (DeepSeek leads with dense blocks)', async () => {
    const file = writeTestModel(dir, 'tiny-deepseek3', 'Q8_0');
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 128 });
    try {
      const info = await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'ds' }));
      const layers = host.telemetry().models[0].experts.map((l) => l.layer);
      const { openGgufMetadata } = require('../model/model') as typeof import('../model/model');
      const f = openGgufMetadata(file);
      const key = Object.keys(f.metadata).find((k) => k.endsWith('.leading_dense_block_count'))!;
      const dense = Number(f.metadata[key]);
      f.close();
      expect(dense).toBeGreaterThan(0);
      expect(layers).toEqual(Array.from({ length: info.layerCount - dense }, (_, i) => dense + i));
    } finally {
      await host.close();
    }
  }, 60_000);
});

describe('engine health sees a stalled forward pass', () => {
  const { tempDir, writeTestModel } = require('../testing') as typeof import('../testing');
  const fs = require('node:fs') as typeof import('node:fs');
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('is not serving while a running request makes no progress for stallTimeoutMs, and serving again after', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    // A 3 ms limit: a prefill pass of 512 tokens outlasts it on any CPU.
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 1024, stallTimeoutMs: 3 });
    try {
      await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 't' }));
      expect(host.health().ok).toBe(true);
      const abort = new AbortController();
      const seen: string[] = [];
      const run = (async () => {
        for await (const c of host.generate(pb.GenerateRequest.fromPartial({ model: 't', promptTokens: Array.from({ length: 600 }, (_, i) => 1 + (i % 50)), maxTokens: 2 }), abort.signal)) void c;
      })();
      const poll = setInterval(() => {
        const h = host.health();
        if (!h.ok) seen.push(h.detail);
      }, 1);
      await run;
      clearInterval(poll);
      expect(seen.length).toBeGreaterThan(0);
      expect(seen[0]).toMatch(/model 't': 1 running request\(s\), no forward pass finished for \d+ s/);
      expect(host.health().ok).toBe(true);
    } finally {
      await host.close();
    }
  }, 60_000);
});
