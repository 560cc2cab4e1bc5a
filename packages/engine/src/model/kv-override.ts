// Metadata overrides: llama.cpp's `--override-kv KEY=TYPE:VALUE` (common/common.cpp
// string_parse_kv_override, src/llama-model-loader.cpp get_key). A load reads the overridden
// value in place of the file's (or where the file has none), for hyperparameters and tokenizer
// keys alike: `qwen3moe.expert_used_count=int:4` runs a MoE model with fewer experts per token,
// `tokenizer.ggml.add_bos_token=bool:false` drops the BOS. `kail quantize` writes them into the
// output file, as llama-quantize does.
import type { GgufValue } from '@kailstream/core-native';

import { EngineError } from '../errors';

export type KvOverrideType = 'int' | 'float' | 'bool' | 'str';

export interface KvOverride {
  key: string;
  type: KvOverrideType;
  /** int: a safe integer; float: a finite number; bool: a boolean; str: a string. */
  value: number | boolean | string;
}

const bad = (item: string, why: string) => new EngineError('KAIL_E_INVALID_ARG', `--override-kv '${item}': ${why}; expected KEY=TYPE:VALUE with TYPE int, float, bool or str`);

/**
 * The fields of one --override-kv value, split at commas as llama.cpp's parse_csv_row splits them:
 * a field that starts with `"` runs to the next lone `"` (commas inside it kept, `""` an escaped quote).
 */
export function splitOverrideList(s: string): string[] {
  const fields: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < s.length; i++) {
    const ch = s[i];
    if (ch === '"') {
      if (!quoted) {
        if (field) field += '"';
        else quoted = true;
      } else if (s[i + 1] === '"') {
        field += '"';
        i++;
      } else {
        quoted = false;
      }
    } else if (ch === ',' && !quoted) {
      fields.push(field);
      field = '';
    } else {
      field += ch;
    }
  }
  fields.push(field);
  return fields;
}

/** One KEY=TYPE:VALUE. Stricter than llama.cpp's atol/atof: a value that is not a number is an error, not 0. */
export function parseKvOverride(item: string): KvOverride {
  const eq = item.indexOf('=');
  if (eq <= 0) throw bad(item, eq === 0 ? 'the key is empty' : "no '='");
  const key = item.slice(0, eq);
  const rest = item.slice(eq + 1);
  const colon = rest.indexOf(':');
  const type = colon < 0 ? '' : rest.slice(0, colon);
  const v = rest.slice(colon + 1);
  switch (type) {
    case 'int': {
      const n = Number(v);
      if (!/^\s*[+-]?\d+\s*$/.test(v) || !Number.isSafeInteger(n)) throw bad(item, `'${v}' is not an integer (of at most 2^53)`);
      return { key, type, value: n };
    }
    case 'float': {
      const n = v.trim() === '' ? NaN : Number(v);
      if (!Number.isFinite(n)) throw bad(item, `'${v}' is not a finite number`);
      return { key, type, value: n };
    }
    case 'bool':
      if (v !== 'true' && v !== 'false') throw bad(item, `a bool is true or false, not '${v}'`);
      return { key, type, value: v === 'true' };
    case 'str':
      return { key, type, value: v };
    default:
      throw bad(item, colon < 0 ? 'no TYPE: before the value' : `unknown type '${type}'`);
  }
}

/** Every override of the repeated flag's values (each a comma-separated list), in order; a later one of a key replaces an earlier. */
export function parseKvOverrides(values: readonly string[]): KvOverride[] {
  const out: KvOverride[] = [];
  for (const v of values) for (const item of splitOverrideList(v)) out.push(parseKvOverride(item));
  return out;
}

/** The flag's spelling of an override (for logs and for passing it on to a service). */
export function formatKvOverride(o: KvOverride): string {
  const s = `${o.key}=${o.type}:${String(o.value)}`;
  return /[,"]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

function kindOf(v: GgufValue): 'number' | 'boolean' | 'string' | 'array' {
  if (typeof v === 'number' || typeof v === 'bigint') return 'number';
  if (typeof v === 'boolean') return 'boolean';
  if (typeof v === 'string') return 'string';
  return 'array';
}

const WANTS: Record<KvOverrideType, ReturnType<typeof kindOf>> = { int: 'number', float: 'number', bool: 'boolean', str: 'string' };

/**
 * The metadata a load reads: `kv` with each override's value in place of the file's. An override
 * must match the kind of value the file holds for its key (a number for int and float, a boolean, a
 * string); arrays are not overridden (llama.cpp reads an array key from the file whatever the
 * override). Keys the file lacks are added. `kv` itself is not changed.
 */
export function applyKvOverrides(kv: Readonly<Record<string, GgufValue>>, overrides: readonly KvOverride[] | undefined): Record<string, GgufValue> {
  if (!overrides?.length) return kv as Record<string, GgufValue>;
  const out: Record<string, GgufValue> = { ...kv };
  for (const o of overrides) {
    const cur = Object.hasOwn(kv, o.key) ? kv[o.key] : undefined;
    if (cur !== undefined) {
      const kind = kindOf(cur);
      if (kind === 'array') throw new EngineError('KAIL_E_INVALID_ARG', `--override-kv ${formatKvOverride(o)}: the model's '${o.key}' is an array; overrides set single values`);
      if (kind !== WANTS[o.type]) throw new EngineError('KAIL_E_INVALID_ARG', `--override-kv ${formatKvOverride(o)}: the model's '${o.key}' is a ${kind}, not ${o.type === 'str' ? 'a string' : o.type === 'bool' ? 'a boolean' : 'a number'}; use ${kind === 'number' ? 'int: or float:' : kind === 'boolean' ? 'bool:' : 'str:'}`);
    }
    out[o.key] = o.value;
  }
  return out;
}

/** llama.cpp's log line for an override it used ("Using metadata override"). */
export function describeKvOverride(o: KvOverride): string {
  return `metadata override (${o.type}) '${o.key}' = ${o.type === 'float' ? (o.value as number).toFixed(6) : String(o.value)}`;
}
