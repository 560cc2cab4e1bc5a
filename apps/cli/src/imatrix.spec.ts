// kail imatrix from the command line, then kail quantize --imatrix with its file: llama-imatrix's
// chunks and progress line, the GGUF and legacy formats, the metadata llama-quantize records, a
// quantized file that runs, and errors. (Parity of the statistics with llama.cpp's:
// tools/src/parity/parity-imatrix.native.spec.ts; of the quantized bytes: tools/src/gguf/imatrix.native.spec.ts.)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getPreset, readGgufHeader, readImatrixFile, writeModel } from '@kailstream/tools';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });
}

describe('kail imatrix', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cli-imatrix-'));
  const model = path.join(dir, 'moe-f16.gguf');
  const text = path.join(dir, 'calib.txt');
  beforeAll(() => {
    writeModel({ config: getPreset('tiny-qwen3moe').config, fileType: 'F16', seed: 5, out: model });
    // Words enough for several chunks of 64 tokens.
    const words = ['the', 'expert', 'cache', 'streams', 'weights', 'from', 'storage', 'while', 'tokens', 'route', 'through', 'layers', 'of', 'a', 'model'];
    fs.writeFileSync(text, Array.from({ length: 2000 }, (_, i) => words[(i * 7 + (i >> 3)) % words.length]).join(' '));
  }, 60_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('writes a GGUF imatrix over chunks of --ctx, with the perplexity; quantize --imatrix records it and the result runs', () => {
    const im = path.join(dir, 'imatrix.gguf');
    const r = kail('imatrix', '-m', model, '-f', text, '-c', '64', '--chunks', '5', '-o', im, '-t', '2');
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/calib\.txt: \d+ tokens; computing over chunks of 64/);
    expect(r.stderr).toMatch(/\[1\][\d.]+,\[2\][\d.]+,\[3\][\d.]+,\[4\][\d.]+,\[5\][\d.]+,/);
    expect(r.stdout).toMatch(/^wrote .*imatrix\.gguf \(gguf\): 16 entries from 5 chunks of 64 tokens \(5 computed in [\d.]+ s\)\nFinal estimate: PPL = [\d.]+$/m);
    const f = readImatrixFile(im);
    expect(f.hasMetadata).toBe(true);
    expect(f.chunkCount).toBe(5);
    expect(f.chunkSize).toBe(64);
    expect(f.datasets).toEqual([text]);
    // Per expert for routed experts (16 of them), one count for the rest; 5 x 64 rows went through attention.
    expect(f.entries.get('blk.0.ffn_up_exps.weight')?.counts).toHaveLength(16);
    expect(f.entries.get('blk.0.attn_q.weight')?.counts).toEqual([320]);
    expect(f.entries.has('output.weight')).toBe(false);
    // 4 of 16 experts per token: the experts' counts sum to 4 x 320.
    expect(f.entries.get('blk.1.ffn_down_exps.weight')!.counts.reduce((a, b) => a + b, 0)).toBe(4 * 320);

    const out = path.join(dir, 'q2ks.gguf');
    const q = kail('quantize', '--imatrix', im, model, out, 'Q2_K_S', '2');
    expect(q.status).toBe(0);
    const kv = readGgufHeader(out).kv;
    expect(kv.get('quantize.imatrix.file')?.value).toBe(im);
    expect(kv.get('quantize.imatrix.dataset')?.value).toBe(text);
    expect(kv.get('quantize.imatrix.entries_count')?.value).toBe(16);
    expect(kv.get('quantize.imatrix.chunks_count')?.value).toBe(5);
    expect(kail('inspect', out).stdout).toMatch(/^file type {7}Q2_K_S$/m);
    const run = kail('run', '-m', out, '-p', 'Hello', '-n', '4', '-t', '2', '--json');
    expect(run.status).toBe(0);
    expect(JSON.parse(run.stdout).tokens).toHaveLength(4);
    // The 2-bit codebook type, which needs the imatrix, runs too.
    const iq2 = path.join(dir, 'iq2xxs.gguf');
    expect(kail('quantize', '--imatrix', im, model, iq2, 'IQ2_XXS').status).toBe(0);
    expect(kail('inspect', iq2).stdout).toMatch(/IQ2_XXS/);
    const run2 = kail('run', '-m', iq2, '-p', 'Hello', '-n', '4', '-t', '2', '--json');
    expect(run2.status).toBe(0);
    expect(JSON.parse(run2.stdout).tokens).toHaveLength(4);
    const refused = kail('quantize', model, path.join(dir, 'iq2-no.gguf'), 'IQ2_XXS');
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(/IQ2_XXS needs an importance matrix for blk\.0\.\w+\.weight .*--imatrix/);
  }, 60_000);

  it('writes the legacy .dat format for a .dat name or --output-format dat, with output.weight on --process-output', () => {
    const dat = path.join(dir, 'imatrix.dat');
    const r = kail('imatrix', '-m', model, '-f', text, '-c', '64', '--chunks', '3', '-o', dat, '--process-output', '--no-ppl', '--json');
    expect(r.status).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j).toMatchObject({ format: 'dat', chunks: 3, entries: 17 });
    expect(j.ppl).toBeNull();
    const f = readImatrixFile(dat);
    expect(f.legacy).toBe(true);
    expect(f.entries.has('output.weight')).toBe(true);
    expect(f.chunkCount).toBe(3);
    const other = path.join(dir, 'legacy.bin');
    expect(kail('imatrix', '-m', model, '-f', text, '-c', '64', '--chunks', '2', '-o', other, '--output-format', 'dat').status).toBe(0);
    expect(readImatrixFile(other).legacy).toBe(true);
    const q = kail('quantize', '--imatrix', dat, model, path.join(dir, 'q4.gguf'), 'Q4_K_M');
    expect(q.status).toBe(0);
  }, 120_000);

  it('--in-file combines imatrix files (GGUF and legacy), or continues one with more chunks, as llama-imatrix does', () => {
    const a = path.join(dir, 'a.gguf');
    expect(kail('imatrix', '-m', model, '-f', text, '-c', '64', '--chunks', '2', '-o', a, '--no-ppl').status).toBe(0);
    // Combining alone needs no model: sums and counts add up (2 + 2 chunks of 64 rows).
    const both = path.join(dir, 'both.gguf');
    const c = kail('imatrix', '--in-file', a, '--in-file', a, '-c', '64', '-o', both);
    expect(c.status).toBe(0);
    expect(c.stdout).toMatch(/^wrote .*both\.gguf \(gguf\): 16 entries from 4 chunks of 64 tokens$/m);
    const fa = readImatrixFile(a);
    const fb = readImatrixFile(both);
    expect(fb.chunkCount).toBe(4);
    expect(fb.datasets).toEqual([text, text]);
    expect(fb.entries.get('blk.0.attn_q.weight')?.counts).toEqual([256]);
    const sa = fa.entries.get('blk.1.ffn_down_exps.weight')!;
    const sb = fb.entries.get('blk.1.ffn_down_exps.weight')!;
    expect(sb.counts).toEqual(sa.counts.map((x) => 2 * x));
    expect(Array.from(sb.sums.subarray(0, 8))).toEqual(Array.from(sa.sums.subarray(0, 8), (x) => Math.fround(2 * x)));
    // Continuing: 2 chunks read back, 3 more computed.
    const more = kail('imatrix', '-m', model, '-f', text, '-c', '64', '--chunks', '3', '--in-file', a, '-o', path.join(dir, 'more.gguf'), '--json');
    expect(more.status).toBe(0);
    expect(JSON.parse(more.stdout)).toMatchObject({ chunks: 5, entries: 16 });
    expect(readImatrixFile(path.join(dir, 'more.gguf')).entries.get('blk.0.attn_q.weight')?.counts).toEqual([320]);
    // A legacy file counts in chunks of -c: its means come back as sums.
    const dat = path.join(dir, 'a.dat');
    expect(kail('imatrix', '--in-file', a, '-c', '64', '-o', dat).status).toBe(0);
    const back = path.join(dir, 'back.gguf');
    expect(kail('imatrix', '--in-file', dat, '-c', '64', '-o', back).status).toBe(0);
    expect(readImatrixFile(back).entries.get('blk.0.attn_q.weight')?.counts).toEqual([128]);
    // Files of another model do not combine; neither -f nor --in-file is an error.
    const other = path.join(dir, 'other.gguf');
    writeModel({ config: getPreset('tiny-llama').config, fileType: 'F16', seed: 5, out: other });
    expect(kail('imatrix', '-m', other, '-f', text, '-c', '64', '--chunks', '2', '-o', path.join(dir, 'o.gguf'), '--no-ppl').status).toBe(0);
    const bad = kail('imatrix', '--in-file', a, '--in-file', path.join(dir, 'o.gguf'), '-o', path.join(dir, 'bad.gguf'));
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/o\.gguf: blk\.0\.\w+\.weight has \d+ sums, the others \d+/);
    const none = kail('imatrix', '-o', path.join(dir, 'none.gguf'));
    expect(none.status).toBe(1);
    expect(none.stderr).toMatch(/give a calibration text \(-f\) with a model \(-m\), or imatrix files to combine/);
  }, 60_000);

  it('--output-frequency writes the output as it goes and --save-frequency keeps copies, without changing the result; --chunk skips chunks', () => {
    const plain = path.join(dir, 'plain.gguf');
    const saved = path.join(dir, 'saved.gguf');
    expect(kail('imatrix', '-m', model, '-f', text, '-c', '64', '--chunks', '5', '-o', plain, '--no-ppl').status).toBe(0);
    // (-b 64: one chunk per pass.)
    const r = kail('imatrix', '-m', model, '-f', text, '-c', '64', '-b', '64', '--chunks', '5', '-o', saved, '--no-ppl', '-ofreq', '2', '--save-frequency', '2');
    expect(r.status).toBe(0);
    // Snapshots do not disturb the collection: the same bytes; nor do chunks sharing a pass (-b 512: 8 of 64).
    expect(fs.readFileSync(saved).equals(fs.readFileSync(plain))).toBe(true);
    expect(readImatrixFile(`${saved}.at_2`).chunkCount).toBe(2);
    expect(readImatrixFile(`${saved}.at_4`).entries.get('blk.0.attn_q.weight')?.counts).toEqual([256]);
    expect(fs.existsSync(`${saved}.at_5`)).toBe(false);
    // Three chunks a pass (-b 192): as llama-imatrix then, a copy after each pass that crosses a multiple of 2, named by its chunks.
    const packed = path.join(dir, 'packed.gguf');
    expect(kail('imatrix', '-m', model, '-f', text, '-c', '64', '-b', '192', '--chunks', '5', '-o', packed, '--no-ppl', '--save-frequency', '2').status).toBe(0);
    expect(fs.readFileSync(packed).equals(fs.readFileSync(plain))).toBe(true);
    expect(fs.readdirSync(dir).filter((f) => f.startsWith('packed.gguf.at_')).sort()).toEqual(['packed.gguf.at_3', 'packed.gguf.at_5']);
    expect(fs.readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
    // --chunk 2: the first two chunks' tokens are left out (3 chunks after them here).
    const later = kail('imatrix', '-m', model, '-f', text, '-c', '64', '--chunk', '2', '--chunks', '3', '-o', path.join(dir, 'later.gguf'), '--json');
    expect(later.status).toBe(0);
    expect(JSON.parse(later.stdout).chunks).toBe(3);
    // --parse-special: special-token text in the calibration file becomes those tokens (fewer of them).
    const chat = path.join(dir, 'chat.txt');
    fs.writeFileSync(chat, '<|im_start|>user\nthe expert cache streams weights<|im_end|>\n'.repeat(40));
    const count = (...a: string[]) => JSON.parse(kail('imatrix', '-m', model, '-f', chat, '-c', '64', '--chunks', '2', '-o', path.join(dir, 'chat.gguf'), '--no-ppl', '--json', ...a).stdout).tokens as number;
    expect(count('--parse-special')).toBeLessThan(count());
    const tooFar = kail('imatrix', '-m', model, '-f', text, '-c', '64', '--from-chunk', '100', '-o', path.join(dir, 'far.gguf'));
    expect(tooFar.status).toBe(1);
    expect(tooFar.stderr).toMatch(/leave too few after removing 100 chunks of 64 \(at least two must remain\)/);
  }, 120_000);

  it('--show-statistics prints llama-imatrix\'s per-tensor and per-layer statistics of one file', () => {
    const im = path.join(dir, 'imatrix.gguf');
    const r = kail('imatrix', '--in-file', im, '--show-statistics');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(`Computing statistics for ${im} (16 tensors)`);
    expect(r.stdout).toMatch(/^ {4}1\tffn_down_exps {7}\t +[\d.]+\t +[\d.]+\t +[\d.]+\t +[\d.]+\t +[\d.]+\t +[\d.]+%\t +\d+\t +[\d.]+\t +[\d.]+%\t +[\d.]+%\t +[\d.]+$/m);
    expect(r.stdout).toMatch(/Computing weighted average statistics per layer \(2 layers\)/);
    const j = JSON.parse(kail('imatrix', '--in-file', im, '--show-statistics', '--json').stdout);
    expect(j.tensors).toHaveLength(16);
    expect(j.layers.map((l: { layer: number }) => l.layer)).toEqual([0, 1]);
    const bad = kail('imatrix', '--in-file', im, '--in-file', im, '--show-statistics');
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/--show-statistics reads one imatrix file/);
  });

  it('refuses a text too short for two chunks, a bad format, and an imatrix for another model, naming each', () => {
    const short = path.join(dir, 'short.txt');
    fs.writeFileSync(short, 'a few words only');
    const a = kail('imatrix', '-m', model, '-f', short, '-c', '64', '-o', path.join(dir, 'x.gguf'));
    expect(a.status).toBe(1);
    expect(a.stderr).toMatch(/tokenizes to \d+ tokens; a chunk size of 64 needs at least 128/);
    expect(fs.existsSync(path.join(dir, 'x.gguf'))).toBe(false);
    const b = kail('imatrix', '-m', model, '-f', text, '--output-format', 'bin');
    expect(b.status).toBe(1);
    expect(b.stderr).toMatch(/--output-format must be gguf or dat, got 'bin'/);
    // An output that cannot be written is named before the chunks are computed; a model is not an imatrix.
    const o = kail('imatrix', '-m', model, '-f', text, '-o', path.join(dir, 'none', 'x.gguf'));
    expect(o.status).toBe(1);
    expect(o.stderr).toContain(`--output: ${path.join(dir, 'none', 'x.gguf')}: cannot write in ${path.join(dir, 'none')}: no such file (ENOENT)`);
    expect(o.stderr).not.toMatch(/\[1\]/);
    const notImatrix = kail('imatrix', '--show-statistics', '--in-file', model);
    expect(notImatrix.status).toBe(1);
    expect(notImatrix.stderr).toMatch(/no \.in_sum2\/\.counts tensors: a model, not an imatrix file/);
    const llama = path.join(dir, 'llama.gguf');
    writeModel({ config: getPreset('tiny-llama').config, fileType: 'F16', seed: 5, out: llama });
    const c = kail('quantize', '--imatrix', path.join(dir, 'imatrix.gguf'), llama, path.join(dir, 'no.gguf'), 'Q4_K_M');
    expect(c.status).toBe(1);
    expect(c.stderr).toMatch(/imatrix size \d+ is different from tensor size \d+ for blk\.0\.\w+\.weight|did not find/);
    expect(fs.existsSync(path.join(dir, 'no.gguf'))).toBe(false);
  }, 120_000);
});
