// The native model's own checks of a program against its buffers (check_op_ranges in model.cpp):
// the backstop behind the metadata checks of hparams.ts. A program whose parameters disagree with
// its buffers (as a model file with inconsistent metadata would produce) is refused at construction
// with KAIL_E_BAD_MODEL naming the op, never run into memory it does not own.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram, ProgramOp } from '@kailstream/core-native';

import { native } from '../native';
import { tempDir, writeTestModel } from '../testing';
import { buildProgram } from './architectures';
import { Metadata, readHParams } from './hparams';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function programOf(file: string): ModelProgram {
  const f = native().openGguf(file, { mapData: false });
  try {
    const arch = f.metadata['general.architecture'] as string;
    const tensors = new Map<string, GgufTensorInfo>(f.tensors.map((t) => [t.name, t]));
    return buildProgram(readHParams(new Metadata(f.metadata, arch), tensors), tensors, { nCtxSeq: 4096 });
  } finally {
    f.close();
  }
}

/** The program with the first op of kind `op` changed by `edit`. */
function tampered(p: ModelProgram, op: ProgramOp['op'], edit: (o: ProgramOp) => void): ModelProgram {
  const q: ModelProgram = JSON.parse(JSON.stringify(p));
  const o = q.ops.find((x) => x.op === op);
  if (!o) throw new Error(`no ${op} op`);
  edit(o);
  return q;
}

describe('native program checks', () => {
  let file: string;
  let program: ModelProgram;
  beforeAll(() => {
    file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    program = programOf(file);
  }, 60_000);

  const load = (p: ModelProgram) => new (native().Model)(file, p, { threads: 1, nCtx: 16 }).close();

  it('accepts the program the architecture builds', () => {
    expect(() => load(program)).not.toThrow();
  });

  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['RoPE over more dimensions than the head', 'rope', (o) => (o.params!.n_dims = 4096), /op \d+ \(rope\): rotating 4096 dimensions .* must be even and within the head/],
    ['an odd RoPE dimension count', 'rope', (o) => (o.params!.n_dims = 7), /op \d+ \(rope\)/],
    ['a zero RoPE frequency base', 'rope', (o) => (o.params!.freq_base = 0), /frequency base and scale must be positive/],
    ['more heads than the query buffer holds', 'rope', (o) => (o.params!.n_head = 64), /op \d+ \(rope\): 8192 values at offset 0 do not fit buffer 'q512'/],
    ['query heads not a multiple of the kv heads', 'attention', (o) => (o.params!.n_head_kv = 3), /op \d+ \(attention\): 4 heads over 3 kv heads/],
    ['more experts used than there are', 'moe', (o) => (o.params!.n_expert_used = 17), /op \d+ \(moe\): uses 17 of 16 experts/],
    ['expert groups that do not divide the experts', 'moe', (o) => Object.assign(o.params!, { n_group: 3, n_group_used: 2 }), /16 experts do not split into 3 groups/],
    ['per-head norms past the buffer', 'head_rms_norm', (o) => (o.params!.n_head = 9), /op \d+ \(head_rms_norm\): 1152 values at offset 0 do not fit/],
    ['a NaN parameter', 'attention', (o) => (o.params!.head_dim = NaN), /parameter head_dim is out of range/],
    ['a negative attention chunk', 'attention', (o) => (o.params!.chunk = -8), /attention chunk -8 is negative/],
    ['temperature tuning without a floor scale', 'attention', (o) => Object.assign(o.params!, { temp_scale: 0.1, temp_floor: 0 }), /temperature tuning needs a floor scale/],
  ])('refuses %s', (_what, op, edit, want) => {
    expect(() => load(tampered(program, op, edit))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });

  // What no file can cause, only a builder's mistake: KAIL_E_INVALID_ARG.
  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['a sliding window and chunks at once', 'attention', (o) => Object.assign(o.params!, { chunk: 8, window: 4 }), /sliding window or in chunks, not both/],
    ['an unknown gating', 'moe', (o) => (o.params!.gating = 4), /gating 4 is not 0 \(softmax\), 1 \(sigmoid\), 2 .* or 3/],
  ])('refuses %s as a program error', (_what, op, edit, want) => {
    expect(() => load(tampered(program, op, edit))).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(want) }));
  });
});
