import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { engine as pb } from '@kailstream/proto';
import { LocalModelHost } from '../service/model-host';
import { startEngineServer, type RunningEngineServer } from '../service/engine-service';
import { tempDir, writeTestModel } from '../testing';

// Random GenerateRequests straight at the engine's gRPC service (what a client in another
// language may send): token ids out of the vocabulary, NaN and infinite sampling values, huge
// counts, unknown roles, empty ids. Each gets an answer or a status with a message; the engine
// keeps serving. Seeded, so a failure reproduces.
jest.setTimeout(120_000);
describe('engine service under random requests', () => {
  const dir = tempDir();
  let engine: RunningEngineServer; let client: pb.EngineServiceClient;
  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const host = new LocalModelHost({ seqsPerModel: 4, defaultContext: 128 });
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny', contextLength: 128, threads: 2 }));
    engine = await startEngineServer(host, { port: 0 });
    client = new pb.EngineServiceClient(`127.0.0.1:${engine.port}`, grpc.credentials.createInsecure());
  }, 60_000);
  afterAll(async () => { client?.close(); await engine?.close(100); fs.rmSync(dir, { recursive: true, force: true }); });

  const gen = (req: pb.GenerateRequest) => new Promise<{ code: number; msg: string; n: number; finish?: number }>((resolve) => {
    const call = client.generate(req, { deadline: Date.now() + 60_000 });
    let n = 0; let finish: number | undefined;
    call.on('data', (m: pb.GenerateResponse) => { n += m.tokens.length; if (m.finishReason) finish = m.finishReason; });
    call.on('error', (e: grpc.ServiceError) => resolve({ code: e.code, msg: e.details, n }));
    call.on('end', () => resolve({ code: 0, msg: '', n, finish }));
  });

  it('answers each with tokens or a clear status, and keeps serving', async () => {
    let seed = Number(process.env.KAIL_FUZZ_SEED ?? 1);
    const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
    const pick = <T,>(a: T[]) => a[Math.floor(rnd() * a.length)];
    const f32 = () => pick([0, 1, -1, 0.5, 2, 1e30, -1e30, NaN, Infinity, -Infinity, 1e-40]);
    const i32 = () => pick([0, 1, -1, 5, 100000, 2147483647, -2147483648]);
    const hist: Record<string, number> = {}; const bad: string[] = [];
    for (let i = 0; i < Number(process.env.KAIL_FUZZ_N ?? 400); i++) {
      const req = pb.GenerateRequest.fromPartial({ requestId: rnd() < 0.1 ? '' : `r${i}`, model: rnd() < 0.05 ? 'nope' : 'tiny', maxTokens: pick([0, 1, 4, 4, 4, 1000, 4294967295]) });
      const mode = pick(['prompt', 'tokens', 'messages', 'none', 'both']);
      if (mode === 'prompt' || mode === 'both') req.prompt = pick(['hi', '', '<|im_start|>', 'x'.repeat(3000), '\u0000\uffff']);
      if (mode === 'tokens' || mode === 'both') req.promptTokens = Array.from({ length: pick([0, 1, 3, 200]) }, () => pick([0, 1, 5, -1, 100000, 2147483647, -2147483648]));
      if (mode === 'messages') req.messages = Array.from({ length: pick([0, 1, 2]) }, () => pb.ChatMessage.fromPartial({ role: pick(['user', 'system', 'assistant', 'tool', 'bogus', '']), content: pick(['hi', '', 'x'.repeat(2000)]), toolCallsJson: pick(['', '', '[]', '[{"id":"a","type":"function","function":{"name":"f","arguments":"{\\"x\\":1}"}}]', '{', '[1]']) }));
      if (mode === 'messages' && rnd() < 0.3) req.toolsJson = pick(['[]', '{', '[{"type":"function","function":{"name":"f"}}]', '"x"', '[null]', '[{"function":{"name":"f","parameters":{"type":"wat"}}}]']);
      if (mode === 'messages' && rnd() < 0.2) req.chatTemplateKwargsJson = pick(['{}', '{"enable_thinking":false}', '[1]', '{', '{"messages":[]}', '{"tools":1}', 'null']);
      if (req.messages.length && rnd() < 0.2) req.messages[0].reasoningContent = pick(['', 'x', 'x'.repeat(3000)]);
      if (rnd() < 0.2) {
        req.toolChoice = pick([0, 1, 2, 2, 9]) as pb.ToolChoice;
        req.toolChoiceFunction = pick(['', 'f', 'g']);
        req.singleToolCall = rnd() < 0.5;
      }
      if (rnd() < 0.7) req.sampling = { temperature: f32(), topK: i32(), topP: f32(), minP: f32(), repetitionPenalty: f32(), presencePenalty: f32(), frequencyPenalty: f32(), penaltyLastN: i32(), seed: pick([0, 1, 2 ** 53 - 1]), hasSeed: rnd() < 0.5, logitBias: pick<Record<number, number>>([{}, {}, { 0: 5 }, { 3: -Infinity, 4: 100 }, { [-1]: 1 }, { 5: NaN }, { 99999999: 2 }, { 7: Infinity }]), extras: rnd() < 0.5 ? undefined : {
        typicalP: f32(), topNSigma: f32(), xtcProbability: f32(), xtcThreshold: f32(), minKeep: pick([0, 1, 5, 4294967295]), dynatempRange: f32(), dynatempExponent: f32(),
        dryMultiplier: f32(), dryBase: f32(), dryAllowedLength: pick([0, 2, 4294967295]), dryPenaltyLastN: i32(), drySequenceBreakers: pick([[], ['\n'], ['', 'x'], ['User:', '###', 'x'.repeat(100)]]),
        mirostat: pick([0, 1, 2, 3, 4294967295]), mirostatTau: f32(), mirostatEta: f32(), samplers: pick([[], ['top_k', 'temperature'], ['nope'], ['xtc', 'xtc'], ['temperature', 'adaptive_p']]), adaptiveTarget: f32(), adaptiveDecay: f32() } };
      if (rnd() < 0.3) req.stop = Array.from({ length: pick([1, 2, 100]) }, () => pick(['', 'a', '\n', 'x'.repeat(500)]));
      if (rnd() < 0.3) {
        req.responseFormat = pick([0, 1, 2, 2, 7]) as pb.ResponseFormat;
        req.jsonSchema = pick(['', '{', '{"type":"object"}', '{"type":"array"}', '{"type":"object","properties":{"a":{"type":"string","pattern":"x"}}}', '{"$ref":"#/nope"}', 'null']);
      }
      req.topLogprobs = pick([0, 0, 1, 20, 100000, 4294967295]); req.wantLogprobs = rnd() < 0.5; req.ignoreEos = rnd() < 0.3;
      if (req.maxTokens > 8 && req.ignoreEos && rnd() < 0.9) req.maxTokens = 8;
      const r = await gen(req);
      hist[r.code] = (hist[r.code] ?? 0) + 1;
      const json = JSON.stringify(pb.GenerateRequest.toJSON(req)).slice(0, 400);
      if (r.code !== 0 && r.code !== grpc.status.INVALID_ARGUMENT && r.code !== grpc.status.NOT_FOUND && r.code !== grpc.status.OUT_OF_RANGE && r.code !== grpc.status.RESOURCE_EXHAUSTED) bad.push(`${r.code} ${r.msg} <- ${json}`);
      if (r.code === grpc.status.INVALID_ARGUMENT && !r.msg) bad.push(`empty message <- ${json}`);
    }
    const ok = await gen(pb.GenerateRequest.fromPartial({ requestId: 'final', model: 'tiny', prompt: 'hello', maxTokens: 4 }));
    expect(bad).toEqual([]);
    expect(hist[0]).toBeGreaterThan(10);
    expect(ok.code).toBe(0);
    expect(ok.n).toBe(4);
  });
});
