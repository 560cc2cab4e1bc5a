// `kail run` with a diffusion language model (llada, llada-moe, rnd1, dream): the canvas (prompt +
// -n masks) unmasked over --diffusion-steps passes, as llama-diffusion-cli does, with a progress
// line per step on stderr and the generated text on stdout as the canvas settles (or, at the end,
// --json), ended by the first reverse prompt (-r) it writes.
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { ChatTemplate, DIFFUSION_ALGORITHMS, DiffusionTextStream, diffusionGenerateWith, diffusionModelSettings, resolveDiffusionParams, StopMatcher, type ChatTemplateFormat, type EngineModel } from '@kailstream/engine/core';

import { createProgress } from '../progress';

export interface DiffusionOpts {
  diffusionSteps: number;
  diffusionAlgorithm: string;
  diffusionBlockLength?: number;
  diffusionEps?: number;
  diffusionAlgTemp: number;
  diffusionCfgScale: number;
  diffusionAddGumbelNoise?: boolean;
}

const posInt = (flag: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${flag} takes a positive integer, got '${v}'`);
  return n;
};
const nonNeg = (flag: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${flag} takes a number >= 0, got '${v}'`);
  return n;
};

/** llama-diffusion-cli's flags, with its defaults (steps 128, algorithm 4: confidence, alg_temp 0, cfg 0). */
export function addDiffusionOptions(cmd: Command): Command {
  return cmd
    .option('--diffusion-steps <n>', 'diffusion models: denoising passes (llama.cpp\'s default)', posInt('--diffusion-steps'), 128)
    .option('--diffusion-algorithm <alg>', `diffusion models: which masked positions a step fills, 0-4 or a name: ${DIFFUSION_ALGORITHMS.map((a, i) => `${i}=${a}`).join(', ')}`, 'confidence')
    .option('--diffusion-block-length <n>', 'diffusion models: fill the output in blocks of n, left to right (LLaDA\'s schedule; default for files with diffusion.shift_logits false: 32)', posInt('--diffusion-block-length'))
    .option('--diffusion-eps <f>', 'diffusion models: the timestep schedule\'s epsilon (Dream\'s; default for the others: 0.001)', nonNeg('--diffusion-eps'))
    .option('--diffusion-alg-temp <f>', 'diffusion models: draw the positions to fill by softmax(confidence / f) instead of the most confident (0)', nonNeg('--diffusion-alg-temp'), 0)
    .option('--diffusion-cfg-scale <f>', 'diffusion models: classifier-free guidance against the canvas with its prompt masked (0: off)', nonNeg('--diffusion-cfg-scale'), 0)
    .option('--diffusion-add-gumbel-noise', 'diffusion models: Gumbel noise on the logits when --temp > 0 (LLaDA\'s)');
}

export interface DiffusionRunInput {
  text: string;
  chat: boolean;
  systemPrompt?: string;
  /** A Modelfile's MESSAGE lines: the chat's opening, after the system prompt. */
  opening?: readonly { role: 'system' | 'user' | 'assistant'; content: string }[];
  template?: string;
  /** 'go': `template` is an Ollama template (a Modelfile's TEMPLATE). */
  templateFormat?: ChatTemplateFormat;
  render: Record<string, unknown>;
  nPredict: number;
  temperature: number;
  topK: number;
  topP: number;
  seed?: number;
  json: boolean;
  modelPath: string;
  /** -r: the text ends at the first of these it writes (printed with it, as llama-cli's; --json's text without it). */
  reversePrompt?: readonly string[];
}

export async function runDiffusion(model: EngineModel, o: DiffusionOpts, r: DiffusionRunInput, log: (l: string) => void): Promise<void> {
  const settings = diffusionModelSettings(model);
  let text = r.text;
  if (r.chat) {
    const messages = [...(r.systemPrompt !== undefined ? [{ role: 'system' as const, content: r.systemPrompt }] : []), ...(r.opening ?? []), { role: 'user' as const, content: text }];
    text = ChatTemplate.fromTokenizer(model.tokenizer, { override: r.template, format: r.templateFormat }).render(messages, { ...r.render, addGenerationPrompt: true });
  }
  // (BOS where the vocabulary adds it, chat or not, as llama-diffusion-cli.)
  const prompt = model.tokenizer.tokenize(text, { addSpecial: true, parseSpecial: true });
  // (-1: the rest of a canvas of 512, llama-diffusion-cli's default ubatch, or of one pass if
  // smaller; with the block schedule cut to the most blocks the steps divide, as the server does.)
  const { params, nGen } = resolveDiffusionParams(
    model,
    prompt.length,
    r.nPredict < 0 ? Math.min(model.nCtx, model.nBatch, 512) - prompt.length : r.nPredict,
    { steps: o.diffusionSteps, algorithm: o.diffusionAlgorithm, blockLength: o.diffusionBlockLength, eps: o.diffusionEps, fit: r.nPredict < 0 },
    { temperature: r.temperature, topK: r.topK, topP: r.topP, seed: r.seed ?? 0 },
  );
  const { algorithm, schedule } = params;
  if (!r.json) log(`diffusion: ${model.hparams.arch}, ${prompt.length} prompt + ${nGen} generated tokens, ${o.diffusionSteps} steps, ${algorithm}, ${schedule.kind === 'block' ? `blocks of ${schedule.blockLength}` : `eps ${schedule.eps}`}, mask token ${settings.maskTokenId}${settings.shiftLogits ? ', shifted logits' : ''}`);
  const progress = r.json ? undefined : createProgress({ label: 'diffusion', total: o.diffusionSteps });
  // The text as the canvas settles (DiffusionTextStream: after each pass what the generated part's
  // settled start adds, the rest at the end; together detokenize's text of the whole, byte for
  // byte): printed as it comes, or with --json gathered. Where stderr is where stdout goes (one
  // terminal, or 2>&1), the progress stops once the text begins (its line cleared on a terminal),
  // so that no progress line lands inside the text; its last line comes after the text.
  // -r: the text goes through the engine's stop matcher (what could begin a reverse prompt held
  // back) and ends with the first reverse prompt it writes, as an autoregressive run's: printed
  // with it, --json's text without it (stopping_word), finish reason 'stop'. The loop stops at the
  // next pass then: all before the cut is settled, so no later pass changes it.
  const stops = new StopMatcher({ stop: r.reversePrompt ?? [] });
  const stream = new DiffusionTextStream(model.tokenizer, prompt.length, settings.maskTokenId, stops);
  const shared = !r.json && stdoutIsStderr();
  let printing = false;
  let jsonText = '';
  const emit = (piece: { text: string } | undefined) => {
    if (!piece?.text) return;
    if (r.json) {
      jsonText += piece.text;
      return;
    }
    if (shared && !printing && process.stderr.isTTY) process.stderr.write('\r\x1b[K');
    printing = true;
    process.stdout.write(piece.text);
  };
  // Ctrl-C between steps: stop with what is unmasked so far.
  const ac = new AbortController();
  const onSigint = () => ac.abort();
  process.once('SIGINT', onSigint);
  const t0 = performance.now();
  let result;
  try {
    result = await diffusionGenerateWith(
      model,
      prompt,
      nGen,
      { ...params, algTemp: o.diffusionAlgTemp, cfgScale: o.diffusionCfgScale, gumbelNoise: !!o.diffusionAddGumbelNoise },
      {
        onStep: (s) => {
          if (stream.cut) return false;
          if (!(shared && printing)) progress?.update(s.step, `${s.masked} masked`);
        },
        onPass: (p) => emit(stream.pass(p)),
        signal: ac.signal,
      },
    );
  } finally {
    process.removeListener('SIGINT', onSigint);
  }
  const ms = performance.now() - t0;
  // The rest (what the passes left unsettled; masks a stopped run left are not text).
  emit(stream.end(result.generated));
  const cut = stream.cut;
  if (!cut) emit({ text: stops.flush() });
  const tokens = Array.from(result.generated);
  const finished = `diffusion: ${result.steps} passes${cut ? ', stopped at the reverse prompt' : result.stopped ? ' (stopped)' : ''}`;
  if (r.json) {
    process.stdout.write(
      JSON.stringify({
        model: r.modelPath,
        prompt_tokens: prompt,
        // (Cut by a pass: the tokens settled then, the text's and the reverse prompt's.)
        tokens: cut ? tokens.slice(0, cut.settled) : tokens,
        text: jsonText,
        finish_reason: cut ? 'stop' : result.stopped ? 'stopped' : 'length',
        ...(cut ? { stopping_word: cut.stop } : {}),
        diffusion: { steps: result.steps, algorithm, schedule, mask_token_id: settings.maskTokenId, shift_logits: settings.shiftLogits },
        timings: { total_ms: ms, ms_per_step: result.steps ? ms / result.steps : 0 },
      }) + '\n',
    );
    return;
  }
  // (llama-cli prints the reverse prompt that stopped it.)
  emit({ text: (cut?.stop ?? '') + '\n' });
  progress?.done(finished);
  log(`${path.basename(r.modelPath)}: ${result.steps} passes over ${prompt.length + nGen} tokens, ${(ms / Math.max(1, result.steps)).toFixed(1)} ms a pass`);
}

/** Whether stdout and stderr reach the same place (a terminal, or one pipe or file: 2>&1). */
function stdoutIsStderr(): boolean {
  if (process.stdout.isTTY && process.stderr.isTTY) return true;
  try {
    const a = fs.fstatSync(1);
    const b = fs.fstatSync(2);
    return a.dev === b.dev && a.ino === b.ino;
  } catch {
    return false;
  }
}
