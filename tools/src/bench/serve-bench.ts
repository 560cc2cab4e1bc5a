#!/usr/bin/env node
// Serving benchmark: aggregate generation tokens/s with 1, 4 and 16 concurrent streams through the
// whole serving path (HTTP API -> scheduler -> engine, OpenAI SSE streaming, greedy, ignore_eos),
// next to the same requests run on the engine in this process without any RPC, which gives the
// latency the API and scheduler add per token. The engine runs in this process (LocalModelHost +
// its gRPC server); the scheduler and the API are their own processes, as under `kail serve`.
// Not a test: run by hand after a build,
//   node tools/dist/bench/serve-bench.js [--model FILE] [--layers 8] [--tg 32] [--streams 1,4,16]
//        [--threads 2] [--ram-budget BYTES | --cap-experts N] [--temperature T] [--models DIR] [--no-write]
// --temperature T samples (seeded per stream) instead of greedy decoding: greedy decoding of random
// weights loops over a few tokens and so over the same experts, which flatters a capped cache.
// Without --model it uses (writing it first when missing) the bench-qwen3-30b-a3b-shaped preset cut
// to --layers blocks, Q4_K. Prints a markdown table and writes it into docs/benchmarks.md between
// the serve-bench markers.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

import { LocalModelHost, formatBytes, planModel, startEngineServer } from '@kailstream/engine';
import { engine as pb } from '@kailstream/proto';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { steadyRate } from './serve-stats';
import { benchArgs } from './args';

const ROOT = path.resolve(__dirname, '../../..');
const PRESET = 'bench-qwen3-30b-a3b-shaped';
const TYPE = 'Q4_K' as const;

function ensureModel(dir: string, layers: number): string {
  const file = path.join(dir, `${PRESET}-L${layers}-${TYPE}.gguf`);
  if (fs.existsSync(file)) return file;
  fs.mkdirSync(dir, { recursive: true });
  process.stderr.write(`writing ${file} (minutes) ...\n`);
  writeModel({ config: { ...getPreset(PRESET).config, nLayers: layers }, fileType: TYPE, seed: 1, out: `${file}.partial` });
  fs.renameSync(`${file}.partial`, file);
  return file;
}

/** Starts a service process that prints one JSON line with its address (as `kail serve` does). */
function startService(script: string, args: string[]): Promise<{ child: ChildProcess; address: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    child.once('exit', (code) => reject(new Error(`${path.basename(script)} exited (${code}): ${err}`)));
    readline.createInterface({ input: child.stdout! }).once('line', (l) => resolve({ child, address: (JSON.parse(l) as { address: string }).address }));
  });
}

interface Run {
  tokens: number;
  seconds: number;
  /** Mean gap between successive tokens of one stream, averaged over streams (s). */
  itl: number;
  /** Mean time to first token (s). */
  ttft: number;
  /** Aggregate tokens/s while every stream decodes (serve-stats.ts steadyRate). */
  steady: number | null;
}

function summarise(streams: { t0: number; times: number[] }[], t0: number, t1: number): Run {
  const tokens = streams.reduce((a, s) => a + s.times.length, 0);
  const itls = streams.filter((s) => s.times.length > 1).map((s) => (s.times.at(-1)! - s.times[0]) / (s.times.length - 1));
  return {
    tokens,
    seconds: (t1 - t0) / 1000,
    itl: itls.reduce((a, b) => a + b, 0) / Math.max(1, itls.length) / 1000,
    ttft: streams.reduce((a, s) => a + (s.times[0] - s.t0), 0) / streams.length / 1000,
    steady: steadyRate(streams.map((s) => s.times)),
  };
}

// Every run gets prompts of its own (the run number first): the engine keeps each finished
// sequence's KV cache for a prompt that continues it (prefix reuse), and a run repeating an
// earlier run's prompts would skip their prefill.
let runNo = 0;
const prompts = (n: number) => {
  const r = ++runNo;
  return Array.from({ length: n }, (_, i) => `Run ${r}, request ${i}: tell a long story about the number ${i * 7 + 3}.`);
};

/** n concurrent generations on the engine in this process (no RPC at all). */
async function direct(host: LocalModelHost, n: number, tg: number, temperature: number): Promise<Run> {
  const t0 = performance.now();
  const streams = await Promise.all(
    prompts(n).map(async (p, i) => {
      const s = { t0: performance.now(), times: [] as number[] };
      const req = pb.GenerateRequest.fromPartial({
        requestId: `direct-${n}-${i}-${Date.now()}`, model: 'bench', messages: [{ role: 'user', content: p }], maxTokens: tg,
        sampling: { temperature, topP: 1, seed: 1000 + i, hasSeed: true }, ignoreEos: true,
      });
      for await (const m of host.generate(req, new AbortController().signal)) for (let k = 0; k < m.tokens.length; k++) s.times.push(performance.now());
      return s;
    }),
  );
  return summarise(streams, t0, performance.now());
}

/** n concurrent OpenAI streaming chat completions through the API. */
async function viaApi(url: string, n: number, tg: number, temperature: number): Promise<Run> {
  const t0 = performance.now();
  const streams = await Promise.all(
    prompts(n).map(async (p, i) => {
      const s = { t0: performance.now(), times: [] as number[] };
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: p }], max_tokens: tg, temperature, seed: 1000 + i, stream: true, ignore_eos: true, stream_options: { include_usage: true } }),
      });
      if (!r.ok || !r.body) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      let completion = 0;
      let chunks = 0;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(6, i);
          buf = buf.slice(i + 2);
          if (ev === '[DONE]') continue;
          const o = JSON.parse(ev) as { error?: { message: string }; usage?: { completion_tokens: number }; choices: { delta?: { content?: string } }[] };
          if (o.error) throw new Error(o.error.message);
          if (o.usage) completion = o.usage.completion_tokens;
          else if (o.choices[0]?.delta?.content) {
            s.times.push(performance.now());
            chunks++;
          }
        }
      }
      // A chunk can carry more than one token (a multi-byte character waits for its last byte):
      // spread the usage count over the chunk times so tokens/s counts tokens, not chunks.
      while (s.times.length < completion && chunks > 0) s.times.push(s.times.at(-1)!);
      return s;
    }),
  );
  return summarise(streams, t0, performance.now());
}

async function main() {
  const values = benchArgs('serve-bench', {
    model: { type: 'string' },
    layers: { type: 'string', default: '8' },
    tg: { type: 'string', default: '32' },
    temperature: { type: 'string', default: '0' },
    streams: { type: 'string', default: '1,4,16' },
    threads: { type: 'string', default: '2' },
    'ram-budget': { type: 'string', default: '0' },
    'cap-experts': { type: 'string' },
    models: { type: 'string', default: path.join(os.homedir(), '.kailstream/bench-models') },
    'no-write': { type: 'boolean', default: false },
  });
  const tg = Number(values.tg);
  const temperature = Number(values.temperature);
  if (!(temperature >= 0 && temperature <= 2)) throw new Error(`--temperature takes 0..2, got '${values.temperature}'`);
  const threads = Number(values.threads);
  const counts = values.streams!.split(',').map(Number);
  if (!counts.every((n) => Number.isInteger(n) && n > 0)) throw new Error(`--streams takes positive integers, got '${values.streams}'`);
  const maxStreams = Math.max(...counts);
  const file = values.model ?? ensureModel(values.models!, Number(values.layers));
  const ctx = 128;
  let ramBudget = Number(values['ram-budget']);
  let capNote = '';
  if (values['cap-experts']) {
    // The streaming cap: what the model needs besides experts, plus an expert cache of N per MoE layer.
    const n = Number(values['cap-experts']);
    const p0 = planModel(file, { nCtx: ctx, nSeqMax: maxStreams, ramBytes: 2 ** 40 });
    ramBudget = p0.fixedBytes + n * p0.nMoeLayers * p0.expertEntryBytes;
    capNote = `, an expert cache of ${n} of ${p0.nExpert} experts per MoE layer`;
  }

  const host = new LocalModelHost({ seqsPerModel: maxStreams, defaultContext: ctx });
  process.stderr.write(`loading ${file} ...\n`);
  const info = await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'bench', contextLength: ctx, threads, ramBudgetBytes: ramBudget }));
  const engine = await startEngineServer(host, { port: 0 });
  const sched = await startService(path.join(ROOT, 'packages/scheduler/dist/main.js'), ['--port', '0', '--engine', `127.0.0.1:${engine.port}`, '--slots', String(maxStreams)]);
  const api = await startService(path.join(ROOT, 'apps/api/dist/main.js'), ['--port', '0', '--scheduler', sched.address]);
  const rows: string[] = [];
  try {
    process.stderr.write('warming up (expert cache, page cache) ...\n');
    await direct(host, 1, tg, temperature);
    await viaApi(api.address, 1, 4, temperature);
    for (const n of counts) {
      const d = await direct(host, n, tg, temperature);
      const a = await viaApi(api.address, n, tg, temperature);
      const row = {
        n, directTps: d.tokens / d.seconds, apiTps: a.tokens / a.seconds,
        directItl: d.itl * 1000, apiItl: a.itl * 1000, directTtft: d.ttft * 1000, apiTtft: a.ttft * 1000,
        // Decode throughput while every stream decodes (see Run.steady).
        directDecode: d.steady, apiDecode: a.steady,
      };
      const f1 = (v: number | null) => (v === null ? '-' : v.toFixed(1));
      process.stderr.write(`${n} streams: direct ${row.directTps.toFixed(1)} t/s (decode ${f1(row.directDecode)}), API ${row.apiTps.toFixed(1)} t/s (decode ${f1(row.apiDecode)})\n`);
      rows.push(
        `| ${n} | ${row.directTps.toFixed(1)} | ${row.apiTps.toFixed(1)} | ${f1(row.directDecode)} | ${f1(row.apiDecode)} | ${(row.apiTps / row.directTps).toFixed(2)} | ${row.directItl.toFixed(1)} | ${row.apiItl.toFixed(1)} | ${(row.apiItl - row.directItl).toFixed(1)} | ${row.directTtft.toFixed(0)} | ${row.apiTtft.toFixed(0)} |`,
      );
    }
  } finally {
    api.child.kill('SIGTERM');
    sched.child.kill('SIGTERM');
    await engine.close(100);
  }
  const cpu = os.cpus()[0]?.model.replace(/\s+/g, ' ').trim() ?? 'unknown CPU';
  const m = info;
  const text = [
    `Measured ${new Date().toISOString().slice(0, 10)} on ${cpu}, ${os.cpus().length} logical CPUs, ${formatBytes(os.totalmem())} RAM, node ${process.version}, ${threads} compute threads; load average ${os.loadavg().map((l) => l.toFixed(1)).join(' / ')} at the end (above ~2 on these 2 CPUs means other work shared the machine and the speeds are lower than alone).`,
    `Model: ${path.basename(file)} (${m ? `${m.architecture}, ${m.layerCount} layers, ${m.expertCount} experts top-${m.expertUsedCount}, ` : ''}${formatBytes(fs.statSync(file).size)}), ${ramBudget > 0 ? `RAM budget ${formatBytes(ramBudget)}${capNote} (the other experts streamed from storage)` : 'in RAM (no budget)'}, context ${ctx} per sequence, ${maxStreams} sequences. Each stream: a one-line chat prompt, ${tg} generated tokens, ${temperature > 0 ? `sampled at temperature ${temperature} (seed per stream)` : 'greedy'}, ignore_eos. "direct": the same requests on the engine in this process (LocalModelHost.generate, no RPC); "API": OpenAI SSE streaming through the API and scheduler processes to the engine's gRPC server. Tokens/s = all generated tokens / wall time of the batch (prefill included); decode tokens/s = tokens emitted while every stream decodes (from the last stream's first token to the first stream's last) over that time; inter-token = mean gap between a stream's successive tokens, prefill passes of streams admitted later included; added = API minus direct.`,
    '',
    '| streams | direct tokens/s | API tokens/s | direct decode tokens/s | API decode tokens/s | API / direct | direct inter-token ms | API inter-token ms | added per token ms | direct TTFT ms | API TTFT ms |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows,
  ].join('\n');
  process.stdout.write(text + '\n');
  if (!values['no-write']) {
    const doc = path.join(ROOT, 'docs/benchmarks.md');
    const cur = fs.readFileSync(doc, 'utf8');
    const begin = '<!-- serve-bench:begin -->';
    const end = '<!-- serve-bench:end -->';
    const block = `${begin}\n${text}\n${end}`;
    const next = cur.includes(begin)
      ? cur.replace(new RegExp(`${begin}[\\s\\S]*?${end}`), block)
      : `${cur.trimEnd()}\n\n## Serving: concurrent streams through the API\n\nWritten by \`node tools/dist/bench/serve-bench.js\` (tools/src/bench/serve-bench.ts).\n\n${block}\n`;
    fs.writeFileSync(doc, next);
    process.stderr.write(`wrote ${doc}\n`);
  }
}

main().catch((e) => {
  process.stderr.write(`serve-bench: ${(e as Error).stack ?? e}\n`);
  process.exit(1);
});
