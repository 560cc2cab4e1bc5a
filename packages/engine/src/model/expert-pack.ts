// Expert packs (`kail repack`): an expert-major copy of a model's routed experts, a sidecar to the
// GGUF (which stays the source of metadata and resident weights and keeps working with llama.cpp).
//
// Each expert of each MoE layer is one block, 4 KiB-aligned and a multiple of 4 KiB long, holding
// its gate, up and down slices (each slice's bytes exactly as in the GGUF, at 64-byte-aligned
// offsets; gate-less experts have an empty gate slice, and experts whose gate and up are one fused
// tensor a gate|up slice and an empty up slice), so one O_DIRECT read fetches an expert. Blocks are striped over one file per storage
// path: expert g = layer * n_expert + e goes to stripe g mod n, so the experts one token needs
// spread over every device and the reader's I/O threads keep all of them busy.
//
// Stripe file layout: "KXPK" magic, u32 format version, u32 header length, the JSON header
// (ExpertPackHeader), zero padding to 4 KiB; then the stripe's blocks. Every stripe carries the
// full table, the model's identity and a pack id shared by its stripes, so a run finds its pack by
// scanning directories and never mixes stripes of two repacks.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import type { GgufTensorInfo, ModelProgram, NativeExpertPack, NativeGgufFile } from '@kailstream/core-native';

import { EngineError } from '../errors';
import { modelIdentity } from '../cache/usage-history';

export const EXPERT_PACK_MAGIC = 'KXPK';
export const EXPERT_PACK_VERSION = 1 as const;
export const EXPERT_PACK_EXT = '.kxp';
const ALIGN = 4096;
const SLICE_ALIGN = 64;

export interface ExpertPackLayer {
  /** gate, up, down tensor names in the GGUF ('' for the gate of gate-less experts and the up of fused gate|up ones). */
  tensors: [string, string, string];
  /** Bytes of one expert's slice of each tensor. */
  strides: [number, number, number];
  sliceOffset: [number, number, number];
  blockBytes: number;
  /** Per expert: the stripe holding its block, and the block's offset in that stripe. */
  stripe: number[];
  offset: number[];
}

export interface ExpertPackHeader {
  format: 'kailstream-expert-pack';
  version: typeof EXPERT_PACK_VERSION;
  /** modelIdentity() of the GGUF the experts came from. */
  modelKey: string;
  model: string;
  packId: string;
  stripe: number;
  stripes: number;
  layers: ExpertPackLayer[];
}

const up = (v: number, a: number) => Math.ceil(v / a) * a;

/**
 * Per MoE op in program order: its gate (null for gate-less experts; fused gate|up experts: the
 * fused tensor), up (null when fused into the gate) and down expert tensors.
 */
export type ExpertTensors = [GgufTensorInfo | null, GgufTensorInfo | null, GgufTensorInfo];
export function expertTensors(program: ModelProgram, file: NativeGgufFile): ExpertTensors[] {
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  const out: ExpertTensors[] = [];
  for (const op of program.ops) {
    if (op.op !== 'moe') continue;
    // (act 2 and 3: up and down only. A fused gate|up tensor is read as the gate slice, as the
    // native stream reads it.)
    const gated = op.params?.act !== 2 && op.params?.act !== 3;
    const fused = gated && !!op.params?.fused_gate_up;
    const ts = (['gate_exps', 'up_exps', 'down_exps'] as const).map((role) => {
      if ((role === 'gate_exps' && !gated) || (role === 'up_exps' && fused)) return null;
      const name = op.weights?.[role];
      const t = name ? byName.get(name) : undefined;
      if (!t) throw new EngineError('KAIL_E_BAD_MODEL', `${file.path}: MoE op without its ${role} tensor`);
      return t;
    });
    out.push(ts as ExpertTensors);
  }
  return out;
}

function layout(tensors: ExpertTensors[], stripes: number): ExpertPackLayer[] {
  const next = new Array<number>(stripes).fill(0);
  return tensors.map((ts, l) => {
    const nExpert = ts[2].dims[2] ?? 1;
    const strides = ts.map((t) => {
      if (!t) return 0;
      const n = t.dims[2] ?? 1;
      if (n !== nExpert || t.nbytes % n !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `expert tensor '${t.name}' does not split into ${nExpert} experts`);
      return t.nbytes / n;
    }) as [number, number, number];
    const sliceOffset: [number, number, number] = [0, up(strides[0], SLICE_ALIGN), 0];
    sliceOffset[2] = up(sliceOffset[1] + strides[1], SLICE_ALIGN);
    const blockBytes = up(sliceOffset[2] + strides[2], ALIGN);
    const stripe: number[] = [];
    const offset: number[] = [];
    for (let e = 0; e < nExpert; e++) {
      const s = (l * nExpert + e) % stripes;
      stripe.push(s);
      offset.push(next[s]);
      next[s] += blockBytes;
    }
    return { tensors: ts.map((t) => t?.name ?? '') as [string, string, string], strides, sliceOffset, blockBytes, stripe, offset };
  });
}

function headerBytes(h: ExpertPackHeader): Buffer {
  const json = Buffer.from(JSON.stringify(h));
  const buf = Buffer.alloc(up(12 + json.length, ALIGN));
  buf.write(EXPERT_PACK_MAGIC, 0, 'latin1');
  buf.writeUInt32LE(EXPERT_PACK_VERSION, 4);
  buf.writeUInt32LE(json.length, 8);
  json.copy(buf, 12);
  return buf;
}

export interface WritePackOptions {
  /** Pack file name (the same in every storage directory), ending in .kxp. */
  name: string;
  /** One directory per stripe. */
  storage: string[];
  log?: (line: string) => void;
}

/** Writes the pack's stripes; returns their paths. Partial files are removed on failure. */
export function writeExpertPack(modelPath: string, program: ModelProgram, file: NativeGgufFile, o: WritePackOptions): string[] {
  if (!o.name.endsWith(EXPERT_PACK_EXT) || o.name.includes('/')) throw new EngineError('KAIL_E_INVALID_ARG', `pack name '${o.name}' must be a file name ending in ${EXPERT_PACK_EXT}`);
  if (!o.storage.length) throw new EngineError('KAIL_E_INVALID_ARG', 'no storage directory');
  const dirs = o.storage.map((d) => path.resolve(d));
  if (new Set(dirs).size !== dirs.length) throw new EngineError('KAIL_E_INVALID_ARG', `a storage directory is given twice: ${dirs.join(', ')}`);
  for (const d of dirs) if (!fs.existsSync(d) || !fs.statSync(d).isDirectory()) throw new EngineError('KAIL_E_INVALID_ARG', `storage path ${d} is not a directory`);
  const tensors = expertTensors(program, file);
  if (!tensors.length) throw new EngineError('KAIL_E_INVALID_ARG', `${modelPath} has no routed experts to repack`);
  const layers = layout(tensors, dirs.length);
  const base = { format: 'kailstream-expert-pack' as const, version: EXPERT_PACK_VERSION, modelKey: modelIdentity(modelPath), model: path.basename(modelPath), packId: crypto.randomUUID(), stripes: dirs.length, layers };
  const headers = dirs.map((_, i) => headerBytes({ ...base, stripe: i }));
  const outs = dirs.map((d) => path.join(d, o.name));
  const tmps = outs.map((f) => `${f}.partial`);
  // One descriptor per split file of the model (one for a model in one file).
  const srcs = file.splits.map((sp) => fs.openSync(sp.path, 'r'));
  const fds: number[] = [];
  try {
    for (const t of tmps) fds.push(fs.openSync(t, 'w', 0o644));
    const maxBlock = Math.max(...layers.map((l) => l.blockBytes));
    const block = Buffer.alloc(maxBlock);
    let written = 0;
    const total = layers.reduce((a, l) => a + l.blockBytes * l.stripe.length, 0);
    let lastLog = 0;
    layers.forEach((l, li) => {
      for (let e = 0; e < l.stripe.length; e++) {
        block.fill(0, 0, l.blockBytes);
        for (let s = 0; s < 3; s++) {
          const t = tensors[li][s];
          if (!t) continue;
          const off = t.offset + e * l.strides[s];
          const n = fs.readSync(srcs[t.split], block, l.sliceOffset[s], l.strides[s], off);
          if (n !== l.strides[s]) throw new EngineError('KAIL_E_IO', `${file.splits[t.split].path}: short read of '${t.name}' expert ${e} at offset ${off} (the file ends early?)`);
        }
        fs.writeSync(fds[l.stripe[e]], block, 0, l.blockBytes, headers[l.stripe[e]].length + l.offset[e]);
        written += l.blockBytes;
      }
      if (o.log && (written - lastLog > total / 20 || li === layers.length - 1)) {
        lastLog = written;
        o.log(`repack: ${li + 1}/${layers.length} MoE layers, ${(100 * written / total).toFixed(0)}%`);
      }
    });
    fds.forEach((fd, i) => {
      fs.writeSync(fd, headers[i], 0, headers[i].length, 0);
      fs.fsyncSync(fd);
    });
  } catch (e) {
    for (const t of tmps) fs.rmSync(t, { force: true });
    throw e;
  } finally {
    for (const fd of srcs) fs.closeSync(fd);
    for (const fd of fds) fs.closeSync(fd);
  }
  tmps.forEach((t, i) => fs.renameSync(t, outs[i]));
  return outs;
}

/** The header of a stripe file and where its blocks start, or null when the file is not an expert pack. */
export function readPackHeader(file: string): { header: ExpertPackHeader; dataOffset: number } | null {
  const fd = fs.openSync(file, 'r');
  try {
    const head = Buffer.alloc(12);
    if (fs.readSync(fd, head, 0, 12, 0) !== 12 || head.toString('latin1', 0, 4) !== EXPERT_PACK_MAGIC) return null;
    if (head.readUInt32LE(4) !== EXPERT_PACK_VERSION) throw new EngineError('KAIL_E_INVALID_ARG', `${file}: expert pack version ${head.readUInt32LE(4)}, this build reads ${EXPERT_PACK_VERSION}`);
    const len = head.readUInt32LE(8);
    const json = Buffer.alloc(len);
    if (fs.readSync(fd, json, 0, len, 12) !== len) throw new EngineError('KAIL_E_BAD_MODEL', `${file}: expert pack header cut short`);
    let header: ExpertPackHeader;
    try {
      header = JSON.parse(json.toString('utf8')) as ExpertPackHeader;
    } catch (e) {
      throw new EngineError('KAIL_E_BAD_MODEL', `${file}: expert pack header is not JSON: ${(e as Error).message}`);
    }
    return { header, dataOffset: up(12 + len, ALIGN) };
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Finds the expert pack of `modelPath` in `storage` (directories to scan for *.kxp, or stripe
 * files) and checks it against the model's expert tensors; returns what the native reader needs.
 * Errors name what is missing or does not match.
 */
export function resolveExpertPack(modelPath: string, program: ModelProgram, file: NativeGgufFile, storage: string[]): NativeExpertPack {
  const key = modelIdentity(modelPath);
  const candidates: string[] = [];
  for (const s of storage) {
    if (!fs.existsSync(s)) throw new EngineError('KAIL_E_IO', `storage path ${s} does not exist`);
    if (fs.statSync(s).isDirectory()) for (const f of fs.readdirSync(s)) if (f.endsWith(EXPERT_PACK_EXT)) candidates.push(path.resolve(s, f));
    if (fs.statSync(s).isFile()) candidates.push(path.resolve(s));
  }
  const packs = new Map<string, Map<number, { file: string; h: ExpertPackHeader; dataOffset: number }>>();
  for (const f of candidates) {
    const r = readPackHeader(f);
    if (!r || r.header.modelKey !== key) continue;
    const h = r.header;
    if (!packs.has(h.packId)) packs.set(h.packId, new Map());
    packs.get(h.packId)!.set(h.stripe, { file: f, h, dataOffset: r.dataOffset });
  }
  const complete = [...packs.values()].filter((m) => [...m.values()][0].h.stripes === m.size);
  if (!complete.length) {
    const partial = [...packs.values()].map((m) => {
      const n = [...m.values()][0].h.stripes;
      const missing = Array.from({ length: n }, (_, i) => i).filter((i) => !m.has(i));
      return `a pack of ${n} stripes lacks stripe(s) ${missing.join(', ')}`;
    });
    throw new EngineError(
      'KAIL_E_IO',
      `no complete expert pack of ${modelPath} in ${storage.join(', ')}${partial.length ? ` (${partial.join('; ')})` : ''}; write one with kail repack -m ${modelPath}`,
    );
  }
  if (complete.length > 1) throw new EngineError('KAIL_E_INVALID_ARG', `several expert packs of ${modelPath} in ${storage.join(', ')}: ${complete.map((m) => [...m.values()][0].file).join(', ')}; give one`);
  const stripes = [...complete[0].values()].sort((a, b) => a.h.stripe - b.h.stripe);
  const h = stripes[0].h;
  const tensors = expertTensors(program, file);
  const want = layout(tensors, h.stripes);
  if (h.layers.length !== want.length) throw new EngineError('KAIL_E_BAD_MODEL', `expert pack ${stripes[0].file}: ${h.layers.length} MoE layers, the model has ${want.length}`);
  const headerLen = stripes.map((s) => s.dataOffset);
  const sizes = stripes.map((s) => fs.statSync(s.file).size);
  const layers = h.layers.map((l, i) => {
    const w = want[i];
    if (l.tensors.join() !== w.tensors.join() || l.strides.join() !== w.strides.join() || l.blockBytes !== w.blockBytes || l.sliceOffset.join() !== w.sliceOffset.join())
      throw new EngineError('KAIL_E_BAD_MODEL', `expert pack ${stripes[0].file}: MoE layer ${i} does not match the model's tensors ${w.tensors.join(', ')}`);
    const offset = new Float64Array(l.offset.length);
    l.offset.forEach((o, e) => {
      const s = l.stripe[e];
      offset[e] = headerLen[s] + o;
      if (offset[e] + l.blockBytes > sizes[s]) throw new EngineError('KAIL_E_BAD_MODEL', `expert pack ${stripes[s].file} ends before expert ${e} of MoE layer ${i} (truncated?)`);
    });
    return { sliceOffset: l.sliceOffset, blockBytes: l.blockBytes, file: Int32Array.from(l.stripe), offset };
  });
  return { files: stripes.map((s) => s.file), layers };
}
