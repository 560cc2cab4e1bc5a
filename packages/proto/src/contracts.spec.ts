import fs from 'node:fs';
import path from 'node:path';

import { common, engine, protoFiles, protoRoot, scheduler } from './index';

describe('generated contracts', () => {
  it('round-trips a generate request through the wire format', () => {
    const req: engine.GenerateRequest = {
      ...engine.GenerateRequest.fromPartial({}),
      requestId: 'r1',
      model: 'tiny',
      prompt: 'hello',
      maxTokens: 16,
      stop: ['\n'],
      sampling: common.SamplingParams.fromPartial({ temperature: 0.5, seed: 2 ** 40, hasSeed: true }),
    };
    const back = engine.GenerateRequest.decode(engine.GenerateRequest.encode(req).finish());
    expect(back).toEqual(req);
    expect(back.sampling?.seed).toBe(2 ** 40);
  });

  it('exposes both services with the methods of the contract', () => {
    expect(Object.keys(engine.EngineServiceService).sort()).toEqual(
      ['cancel', 'copyModelFile', 'deleteModelFile', 'detokenize', 'generate', 'health', 'listModelFiles', 'listModels', 'loadModel', 'planModel', 'setLoraAdapters', 'slotAction', 'tokenize', 'unloadModel', 'watchTelemetry'].sort(),
    );
    expect(Object.keys(scheduler.SchedulerServiceService).sort()).toEqual(
      ['cancel', 'copyModelFile', 'deleteModelFile', 'detokenize', 'ensureModel', 'health', 'listEngines', 'listModelFiles', 'listModels', 'loadModel', 'planModel', 'registerEngine', 'setLoraAdapters', 'slotAction', 'submit', 'tokenize', 'unloadModel', 'watchQueue', 'watchTelemetry'].sort(),
    );
    expect(engine.EngineServiceService.generate.responseStream).toBe(true);
    expect(Object.keys(scheduler.SchedulerServiceService)).toContain('submit');
    expect(typeof engine.EngineServiceClient).toBe('function');
  });

  it('points at the proto sources', () => {
    for (const f of Object.values(protoFiles)) expect(fs.existsSync(path.join(protoRoot, f))).toBe(true);
  });
});
