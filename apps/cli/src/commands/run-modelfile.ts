// `kail run NAME` with a model made by `kail create` (or Ollama's create, or linked from Ollama's
// store): its Modelfile settings, kept next to its file as ID.modelfile.json, apply as `ollama run`
// applies them: the system prompt and the opening messages (MESSAGE lines) before the chat, the
// TEMPLATE (Ollama's Go template) in place of the file's chat template, and the PARAMETERs as the
// defaults of the flags they stand for (a flag on the command line wins).
import fs from 'node:fs';
import type { Command } from 'commander';
import { modelfileSidecar } from '@kailstream/engine/core';

export interface ModelfileSettings {
  system?: string;
  template?: string;
  messages?: { role: 'system' | 'user' | 'assistant'; content: string }[];
  parameters?: Record<string, unknown>;
}

/** The Modelfile settings kept next to a model file (ID.modelfile.json); null without them. A damaged file is said and skipped. */
export function readModelfileSettings(modelPath: string, log: (line: string) => void): ModelfileSettings | null {
  const file = modelfileSidecar(modelPath);
  if (!fs.existsSync(file)) return null;
  try {
    const m: unknown = JSON.parse(fs.readFileSync(file, 'utf8'));
    if (!m || typeof m !== 'object' || Array.isArray(m)) throw new Error('not a JSON object');
    const s = m as Record<string, unknown>;
    const text = (v: unknown) => (typeof v === 'string' && v ? v : undefined);
    const messages = Array.isArray(s.messages)
      ? s.messages.filter((x): x is { role: 'system' | 'user' | 'assistant'; content: string } => !!x && ['system', 'user', 'assistant'].includes(x.role) && typeof x.content === 'string')
      : undefined;
    const parameters = s.parameters && typeof s.parameters === 'object' && !Array.isArray(s.parameters) ? (s.parameters as Record<string, unknown>) : undefined;
    return { system: text(s.system), template: text(s.template), messages: messages?.length ? messages : undefined, parameters };
  } catch (e) {
    log(`note: ${file} cannot be read (${(e as Error).message}): the model runs without its Modelfile settings`);
    return null;
  }
}

/** Ollama's parameter names -> kail run's options. */
const RUN_OPTIONS: Readonly<Record<string, string>> = {
  temperature: '--temp', top_k: '--top-k', top_p: '--top-p', min_p: '--min-p', typical_p: '--typical', seed: '--seed',
  repeat_penalty: '--repeat-penalty', repeat_last_n: '--repeat-last-n', presence_penalty: '--presence-penalty', frequency_penalty: '--frequency-penalty',
  mirostat: '--mirostat', mirostat_tau: '--mirostat-ent', mirostat_eta: '--mirostat-lr', num_predict: '--n-predict', num_ctx: '--ctx',
};

/**
 * Sets the options the PARAMETERs stand for, where the command line did not (source 'config', so
 * that defaults that depend on the mode, such as -n in a conversation, give way to them). Returns
 * what it set ("temperature 0.2") and notes on what it could not (a value the flag refuses, a
 * parameter without a kail run flag, such as stop or num_gpu).
 */
export function applyModelfileParameters(cmd: Command, params: Record<string, unknown>): { applied: string[]; notes: string[] } {
  const applied: string[] = [];
  const notes: string[] = [];
  for (const [name, value] of Object.entries(params)) {
    const long = RUN_OPTIONS[name];
    const option = long ? cmd.options.find((o) => o.long === long) : undefined;
    if (!option) {
      notes.push(`PARAMETER ${name} has no kail run flag: not applied`);
      continue;
    }
    const key = option.attributeName();
    if (['cli', 'env'].includes(cmd.getOptionValueSource(key) ?? '')) continue;
    // (seed -1 is a random seed: what kail run does without one.)
    if (name === 'seed' && Number(value) < 0) continue;
    try {
      const v = option.parseArg ? option.parseArg(String(value), undefined) : value;
      cmd.setOptionValueWithSource(key, v, 'config');
      applied.push(`${name} ${String(value)}`);
    } catch (e) {
      notes.push(`PARAMETER ${name} ${String(value)}: ${(e as Error).message}: not applied`);
    }
  }
  return { applied, notes };
}
