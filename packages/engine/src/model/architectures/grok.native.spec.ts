// Grok's program (Grok-1 and Grok-2 blocks, its multipliers and the defaults llama.cpp gives old
// files), and the metadata its builder refuses, naming the key. Numerics are checked against
// llama.cpp in tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('grok program', () => {
  let g1: ReturnType<typeof testModelFile>;
  let g2: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    g1 = testModelFile(dir, 'tiny-grok');
    g2 = testModelFile(dir, 'tiny-grok2');
  }, 60_000);

  it('caps the scores after attention.output_scale with no other scaling; GeGLU experts; a dense GeGLU only in Grok-2 blocks', () => {
    for (const [f, dense] of [[g1, false], [g2, true]] as const) {
      const p = programOf(f.kv, f.tensors);
      const att = p.ops.filter((o) => o.op === 'attention');
      expect(att.map((o) => [o.params!.scale, o.params!.softcap, o.params!.softcap_scale])).toEqual(
        att.map(() => [1, f.kv['grok.attn_logit_softcapping'], f.kv['grok.attention.output_scale']]),
      );
      expect(p.ops.filter((o) => o.op === 'moe').every((o) => o.params!.act === 4 && o.params!.norm_w === true && o.params!.gating === 0)).toBe(true);
      expect(p.ops.some((o) => o.op === 'gelu')).toBe(dense);
    }
  });

  it('gives a file without the multipliers llama.cpp\'s defaults for old Grok-1 files', () => {
    const kv = { ...g1.kv };
    for (const k of ['embedding_scale', 'logit_scale', 'attention.output_scale', 'attn_logit_softcapping']) delete kv[`grok.${k}`];
    const p = programOf(kv, g1.tensors);
    const scales = p.ops.filter((o) => o.op === 'scale').map((o) => o.params!.scale);
    expect(scales[0]).toBe(78.38367176906169);
    expect(scales[scales.length - 1]).toBe(0.5773502691896257);
    const att = p.ops.find((o) => o.op === 'attention')!;
    expect([att.params!.softcap, att.params!.softcap_scale]).toEqual([30, 0.08838834764831845]);
    expect(p.ops.some((o) => o.op === 'softcap')).toBe(false);
    expect(programOf(g2.kv, g2.tensors).ops.filter((o) => o.op === 'softcap')).toHaveLength(1);
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no experts', (kv) => delete kv['grok.expert_count'], /expert_count and expert_used_count are required/],
    ['a partial RoPE', (kv) => (kv['grok.rope.dimension_count'] = 8), /rope\.dimension_count 8 must equal the head size 16/],
    ['a zero attention cap', (kv) => (kv['grok.attn_logit_softcapping'] = 0), /attn_logit_softcapping 0 is not a positive number/],
    ['a negative logit scale', (kv) => (kv['grok.logit_scale'] = -1), /logit_scale -1 is not a non-negative number/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...g1.kv };
    edit(kv);
    expect(() => programOf(kv, g1.tensors)).toThrow(want);
  });
});
