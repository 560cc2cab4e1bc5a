// Arctic's program: the experts read the block's input (normed by ffn_norm_exps) and are read ahead
// before the attention; the dense MLP reads the post-attention stream. Numerics are checked against
// llama.cpp in tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('arctic program', () => {
  let f: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-arctic');
  }, 60_000);

  it('routes each block on ffn_norm_exps of its input, read ahead before its attention; the dense MLP on ffn_norm of the stream after it', () => {
    const p = programOf(f.kv, f.tensors);
    const name = (b: number | undefined) => (b === undefined ? '' : p.buffers[b].name);
    for (let il = 0; il < 4; il++) {
      const norm = p.ops.findIndex((o) => o.weights?.weight === `blk.${il}.ffn_norm_exps.weight`);
      const attention = p.ops.findIndex((o, i) => i > norm && o.op === 'attention');
      const moe = p.ops.findIndex((o, i) => i > norm && o.op === 'moe');
      expect(name(p.ops[norm].out)).toBe('moe_in');
      expect(p.ops[norm + 1].op).toBe('moe_prefetch');
      expect(attention).toBeLessThan(moe);
      expect(name(p.ops[moe].a)).toBe('moe_in');
      const dense = p.ops.findIndex((o) => o.weights?.weight === `blk.${il}.ffn_norm.weight`);
      expect(attention < dense && dense < moe).toBe(true);
    }
    expect(p.ops.filter((o) => o.op === 'rope').every((o) => o.params!.neox === false)).toBe(true);
  });

  it('refuses a partial RoPE, naming it', () => {
    expect(() => programOf({ ...f.kv, 'arctic.rope.dimension_count': 8 }, f.tensors)).toThrow(/rope\.dimension_count 8 must equal the head size 16/);
  });
});
