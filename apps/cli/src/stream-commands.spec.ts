// kail plan, and run/bench with --ram (experts streaming from storage), on the built-in demo model.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { systemInfo, writeMultipleChoice } from '@kailstream/engine';
import { getPreset, writeLoraAdapter, writeModel } from '@kailstream/tools';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });
}

describe('kail plan and --ram', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cli-stream-'));
  let model: string;
  let inMemory: number[];
  let ram: number;
  beforeAll(() => {
    const r = kail('run', '--demo', '--data-dir', dir, '-p', 'Hello', '-n', '8', '-t', '2', '--json');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout);
    model = out.model;
    inMemory = out.tokens;
    expect(out.stream).toBeNull();
  }, 120_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('plan prints resident, KV, cache capacity and cold bytes per token; --json too', () => {
    const p = JSON.parse(kail('plan', '-m', model, '--ram', '64M', '--reserve', '0', '--ctx', '256', '--json').stdout);
    expect(p.fits).toBe(true);
    expect(p.ramBytes).toBe(64 * 2 ** 20);
    expect(p.kvBytes).toBeGreaterThan(0);
    expect(p.nCtx).toBe(256);
    expect(p.cacheBytes).toBe(p.ramBytes - p.residentBytes - p.kvBytes - p.scratchBytes);
    expect(p.coldReadBytesPerToken).toBe(p.nExpertUsed * p.nMoeLayers * p.expertEntryBytes);
    // A budget with room for 2.5 experts per MoE layer, for the runs below.
    ram = p.fixedBytes + Math.round(2.5 * p.nMoeLayers * p.expertEntryBytes);
    const text = kail('plan', '-m', model, '--ram', '512M', '--ctx', '256');
    expect(text.status).toBe(0);
    for (const label of ['resident', 'KV cache', 'expert cache', 'per MoE layer', 'cold read/token', 'fits             yes']) expect(text.stdout).toContain(label);
  });

  it('plan counts the experts of MoE layers of different sizes (GroveMoE: routed and chunk experts)', () => {
    const grove = path.join(dir, 'grove.gguf');
    const preset = getPreset('tiny-grovemoe');
    writeModel({ config: preset.config, fileType: 'F16', seed: 1, out: grove });
    const p = JSON.parse(kail('plan', '-m', grove, '--ram', '512M', '--json').stdout);
    const c = preset.config as unknown as { nLayers: number; nExperts: number; expertsPerGroup: number };
    const nChunk = c.nExperts / c.expertsPerGroup;
    expect(Number.isInteger(nChunk) && nChunk < c.nExperts).toBe(true);
    expect(p.nMoeLayers).toBe(2 * c.nLayers);
    expect([p.nExpert, p.nExpertMin]).toEqual([c.nExperts, nChunk]);
    expect(p.nExpertTotal).toBe(c.nLayers * (c.nExperts + nChunk));
    const text = kail('plan', '-m', grove, '--ram', '512M').stdout;
    expect(text).toContain(`${p.nExpertTotal} experts in ${p.nMoeLayers} MoE layers of ${nChunk} to ${c.nExperts}`);
    // Uniform layers keep the short form.
    expect(kail('plan', '-m', model, '--ram', '512M').stdout).toMatch(/MoE layers x \d+ experts, \d+ used per token/);
  });

  it('plan exits non-zero with the numbers when the budget is too small; bad sizes are named', () => {
    const r = kail('plan', '-m', model, '--ram', '1M');
    expect(r.status).not.toBe(0);
    expect(r.stdout).toContain('fits             no');
    expect(r.stderr).toMatch(/RAM budget 1\.00 MiB .* short: resident weights .* the budget must be at least/);
    const bad = kail('plan', '-m', model, '--ram', '8X');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain("--ram: '8X' is not a byte size");
    expect(kail('plan', '-m', model, '--ram', '512M', '--vram', '0').status).toBe(0);
  });

  it('--vram: plan counts the VRAM tier; run and bench use it on a CUDA device and refuse, saying why, without one', () => {
    const p = JSON.parse(kail('plan', '-m', model, '--ram', '512M', '--vram', '1M', '--json').stdout);
    expect(p.vramBytes).toBe(2 ** 20);
    expect(p.vramCacheExperts).toBe(Math.floor(2 ** 20 / p.expertEntryBytes));
    expect(p.vramCacheExperts).toBeGreaterThan(0);
    expect(p.vramCacheBytes).toBe(p.vramCacheExperts * p.expertEntryBytes);
    expect(kail('plan', '-m', model, '--ram', '512M', '--vram', '1M').stdout).toContain(`VRAM tier        1.00 MiB: ${p.vramCacheExperts} experts`);
    // A budget past every expert (a whole GPU, as the profile offers) takes only their slots.
    const all = JSON.parse(kail('plan', '-m', model, '--ram', '512M', '--vram', '100G', '--json').stdout);
    expect(all.vramCacheExperts).toBe(all.nExpertTotal);
    expect(all.vramCacheBytes).toBe(all.nExpertTotal * all.expertEntryBytes);
    expect(kail('plan', '-m', model, '--ram', '512M', '--vram', '100G').stdout).toContain(
      `of the 100.00 GiB budget: all ${all.nExpertTotal} experts`,
    );
    // Without a RAM budget nothing streams, so there is nothing for the tier to hold.
    const noRam = kail('run', '-m', model, '-n', '2', '--vram', '1M', '--data-dir', dir);
    expect(noRam.status).not.toBe(0);
    expect(noRam.stderr).toMatch(/--vram\) needs a RAM budget/);
    const devices = systemInfo().cudaDevices.length;
    for (const cmd of ['run', 'bench']) {
      const extra = cmd === 'run' ? ['-p', 'Hello', '-n', '8', '--json'] : ['-p', '8', '-n', '4', '-r', '1'];
      const ctx = cmd === 'run' ? ['--ctx', '256'] : [];
      const v = kail(cmd, '-m', model, '-t', '2', ...ctx, '--ram', String(ram), '--reserve', '0', '--vram', '1M', ...extra);
      if (devices === 0) {
        expect(v.status).not.toBe(0);
        expect(v.stderr).toMatch(/a VRAM tier needs (the CUDA backend, and this build has none|a CUDA device, and there is no device 0)/);
      } else {
        // A GPU: RAM misses come back from VRAM, and the tokens are the in-memory run's.
        expect(v.status).toBe(0);
        if (cmd === 'run') {
          const out = JSON.parse(v.stdout);
          expect(out.tokens).toEqual(inMemory);
          expect(out.stream.vramDevice).toMatch(/^cuda:0/);
        }
      }
    }
  });

  it('run --ram streams experts and gives the in-memory tokens', () => {
    const r = kail('run', '-m', model, '-p', 'Hello', '-n', '8', '-t', '2', '--ctx', '256', '--ram', String(ram), '--reserve', '0', '--json');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.tokens).toEqual(inMemory);
    expect(out.stream.bytesRead).toBeGreaterThan(0);
    expect(out.stream.hits + out.stream.misses).toBe(out.stream.accesses);
    const text = kail('run', '-m', model, '-p', 'Hello', '-n', '4', '-t', '2', '--ctx', '256', '--ram', String(ram), '--reserve', '0');
    expect(text.stderr).toMatch(/experts: \d+ asked, hit rate [\d.]+% \(\+[\d.]+% being prefetched\), read .* prefetch precision/);
    const refused = kail('run', '-m', model, '-n', '1', '--ram', '2M');
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toContain('short');
  });

  it('perplexity prints llama-perplexity\'s estimate, the same with experts streaming under --ram', () => {
    const text = path.join(dir, 'text.txt');
    fs.writeFileSync(text, 'The router sends each token to a few experts, and the experts stream from storage. '.repeat(40));
    const r = kail('perplexity', '-m', model, '-f', text, '-c', '64', '--chunks', '3', '-t', '2');
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/^\[1\][\d.]+,\[2\][\d.]+,\[3\][\d.]+,$/m);
    expect(r.stdout).toMatch(/^Final estimate: PPL = [\d.]+ \+\/- [\d.]+$/m);
    expect(r.stdout).toContain('3 chunks of 64 tokens, 93 scored');
    const mem = JSON.parse(kail('perplexity', '-m', model, '-f', text, '-c', '64', '--chunks', '3', '-t', '2', '--json').stdout);
    const streamed = JSON.parse(kail('perplexity', '-m', model, '-f', text, '-c', '64', '--chunks', '3', '-t', '2', '--ram', String(ram), '--reserve', '0', '--json').stdout);
    expect(mem.ppl).toBeGreaterThan(1);
    expect(streamed.ppl).toBe(mem.ppl);
    expect(streamed.tokensScored).toBe(93);
    // --ppl-stride (llama-perplexity's strided mode): chunks of -c + S/2 every S tokens, the last S scored.
    const st = kail('perplexity', '-m', model, '-f', text, '-c', '32', '--ppl-stride', '16', '--ppl-output-type', '1', '--chunks', '3', '-t', '2');
    expect(st.status).toBe(0);
    expect(st.stdout).toMatch(/^ {7}0  [\d.]+\n {6}16  [\d.]+\n {6}32  [\d.]+\n/m);
    expect(st.stdout).toContain('3 chunks of 40 tokens every 16, 48 scored');
    const stJson = JSON.parse(kail('perplexity', '-m', model, '-f', text, '-c', '32', '--ppl-stride', '16', '--chunks', '3', '-t', '2', '--ram', String(ram), '--reserve', '0', '--json').stdout);
    expect(stJson.ppl).toBeCloseTo(Number(/Final estimate: PPL = ([\d.]+)/.exec(st.stdout)![1]), 3);
    expect(kail('perplexity', '-m', model, '-f', text, '-c', '8', '--ppl-stride', '64').stderr).toContain('a stride of 64 scores more tokens than a chunk of 40 holds');
    // A text too short for two chunks is a clear error, not a crash.
    fs.writeFileSync(text, 'Too short.');
    const short = kail('perplexity', '-m', model, '-f', text, '-c', '64');
    expect(short.status).not.toBe(0);
    expect(short.stderr).toMatch(/tokenizes to \d+ tokens; a chunk size of 64 needs at least 128/);
  });

  it("perplexity --hellaswag, --winogrande and --multiple-choice print llama-perplexity's lines; the same scores with experts streaming; a bad file is named", () => {
    const words = 'the router sends each token to a few experts and they stream from storage into the cache'.split(' ');
    let s = 3;
    const w = (n: number) => Array.from({ length: n }, () => words[(s = (s * 1103515245 + 12345) >>> 0) % words.length]).join(' ');
    const hs = path.join(dir, 'hs.txt');
    fs.writeFileSync(hs, Array.from({ length: 8 }, (_, t) => [`Streaming: ${w(8)}`, String(t % 4), w(3), w(5), w(2), w(6)].join('\n')).join('\n') + '\n');
    const r = kail('perplexity', '-m', model, '-f', hs, '--hellaswag', '--hellaswag-tasks', '6', '-t', '2');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('task\tacc_norm\t95% confidence interval');
    expect(r.stdout).toMatch(/^6\t\d+\.\d{8}%\t\[\d+\.\d{4}%, \d+\.\d{4}%\]$/m);
    expect(r.stdout).toMatch(/^HellaSwag acc_norm over 6 tasks: /m);
    const mem = JSON.parse(kail('perplexity', '-m', model, '-f', hs, '--hellaswag', '-t', '2', '-c', '64', '--json').stdout).hellaswag;
    // (Eight sequences of 64 positions: the KV cache of 512, a MiB more than the plan's 256.)
    const streamed = JSON.parse(kail('perplexity', '-m', model, '-f', hs, '--hellaswag', '-t', '2', '-c', '64', '-np', '8', '--ram', String(ram + 2 ** 20), '--reserve', '0', '--json').stdout).hellaswag;
    expect(mem.tasks).toBe(8);
    expect(streamed.correct).toBe(mem.correct);
    const wg = path.join(dir, 'wg.csv');
    fs.writeFileSync(wg, ['index,sentence,option1,option2,answer', ...Array.from({ length: 6 }, (_, t) => `${t},${w(4)} _ ${w(1 + (t % 5))}.,${w(1)},${w(1)},${1 + (t % 2)}`)].join('\n') + '\n');
    const g = kail('perplexity', '-m', model, '-f', wg, '--winogrande', '-t', '2');
    expect(g.status).toBe(0);
    // (As llama-perplexity: -f drops the file's trailing newline, and its reader then leaves out the
    // last line, which no newline ends: 5 of the 6 tasks.)
    expect(g.stderr).toContain('5 Winogrande tasks (1 line(s) skipped, e.g. line 1: no \'_\' in the sentence)');
    expect(g.stdout).toMatch(/^5\t\d+\.\d{4}\t +-?\d+\.\d{6}  +-?\d+\.\d{6}  [12]  [12]$/m);
    expect(g.stdout).toMatch(/^Final Winogrande score\(5 tasks\): [\d.]+ \+\/- [\d.]+/m);
    // Each file in the other's mode: named, before the model loads.
    const bad = kail('perplexity', '-m', model, '-f', wg, '--hellaswag');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain(`${wg}: 7 lines; a HellaSwag file has 6 per task`);
    expect(kail('perplexity', '-m', model, '-f', hs, '--winogrande').stderr).toContain(`${hs}: no Winogrande tasks`);
    // The multiple-choice file (binary): tasks of 2-4 answers; one of 6 needs -np 6.
    const mcFile = path.join(dir, 'mc.bin');
    const tasks = Array.from({ length: 5 }, (_, t) => ({ question: w(6), answers: Array.from({ length: 2 + (t % 3) }, () => w(2)), labels: Array.from({ length: 2 + (t % 3) }, (_, a) => (a === 0 ? 1 : 0)) }));
    fs.writeFileSync(mcFile, writeMultipleChoice(tasks));
    const mc = kail('perplexity', '-m', model, '-f', mcFile, '--multiple-choice', '-t', '2');
    expect(mc.status).toBe(0);
    expect(mc.stdout).toMatch(/^task\tacc_norm\n1\t\d+\.\d{8}\n/m);
    expect(mc.stdout).toMatch(/^Final result: [\d.]+ \+\/- [\d.]+\nRandom chance: [\d.]+ \+\/- [\d.]+$/m);
    fs.writeFileSync(mcFile, writeMultipleChoice([...tasks, { question: 'q', answers: ['a', 'b', 'c', 'd', 'e', 'f'], labels: [1, 0, 0, 0, 0, 0] }]));
    expect(kail('perplexity', '-m', model, '-f', mcFile, '--multiple-choice').stderr).toContain('task 6: 6 candidates need as many sequences; the model was loaded with 4 (-np)');
    expect(kail('perplexity', '-m', model, '-f', mcFile, '--multiple-choice', '-np', '6').status).toBe(0);
    expect(kail('perplexity', '-m', model, '-f', hs, '--multiple-choice').stderr).toMatch(/hs\.txt: .*(runs past the end|ends inside|at most 100)/);
  });

  it("--rope-scaling/--rope-scale/--yarn-orig-ctx (llama.cpp's RoPE flags) run as the same values in the file's metadata would; a bad one is named", () => {
    const run = (...a: string[]) => kail('run', '-m', model, '-p', 'The experts stream from storage', '-n', '8', '-t', '2', '--ignore-eos', '--json', ...a);
    const yarn = run('--rope-scaling', 'yarn', '--rope-scale', '4', '--yarn-orig-ctx', '64', '--rope-freq-base', '20000');
    expect(yarn.status).toBe(0);
    const meta = run('--override-kv', 'qwen3moe.rope.scaling.type=str:yarn,qwen3moe.rope.scaling.factor=float:4,qwen3moe.rope.scaling.original_context_length=int:64,qwen3moe.rope.freq_base=float:20000');
    expect(JSON.parse(yarn.stdout).tokens).toEqual(JSON.parse(meta.stdout).tokens);
    const bad = run('--rope-scale', 'four');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain("--rope-scale takes a number, got 'four'");
    expect(run('--rope-scaling', 'ntk').stderr).toContain("--rope-scaling must be none, linear, yarn, got 'ntk'");
    expect(run('--rope-scale', '2', '--rope-freq-scale', '0.5').stderr).toContain('--rope-scale N and --rope-freq-scale 1/N say the same thing');
  });

  it("perplexity --kl-divergence-base then --kl-divergence, as llama-perplexity's: the same model (streamed or not) gives 0, fewer experts do not", () => {
    const text = path.join(dir, 'kld.txt');
    fs.writeFileSync(text, 'A quantized model is judged by how far its distributions move from the base model. '.repeat(40));
    const base = path.join(dir, 'base.kld');
    const saved = kail('perplexity', '-m', model, '-f', text, '-c', '64', '--chunks', '3', '-t', '2', '--kl-divergence-base', base);
    expect(saved.status).toBe(0);
    expect(saved.stdout).toContain(`log-probabilities saved to ${base}`);
    const arch = JSON.parse(kail('inspect', '--json', model).stdout).architecture;
    const kld = (...a: string[]) => {
      const r = kail('perplexity', '-m', model, '--kl-divergence-base', base, '--kl-divergence', '-t', '2', '--json', ...a);
      expect(r.status).toBe(0);
      return JSON.parse(r.stdout).stats;
    };
    const same = kld();
    expect(same.positions).toBe(93);
    expect(Math.abs(same.kld.value)).toBeLessThan(1e-5);
    expect(same.sameTop.value).toBe(1);
    expect(kld('--ram', String(ram), '--reserve', '0')).toEqual(same);
    const fewer = kld('--override-kv', `${arch}.expert_used_count=int:1`);
    expect(fewer.kld.value).toBeGreaterThan(1e-3);
    expect(fewer.sameTop.value).toBeLessThan(1);
    // The text report: llama-perplexity's chunk lines and statistics.
    const t = kail('perplexity', '-m', model, '--kl-divergence-base', base, '--kl-divergence', '-t', '2', '--override-kv', `${arch}.expert_used_count=int:1`);
    expect(t.stdout).toMatch(/^ {3}3 {4}[ \d.]+ ± [ \d.]+ {4}[ \d.-]+ ± [ \d.]+ {4}[ \d.]+ ± [ \d.]+ {4}[ \d.]+ ± [ \d.]+ % {4}[ \d.]+ ± [ \d.]+ %$/m);
    expect(t.stdout).toMatch(/^Mean {4}KLD: +[\d.]+ ± +[\d.]+$/m);
    expect(t.stdout).toMatch(/^Same top p: +[\d.]+ ± +[\d.]+ %$/m);
    // Misuse: a clear error each.
    const bad = (re: RegExp, ...a: string[]) => {
      const r = kail('perplexity', '-m', model, '-t', '2', ...a);
      expect(r.status).not.toBe(0);
      expect(r.stderr).toMatch(re);
    };
    bad(/--kl-divergence needs --kl-divergence-base FILE/, '--kl-divergence');
    bad(/takes its tokens from the base file; leave out -f/, '--kl-divergence', '--kl-divergence-base', base, '-f', text);
    bad(/does not look like a file of base log-probabilities/, '--kl-divergence', '--kl-divergence-base', text);
    bad(/cannot open the base logits: no such file \(ENOENT\)/, '--kl-divergence', '--kl-divergence-base', `${base}.none`);
    // (A base file to write that cannot be one is refused before the chunks are computed.)
    bad(/--kl-divergence-base: .* is a directory; name a file/, '-f', text, '-c', '64', '--kl-divergence-base', path.dirname(base));
    bad(/perplexity needs -f TEXT/);
  });

  it('--lora / --lora-scaled apply LoRA adapters (llama.cpp\'s syntax); scale 0 is the base model; a bad one is an error', () => {
    const text = path.join(dir, 'lora.txt');
    fs.writeFileSync(text, 'Adapters add a low-rank delta to the projections they name, and nothing else. '.repeat(40));
    const adapter = path.join(dir, 'demo-lora.gguf');
    // Attention and the routed experts (which stream from storage under --ram below).
    writeLoraAdapter({ config: getPreset('tiny-qwen3moe').config, out: adapter, rank: 8, alpha: 16, bStd: 0.2, targets: ['attn_q', 'attn_v', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps'] });
    const ppl = (...a: string[]) => {
      const r = kail('perplexity', '-m', model, '-f', text, '-c', '64', '--chunks', '2', '-t', '2', '--json', ...a);
      expect(r.stderr).not.toMatch(/error/i);
      return JSON.parse(r.stdout).ppl as number;
    };
    // inspect tells an adapter from a model.
    const info = JSON.parse(kail('inspect', adapter, '--json').stdout).adapter;
    expect(info).toMatchObject({ architecture: 'qwen3moe', adapterType: 'lora', alpha: 16, ranks: [8] });
    expect(info.targets).toEqual(['blk.N.attn_q.weight', 'blk.N.attn_v.weight', 'blk.N.ffn_gate_exps.weight', 'blk.N.ffn_up_exps.weight', 'blk.N.ffn_down_exps.weight']);
    const base = ppl();
    expect(ppl('--lora', adapter)).not.toBe(base);
    expect(ppl('--lora-scaled', `${adapter}:0`)).toBe(base);
    // With experts streaming under --ram: the same. The plan counts the adapter's pairs.
    expect(ppl('--lora', adapter, '--ram', String(ram + fs.statSync(adapter).size), '--reserve', '0')).toBe(ppl('--lora', adapter));
    const plan = (...a: string[]) => JSON.parse(kail('plan', '-m', model, '--ram', '64M', '--reserve', '0', '--ctx', '256', '--json', ...a).stdout);
    const withLora = plan('--lora', adapter);
    expect(withLora.loraBytes).toBeGreaterThan(0.9 * fs.statSync(adapter).size);
    expect(withLora.fixedBytes - plan().fixedBytes).toBe(withLora.loraBytes);
    // Two halves are one adapter at 0.5, up to the order of float sums.
    const half = ppl('--lora-scaled', `${adapter}:0.5`);
    expect(half).not.toBe(base);
    expect(Math.abs(ppl('--lora-scaled', `${adapter}:0.25,${adapter}:0.25`) - half) / half).toBeLessThan(1e-5);
    const r = kail('run', '-m', model, '-p', 'Hello', '-n', '4', '-t', '2', '--lora', adapter, '--json');
    expect(r.status).toBe(0);
    const bad = kail('run', '-m', model, '-n', '1', '--lora-scaled', adapter);
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain(`--lora-scaled takes FNAME:SCALE, got '${adapter}'`);
    const wrong = kail('run', '-m', model, '-n', '1', '--lora', model);
    expect(wrong.status).not.toBe(0);
    expect(wrong.stderr).toContain("general.type is 'model', expected 'adapter'");
  });

  it('bench --ram reports the generation phase of the stream', () => {
    const b = JSON.parse(kail('bench', '-m', model, '-p', '8', '-n', '4', '-t', '2', '--feed', 'random', '--ram', String(ram + 2 ** 20), '--reserve', '0', '--json').stdout);
    expect(b.gen_tps).toBeGreaterThan(0);
    expect(b.stream.bytes_read_per_token).toBeGreaterThanOrEqual(0);
    expect(b.stream.hit_rate).toBeGreaterThanOrEqual(0);
    // Experts whose prefetch was still in flight are a share of the same accesses, apart from the hits.
    expect(b.stream.inflight_rate).toBeGreaterThanOrEqual(0);
    expect(b.stream.hit_rate + b.stream.inflight_rate).toBeLessThanOrEqual(1);
    expect(b.stream.peak_cache_bytes).toBeLessThanOrEqual(b.stream.cache_bytes);
    // No VRAM tier here: nothing copied back from one.
    expect(b.stream).toMatchObject({ vram_device: '', vram_capacity_bytes: 0, vram_bytes_per_token: 0, vram_s: 0 });
  });
});
