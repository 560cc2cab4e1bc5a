// Two streaming models in one engine service, the VRAM tier from the hardware profile (what
// `kail serve` does): each model's tier takes what the loaded models' tiers leave of the profiled
// GPU. The profile is DATA_DIR/profile.json with the GPU's usable memory replaced by GPU_BYTES, so
// the two tiers cannot both hold every expert. Prints each model's tier and greedy tokens, and
// whether they equal an in-RAM model's.
//   node tools/gpu-check/two-models.js MODEL.gguf DATA_DIR GPU_BYTES RAM_BYTES [THREADS]
'use strict';
const { LocalModelHost, readHardwareProfile } = require('@kailstream/engine');
const { engine: pb } = require('@kailstream/proto');

async function main() {
  const [file, dataDir, gpuBytes, ramBytes, threads] = process.argv.slice(2);
  if (!ramBytes) throw new Error('usage: two-models.js MODEL.gguf DATA_DIR GPU_BYTES RAM_BYTES [THREADS]');
  const profile = readHardwareProfile(dataDir);
  if (!profile) throw new Error(`no hardware profile in ${dataDir} (run kail profile --data-dir ${dataDir})`);
  const gpus = profile.gpus.length ? [{ ...profile.gpus[0], usableBytes: Number(gpuBytes) }] : [];
  console.log(`profiled GPU: ${gpus.length ? `${gpus[0].name}, usable memory set to ${gpus[0].usableBytes} bytes` : 'none (no VRAM tier expected)'}`);
  const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256, threads: Number(threads || 0), profile: { ...profile, gpus } });
  const tokens = async (model) => {
    const ids = [];
    const req = pb.GenerateRequest.fromPartial({ requestId: model, model, prompt: 'Once upon a time in a land far away', maxTokens: 24, sampling: { temperature: 0 }, ignoreEos: true });
    for await (const r of host.generate(req, new AbortController().signal)) ids.push(...r.tokens);
    return ids;
  };
  try {
    const ref = [];
    for (const [id, ram] of [['in-ram', 0], ['first', Number(ramBytes)], ['second', Number(ramBytes)]]) {
      const info = await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id, ramBudgetBytes: ram, ...(ram ? {} : { vramBudgetBytes: 0 }) }));
      const t = await tokens(id);
      if (id === 'in-ram') ref.push(...t);
      const r = info.residency;
      console.log(`${id}: RAM budget ${info.ramBudgetBytes}, RAM expert cache ${r.ramExpertCacheBytes} bytes, VRAM tier ${r.vramExpertCacheBytes} bytes of ${r.expertBytes} expert bytes; ${t.length} tokens, same as in RAM: ${JSON.stringify(t) === JSON.stringify(ref)}`);
    }
  } finally {
    await host.close();
  }
}
main().catch((e) => {
  console.error(`two-models: ${e.message}`);
  process.exit(1);
});
