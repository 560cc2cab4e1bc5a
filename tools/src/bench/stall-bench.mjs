// Decode stalls when a long prompt arrives: one stream decodes, then an N-token prompt comes in;
// prints the prompt's time to first token and the largest gap between the decoding stream's tokens
// meanwhile, with BatchEngine's maxDecodeStallMs at 500 ms (the default) and 0 (no limit),
// alternating, twice each. Not a test: run by hand after a build,
//   node tools/src/bench/stall-bench.mjs MODEL.gguf [N=1000]
import { createRequire } from 'node:module';
const require = createRequire(import.meta.url);
const { EngineModel, BatchEngine } = require('../../../packages/engine/dist/index.js');
(async () => {
  const m = EngineModel.load(process.argv[2], { threads: 2, nCtx: 2048, nSeqMax: 2, kvType: 'f16' });
  let s = 5; const r = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) % m.nVocab;
  const longPrompt = Array.from({ length: Number(process.argv[3] || 1000) }, r);
  for (const stall of [500, 0, 500, 0]) {
    const e = new BatchEngine(m, { maxDecodeStallMs: stall, reusePrefix: false });
    const times = [];
    const ac = new AbortController();
    const dec = (async () => { for await (const c of e.generate({ id: 'd', prompt: [1, 2, 3, 4], maxTokens: 1000, sampling: { temperature: 0 }, ignoreEog: true }, ac.signal)) if (c.tokens.length) times.push(performance.now()); })();
    while (times.length < 5) await new Promise((q) => setTimeout(q, 5));
    const t0 = performance.now(); let ttft = 0;
    for await (const c of e.generate({ id: 'p', prompt: longPrompt, maxTokens: 1, sampling: { temperature: 0 }, ignoreEog: true })) if (c.tokens.length && !ttft) ttft = performance.now() - t0;
    const during = times.filter((t) => t >= t0);
    let gap = 0; for (let i = 1; i < during.length; i++) gap = Math.max(gap, during[i] - during[i - 1]);
    const first = during.length ? during[0] - t0 : 0;
    ac.abort(); await dec; await e.close(); m.truncate(0, 0); m.truncate(1, 0);
    console.log(`stall limit ${stall} ms: ${longPrompt.length}-token prompt TTFT ${ttft.toFixed(0)} ms; the decoding stream emitted ${during.length} tokens meanwhile, largest gap ${Math.max(gap, first).toFixed(0)} ms`);
  }
  m.close();
})();
