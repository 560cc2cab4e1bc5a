// The Qwen3-MoE relatives with sliding windows, Mellum (mellum) and Maple (maple), and GroveMoE's
// chunk experts (grovemoe): their programs as llama.cpp's graphs build them and the metadata their
// builders refuse, naming the key. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue, ModelProgram } from '@kailstream/core-native';

import { opsOf, programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** The query rope op of each block that rotates (q then k per block). */
const qRopes = (p: ModelProgram) => opsOf(p, 'rope').filter((_, i) => i % 2 === 0);

function refuses(f: ReturnType<typeof testModelFile>, edit: (kv: Record<string, GgufValue>) => void, want: RegExp): void {
  const kv = { ...f.kv };
  edit(kv);
  expect(() => programOf(kv, f.tensors)).toThrow(want);
}

describe('mellum program', () => {
  let f: ReturnType<typeof testModelFile>;
  let full: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-mellum');
    full = testModelFile(dir, 'tiny-mellum-full');
  }, 60_000);

  it('slides on the flagged blocks, rotating them unscaled at the file base (not rope.freq_base_swa, as llama.cpp\'s graph)', () => {
    const p = programOf(f.kv, f.tensors);
    expect(opsOf(p, 'attention').map((o) => o.params!.window ?? 0)).toEqual([8, 8, 8, 0]);
    const q = qRopes(p);
    expect(q.map((o) => o.params!.freq_base)).toEqual([1e6, 1e6, 1e6, 1e6]);
    expect(q.map((o) => [o.params!.freq_scale, o.params!.ext_factor, o.params!.attn_factor])).toEqual([[1, 0, 1], [1, 0, 1], [1, 0, 1], [1, 0, 1]]);
    expect(opsOf(p, 'moe').every((o) => o.params!.norm_w === true && o.params!.w_scale === 0 && o.params!.gating === 0)).toBe(true);
    // Without attention.sliding_window every block is full.
    expect(opsOf(programOf(full.kv, full.tensors), 'attention').map((o) => o.params!.window ?? 0)).toEqual([0, 0, 0, 0]);
  });

  it('requires its untied head', () => {
    const tensors = new Map(f.tensors);
    tensors.delete('output.weight');
    expect(() => programOf(f.kv, tensors)).toThrow(/lacks tensor 'output\.weight', which the mellum architecture requires/);
  });

  it('refuses a pattern of the wrong length, naming the key', () => {
    refuses(f, (kv) => (kv['mellum.attention.sliding_window_pattern'] = [true, false]), /sliding_window_pattern has 2 entries for 4 layers/);
  });
});

describe('maple program', () => {
  let f: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-maple');
  }, 60_000);

  it('rotates the sliding blocks only (rope.dimension_count_swa dims at rope.freq_base_swa), and clamps each block\'s experts at its own limit', () => {
    const p = programOf(f.kv, f.tensors);
    expect(opsOf(p, 'attention').map((o) => o.params!.window ?? 0)).toEqual([8, 8, 8, 0]);
    const q = qRopes(p);
    expect(q).toHaveLength(3);
    expect(q.map((o) => [o.params!.n_dims, o.params!.freq_base])).toEqual(Array(3).fill([16, 1e4]));
    // swiglu_clamp_exp [1, 0.5, 0, 0.75]: ggml_swiglu_clamp (act 7) where positive.
    expect(opsOf(p, 'moe').map((o) => [o.params!.act ?? 0, o.params!.limit ?? 0])).toEqual([[7, 1], [7, 0.5], [0, 0], [7, 0.75]]);
    expect(programOf({ ...f.kv, 'maple.rope.dimension_count_swa': 32 }, f.tensors).ops.filter((o) => o.op === 'rope').every((o) => o.params!.n_dims === 32)).toBe(true);
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no pattern array', (kv) => delete kv['maple.attention.sliding_window_pattern'], /attention\.sliding_window_pattern must be an array/],
    ['a pattern period instead of an array', (kv) => (kv['maple.attention.sliding_window_pattern'] = 4), /attention\.sliding_window_pattern must be an array/],
    ['no window', (kv) => delete kv['maple.attention.sliding_window'], /lacks metadata 'maple\.attention\.sliding_window'/],
    ['no SwiGLU limits', (kv) => delete kv['maple.swiglu_clamp_exp'], /lacks metadata 'maple\.swiglu_clamp_exp'/],
    ['a negative limit', (kv) => (kv['maple.swiglu_clamp_exp'] = [1, -1, 0, 0]), /'maple\.swiglu_clamp_exp' entry 1 is -1/],
    ['an odd sliding RoPE width', (kv) => (kv['maple.rope.dimension_count_swa'] = 15), /rope\.dimension_count_swa 15 is not an even number/],
    ['a sliding base that is not positive', (kv) => (kv['maple.rope.freq_base_swa'] = 0), /rope\.freq_base_swa 0 is not positive/],
  ])('refuses %s, naming it', (_what, edit, want) => refuses(f, edit, want));
});

describe('grovemoe program', () => {
  let f: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-grovemoe');
  }, 60_000);

  it('runs chunk experts on the routed output, routed by the same router, scaled by expert_group_scale and added', () => {
    const p = programOf(f.kv, f.tensors);
    const moes = opsOf(p, 'moe');
    expect(moes).toHaveLength(8);
    for (let il = 0; il < 4; il++) {
      const [routed, chunk] = [moes[2 * il], moes[2 * il + 1]];
      expect(routed.params).toMatchObject({ n_expert: 8, n_expert_used: 2, sel_sigmoid: 1, norm_w: true, w_scale: 0 });
      expect(routed.weights!.gate_exps).toBe(`blk.${il}.ffn_gate_exps.weight`);
      // The chunk experts read the routed experts' output and route on the same normed input.
      expect(chunk.a).toBe(routed.out);
      expect(chunk.b).toBe(routed.a);
      expect(chunk.weights).toEqual({
        gate_inp: `blk.${il}.ffn_gate_inp.weight`,
        gate_exps: `blk.${il}.ffn_gate_chexps.weight`,
        up_exps: `blk.${il}.ffn_up_chexps.weight`,
        down_exps: `blk.${il}.ffn_down_chexps.weight`,
      });
      expect(chunk.params).toEqual({ n_expert: 4, n_route: 8, chunk_group: 2, n_expert_used: 2, gating: 0, norm_w: 1, w_scale: 0, sel_sigmoid: 1 });
    }
    expect(opsOf(p, 'scale').map((o) => o.params!.scale)).toEqual(Array(4).fill(0.5));
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no experts_per_group', (kv) => delete kv['grovemoe.experts_per_group'], /lacks metadata 'grovemoe\.experts_per_group'/],
    ['no expert_group_scale', (kv) => delete kv['grovemoe.expert_group_scale'], /lacks metadata 'grovemoe\.expert_group_scale'/],
    ['groups that do not divide the experts', (kv) => (kv['grovemoe.experts_per_group'] = 3), /experts_per_group 3 does not divide expert_count 8/],
    ['expert groups', (kv) => Object.assign(kv, { 'grovemoe.expert_group_count': 2, 'grovemoe.expert_group_used_count': 1 }), /expert groups \(expert_group_count 2\) with chunk experts are not supported/],
  ])('refuses %s, naming it', (_what, edit, want) => refuses(f, edit, want));
});
