import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { ChatTemplate, EngineModel, Tokenizer, benchmark, generate, openGgufMetadata, summarize, type GenerateResult } from '@kailstream/engine';
import { getPreset, writeModel, WEIGHT_RECIPE_VERSION } from '@kailstream/tools';

import { dataDir } from '../paths';

function int(name: string, min: number, max = Number.MAX_SAFE_INTEGER) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be an integer in ${min}..${max}, got '${v}'`);
    return n;
  };
}
function num(name: string, min: number, max: number) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n < min || n > max) throw new Error(`${name} must be a number in ${min}..${max}, got '${v}'`);
    return n;
  };
}

/** The built-in default model: a tiny Qwen3-MoE the project writes itself (no download). */
export function ensureDemoModel(dir: string, log: (l: string) => void): string {
  const file = path.join(dir, 'models', `kail-demo-tiny-qwen3moe-f32-r${WEIGHT_RECIPE_VERSION}.gguf`);
  if (fs.existsSync(file)) return file;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  log(`writing the built-in demo model to ${file} ...`);
  const tmp = `${file}.partial`;
  writeModel({ config: getPreset('tiny-qwen3moe').config, fileType: 'F32', seed: 1, out: tmp });
  fs.renameSync(tmp, file);
  return file;
}

interface RunOpts {
  model?: string;
  prompt?: string;
  nPredict: number;
  chat?: boolean;
  temp: number;
  seed?: number;
  topK: number;
  topP: number;
  minP: number;
  threads?: number;
  ctx?: number;
  json?: boolean;
  demo?: boolean;
  dataDir?: string;
}

export function registerModelCommands(program: Command): void {
  program
    .command('run')
    .description('generate text from a prompt, streaming it; then print prompt and generation tokens/s')
    .option('-m, --model <file>', 'GGUF model file')
    .option('-p, --prompt <text>', 'prompt text', 'Once upon a time')
    .option('-n, --n-predict <n>', 'tokens to generate', int('--n-predict', 0), 64)
    .option('--chat', "wrap the prompt in the model's chat template as a user message")
    .option('--temp <t>', 'temperature (0 = greedy)', num('--temp', 0, 100), 0)
    .option('--top-k <k>', 'top-k (0 = off)', int('--top-k', 0), 40)
    .option('--top-p <p>', 'top-p (1 = off)', num('--top-p', 0, 1), 0.95)
    .option('--min-p <p>', 'min-p (0 = off)', num('--min-p', 0, 1), 0.05)
    .option('--seed <s>', 'sampling seed', int('--seed', 0, 2 ** 32 - 1))
    .option('-t, --threads <n>', 'compute threads (default: physical cores)', int('--threads', 1, 1024))
    .option('-c, --ctx <n>', 'context length', int('--ctx', 1, 1 << 20))
    .option('--json', 'print one JSON object (token ids, text, timings) instead of streaming')
    .option('--demo', 'use the built-in demo model (written on first use into the data directory)')
    .option('--data-dir <dir>', 'data directory')
    .action(async (o: RunOpts) => {
      const log = (l: string) => process.stderr.write(l + '\n');
      const modelPath = o.model ?? (o.demo ? ensureDemoModel(dataDir(o.dataDir), log) : undefined);
      if (!modelPath) throw new Error('give a model with -m FILE.gguf, or --demo for the built-in one');
      const model = EngineModel.load(modelPath, { threads: o.threads, nCtx: o.ctx });
      try {
        let text = o.prompt ?? '';
        let parseSpecial = false;
        if (o.chat) {
          text = ChatTemplate.fromTokenizer(model.tokenizer).render([{ role: 'user', content: text }], { addGenerationPrompt: true });
          parseSpecial = true;
        }
        const prompt = model.tokenizer.tokenize(text, { addSpecial: !o.chat, parseSpecial });
        if (!o.json) {
          log(`model: ${path.basename(modelPath)} (${model.hparams.arch}, ${model.hparams.nLayer} layers${model.hparams.nExpert ? `, ${model.hparams.nExpert} experts / ${model.hparams.nExpertUsed} used` : ''}), ${model.runtime.nThreads} threads`);
          process.stdout.write(text);
        }
        const r: GenerateResult = await generate(model, prompt, {
          maxTokens: o.nPredict,
          sampling: { temperature: o.temp, topK: o.topK, topP: o.topP, minP: o.minP, seed: o.seed },
          onText: o.json ? undefined : (t) => process.stdout.write(t),
        });
        if (o.json) {
          process.stdout.write(
            JSON.stringify({
              model: modelPath,
              prompt_tokens: prompt,
              tokens: r.tokens,
              text: r.text,
              finish_reason: r.finishReason,
              timings: { prompt_ms: r.promptMs, generation_ms: r.generationMs, prompt_tps: r.promptTps, gen_tps: r.genTps },
            }) + '\n',
          );
        } else {
          process.stdout.write('\n');
          log(`prompt: ${r.promptTokens} tokens, ${r.promptTps.toFixed(1)} tokens/s | generation: ${r.tokens.length} tokens, ${r.genTps.toFixed(1)} tokens/s | ${r.finishReason}`);
        }
      } finally {
        model.close();
      }
    });

  program
    .command('bench')
    .description('prompt and generation tokens/s, like llama-bench')
    .requiredOption('-m, --model <file>', 'GGUF model file')
    .option('-p, --n-prompt <n>', 'prompt tokens', int('--n-prompt', 1, 1 << 20), 512)
    .option('-n, --n-gen <n>', 'generated tokens', int('--n-gen', 0, 1 << 20), 128)
    .option('-t, --threads <n>', 'compute threads (default: physical cores)', int('--threads', 1, 1024))
    .option('--feed <kind>', 'what each decode step feeds: greedy or random', 'greedy')
    .option('-r, --reps <n>', 'repetitions (median reported)', int('--reps', 1, 100), 1)
    .option('--json', 'print one JSON object')
    .action(async (o: { model: string; nPrompt: number; nGen: number; threads?: number; feed: string; reps: number; json?: boolean }) => {
      if (o.feed !== 'greedy' && o.feed !== 'random') throw new Error(`--feed must be greedy or random, got '${o.feed}'`);
      const model = EngineModel.load(o.model, { threads: o.threads, nCtx: o.nPrompt + o.nGen + 1 });
      try {
        const r = await benchmark(model, { promptTokens: o.nPrompt, genTokens: o.nGen, feed: o.feed, reps: o.reps });
        if (o.json) process.stdout.write(JSON.stringify(r) + '\n');
        else
          process.stdout.write(
            `${path.basename(o.model)} (${r.arch}), ${r.threads} threads, feed ${r.feed}, median of ${r.reps}\n` +
              `pp${r.prompt_tokens}: ${r.prompt_tps.toFixed(2)} tokens/s\n` +
              `tg${r.gen_tokens}: ${r.gen_tps.toFixed(2)} tokens/s\n`,
          );
      } finally {
        model.close();
      }
    });

  program
    .command('logits')
    .description('write raw logits for every position: n_tokens x n_vocab little-endian float32 (the parity interface)')
    .requiredOption('-m, --model <file>', 'GGUF model file')
    .requiredOption('--tokens <ids>', 'comma-separated token ids')
    .requiredOption('--out <file>', 'output .f32 file; FILE.json gets n_tokens and n_vocab')
    .option('--kv <type>', 'KV cache type: f32 (exact) or f16', 'f32')
    .option('-t, --threads <n>', 'compute threads', int('--threads', 1, 1024))
    .option('--batch <n>', 'tokens per forward pass', int('--batch', 1, 1 << 16), 512)
    .action(async (o: { model: string; tokens: string; out: string; kv: string; threads?: number; batch: number }) => {
      const tokens = o.tokens.split(',').map((s) => {
        const n = Number(s.trim());
        if (!Number.isInteger(n) || n < 0) throw new Error(`--tokens: '${s}' is not a token id`);
        return n;
      });
      if (!tokens.length) throw new Error('--tokens is empty');
      if (o.kv !== 'f32' && o.kv !== 'f16') throw new Error(`--kv must be f32 or f16, got '${o.kv}'`);
      const model = EngineModel.load(o.model, { threads: o.threads, kvType: o.kv, nCtx: Math.max(tokens.length, 16) });
      try {
        const logits = await model.evaluate(0, tokens, 'all', o.batch);
        fs.writeFileSync(o.out, Buffer.from(logits.buffer, logits.byteOffset, logits.byteLength));
        fs.writeFileSync(`${o.out}.json`.replace(/\.f32\.json$/, '.json'), JSON.stringify({ n_tokens: tokens.length, n_vocab: model.nVocab }) + '\n');
      } finally {
        model.close();
      }
    });

  program
    .command('tokenize')
    .description('print the token ids of a text (a JSON array); works on vocabulary-only GGUF files')
    .requiredOption('-m, --model <file>', 'GGUF model or vocabulary file')
    .argument('<text>', 'text to tokenize')
    .option('--no-add-special', 'do not add BOS/EOS the model asks for')
    .option('--parse-special', 'treat special-token text (e.g. <|im_start|>) as special tokens')
    .action(async (text: string, o: { model: string; addSpecial: boolean; parseSpecial?: boolean }) => {
      const file = openGgufMetadata(o.model);
      try {
        const tok = Tokenizer.fromMetadata(file.metadata);
        process.stdout.write(JSON.stringify(tok.tokenize(text, { addSpecial: o.addSpecial, parseSpecial: !!o.parseSpecial })) + '\n');
      } finally {
        file.close();
      }
    });

  program
    .command('inspect')
    .description('print architecture, parameter count, tensor types, expert sizes and bytes per token')
    .argument('<file>', 'GGUF model file')
    .option('--json', 'print one JSON object')
    .action((file: string, o: { json?: boolean }) => {
      const f = openGgufMetadata(file);
      try {
        const s = summarize(f);
        if (o.json) {
          process.stdout.write(JSON.stringify(s) + '\n');
          return;
        }
        const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;
        const lines = [
          `file            ${s.path} (${gib(s.fileBytes)})`,
          `architecture    ${s.architecture}`,
          `parameters      ${(s.parameterCount / 1e9).toFixed(3)} B`,
          `layers          ${s.layerCount}`,
          `context         ${s.contextLength}`,
          `experts         ${s.expertCount ? `${s.expertCount} per layer, ${s.expertUsedCount} used per token` : 'none (dense)'}`,
          `tensor types    ${Object.entries(s.tensorTypeBytes).map(([t, b]) => `${t} ${gib(b)}`).join(', ')}`,
          `resident        ${gib(s.residentBytes)} (non-expert weights)`,
          `routed experts  ${gib(s.expertBytes)}${s.bytesPerExpert ? ` (${(s.bytesPerExpert / 2 ** 20).toFixed(2)} MiB each)` : ''}`,
          `bytes/token     ${gib(s.bytesPerToken)} of weights read per token`,
        ];
        process.stdout.write(lines.join('\n') + '\n');
      } finally {
        f.close();
      }
    });
}
