import type { engine as pb } from '@kailstream/proto';

import { ApiMetrics } from './metrics';

function model(id: string, bytesRead: number, spec: boolean): pb.ModelTelemetry {
  return {
    model: id,
    tokensPerSecond: 3,
    runningRequests: 1,
    bytesRead,
    ioStallSeconds: 0.25,
    tiers: [{ tier: 'ram', budgetBytes: 1000, usedBytes: 400, hits: 7, misses: 2 }],
    kvUsedBytes: 10,
    kvCapacityBytes: 40,
    experts: [],
    slots: [],
    speculative: spec ? { enabled: true, mode: 'draft', draftedTokens: 12, acceptedTokens: 9, targetPasses: 4, tokensPerPass: 3.25, currentK: 4, timeSavedSeconds: 0 } : undefined,
  };
}

describe('ApiMetrics engine figures', () => {
  it('exports each loaded model of an engine under its own {engine, model} labels', async () => {
    const m = new ApiMetrics();
    m.ingestTelemetry({
      engineId: 'e1',
      address: 'x',
      snapshot: {
        unixMs: 0, tokensPerSecond: 6, tokensGenerated: 0, bytesRead: 500, ioStallSeconds: 0.5, runningRequests: 2,
        tiers: [], storageBandwidthBytesPerSecond: 0, kvUsedBytes: 20, kvCapacityBytes: 80,
        models: [model('qwen', 500, false), model('mixtral', 0, true)],
      },
    });
    const text = await m.registry.metrics();
    expect(text).toContain('kailstream:storage_read_bytes_total{engine="e1",model="qwen"} 500');
    expect(text).toContain('kailstream:storage_read_bytes_total{engine="e1",model="mixtral"} 0');
    expect(text).toContain('kailstream:expert_cache_hits_total{engine="e1",model="mixtral",tier="ram"} 7');
    expect(text).toContain('kailstream:kv_cache_usage_perc{engine="e1",model="qwen"} 0.25');
    // Speculation only where the model speculates.
    expect(text).toContain('kailstream:spec_decode_num_accepted_tokens_total{engine="e1",model="mixtral"} 9');
    expect(text).not.toMatch(/spec_decode_num_accepted_tokens_total\{engine="e1",model="qwen"\}/);
    m.close();
  });
});
