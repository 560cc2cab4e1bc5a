// Saved slots (llama-server's POST /slots/ID?action=save|restore, llama-cli's --prompt-cache): a
// sequence's cached tokens and KV cache in one file. Layout: "KAILSLOT", a little-endian u32
// header length, the header (JSON: the model it belongs to, the tokens, the LoRA scales the rows
// were computed with), then EngineModel.saveSequence's bytes.
import fs from 'node:fs';

import { EngineError, fsErrorText } from '../errors';
import type { EngineModel } from '../model/model';
import { modelFileBytes } from '../model/split-files';

const MAGIC = Buffer.from('KAILSLOT');

export interface SlotFileHeader {
  version: 1;
  /**
   * What the cache rows were computed by: the architecture, its sizes, the file's size and the
   * load's EngineModel.computeKey (overrides, control vectors, adapters; absent in older files: none).
   */
  model: { arch: string; nLayer: number; nVocab: number; fileBytes: number; compute?: string };
  tokens: number[];
  /** The LoRA scales of the rows, comma-joined ('' without adapters). */
  lora: string;
}

function identity(model: EngineModel): SlotFileHeader['model'] {
  return { arch: model.hparams.arch, nLayer: model.hparams.nLayer, nVocab: model.nVocab, fileBytes: modelFileBytes(model.path), ...(model.computeKey ? { compute: model.computeKey } : {}) };
}

/** Writes a slot file; returns its size in bytes. */
export function writeSlotFile(file: string, model: EngineModel, tokens: readonly number[], lora: string, state: Uint8Array): number {
  const header = Buffer.from(JSON.stringify({ version: 1, model: identity(model), tokens: [...tokens], lora } satisfies SlotFileHeader), 'utf8');
  const len = Buffer.alloc(4);
  len.writeUInt32LE(header.length);
  const body = Buffer.concat([MAGIC, len, header, Buffer.from(state.buffer, state.byteOffset, state.byteLength)]);
  fs.writeFileSync(file, body);
  return body.length;
}

/**
 * Reads a slot file written for this model: its header and the KV bytes. A file that is not one,
 * is damaged or belongs to another model is refused (KAIL_E_INVALID_ARG) naming why.
 */
export function readSlotFile(file: string, model: EngineModel): { header: SlotFileHeader; state: Uint8Array; bytes: number } {
  let buf: Buffer;
  try {
    buf = fs.readFileSync(file);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new EngineError(code === 'ENOENT' ? 'KAIL_E_NOT_FOUND' : 'KAIL_E_IO', `slot file ${file}: ${fsErrorText(e)}`);
  }
  const bad = (why: string) => new EngineError('KAIL_E_INVALID_ARG', `slot file ${file}: ${why}`);
  if (buf.length < 12 || !buf.subarray(0, 8).equals(MAGIC)) throw bad('not a saved slot');
  const n = buf.readUInt32LE(8);
  if (12 + n > buf.length) throw bad('truncated header');
  let header: SlotFileHeader;
  try {
    header = JSON.parse(buf.subarray(12, 12 + n).toString('utf8')) as SlotFileHeader;
  } catch {
    throw bad('damaged header');
  }
  if (header?.version !== 1 || !Array.isArray(header.tokens) || !header.tokens.every((t) => Number.isInteger(t) && t >= 0 && t < model.nVocab) || typeof header.lora !== 'string')
    throw bad('damaged header');
  const want = identity(model);
  const got = header.model ?? {};
  if (got.arch !== want.arch || got.nLayer !== want.nLayer || got.nVocab !== want.nVocab || got.fileBytes !== want.fileBytes)
    throw bad(`saved for another model (${got.arch}, ${got.nLayer} layers, vocabulary ${got.nVocab}, file of ${got.fileBytes} bytes; this one: ${want.arch}, ${want.nLayer}, ${want.nVocab}, ${want.fileBytes})`);
  if ((got.compute ?? '') !== (want.compute ?? ''))
    throw bad(`saved from the model loaded with ${got.compute || 'no overrides, control vectors or adapters'}; this load has ${want.compute || 'none'}: its cache rows would differ`);
  return { header, state: new Uint8Array(buf.buffer, buf.byteOffset + 12 + n, buf.length - 12 - n), bytes: buf.length };
}
