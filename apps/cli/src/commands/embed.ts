// `kail embed`: llama.cpp's llama-embedding. Each line of the prompt is one input; the model's
// pooled final hidden state (its pooling_type, or --pooling) is printed, normalized as
// --embd-normalize says, in llama-embedding's text form, or as JSON (--embd-output-format).
import fs from 'node:fs';
import type { Command } from 'commander';
import { BatchEngine, EngineModel, embdCosine as cosine, embdNormalize } from '@kailstream/engine/core';

const POOLINGS = ['none', 'mean', 'cls', 'last'] as const;
type Pooling = (typeof POOLINGS)[number];
const FORMATS = ['', 'array', 'json', 'json+'] as const;

interface EmbedOpts {
  model: string;
  prompt?: string;
  file?: string;
  embdSeparator: string;
  pooling?: string;
  embdNormalize: string;
  embdOutputFormat: string;
  ctxSize?: string;
  threads?: string;
}

function intOpt(name: string, v: string | undefined, min: number, max: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be an integer in ${min}..${max}, got '${v}'`);
  return n;
}

export function registerEmbed(program: Command): void {
  program
    .command('embed')
    .description("print the embeddings of each line of a prompt (llama.cpp's llama-embedding): the model's pooled final hidden state")
    .requiredOption('-m, --model <file>', 'GGUF model file (an embedding model such as bert / nomic-bert / modern-bert / jina-bert-v2 / jina-bert-v3 / t5encoder / gemma-embedding, or any decoder)')
    .option('-p, --prompt <text>', 'text to embed; each line (--embd-separator) is one input')
    .option('-f, --file <file>', 'read the prompt from a file')
    .option('--embd-separator <s>', 'separator between inputs', '\n')
    .option('--pooling <type>', `pooling: ${POOLINGS.join(', ')} (none: every token's embedding; default: the model's pooling_type, else last)`)
    .option('--embd-normalize <n>', 'normalization: -1 none, 0 max absolute (int16 range), 1 taxicab, 2 euclidean, >2 p-norm', '2')
    .option('--embd-output-format <f>', "'' (text), array, json (OpenAI's list) or json+ (json and the cosine similarity matrix)", '')
    .option('-c, --ctx-size <n>', 'context (longest input); default the model\'s, at most 4096')
    .option('-t, --threads <n>', 'compute threads')
    .action(async (o: EmbedOpts) => {
      if ((o.prompt === undefined) === (o.file === undefined)) throw new Error('give the text with -p/--prompt or -f/--file (one of them)');
      let text = o.prompt;
      if (text === undefined) {
        try {
          text = fs.readFileSync(o.file!, 'utf8');
        } catch (e) {
          throw new Error(`-f: cannot read ${o.file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
        }
      }
      const sep = o.embdSeparator.replace(/\\n/g, '\n');
      const inputs = text.split(sep).filter((l, i, all) => l.length > 0 || all.length === 1);
      if (inputs.length === 0 || inputs.every((l) => l.length === 0)) throw new Error('the prompt is empty');
      if (o.pooling !== undefined && !POOLINGS.includes(o.pooling as Pooling))
        throw new Error(`--pooling must be one of ${POOLINGS.join(', ')}, got '${o.pooling}' (rank: use kail serve's /rerank)`);
      const norm = intOpt('--embd-normalize', o.embdNormalize, -1, 64)!;
      if (!FORMATS.includes(o.embdOutputFormat as (typeof FORMATS)[number])) throw new Error(`--embd-output-format must be one of '', array, json, json+, got '${o.embdOutputFormat}'`);
      const model = EngineModel.load(o.model, {
        threads: intOpt('--threads', o.threads, 1, 1024),
        nCtx: intOpt('--ctx-size', o.ctxSize, 1, 1 << 20),
        nSeqMax: Math.min(inputs.length, 4),
      });
      const engine = new BatchEngine(model, { reusePrefix: false });
      let vectors: Float32Array[][];
      const pooling = (o.pooling as Pooling | undefined) ?? model.defaultPooling;
      try {
        vectors = await Promise.all(
          inputs.map(async (line, i) => {
            // As llama-embedding: the vocabulary's BOS/CLS and EOS/SEP, special-token text parsed.
            const prompt = model.tokenizer.tokenize(line, { addSpecial: true, parseSpecial: true });
            let out: Float32Array | undefined;
            for await (const c of engine.generate({ id: `embed-${i}`, prompt, maxTokens: 0, embed: pooling })) if (c.embedding) out = c.embedding;
            // (Pooling none: one row per token, each normalized, as llama-embedding does.)
            const w = model.hiddenWidth;
            const rows = pooling === 'none' ? prompt.length : 1;
            return Array.from({ length: rows }, (_, r) => embdNormalize(out!.subarray(r * w, (r + 1) * w), norm));
          }),
        );
      } finally {
        await engine.close();
        model.close();
      }
      if (pooling === 'none') process.stdout.write(formatTokens(vectors.flat(), norm, o.embdOutputFormat));
      else process.stdout.write(format(vectors.map((v) => v[0]), inputs, norm, o.embdOutputFormat));
    });
}

/** Every token's embedding (pooling none): llama-embedding's lines (first and last three values), or JSON. */
function formatTokens(rows: Float32Array[], norm: number, fmt: string): string {
  if (fmt) return format(rows, [], norm, fmt === 'json+' ? 'json' : fmt);
  const v = (x: number) => (norm === 0 ? x.toFixed(0).padStart(6) : x.toFixed(6).padStart(9));
  return rows.map((r, j) => `embedding ${j}: ${Array.from(r.subarray(0, 3), v).join(' ')}  ... ${Array.from(r.subarray(Math.max(0, r.length - 3)), v).join(' ')}`).join('\n') + '\n';
}

function format(vectors: Float32Array[], inputs: string[], norm: number, fmt: string): string {
  const num = (x: number) => (norm === 0 ? x.toFixed(0) : x.toFixed(7));
  if (fmt === 'array') return `[${vectors.map((v) => `[${Array.from(v, num).join(',')}]`).join(',')}]\n`;
  if (fmt === 'json' || fmt === 'json+') {
    const data = vectors.map((v, index) => `    {\n      "object": "embedding",\n      "index": ${index},\n      "embedding": [${Array.from(v, num).join(',')}]\n    }`);
    let s = `{\n  "object": "list",\n  "data": [\n${data.join(',\n')}\n  ]`;
    if (fmt === 'json+' && vectors.length > 1)
      s += `,\n  "cosineSimilarity": [\n${vectors.map((a) => `    [${vectors.map((b) => cosine(a, b).toFixed(2)).join(', ')} ]`).join(',\n')}\n  ]`;
    return s + '\n}\n';
  }
  // llama-embedding's text: a single input in full, several by their first 16 values and the
  // cosine similarity matrix.
  const width = (x: number) => (norm === 0 ? x.toFixed(0).padStart(6) : x.toFixed(6).padStart(9));
  const lines = vectors.map((v, j) => `embedding ${j}: ${Array.from(vectors.length > 1 ? v.subarray(0, 16) : v, width).join(' ')}`);
  if (vectors.length > 1) {
    lines.push('', 'cosine similarity matrix:', '', inputs.map((p) => p.slice(0, 6).padStart(6)).join(' '));
    vectors.forEach((a, i) => lines.push(`${vectors.map((b) => cosine(a, b).toFixed(2).padStart(6)).join(' ')} ${inputs[i].slice(0, 10)}`));
  }
  return lines.join('\n') + '\n';
}
