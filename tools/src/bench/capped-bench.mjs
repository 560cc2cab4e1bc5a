#!/usr/bin/env node
// Expert streaming under a real memory cap: kail (and, with --llama, llama.cpp through
// node-llama-cpp in its default configuration) run in a memory cgroup per cap, the model file
// evicted from the page cache before each run. Reports generation tokens/s, expert bytes read per
// token, hit rate (and the share of accesses whose prefetch read was still in flight, misses in the
// hit rate), the cgroup's peak, OOM kills, whether kail's tokens equal an uncapped run's,
// and the I/O bound twice: the profile's random-read bandwidth / bytes read per token (the issue's
// definition), and the same with the model file's own random O_DIRECT read bandwidth, at the read
// size and depth the profile gives a run.
// Needs root (writable memory cgroups) and built dist/ outputs. Prints a markdown table and a JSON line.
//   node tools/src/bench/capped-bench.mjs --model F.gguf --caps 512M,900M [--pp 32] [--tg 32] [--reps 3]
//        [--threads 2] [--feeds greedy,random] [--reserve 96M] [--data-dir D] [--llama] [--no-repack-shim SO]
//        [--llama-reps 1] [--timeout-s 1200] [--skip-kail]
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const engine = require(path.join(ROOT, 'packages/engine/dist/index.js'));
const KAIL = path.join(ROOT, 'apps/cli/bin/kail.js');
const LLAMA = path.join(ROOT, 'tools/src/bench/llama-bench.mjs');
const { benchArgs } = require(path.join(ROOT, 'tools/dist/bench/args.js'));

const values = benchArgs('capped-bench', {
    model: { type: 'string' },
    caps: { type: 'string' },
    pp: { type: 'string', default: '32' },
    tg: { type: 'string', default: '32' },
    reps: { type: 'string', default: '3' },
    threads: { type: 'string', default: '2' },
    feeds: { type: 'string', default: 'greedy,random' },
    reserve: { type: 'string', default: '96M' },
    'data-dir': { type: 'string' },
    llama: { type: 'boolean', default: false },
    'no-repack-shim': { type: 'string' },
    'skip-kail': { type: 'boolean', default: false },
    'llama-reps': { type: 'string', default: '1' },
    'timeout-s': { type: 'string', default: '1200' },
});
if (!values.model || !values.caps) {
  console.error('capped-bench: --model and --caps are required (--help lists the flags)');
  process.exit(2);
}
const model = path.resolve(values.model);
const caps = values.caps.split(',').map((c) => engine.parseByteSize(c));
const feeds = values.feeds.split(',');
const fmt = engine.formatBytes;
const dataDir = values['data-dir'] ?? path.join(os.homedir(), '.kailstream');
const profile = engine.readHardwareProfile(dataDir);
const profileBw = profile ? Math.max(...profile.storage.map((s) => s.randomBytesPerSecond)) : 0;

let n = 0;
function inCap(cap, args, env = process.env) {
  const g = engine.createMemoryCgroup(`kail-capped-bench-${process.pid}-${n++}`);
  if (typeof g === 'string') throw new Error(g);
  try {
    g.setLimit(cap);
    engine.evictFromPageCache(model);
    const t0 = Date.now();
    const r = g.run(process.execPath, args, { timeoutMs: Number(values['timeout-s']) * 1000, env });
    return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr, peak: g.peak(), oomKills: g.oomKills(), wall: (Date.now() - t0) / 1000 };
  } finally {
    g.remove();
  }
}
const lastJson = (s) => JSON.parse(s.trim().split('\n').pop());

const common = ['-t', values.threads];
// Reference tokens: uncapped, in memory.
const runArgs = ['run', '-m', model, '-p', 'Once upon a time', '-n', values.tg, '--json', '--no-usage-history', '--data-dir', dataDir, ...common];
const ref = inCap(0, [KAIL, ...runArgs]);
if (ref.status !== 0) throw new Error(`reference run failed: ${ref.stderr}`);
const refTokens = lastJson(ref.stdout).tokens;
const routing = lastJson(inCap(0, [KAIL, 'bench', '-m', model, '-p', '8', '-n', '1', '--routing-stats', '--json', '--data-dir', dataDir, ...common]).stdout).routing;

// The bound's bandwidth: random O_DIRECT reads of the model file itself, with the block size and depth
// the profile gives a run, the file evicted first, median of 3 one-second samples. The profile's own
// test file (256 MiB by default) can sit in a virtual disk's host cache and read several times faster
// than a model-sized file does.
const readBytes = profile?.defaults.readBytes ?? 2 ** 20;
const depth = profile?.defaults.ioThreads ?? 4;
engine.evictFromPageCache(model);
const { loadBinding } = require(path.join(ROOT, 'packages/core-native/dist/index.js'));
const samples = [];
for (let i = 0; i < 3; i++) {
  const r = await loadBinding().ioBench({ path: model, blockBytes: readBytes, queueDepth: depth, random: true, seconds: 1, direct: true });
  samples.push(r.seconds > 0 ? r.bytes / r.seconds : 0);
}
const bw = samples.sort((a, b) => a - b)[1];

const rows = [];
for (const cap of caps) {
  const ram = String(cap);
  const stream = ['--ram', ram, '--reserve', values.reserve];
  const tok = values['skip-kail'] ? null : inCap(cap, [KAIL, ...runArgs, ...stream]);
  const same = tok?.status === 0 ? JSON.stringify(lastJson(tok.stdout).tokens) === JSON.stringify(refTokens) : false;
  for (const feed of values['skip-kail'] ? [] : feeds) {
    const r = inCap(cap, [KAIL, 'bench', '-m', model, '-p', values.pp, '-n', values.tg, '--feed', feed, '-r', values.reps, '--json', '--data-dir', dataDir, ...common, ...stream]);
    const b = r.status === 0 ? lastJson(r.stdout) : null;
    const bpt = b?.stream?.bytes_read_per_token ?? 0;
    rows.push({
      engine: 'kail', cap, feed, status: r.status === 0 ? 'ok' : r.signal ? `killed (${r.signal})` : `exit ${r.status}: ${r.stderr.trim().split('\n').pop()}`,
      gen_tps: b?.gen_tps ?? null, bytes_per_token: bpt, hit_rate: b?.stream?.hit_rate ?? null, inflight_rate: b?.stream?.inflight_rate ?? null, peak: r.peak, oom_kills: r.oomKills,
      io_bound_tps: profileBw && bpt ? profileBw / bpt : null, io_bound_file_tps: bw && bpt ? bw / bpt : null, same_tokens: same,
    });
    console.error(`kail cap ${fmt(cap)} feed ${feed}: ${rows.at(-1).status}, ${b?.gen_tps?.toFixed(2)} t/s, peak ${fmt(r.peak)}`);
  }
  const configs = [];
  if (values.llama) configs.push(['llama.cpp (default, mmap)', process.env]);
  // Repack off: the LD_PRELOAD shim of tools/src/bench/no-repack (build.sh) clears use_extra_bufts.
  if (values['no-repack-shim']) configs.push(['llama.cpp (repack off, mmap)', { ...process.env, LD_PRELOAD: path.resolve(values['no-repack-shim']) }]);
  for (const [name, env] of configs) {
    for (const feed of feeds) {
      const r = inCap(cap, [LLAMA, '--model', model, '--pp', values.pp, '--tg', values.tg, '--threads', values.threads, '--reps', values['llama-reps'], '--feed', feed], env);
      const b = r.status === 0 ? lastJson(r.stdout) : null;
      rows.push({ engine: name, cap, feed, status: r.status === 0 ? 'ok' : r.signal ? `killed (${r.signal}${r.oomKills ? ', OOM' : r.wall >= Number(values['timeout-s']) - 1 ? ', timeout' : ''})` : `exit ${r.status}`, gen_tps: b?.gen_tps ?? null, peak: r.peak, oom_kills: r.oomKills });
      console.error(`${name} cap ${fmt(cap)} feed ${feed}: ${rows.at(-1).status}, ${b?.gen_tps?.toFixed(2)} t/s, peak ${fmt(r.peak)}`);
    }
  }
}

const size = fs.statSync(model).size;
const pctOf = (x, bound) => (x && bound ? `${((100 * x) / bound).toFixed(0)}%` : '-');
const lines = [
  `Model ${path.basename(model)} (${fmt(size)}); prompt ${values.pp} random tokens, ${values.tg} generated, ${values.threads} threads, median of ${values.reps}; ` +
    `kail --ram = the cap with --reserve ${values.reserve}, O_DIRECT, default policy; file evicted before each run.`,
  `Routing over ${routing.tokens} random tokens: every MoE layer used >= ${(100 * routing.minUsedShare).toFixed(0)}% of its ${routing.nExpert} experts; consecutive tokens shared ${routing.meanConsecutiveShared.toFixed(2)} of ${routing.nExpertUsed} on average.`,
  `I/O bound = bandwidth / bytes read per token, with two bandwidths: ` +
    (profileBw ? `the profile's random-read figure, ${fmt(profileBw)}/s (${engine.hardwareProfilePath(dataDir)}); ` : 'no hardware profile (read size 1 MiB, depth 4); ') +
    `the model file's, ${fmt(bw)}/s (random ${fmt(readBytes)} O_DIRECT reads at queue depth ${depth}, the file evicted, median of ${samples.map((x) => fmt(x)).join(', ')}).`,
  '',
  '| engine | cap | feed | result | gen t/s | bytes read/token | hit rate | prefetch in flight | cgroup peak | OOM kills | I/O bound t/s: profile, file | achieved / bound: profile, file | tokens = uncapped |',
  '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ...rows.map((r) =>
    `| ${r.engine} | ${fmt(r.cap)} | ${r.feed} | ${r.status} | ${r.gen_tps?.toFixed(2) ?? '-'} | ${r.bytes_per_token ? fmt(r.bytes_per_token) : '-'} | ` +
      `${r.hit_rate != null ? (100 * r.hit_rate).toFixed(1) + '%' : '-'} | ${r.inflight_rate != null ? (100 * r.inflight_rate).toFixed(1) + '%' : '-'} | ${fmt(r.peak)} | ${r.oom_kills} | ${r.io_bound_tps?.toFixed(2) ?? '-'}, ${r.io_bound_file_tps?.toFixed(2) ?? '-'} | ` +
      `${pctOf(r.gen_tps, r.io_bound_tps)}, ${pctOf(r.gen_tps, r.io_bound_file_tps)} | ${r.engine === 'kail' ? (r.same_tokens ? 'yes' : 'no') : '-'} |`,
  ),
];
console.log(lines.join('\n'));
console.log(JSON.stringify({ model, size, routing, bandwidth: bw, bandwidthSamples: samples, profileBandwidth: profileBw, rows }));
