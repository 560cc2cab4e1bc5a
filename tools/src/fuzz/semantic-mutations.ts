// Semantic mutations of GGUF model files: files that stay valid GGUF (the byte-level parser is
// mutation-tested on its own, packages/core-native/tests/test-gguf.cpp) but whose contents are
// wrong: metadata of the wrong value or type, missing keys, another architecture, tensors of the
// wrong shape or type, missing or renamed tensors, inconsistent expert and head counts, tokenizer
// arrays of the wrong length, a chat template that is not Jinja. Each mutation changes one thing
// of a parsed model image; writeMutated writes the result as a new, well-formed GGUF file.
import fs from 'node:fs';

import { GgmlType, ggmlTensorBytes, GgufType } from '../gguf/constants';
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import type { GgufReadKv, GgufReadTensor } from '../gguf/reader';
import { GgufWriter, kv } from '../gguf/writer';
import type { GgufArrayElementType, GgufValue } from '../gguf/writer';

/** A tensor of a model image: its (possibly mutated) name, shape and type, and where its bytes come from. */
export interface ImageTensor {
  name: string;
  shape: number[];
  type: GgmlType;
  /** The source tensor whose bytes are copied (cut or zero-padded to the new size); null: zeros. */
  source: GgufReadTensor | null;
}

/** A parsed GGUF file to mutate: metadata in file order and the tensor table. */
export interface ModelImage {
  path: string;
  alignment: number;
  kv: Map<string, GgufValue>;
  tensors: ImageTensor[];
}

export interface Mutation {
  /** Stable id: `<group>:<target>:<variant>`. */
  id: string;
  /** Mutation family, for the per-family outcome counts. */
  group: string;
  apply(img: ModelImage): void;
}

function toWriterValue(v: GgufReadKv): GgufValue {
  if (v.type === GgufType.ARRAY) return { type: GgufType.ARRAY, elemType: v.elemType as GgufArrayElementType, value: v.value as never };
  return { type: v.type, value: v.value } as GgufValue;
}

export function readImage(path: string): ModelImage {
  const h = readGgufHeader(path);
  const m = new Map<string, GgufValue>();
  for (const [k, v] of h.kv) if (k !== 'general.alignment') m.set(k, toWriterValue(v));
  return { path, alignment: h.alignment, kv: m, tensors: h.tensors.map((t) => ({ name: t.name, shape: [...t.shape], type: t.type, source: t })) };
}

export function cloneImage(img: ModelImage): ModelImage {
  return { ...img, kv: new Map(img.kv), tensors: img.tensors.map((t) => ({ ...t, shape: [...t.shape] })) };
}

/** Writes the image as a GGUF file. Throws when a tensor's shape does not fit its type's blocks. */
export function writeImage(img: ModelImage, out: string): void {
  const w = new GgufWriter(out, { alignment: img.alignment });
  try {
    for (const [k, v] of img.kv) w.set(k, v);
    for (const t of img.tensors) w.addTensor({ name: t.name, shape: t.shape, type: t.type });
    const fd = fs.openSync(img.path, 'r');
    try {
      for (const t of img.tensors) {
        const bytes = ggmlTensorBytes(t.type, t.shape);
        const data = Buffer.alloc(bytes);
        if (t.source) {
          const src = t.source.bytes <= bytes ? readGgufTensorBytes(img.path, t.source) : readPrefix(fd, t.source, bytes);
          src.copy(data, 0, 0, Math.min(bytes, src.length));
        }
        w.writeTensorData(t.name, data);
      }
    } finally {
      fs.closeSync(fd);
    }
    w.finish();
  } catch (e) {
    w.abort();
    throw e;
  }
}

function readPrefix(fd: number, t: GgufReadTensor, n: number): Buffer {
  const out = Buffer.alloc(n);
  let off = 0;
  while (off < n) {
    const got = fs.readSync(fd, out, off, n - off, t.fileOffset + off);
    if (got === 0) break;
    off += got;
  }
  return out;
}

// ---- the mutations ----------------------------------------------------------------------------

const I32_MAX = 2 ** 31 - 1;
const HUGE = 2 ** 40;
const isIntType = (t: GgufType) => [GgufType.UINT8, GgufType.INT8, GgufType.UINT16, GgufType.INT16, GgufType.UINT32, GgufType.INT32, GgufType.UINT64, GgufType.INT64].includes(t);
const isFloatType = (t: GgufType) => t === GgufType.FLOAT32 || t === GgufType.FLOAT64;
const num = (v: GgufValue) => Number(v.value as number | bigint);

/** Keys handled by the tokenizer- and template-specific mutations instead of the generic ones. */
const TOKENIZER_ARRAYS = ['tokenizer.ggml.tokens', 'tokenizer.ggml.scores', 'tokenizer.ggml.token_type', 'tokenizer.ggml.merges'];

function setKey(key: string, value: GgufValue | undefined): (img: ModelImage) => void {
  return (img) => {
    if (value === undefined) img.kv.delete(key);
    else img.kv.set(key, value);
  };
}

/** Scalar and array metadata mutations for one key. */
function keyMutations(key: string, v: GgufValue): Mutation[] {
  const out: Mutation[] = [];
  const add = (variant: string, value: GgufValue | undefined, group = 'metadata') => out.push({ id: `meta:${key}:${variant}`, group, apply: setKey(key, value) });
  add('removed', undefined, 'metadata-removed');
  if (isIntType(v.type) || isFloatType(v.type)) {
    const float = isFloatType(v.type);
    const same = (x: number): GgufValue => (float ? { type: v.type, value: x } as GgufValue : kv.u32(x));
    add('zero', same(0));
    add('one', same(1));
    add('i32max', float ? kv.f32(I32_MAX) : kv.u32(I32_MAX));
    add('huge', float ? kv.f64(HUGE) : kv.u64(HUGE));
    add('negative', float ? kv.f32(-1) : kv.i32(-1));
    if (float) {
      add('int-for-float', kv.u32(Math.max(0, Math.round(num(v)))));
      add('nan', kv.f32(NaN));
      add('inf', kv.f32(Infinity));
    } else {
      add('float-for-int', kv.f32(num(v) + 0.5));
    }
    add('string', kv.str(String(num(v))), 'metadata-type');
    add('array', kv.arr(GgufType.INT32, [Math.trunc(num(v)), Math.trunc(num(v))]), 'metadata-type');
    add('bool', kv.bool(true), 'metadata-type');
  } else if (v.type === GgufType.STRING) {
    add('empty', kv.str(''));
    add('bogus', kv.str('bogus'));
    add('number', kv.u32(1), 'metadata-type');
  } else if (v.type === GgufType.BOOL) {
    add('number', kv.u32(7), 'metadata-type');
    add('string', kv.str('true'), 'metadata-type');
  } else if (v.type === GgufType.ARRAY) {
    const arr = Array.from(v.value as ArrayLike<unknown>);
    add('empty', { ...v, value: [] } as GgufValue, 'metadata-array');
    add('shorter', { ...v, value: arr.slice(0, Math.max(0, arr.length - 1)) } as GgufValue, 'metadata-array');
    add('longer', { ...v, value: [...arr, arr[arr.length - 1] ?? 0] } as GgufValue, 'metadata-array');
    if (v.elemType === GgufType.STRING) add('ints', kv.arr(GgufType.INT32, arr.map((_, i) => i)), 'metadata-type');
    else add('strings', kv.arr(GgufType.STRING, arr.map(String)), 'metadata-type');
    add('scalar', kv.u32(arr.length ? Number(arr[0]) || 1 : 1), 'metadata-type');
  }
  return out;
}

/** Tensor mutations for one tensor name. */
function tensorMutations(name: string): Mutation[] {
  const out: Mutation[] = [];
  const on = (variant: string, group: string, f: (t: ImageTensor, img: ModelImage) => void) =>
    out.push({
      id: `tensor:${name}:${variant}`,
      group,
      apply: (img) => {
        const t = img.tensors.find((x) => x.name === name);
        if (!t) throw new Error(`no tensor ${name}`);
        f(t, img);
      },
    });
  on('removed', 'tensor-removed', (t, img) => img.tensors.splice(img.tensors.indexOf(t), 1));
  on('renamed', 'tensor-removed', (t) => (t.name = `${name.replace(/\.weight$|\.bias$/, '')}.wieght`));
  on('swap-dims', 'tensor-shape', (t) => t.shape.length >= 2 && ([t.shape[0], t.shape[1]] = [t.shape[1], t.shape[0]]));
  on('shrink-ne0', 'tensor-shape', (t) => (t.shape[0] = Math.max(32, t.shape[0] / 2)));
  on('grow-ne0', 'tensor-shape', (t) => (t.shape[0] *= 2));
  on('shrink-last', 'tensor-shape', (t) => (t.shape[t.shape.length - 1] = Math.max(1, Math.floor(t.shape[t.shape.length - 1] / 2))));
  on('grow-last', 'tensor-shape', (t) => (t.shape[t.shape.length - 1] *= 2));
  on('flatten', 'tensor-shape', (t) => (t.shape = [t.shape.reduce((a, b) => a * b, 1)]));
  on('extra-dim', 'tensor-shape', (t) => t.shape.length < 4 && t.shape.push(1));
  for (const [ty, tn] of [
    [GgmlType.F16, 'F16'],
    [GgmlType.BF16, 'BF16'],
    [GgmlType.Q8_0, 'Q8_0'],
    [GgmlType.Q4_K, 'Q4_K'],
    [GgmlType.Q8_K, 'Q8_K'],
    [GgmlType.I32, 'I32'],
    [GgmlType.F64, 'F64'],
  ] as const)
    on(`type-${tn}`, 'tensor-type', (t) => {
      if (t.type === ty) throw new SkipMutation('same type');
      t.type = ty;
      t.source = null; // zeros: a weight of zeros is finite in every type
    });
  return out;
}

/** Thrown by a mutation that does not apply to this model (the harness skips it). */
export class SkipMutation extends Error {}

const blockOf = (name: string) => /^blk\.(\d+)\./.exec(name)?.[1];

/**
 * Every semantic mutation of `img` (a model of architecture `arch`): `full` adds the per-tensor
 * mutations of every kind of tensor (global ones, the first and the last block), else the tensor
 * families are sampled.
 */
export function mutationsFor(img: ModelImage, supportedArchs: readonly string[]): Mutation[] {
  const arch = String(img.kv.get('general.architecture')?.value);
  const out: Mutation[] = [];
  for (const [key, v] of img.kv) {
    if (TOKENIZER_ARRAYS.includes(key) || key === 'tokenizer.chat_template' || key === 'general.architecture') continue;
    if (key.startsWith('general.') && key !== 'general.name') continue;
    out.push(...keyMutations(key, v));
  }

  // Architecture: another supported one (keys left under the old prefix, or renamed to the new
  // one so the metadata is found and only the tensors disagree), an unknown one, none.
  const renameArch = (to: string) => (i: ModelImage) => {
    const next = new Map<string, GgufValue>();
    for (const [k, v] of i.kv) next.set(k.startsWith(`${arch}.`) ? `${to}.${k.slice(arch.length + 1)}` : k, v);
    next.set('general.architecture', kv.str(to));
    i.kv = next;
  };
  for (const other of supportedArchs.filter((a) => a !== arch)) {
    out.push({ id: `arch:${other}:label-only`, group: 'arch', apply: setKey('general.architecture', kv.str(other)) });
    out.push({ id: `arch:${other}:relabeled`, group: 'arch', apply: renameArch(other) });
  }
  out.push({ id: 'arch:bogus:relabeled', group: 'arch', apply: renameArch('bogus') });
  out.push({ id: 'arch:none:removed', group: 'arch', apply: setKey('general.architecture', undefined) });
  out.push({ id: 'arch:number', group: 'arch', apply: setKey('general.architecture', kv.u32(1)) });

  // Per-layer metadata as arrays: the right length with a value that differs per layer, the wrong length.
  const nLayer = num(img.kv.get(`${arch}.block_count`)!);
  for (const key of ['attention.head_count', 'attention.head_count_kv', 'feed_forward_length']) {
    const full = `${arch}.${key}`;
    const v = img.kv.get(full);
    if (!v || v.type === GgufType.ARRAY) continue;
    const x = num(v);
    out.push({ id: `perlayer:${key}:right-length`, group: 'metadata-array', apply: setKey(full, kv.arr(GgufType.UINT32, new Array(nLayer).fill(x))) });
    out.push({ id: `perlayer:${key}:varied`, group: 'metadata-array', apply: setKey(full, kv.arr(GgufType.UINT32, Array.from({ length: nLayer }, (_, i) => (i === nLayer - 1 ? Math.max(1, x / 2) : x)))) });
    out.push({ id: `perlayer:${key}:short`, group: 'metadata-array', apply: setKey(full, kv.arr(GgufType.UINT32, new Array(nLayer - 1).fill(x))) });
    out.push({ id: `perlayer:${key}:long`, group: 'metadata-array', apply: setKey(full, kv.arr(GgufType.UINT32, new Array(nLayer + 3).fill(x))) });
    out.push({ id: `perlayer:${key}:zeros`, group: 'metadata-array', apply: setKey(full, kv.arr(GgufType.UINT32, new Array(nLayer).fill(0))) });
  }

  // Consistency: expert counts, head counts, vocabulary.
  const nExpert = img.kv.get(`${arch}.expert_count`);
  if (nExpert) {
    const e = num(nExpert);
    out.push({ id: 'experts:used-gt-count', group: 'consistency', apply: setKey(`${arch}.expert_used_count`, kv.u32(e + 1)) });
    out.push({ id: 'experts:used-eq-count', group: 'consistency', apply: setKey(`${arch}.expert_used_count`, kv.u32(e)) });
    out.push({ id: 'experts:count-half', group: 'consistency', apply: setKey(`${arch}.expert_count`, kv.u32(e / 2)) });
    out.push({ id: 'experts:count-double', group: 'consistency', apply: setKey(`${arch}.expert_count`, kv.u32(e * 2)) });
    out.push({ id: 'experts:count-odd', group: 'consistency', apply: setKey(`${arch}.expert_count`, kv.u32(e - 1)) });
    if (img.kv.has(`${arch}.expert_group_count`)) {
      out.push({ id: 'experts:groups-not-dividing', group: 'consistency', apply: setKey(`${arch}.expert_group_count`, kv.u32(3)) });
      out.push({ id: 'experts:groups-used-gt-groups', group: 'consistency', apply: setKey(`${arch}.expert_group_used_count`, kv.u32(9)) });
      out.push({ id: 'experts:groups-more-than-experts', group: 'consistency', apply: setKey(`${arch}.expert_group_count`, kv.u32(e * 2)) });
    }
  }
  for (const h of [3, 5, 7, 1000]) out.push({ id: `heads:head_count-${h}`, group: 'consistency', apply: setKey(`${arch}.attention.head_count`, kv.u32(h)) });
  out.push({ id: 'heads:kv-not-dividing', group: 'consistency', apply: setKey(`${arch}.attention.head_count_kv`, kv.u32(3)) });
  out.push({ id: 'heads:kv-gt-heads', group: 'consistency', apply: setKey(`${arch}.attention.head_count_kv`, kv.u32(num(img.kv.get(`${arch}.attention.head_count`)!) * 2)) });
  out.push({ id: 'embd:odd', group: 'consistency', apply: setKey(`${arch}.embedding_length`, kv.u32(255)) });
  out.push({ id: 'rope:dims-gt-head', group: 'consistency', apply: setKey(`${arch}.rope.dimension_count`, kv.u32(4096)) });
  out.push({ id: 'rope:dims-odd', group: 'consistency', apply: setKey(`${arch}.rope.dimension_count`, kv.u32(7)) });
  out.push({ id: 'layers:more-than-blocks', group: 'consistency', apply: setKey(`${arch}.block_count`, kv.u32(nLayer + 1)) });
  out.push({ id: 'layers:fewer-than-blocks', group: 'consistency', apply: setKey(`${arch}.block_count`, kv.u32(nLayer - 1)) });
  out.push({ id: 'layers:dense-gt-blocks', group: 'consistency', apply: setKey(`${arch}.leading_dense_block_count`, kv.u32(nLayer + 5)) });
  out.push({ id: 'layers:nextn-eq-blocks', group: 'consistency', apply: setKey(`${arch}.nextn_predict_layers`, kv.u32(nLayer)) });
  out.push({ id: 'layers:nextn-gt-blocks', group: 'consistency', apply: setKey(`${arch}.nextn_predict_layers`, kv.u32(nLayer + 2)) });
  out.push({ id: 'mla:kv-lora-huge', group: 'consistency', apply: setKey(`${arch}.attention.kv_lora_rank`, kv.u32(I32_MAX)) });

  // Tokenizer arrays.
  const tokens = img.kv.get('tokenizer.ggml.tokens');
  const nTok = tokens ? (tokens.value as ArrayLike<unknown>).length : 0;
  for (const key of TOKENIZER_ARRAYS) {
    const v = img.kv.get(key);
    if (!v || v.type !== GgufType.ARRAY) continue;
    const arr = Array.from(v.value as ArrayLike<unknown>);
    const short = key === 'tokenizer.ggml.merges' ? 1 : 100;
    out.push({ id: `tok:${key}:removed`, group: 'tokenizer', apply: setKey(key, undefined) });
    out.push({ id: `tok:${key}:shorter`, group: 'tokenizer', apply: setKey(key, { ...v, value: arr.slice(0, arr.length - short) } as GgufValue) });
    out.push({ id: `tok:${key}:longer`, group: 'tokenizer', apply: setKey(key, { ...v, value: [...arr, ...arr.slice(0, 100)] } as GgufValue) });
    out.push({ id: `tok:${key}:empty`, group: 'tokenizer', apply: setKey(key, { ...v, value: [] } as GgufValue) });
    if (v.elemType === GgufType.STRING) out.push({ id: `tok:${key}:ints`, group: 'tokenizer', apply: setKey(key, kv.arr(GgufType.INT32, arr.map((_, i) => i))) });
    else out.push({ id: `tok:${key}:strings`, group: 'tokenizer', apply: setKey(key, kv.arr(GgufType.STRING, arr.map(String))) });
    if (key === 'tokenizer.ggml.merges') out.push({ id: `tok:${key}:garbage`, group: 'tokenizer', apply: setKey(key, kv.arr(GgufType.STRING, arr.map((_, i) => (i % 2 ? 'nospace' : 'a b c')))) });
    if (key === 'tokenizer.ggml.token_type') out.push({ id: `tok:${key}:out-of-range`, group: 'tokenizer', apply: setKey(key, kv.arr(GgufType.INT32, arr.map(() => 99))) });
  }
  if (tokens) {
    const arr = Array.from(tokens.value as ArrayLike<string>);
    out.push({ id: 'tok:tokens:duplicates', group: 'tokenizer', apply: setKey('tokenizer.ggml.tokens', kv.arr(GgufType.STRING, arr.map((s, i) => (i % 3 ? s : arr[0])))) });
    out.push({ id: 'tok:tokens:all-empty', group: 'tokenizer', apply: setKey('tokenizer.ggml.tokens', kv.arr(GgufType.STRING, arr.map(() => ''))) });
    // The vocabulary disagreeing with token_embd: more or fewer tokens than embedding rows, with
    // every other tokenizer array kept consistent with the token list.
    for (const [variant, n] of [['vocab-gt-embd', nTok + 64], ['vocab-lt-embd', nTok - 64]] as const)
      out.push({
        id: `tok:${variant}`,
        group: 'consistency',
        apply: (i) => {
          for (const key of ['tokenizer.ggml.tokens', 'tokenizer.ggml.scores', 'tokenizer.ggml.token_type']) {
            const v = i.kv.get(key);
            if (!v || v.type !== GgufType.ARRAY) continue;
            const a = Array.from(v.value as ArrayLike<unknown>);
            const filler = key === 'tokenizer.ggml.tokens' ? (j: number) => `<extra_${j}>` : key === 'tokenizer.ggml.token_type' ? () => 1 : () => 0;
            const next = n <= a.length ? a.slice(0, n) : [...a, ...Array.from({ length: n - a.length }, (_, j) => filler(j))];
            i.kv.set(key, { ...v, value: next } as GgufValue);
          }
        },
      });
  }
  for (const id of ['bos', 'eos', 'padding', 'unknown', 'eot'])
    for (const [variant, value] of [['oob', kv.u32(nTok + 10)], ['huge', kv.u32(I32_MAX)], ['negative', kv.i32(-5)]] as const)
      out.push({ id: `tok:${id}_token_id:${variant}`, group: 'tokenizer', apply: setKey(`tokenizer.ggml.${id}_token_id`, value) });

  // Chat templates that are not (valid) Jinja, or fail when rendered.
  for (const [variant, tpl] of [
    ['unclosed-tag', '{% for m in messages %}{{ m.content }}'],
    ['bad-expression', '{{ messages[ }}'],
    ['unknown-filter', '{{ messages | nosuchfilter }}'],
    ['raises', "{{ raise_exception('nope') }}"],
    ['runaway', '{% for i in range(100000000) %}x{% endfor %}'],
    ['not-a-string', ''],
  ] as const)
    out.push({
      id: `template:${variant}`,
      group: 'template',
      apply: setKey('tokenizer.chat_template', variant === 'not-a-string' ? kv.u32(1) : kv.str(tpl)),
    });

  // Tensors: the global ones, and every tensor of the first and of the last block.
  const last = Math.max(...img.tensors.map((t) => Number(blockOf(t.name) ?? -1)));
  for (const t of img.tensors) {
    const b = blockOf(t.name);
    if (b !== undefined && Number(b) !== 0 && Number(b) !== last) continue;
    out.push(...tensorMutations(t.name));
  }
  return out;
}
