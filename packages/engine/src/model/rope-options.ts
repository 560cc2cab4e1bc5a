// llama.cpp's RoPE context flags (--rope-scaling, --rope-scale, --rope-freq-base,
// --rope-freq-scale, --yarn-orig-ctx, --yarn-ext-factor, --yarn-beta-fast, --yarn-beta-slow):
// values that replace the file's for a load, as llama_context's cparams replace the trained
// hparams (src/llama-context.cpp). The use: extending a model's context with YaRN, e.g. Qwen3's
// `--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768`.
import type { ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../errors';
import type { HParams } from './hparams';

export type RopeScaling = 'none' | 'linear' | 'yarn';
export const ROPE_SCALINGS: readonly RopeScaling[] = ['none', 'linear', 'yarn'];

export interface RopeOptions {
  /** --rope-scaling: the scaling type (default: the file's). */
  scaling?: RopeScaling;
  /** --rope-freq-base (default: the file's). */
  freqBase?: number;
  /** --rope-freq-scale, or 1 / --rope-scale (default: the file's). */
  freqScale?: number;
  /** --yarn-orig-ctx: the context the model was trained with, YaRN's reference (default: the file's). */
  yarnOrigCtx?: number;
  /** --yarn-ext-factor (default: 1 with YaRN, else 0, unless the file says). */
  yarnExtFactor?: number;
  /** --yarn-beta-fast, --yarn-beta-slow (default 32 and 1). */
  yarnBetaFast?: number;
  yarnBetaSlow?: number;
}

const bad = (flag: string, v: unknown, want: string) => new EngineError('KAIL_E_INVALID_ARG', `${flag} must be ${want}, got ${v}`);

/** The options, checked: a value out of range is an error naming its flag. */
export function checkRopeOptions(o: RopeOptions): void {
  if (o.scaling !== undefined && !ROPE_SCALINGS.includes(o.scaling)) throw bad('--rope-scaling', `'${o.scaling}'`, ROPE_SCALINGS.join(', '));
  if (o.freqBase !== undefined && !(Number.isFinite(o.freqBase) && o.freqBase > 0)) throw bad('--rope-freq-base', o.freqBase, 'a positive number');
  if (o.freqScale !== undefined && !(Number.isFinite(o.freqScale) && o.freqScale > 0)) throw bad('--rope-freq-scale (or --rope-scale)', o.freqScale, 'a positive number');
  if (o.yarnOrigCtx !== undefined && !(Number.isSafeInteger(o.yarnOrigCtx) && o.yarnOrigCtx > 0)) throw bad('--yarn-orig-ctx', o.yarnOrigCtx, 'a positive integer');
  for (const [flag, v] of [['--yarn-ext-factor', o.yarnExtFactor], ['--yarn-beta-fast', o.yarnBetaFast], ['--yarn-beta-slow', o.yarnBetaSlow]] as const)
    if (v !== undefined && !(Number.isFinite(v) && v >= 0)) throw bad(flag, v, 'a non-negative number');
}

/** Whether any value is set. */
export function hasRopeOptions(o: RopeOptions | undefined): o is RopeOptions {
  return !!o && Object.values(o).some((v) => v !== undefined);
}

/**
 * The hyperparameters with the options in place, by llama_context's rules: the type defaults to
 * the file's; scaling 'none' never scales; the YaRN extrapolation factor defaults to 1 under YaRN
 * and 0 otherwise when the type is given; a custom YaRN scale sets the training context to the
 * original one over the scale (llama.cpp's "custom YaRN scaling detected").
 */
export function applyRopeOptions(hp: HParams, o: RopeOptions | undefined): HParams {
  if (!hasRopeOptions(o)) return hp;
  checkRopeOptions(o);
  const md = hp.meta;
  const type = o.scaling ?? hp.ropeScalingType;
  // (The file's scale before its type is applied: a file of type none still has its factor.)
  const factor = md.num('rope.scaling.factor', 0) || md.num('rope.scale_linear', 0);
  const fileScale = factor ? 1 / factor : 1;
  const scale = type === 'none' ? 1 : (o.freqScale ?? fileScale);
  const extFactor = o.yarnExtFactor ?? (o.scaling !== undefined ? (type === 'yarn' ? 1 : 0) : hp.ropeYarn.extFactor);
  const nCtxOrig = o.yarnOrigCtx ?? hp.ropeYarn.nCtxOrig;
  return {
    ...hp,
    ropeScalingType: type,
    ropeFreqBase: o.freqBase ?? hp.ropeFreqBase,
    ropeFreqScale: scale,
    ropeYarn: {
      ...hp.ropeYarn,
      extFactor,
      betaFast: o.yarnBetaFast ?? hp.ropeYarn.betaFast,
      betaSlow: o.yarnBetaSlow ?? hp.ropeYarn.betaSlow,
      nCtxOrig,
    },
    nCtxTrain: type === 'yarn' && scale !== fileScale ? Math.floor(nCtxOrig / scale) : hp.nCtxTrain,
  };
}

/**
 * Architectures whose sliding-window (or chunked) layers keep the file's RoPE base and scale
 * under the options, as llama.cpp builds them (get_rope_freq_base / get_rope_freq_scale:
 * hparams' rope_freq_*_train_swa, which default to the file's values, not the context's; laguna
 * the same by its own code): the options reach only their other layers. In llama.cpp's other
 * sliding-window architectures (cohere2, cohere2moe, exaone-moe, mellum, lfm2, ...) every
 * layer takes the context's base and scale, so there the options reach every layer.
 */
const SLIDING_LAYERS_KEEP_FILE_ROPE: ReadonlySet<string> = new Set(['afmoe', 'gemma2', 'gemma3', 'gemma3n', 'gemma4', 'gpt-oss', 'laguna', 'llama4', 'maple', 'mimo2', 'smallthinker', 'spark2_5', 'step35']);

/** For each op of a program that carries RoPE parameters, whether its layer's attention is sliding (or chunked). */
function ropeOpsOnSlidingLayers(program: ModelProgram): Map<number, boolean> {
  const out = new Map<number, boolean>();
  let pending: number[] = [];
  program.ops.forEach((op, i) => {
    if (op.params && 'freq_base' in op.params) pending.push(i);
    if (op.op === 'attention') {
      const sliding = Number(op.params?.window ?? 0) > 0 || Number(op.params?.chunk ?? 0) > 0;
      for (const j of pending) out.set(j, sliding);
      pending = [];
    }
  });
  return out;
}

/**
 * The program of a load with RoPE options, as llama.cpp splits them on a model with sliding-window
 * layers: `program` is built with the options everywhere; for an architecture whose sliding layers
 * keep the file's RoPE, their rope ops take the base and scale of `fileProgram` (built from the
 * file's values) instead. The two programs differ only in numbers; if their ops do not pair up,
 * the options are refused rather than guessed.
 */
export function ropeOptionsOnSlidingWindows(program: ModelProgram, fileProgram: () => ModelProgram, arch: string): ModelProgram {
  const sliding = ropeOpsOnSlidingLayers(program);
  if (![...sliding.values()].some(Boolean) || !SLIDING_LAYERS_KEEP_FILE_ROPE.has(arch)) return program;
  const file = fileProgram();
  if (file.ops.length !== program.ops.length || file.ops.some((op, i) => op.op !== program.ops[i].op))
    throw new EngineError('KAIL_E_UNSUPPORTED', `${arch}: the --rope-*/--yarn-* options change this model's program beyond its RoPE values; use --override-kv on the file's rope keys instead`);
  const ops = program.ops.map((op, i) => {
    if (!sliding.get(i)) return op;
    const own = file.ops[i].params!;
    return { ...op, params: { ...op.params, freq_base: own.freq_base, freq_scale: own.freq_scale } };
  });
  return { ...program, ops };
}

/** Each option's llama.cpp flag (without --); --rope-scale N is --rope-freq-scale 1/N spelled otherwise. */
const OPTION_FLAGS: readonly (readonly [keyof RopeOptions, RopeFlag])[] = [
  ['scaling', 'rope-scaling'],
  ['freqBase', 'rope-freq-base'],
  ['freqScale', 'rope-freq-scale'],
  ['yarnOrigCtx', 'yarn-orig-ctx'],
  ['yarnExtFactor', 'yarn-ext-factor'],
  ['yarnBetaFast', 'yarn-beta-fast'],
  ['yarnBetaSlow', 'yarn-beta-slow'],
];

/** The options as llama.cpp's command-line words (['--rope-scaling', 'yarn', ...]); empty for none. */
export function ropeOptionArgs(o: RopeOptions | undefined): string[] {
  return OPTION_FLAGS.flatMap(([key, flag]) => (o?.[key] === undefined ? [] : [`--${flag}`, String(o[key])]));
}

/** The options as flags, for a load's computeKey and logs ('' for none). */
export function describeRopeOptions(o: RopeOptions | undefined): string {
  return ropeOptionArgs(o).join(' ');
}

/** llama.cpp's flag names for the options (without the leading --). */
export const ROPE_FLAGS = ['rope-scaling', 'rope-scale', 'rope-freq-base', 'rope-freq-scale', 'yarn-orig-ctx', 'yarn-ext-factor', 'yarn-beta-fast', 'yarn-beta-slow'] as const;
export type RopeFlag = (typeof ROPE_FLAGS)[number];

/**
 * The options from the flags' text values, as llama.cpp's arg parser reads them (`--rope-scale N`
 * is a frequency scale of 1/N); undefined when none is given. A value that is not a number, or
 * both --rope-scale and --rope-freq-scale, is an error naming the flag.
 */
export function parseRopeFlags(values: Partial<Record<RopeFlag, string>>): RopeOptions | undefined {
  const num = (flag: RopeFlag): number | undefined => {
    const v = values[flag];
    if (v === undefined) return undefined;
    const n = Number(v);
    if (v.trim() === '' || !Number.isFinite(n)) throw new EngineError('KAIL_E_INVALID_ARG', `--${flag} takes a number, got '${v}'`);
    return n;
  };
  const scale = num('rope-scale');
  if (scale !== undefined && values['rope-freq-scale'] !== undefined) throw new EngineError('KAIL_E_INVALID_ARG', '--rope-scale N and --rope-freq-scale 1/N say the same thing: give one');
  if (scale !== undefined && !(scale > 0)) throw bad('--rope-scale', scale, 'a positive number');
  const o: Record<string, unknown> = {};
  for (const [key, flag] of OPTION_FLAGS) o[key] = key === 'scaling' ? values[flag] : num(flag);
  if (scale !== undefined) o.freqScale = 1 / scale;
  const opts = o as RopeOptions;
  if (!hasRopeOptions(opts)) return undefined;
  checkRopeOptions(opts);
  return opts;
}
