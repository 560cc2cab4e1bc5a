import { renderToString } from 'react-dom/server';
import type { TelemetryPoint } from '@kailstream/api';

import { EngineStrip, HeatmapModelPicker, SlotTable, TelemetryCharts, slotState, telemetrySeries } from './telemetry-view';

function point(t: number, over: Partial<TelemetryPoint> = {}): TelemetryPoint {
  return {
    t,
    tokensPerSecond: 12,
    tokensGenerated: 100,
    bytesRead: 0,
    bytesReadPerSecond: 2048,
    ioStallSeconds: 0,
    ioStallPerSecond: 0.1,
    storageBandwidthBytesPerSecond: 0,
    running: 1,
    queued: 2,
    queueCapacity: 64,
    kvUsedBytes: 10,
    kvCapacityBytes: 100,
    tiers: [{ tier: 'ram', budgetBytes: 1000, usedBytes: 600, hits: 9, misses: 1, hitRate: 0.9 }],
    models: ['tiny'],
    engines: 1,
    speculative: [],
    ...over,
  };
}

describe('telemetry charts', () => {
  it('turns the history into series: memory against budgets per tier, hit rate with gaps', () => {
    const pts = [point(0), point(500, { tiers: [{ tier: 'ram', budgetBytes: 1000, usedBytes: 700, hits: 9, misses: 1, hitRate: null }] })];
    const s = telemetrySeries(pts);
    expect(s.memory.map((x) => x.name)).toEqual(['RAM used', 'RAM budget', 'KV used', 'KV capacity']);
    expect(s.memory[0].points).toEqual([[0, 600], [500, 700]]);
    expect(s.memory[1].dashed).toBe(true);
    expect(s.hitRate[0].points).toEqual([[0, 0.9], [500, null]]);
    // Without a profiled bandwidth there is no reference line.
    expect(s.storage.map((x) => x.name)).toEqual(['bytes read/s']);
    expect(telemetrySeries([point(0, { storageBandwidthBytesPerSecond: 1e9 })]).storage.map((x) => x.name)).toEqual(['bytes read/s', 'profiled bandwidth']);
  });

  it('renders six charts (no tables) with the latest values', () => {
    const html = renderToString(<TelemetryCharts points={[point(0), point(1000)]} windowSeconds={60} />);
    for (const id of ['tokens', 'memory', 'hits', 'storage', 'stall', 'queue']) expect(html).toContain(`data-testid="chart-${id}"`);
    expect(html).not.toContain('<table');
    expect(html).toMatch(/data-legend="RAM hit rate">90.0%</);
    expect(html).toMatch(/data-legend="bytes read\/s">2.00 KiB\/s</);
  });

  it('lists the engines with health, models and running requests', () => {
    const html = renderToString(
      <EngineStrip
        queue={{
          queued: 3,
          running: 1,
          capacity: 64,
          engines: [
            { engineId: 'e1', address: '127.0.0.1:1', serving: true, models: ['tiny'], running: 1, lastSeenUnixMs: 0 },
            { engineId: 'e2', address: '127.0.0.1:2', serving: false, models: [], running: 0, lastSeenUnixMs: 0 },
          ],
        }}
      />,
    );
    expect(html).toMatch(/class="ok">●<\/span> <!-- -->127.0.0.1:1<!-- --> · <!-- -->tiny<!-- --> · <!-- -->1<!-- --> running/);
    expect(html).toContain('no model');
    expect(html).toContain('class="error">○');
    expect(html).toMatch(/queue <!-- -->3<!-- --> of 64/);
  });

  it('shows each model\'s slots: idle, prompt progress or generating, with the request, its counts and the KV cache held', () => {
    const base = { requestId: '', nCtx: 4096, promptTokens: 0, promptTokensProcessed: 0, decodedTokens: 0, remainingTokens: 0, cachedTokens: 0, sampling: undefined, speculative: false };
    const at = (temperature: number) => ({ temperature, topK: 40, topP: 1, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyLastN: 64, seed: 1, hasSeed: true, logitBias: {} });
    const slots = [
      { ...base, id: 0, processing: true, requestId: 'chatcmpl-1', promptTokens: 300, promptTokensProcessed: 300, decodedTokens: 12, remainingTokens: 244, cachedTokens: 312, sampling: at(0.7) },
      { ...base, id: 1, processing: true, requestId: 'chatcmpl-2', promptTokens: 20000, promptTokensProcessed: 512, cachedTokens: 512, sampling: at(1) },
      { ...base, id: 2, processing: false, cachedTokens: 40 },
    ];
    expect(slots.map(slotState)).toEqual(['generating', 'prompt 512 / 20.0k', 'idle']);
    const html = renderToString(<SlotTable models={[{ engineId: 'e1', model: 'tiny', slots }]} />);
    expect(html).toMatch(/2<!-- --> of <!-- -->3<!-- --> slots busy/);
    expect(html).toMatch(/<td class="ok">generating<\/td><td>chatcmpl-1<\/td><td>12<\/td><td>244<\/td><td>312<!-- --> \/ <!-- -->4096<!-- --> tokens<\/td><td>0.70<\/td>/);
    expect(html).toMatch(/<td class="muted">idle<\/td><td>—<\/td><td>—<\/td><td>—<\/td><td>40<!-- --> \/ <!-- -->4096<!-- --> tokens<\/td><td>—<\/td>/);
    expect(html).not.toContain('(e1)');
    expect(renderToString(<SlotTable models={[]} />)).toContain('no model loaded');
  });

  it('offers the heatmap a model picker once two models report, naming engines only when there are several', () => {
    const noop = () => undefined;
    expect(renderToString(<HeatmapModelPicker sources={[{ engineId: 'e1', model: 'tiny' }]} value={{ engineId: 'e1', model: 'tiny' }} onChange={noop} />)).toBe('');
    const one = renderToString(<HeatmapModelPicker sources={[{ engineId: 'e1', model: 'qwen' }, { engineId: 'e1', model: 'mixtral' }]} value={{ engineId: 'e1', model: 'mixtral' }} onChange={noop} />);
    expect(one).toContain('aria-label="heatmap model"');
    expect(one).toMatch(/<option value="0">qwen<\/option>/);
    expect(one).toMatch(/<option value="1" selected="">mixtral<\/option>/);
    const two = renderToString(<HeatmapModelPicker sources={[{ engineId: 'e0', model: 'olmoe' }, { engineId: 'e1', model: 'qwen' }]} value={{ engineId: 'e0', model: 'olmoe' }} onChange={noop} />);
    expect(two).toContain('qwen<!-- --> (e1)');
  });
});
