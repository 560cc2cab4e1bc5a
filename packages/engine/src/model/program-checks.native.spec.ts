// The native model's own checks of a program against its buffers (check_op_ranges in model.cpp):
// the backstop behind the metadata checks of hparams.ts. A program whose parameters disagree with
// its buffers (as a model file with inconsistent metadata would produce) is refused at construction
// with KAIL_E_BAD_MODEL naming the op, never run into memory it does not own.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram, NativeModel, ProgramOp } from '@kailstream/core-native';

import { native } from '../native';
import { tempDir, writeTestModel } from '../testing';
import { buildMtpProgram, buildProgram } from './architectures';
import { buildGemma4Assistant } from './architectures/gemma4-assistant';
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

/**
 * Inside a describe: the preset's file and program (loaded before its tests), a loader for
 * programs over that file, and the test that the unchanged program loads.
 */
function fixture(preset: string): { f: { file: string; program: ModelProgram }; load: (p: ModelProgram) => void } {
  const f = { file: '', program: undefined as unknown as ModelProgram };
  beforeAll(() => {
    f.file = writeTestModel(dir, preset, 'F32');
    f.program = programOf(f.file);
  }, 60_000);
  const load = (p: ModelProgram) => new (native().Model)(f.file, p, { threads: 1, nCtx: 16 }).close();
  it('accepts the program the architecture builds', () => {
    expect(() => load(f.program)).not.toThrow();
  });
  return { f, load };
}

describe('native program checks', () => {
  const { f, load } = fixture('tiny-qwen3moe');

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
    ['a product written past its buffer', 'matmul', (o) => (o.params = { ...o.params, out_off: 4 }), /op \d+ \(matmul\): \d+ values at offset 4 do not fit buffer/],
    ['heads whose product would overflow', 'head_rms_norm', (o) => Object.assign(o.params!, { head_dim: 2 ** 32, n_head: 2 ** 32 }), /parameter head_dim is out of range/],
    ['a negative attention chunk', 'attention', (o) => (o.params!.chunk = -8), /attention chunk -8 is negative/],
    ['temperature tuning without a floor scale', 'attention', (o) => Object.assign(o.params!, { temp_scale: 0.1, temp_floor: 0 }), /temperature tuning needs a floor scale/],
    ['a negative ALiBi maximum bias', 'attention', (o) => (o.params!.alibi = -8), /op \d+ \(attention\): ALiBi's maximum bias -8\.0+ is not a non-negative number/],
    ['a negative symmetric window', 'attention', (o) => (o.params!.sym_window = -2), /op \d+ \(attention\): symmetric window -2 is negative/],
  ])('refuses %s', (_what, op, edit, want) => {
    expect(() => load(tampered(f.program, op, edit))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });

  // What no file can cause, only a builder's mistake: KAIL_E_INVALID_ARG.
  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['a sliding window and chunks at once', 'attention', (o) => Object.assign(o.params!, { chunk: 8, window: 4 }), /sliding window or in chunks, not both/],
    ['an unknown gating', 'moe', (o) => (o.params!.gating = 5), /gating 5 is not 0 \(softmax\), 1 \(sigmoid\), 2 .* or 4 \(sqrt softplus\)/],
  ])('refuses %s as a program error', (_what, op, edit, want) => {
    expect(() => load(tampered(f.program, op, edit))).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(want) }));
  });
});

describe('native program checks: shared experts (tiny-qwen2moe)', () => {
  const { f, load } = fixture('tiny-qwen2moe');

  it('refuses a negative SwiGLU limit (a file\'s), and gates that do not divide the rows (a builder\'s)', () => {
    expect(() => load(tampered(f.program, 'swiglu', (o) => (o.params = { ...o.params, limit: -1 })))).toThrow(
      expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/op \d+ \(swiglu\): SwiGLU limit -1\.0+ is not a non-negative number/) }),
    );
    expect(() => load(tampered(f.program, 'sigmoid_mul', (o) => (o.params = { group: 3 })))).toThrow(
      expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/op \d+ \(sigmoid_mul\): gates of 3 values do not divide rows of 256/) }),
    );
  });
});

describe('native program checks: a clamped QKV (tiny-dbrx)', () => {
  const { f, load } = fixture('tiny-dbrx');

  it('refuses a clamp without a positive limit', () => {
    for (const limit of [0, -1, NaN])
      expect(() => load(tampered(f.program, 'clamp', (o) => (o.params = { limit })))).toThrow(
        expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/op \d+ \(clamp\): clamping limit .* is not a positive number|parameter limit is out of range/) }),
      );
  });
});

describe("native program checks: Chameleon's clamped image-token logits (tiny-chameleon)", () => {
  const { f, load } = fixture('tiny-chameleon');

  it.each<[string, (o: ProgramOp) => void, RegExp]>([
    ['min above max', (o) => Object.assign(o.params!, { min: 1, max: -1 }), /op \d+ \(clamp\): clamping to \[min, max\] needs both, finite, min <= max, and no limit/],
    ['min without max', (o) => delete o.params!.max, /clamping to \[min, max\] needs both/],
    ['min and max with a limit', (o) => Object.assign(o.params!, { limit: 2 }), /clamping to \[min, max\] needs both, finite, min <= max, and no limit/],
    ['a range past the logits', (o) => Object.assign(o.params!, { n: 8448 }), /op \d+ \(clamp\): 8448 values at offset 4 do not fit buffer 'logits'/],
  ])('refuses %s', (_what, edit, msg) => {
    expect(() => load(tampered(f.program, 'clamp', edit))).toThrow(expect.objectContaining({ message: expect.stringMatching(msg) }));
  });
});

describe('native program checks: recurrent layers (tiny-qwen35moe)', () => {
  const { f, load } = fixture('tiny-qwen35moe');

  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['a one-tap convolution', 'ssm_conv', (o) => (o.params!.d_conv = 1), /op \d+ \(ssm_conv\): a convolution of 1 taps/],
    ['value heads that are not a multiple of the key heads', 'gated_delta_net', (o) => (o.params!.n_k_heads = 3), /4 value heads over 3 key heads/],
    // (A head of 2^20 would make n_v_heads x head_dim^2 overflow; refused before any product.)
    ['a head too wide to hold a state of', 'gated_delta_net', (o) => (o.params!.head_dim = 1 << 20), /4 value heads over 2 key heads of 1048576/],
  ])('refuses %s', (_what, op, edit, want) => {
    expect(() => load(tampered(f.program, op, edit))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });

  it('refuses a recurrent layer two ops share, or a state of the wrong width, as program errors', () => {
    const shared: ModelProgram = JSON.parse(JSON.stringify(f.program));
    const convs = shared.ops.filter((o) => o.op === 'ssm_conv');
    // The second convolution writes into the first one's layer (of the same width): the second's is then unused.
    convs[1].params!.layer = convs[0].params!.layer;
    expect(() => load(shared)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/recurrent layer \d+ is used by (2|0) ops/) }));
    const wide: ModelProgram = JSON.parse(JSON.stringify(f.program));
    wide.rsWidth![0] += 1;
    expect(() => load(wide)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/recurrent layer's width is not/) }));
  });
});

describe('native program checks: Kimi Delta Attention (tiny-kimi-linear)', () => {
  const { f, load } = fixture('tiny-kimi-linear');

  it('runs its delta nets with a gate per key channel over three convolutions each', () => {
    const gdn = f.program.ops.filter((o) => o.op === 'gated_delta_net');
    expect(gdn.length).toBe(2);
    expect(gdn.every((o) => o.params!.kda === 1 && f.program.buffers[o.b!].width === 4 * 64)).toBe(true);
    expect(f.program.ops.filter((o) => o.op === 'ssm_conv').map((o) => o.weights!.weight)).toEqual(['0', '2'].flatMap((b) => ['q', 'k', 'v'].map((x) => `blk.${b}.ssm_conv1d_${x}.weight`)));
  });

  it('refuses a gate per head over a dt_bias per key channel, a gate buffer too narrow and a kda flag not 0 or 1', () => {
    expect(() => load(tampered(f.program, 'gated_delta_net', (o) => delete o.params!.kda))).toThrow(
      expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/gated delta net dt_bias 'blk.0.ssm_dt.bias' F32 \[256\] must be F32 with 4 elements \(one per value head\)/) }),
    );
    expect(() => load(tampered(f.program, 'gated_delta_net', (o) => (o.b = o.c)))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/256 values at offset 0 do not fit buffer 'kda_beta4' \(b/) }));
    expect(() => load(tampered(f.program, 'gated_delta_net', (o) => (o.params!.kda = 2)))).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/kda must be 0/) }));
  });
});

describe('native program checks: Kimi-K3 (tiny-kimi-k3)', () => {
  const { f, load } = fixture('tiny-kimi-k3');

  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['a residual mix over more checkpoints than its stack holds', 'attn_res', (o) => (o.params!.n_ckpt = 4), /1024 values at offset 0 do not fit buffer 'attn_res_stack'/],
    ['a residual mix without checkpoints', 'attn_res', (o) => (o.params!.n_ckpt = 0), /at least one checkpoint/],
    ['a residual mix without the current stream', 'attn_res', (o) => delete o.b, /needs buffer b/],
    ['a residual score of the wrong size', 'attn_res', (o) => (o.weights!.score = 'blk.0.ssm_norm.weight'), /residual attention score 'blk.0.ssm_norm.weight' F32 \[64\] must be F32 with 256 elements/],
    ['situ experts without a positive beta', 'moe', (o) => (o.params!.situ_beta = 0), /situ experts need a positive finite situ_beta/],
    ['a situ FFN with a negative beta', 'swiglu', (o) => (o.params!.situ_beta = -1), /situ needs a positive finite situ_beta/],
    ['a situ FFN with a SwiGLU limit', 'swiglu', (o) => (o.params!.limit = 7), /and no limit/],
    ['a negated gate without a lower bound', 'gated_delta_net', (o) => delete o.params!.lower_bound, /neg_a applies to the lower-bounded gate only/],
    ['a gate lower bound that is not negative', 'gated_delta_net', (o) => (o.params!.lower_bound = 0.5), /lower bound 0\.5\d* must be finite and negative/],
  ])('refuses %s', (_what, op, edit, want) => {
    expect(() => load(tampered(f.program, op, edit))).toThrow(expect.objectContaining({ message: expect.stringMatching(want) }));
  });

});

describe('native program checks: Ling 3\'s lower-bounded KDA gate (tiny-bailingmoe3)', () => {
  const { f, load } = fixture('tiny-bailingmoe3');

  it('runs its delta nets with a full-width gate per key channel under the file\'s lower bound', () => {
    const gdn = f.program.ops.filter((o) => o.op === 'gated_delta_net');
    expect(gdn.map((o) => [o.params!.kda, o.params!.lower_bound, o.params!.neg_a, f.program.buffers[o.b!].width])).toEqual([[1, -5, undefined, 256], [1, -5, undefined, 256]]);
  });

  it.each<[string, (o: ProgramOp) => void, RegExp]>([
    ['a lower bound of 0', (o) => (o.params!.lower_bound = 0), /lower bound 0\.0+ must be finite and negative/],
    ['a lower bound past float range', (o) => (o.params!.lower_bound = -1e39), /lower bound -9{15}\d+\.0+ must be finite and negative/],
  ])('refuses %s', (_what, edit, want) => {
    expect(() => load(tampered(f.program, 'gated_delta_net', edit))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });
});

describe('native program checks: a model without attention (tiny-falcon-mamba)', () => {
  const { f, load } = fixture('tiny-falcon-mamba');

  it('has no KV layers; its weightless dt/B/C norms stay within the x_db buffer', () => {
    expect(f.program.kvKWidth).toEqual([]);
    expect(f.program.ops.filter((o) => o.op === 'head_rms_norm').every((o) => o.weights === undefined || Object.keys(o.weights).length === 0)).toBe(true);
    expect(() => load(tampered(f.program, 'head_rms_norm', (o) => (o.params!.a_off = 600)))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/op \d+ \(head_rms_norm\)/) }));
    expect(() => load(tampered(f.program, 'head_rms_norm', (o) => (o.params!.head_dim = 0)))).toThrow(/head_dim and n_head must be positive/);
    // An attention op in a program that declares no KV layer.
    const attn: ModelProgram = JSON.parse(JSON.stringify(f.program));
    const i = attn.ops.findIndex((o) => o.op === 'head_rms_norm');
    attn.ops.splice(i, 0, { op: 'attention', out: attn.ops[i].a!, a: attn.ops[i].a!, b: attn.ops[i].a!, c: attn.ops[i].a!, params: { layer: 0, n_head: 1, n_head_kv: 1, head_dim: 32, head_dim_v: 32, scale: 1 } });
    expect(() => load(attn)).toThrow(expect.objectContaining({ message: expect.stringMatching(/op \d+ \(attention\): kv layer 0 out of range/) }));
  });
});

describe('native program checks: Mamba-2 (tiny-nemotron-h-moe)', () => {
  const { f, load } = fixture('tiny-nemotron-h-moe');

  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['heads that do not split into the groups', 'ssm_scan', (o) => (o.params!.n_group = 3), /8 SSM heads of 64 in 3 groups with a state of 64: the heads must split evenly/],
    ['an x|B|C input of the wrong width', 'ssm_scan', (o) => (o.params!.d_state = 32), /x\|B\|C input is 768 wide, expected 640/],
    ['a state too wide to hold', 'ssm_scan', (o) => (o.params!.head_dim = 1 << 20), /8 SSM heads of 1048576/],
    ['an unknown expert activation', 'moe', (o) => (o.params!.act = 9), /act 9 is not 0 .* 6 \(SwiGLU with a limit\), 7 \(ggml_swiglu_clamp\) or 8 \(situ\)/],
    ['a SwiGLU limit that is not positive', 'moe', (o) => Object.assign(o.params!, { act: 6, limit: 0 }), /SwiGLU limit 0\.0+ is not a positive number/],
    ['a swiglu_clamp limit that is not positive', 'moe', (o) => Object.assign(o.params!, { act: 7, limit: -2 }), /SwiGLU limit -2\.0+ is not a positive number/],
    ['a router over fewer experts than the op runs', 'moe', (o) => Object.assign(o.params!, { n_route: 2 }), /routes over 2 experts, fewer than its/],
    ['a router wider than its experts without a chunk group', 'moe', (o) => Object.assign(o.params!, { n_route: Number(o.params!.n_expert) + 1 }), /n_route differs from n_expert without a chunk_group/],
    ['chunk groups that do not map the routed experts onto its own', 'moe', (o) => Object.assign(o.params!, { n_route: Number(o.params!.n_expert) * 3, chunk_group: 2 }), /chunk_group 2 does not map \d+ routed experts onto/],
  ])('refuses %s', (_what, op, edit, want) => {
    expect(() => load(tampered(f.program, op, edit))).toThrow(expect.objectContaining({ message: expect.stringMatching(want) }));
  });

  it('refuses a scan whose state is not n_head x head_dim x d_state, and a convolution bias of the wrong size', () => {
    const wide: ModelProgram = JSON.parse(JSON.stringify(f.program));
    const scan = wide.ops.find((o) => o.op === 'ssm_scan')!;
    wide.rsWidth![Number(scan.params!.layer)] += 1;
    expect(() => load(wide)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/recurrent layer's width is not n_head x head_dim x d_state/) }));
    const bias = tampered(f.program, 'ssm_conv', (o) => (o.weights!.bias = 'blk.0.ssm_dt.bias'));
    expect(() => load(bias)).toThrow(/convolution bias 'blk.0.ssm_dt.bias' must be F32 with 768 elements/);
    const a = tampered(f.program, 'ssm_scan', (o) => (o.weights!.a = 'blk.0.ssm_conv1d.bias'));
    expect(() => load(a)).toThrow(/SSM scan a 'blk.0.ssm_conv1d.bias' F32 \[768\] must be F32 with 8 elements \(one per head\) or n_head x d_state/);
    const outB = tampered(f.program, 'ssm_scan', (o) => (o.out = o.b!));
    expect(() => load(outB)).toThrow(/op \d+ \(ssm_scan\): /);
  });
});

describe("native program checks: PLaMo 2's strided z|x copies (tiny-plamo2)", () => {
  const { f, load } = fixture('tiny-plamo2');

  it.each<[string, (o: ProgramOp) => void, RegExp]>([
    ['more heads than ssm_in gives', (o) => (o.params!.blocks = 9), /op \d+ \(copy\): 1088 values at offset 0 do not fit buffer 'p2_zx1024'/],
    ['heads that overlap in out', (o) => (o.params!.out_stride = 32), /op \d+ \(copy\): 8 blocks of 64 values, strides 128 \(a\) and 32 \(out\): a strided copy needs/],
    ['strides without a block count', (o) => delete o.params!.blocks, /op \d+ \(copy\): missing parameter 'blocks'/],
    ['a copy in place', (o) => (o.a = o.out), /op \d+ \(copy\): a strided copy's out must not be a/],
    ['strides on another op', (o) => Object.assign(o, { op: 'add', b: o.a }), /op \d+ \(add\): blocks, a_stride and out_stride are parameters of copy only/],
  ])('refuses %s', (_what, edit, want) => {
    expect(() => load(tampered(f.program, 'copy', edit))).toThrow(expect.objectContaining({ message: expect.stringMatching(want) }));
  });
});

describe('native program checks: Gemma 4 (tiny-gemma4, tiny-gemma4-e)', () => {
  const { f, load } = fixture('tiny-gemma4');
  const e = { file: '', program: undefined as unknown as ModelProgram };
  beforeAll(() => {
    e.file = writeTestModel(dir, 'tiny-gemma4-e', 'F32');
    e.program = programOf(e.file);
  }, 60_000);
  const loadE = (p: ModelProgram) => new (native().Model)(e.file, p, { threads: 1, nCtx: 16 }).close();

  it('accepts the shared-KV program, and refuses a reader of a layer no earlier op stores or an op storing k without v', () => {
    expect(() => loadE(e.program)).not.toThrow();
    const readers = e.program.ops.filter((o) => o.op === 'attention' && o.b === undefined);
    expect(readers.length).toBe(2);
    // The first attention op no longer stores its layer: every op before its readers reads nothing.
    const early = tampered(e.program, 'attention', (o) => {
      delete o.b;
      delete o.c;
    });
    expect(() => loadE(early)).toThrow(expect.objectContaining({ message: expect.stringMatching(/op \d+ \(attention\) reads kv layer 0, which no earlier op stores/) }));
    const half = tampered(e.program, 'attention', (o) => delete o.c);
    expect(() => loadE(half)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/stores both k \(b\) and v \(c\) or neither/) }));
    // The sliding reader (4 heads over 2 KV heads of 16) as 2 heads over 1 KV head of 32: the same widths, other heads.
    const split: ModelProgram = JSON.parse(JSON.stringify(e.program));
    Object.assign(split.ops.find((o) => o.op === 'attention' && o.b === undefined)!.params!, { n_head: 2, n_head_kv: 1, head_dim: 32, head_dim_v: 32 });
    expect(() => loadE(split)).toThrow(/op \d+ \(attention\) reads kv layer 2 with another n_head_kv than the op that stores it/);
  });

  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['fused experts named as gate only', 'moe', (o) => (o.weights!.up_exps = 'blk.1.ffn_gate_up_exps.weight'), /fused expert tensor 'blk.0.ffn_gate_up_exps.weight' .* must be named as both gate and up/],
    ['per-expert scales of the wrong size', 'moe', (o) => (o.weights!.down_exps_s = 'blk.0.ffn_gate_inp.scale'), /per-expert output scale 'blk.0.ffn_gate_inp.scale' must be F32 with 8 elements/],
    ['a soft cap of zero', 'softcap', (o) => (o.params!.cap = 0), /op \d+ \(softcap\): soft-capping value 0/],
    ['a soft cap without its input', 'softcap', (o) => delete o.a, /op \d+ \(softcap\): needs buffer a/],
    ['a GELU without its input', 'gelu', (o) => delete o.a, /op \d+ \(gelu\): needs buffer a/],
  ])('refuses %s', (_what, op, edit, want) => {
    expect(() => load(tampered(f.program, op, edit))).toThrow(expect.objectContaining({ message: expect.stringMatching(want) }));
  });

  it('refuses a product by a scale vector of the wrong size, by b and a weight at once, and by nothing', () => {
    const byWeight = (edit: (o: ProgramOp) => void) => {
      const q: ModelProgram = JSON.parse(JSON.stringify(f.program));
      edit(q.ops.find((o) => o.op === 'mul' && o.weights?.weight)!);
      return q;
    };
    expect(() => load(byWeight((o) => (o.weights!.weight = 'blk.0.attn_q_norm.weight')))).toThrow(/scale 'blk.0.attn_q_norm.weight' must be F32 with 64 elements or one/);
    expect(() => load(byWeight((o) => (o.b = o.a)))).toThrow(/multiplies by b or by a weight, not both/);
    expect(() => load(byWeight((o) => delete o.weights))).toThrow(/op \d+ \(mul\): needs buffer b/);
  });
});

describe('native program checks: hyper-connections and MLA sinks (tiny-hy-v4)', () => {
  const { f, load } = fixture('tiny-hy-v4');

  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['coefficients past the mixes', 'hc_gates', (o) => (o.params!.n = 64), /op \d+ \(hc_gates\): 64 values at offset 0 do not fit buffer 'hc_mix8'/],
    ['coefficients repeated past their buffer', 'hc_gates', (o) => (o.params!.repeat = 4096), /op \d+ \(hc_gates\): 16384 values at offset 0 do not fit buffer 'hc_pre'/],
    ['a scale index past the scale tensor', 'hc_gates', (o) => (o.params!.scale_index = 2), /hyper-connection scale 'blk.0.hc_attn_scale.weight' F32 \[2\] must be F32 with more than 2 elements/],
    ['a base too short for the coefficients', 'hc_gates', (o) => (o.params!.base_off = 6), /hyper-connection base 'blk.0.hc_attn_base.weight' F32 \[8\] must be F32 with at least 10 elements/],
    ['sinks that are not one per head', 'mla_attention', (o) => (o.weights!.sinks = 'blk.0.attn_norm.weight'), /attention sinks 'blk.0.attn_norm.weight' must be F32 with 4 elements \(one per head\)/],
  ])('refuses %s', (_what, op, edit, want) => {
    expect(() => load(tampered(f.program, op, edit))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });
});

describe('native program checks: qwen4exp PLE n-gram embedding, gate, dilated convolution, weightless hc_gates and the QSA indexer (tiny-qwen4exp)', () => {
  const f = { file: '', program: undefined as unknown as ModelProgram };
  beforeAll(() => {
    f.file = writeTestModel(dir, 'tiny-qwen4exp', 'F32');
    const g = native().openGguf(f.file, { mapData: false });
    try {
      const tensors = new Map<string, GgufTensorInfo>(g.tensors.map((t) => [t.name, t]));
      f.program = buildProgram(readHParams(new Metadata(g.metadata, 'qwen4exp'), tensors), tensors, { nCtxSeq: 256 });
    } finally {
      g.close();
    }
  }, 60_000);
  const load = (p: ModelProgram) => new (native().Model)(f.file, p, { threads: 1, nCtx: 16 }).close();
  it('accepts the program the architecture builds', () => {
    expect(() => load(f.program)).not.toThrow();
  });
  const pleConv = (edit: (o: ProgramOp) => void) => (o: ProgramOp) => {
    if (o.weights!.weight !== 'blk.1.ple_conv1d.weight') throw new Error('not the PLE convolution');
    edit(o);
  };

  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['an n-gram size past 8', 'ple_ngram', (o) => (o.params!.n_gram = 9), /op \d+ \(ple_ngram\): n-gram size 9 with 2 heads per n-gram/],
    ['a head range past the table', 'ple_ngram', (o) => (o.params!.voc_3 = 5000), /PLE n-gram table 'per_layer_token_embd.weight' \[64, 1152\] must be \[64, at least 5883\]/],
    ['a head range past int32', 'ple_ngram', (o) => (o.params!.off_0 = 2 ** 31 - 2), /op \d+ \(ple_ngram\): head 0's row range .* does not fit an int32 row index/],
    ['a multiplier half past 32 bits', 'ple_ngram', (o) => (o.params!.mult_hi_2 = 2 ** 32), /parameter mult_hi_2 is not a 32-bit half of a multiplier/],
    ['a negative EOS', 'ple_ngram', (o) => (o.params!.eos = -1), /EOS and image token ids must not be negative/],
    ['gates past their inputs', 'ple_gate', (o) => (o.params!.n_group = 8), /op \d+ \(ple_gate\): 2048 values at offset 0 do not fit buffer 'ple_key'/],
    ['a gate scale out of range', 'ple_gate', (o) => (o.params!.scale = 1e300), /op \d+ \(ple_gate\): scale is not a finite number/],
    ['weightless gates without a gate_scale', 'hc_gates', (o) => delete o.params!.gate_scale, /hyper-connection scale \(missing\) must be F32/],
    ['a weightless gate_scale out of range', 'hc_gates', (o) => (o.params!.gate_scale = 1e300), /hyper-connection gate_scale inf is not a finite number/],
    ['a QSA selection repeated past its buffer', 'qsa_index', (o) => (o.params!.repeat = 4), /op \d+ \(qsa_index\): 1036 values at offset 256 do not fit buffer 'qsa_q256_2x259'/],
    ['a zero QSA block size', 'qsa_index', (o) => (o.params!.ratio = 0), /op \d+ \(qsa_index\): needs positive n_head, head_dim, top_k, ratio and repeat/],
    ['more rotary dimensions than the indexer head', 'qsa_index', (o) => (o.params!.n_dims = 64), /op \d+ \(qsa_index\): 64 rotary dimensions do not fit the indexer head of 32/],
    ['an indexer key norm of another width', 'qsa_index', (o) => (o.weights!.weight = 'blk.3.attn_q_norm.weight'), /QSA indexer key norm 'blk.3.attn_q_norm.weight' F32 \[64\] must be F32 with 32 elements/],
    ['a negative eps', 'qsa_index', (o) => (o.params!.eps = -1), /op \d+ \(qsa_index\): eps is not a finite non-negative number/],
    ['block keys kept in the raw keys\' layer', 'qsa_index', (o) => (o.params!.block_layer = o.params!.layer), /op \d+ \(qsa_index\): block_layer needs a kv layer of its own/],
  ])('refuses %s', (_what, op, edit, want) => {
    expect(() => load(tampered(f.program, op, edit))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });

  it('refuses a QSA indexer with no layer for its block keys', () => {
    expect(() => load(tampered(f.program, 'qsa_index', (o) => delete o.params!.block_layer))).toThrow(
      expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/op \d+ \(qsa_index\): missing parameter 'block_layer'/) }),
    );
  });

  it('refuses a dilation the recurrent layer was not sized for, or out of range', () => {
    const edit = (e: (o: ProgramOp) => void) => {
      const q: ModelProgram = JSON.parse(JSON.stringify(f.program));
      pleConv(e)(q.ops.find((x) => x.op === 'ssm_conv' && x.weights!.weight === 'blk.1.ple_conv1d.weight')!);
      return q;
    };
    expect(() => load(edit((o) => (o.params!.dilation = 2)))).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/not \(d_conv - 1\) x dilation x channels/) }));
    expect(() => load(edit((o) => (o.params!.dilation = 0)))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/a dilation of 0 \(must be in 1..64\)/) }));
  });
});

describe('native program checks: DeepSeek-V4 compressors, attention and hyper-connection post (tiny-deepseek4)', () => {
  const { f, load } = fixture('tiny-deepseek4');

  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['a compressor state layer of another width', 'dsv4_compress', (o) => (o.params!.head_dim = 64), /op \d+ \(dsv4_compress\): needs a kv layer of width 2 x \(kv \| score\) and no V/],
    ['more rotary dimensions than the compressed head', 'dsv4_compress', (o) => (o.params!.n_dims = 128), /op \d+ \(dsv4_compress\): ratio 4, head 96, 128 rotary dimensions/],
    ['a zero compress ratio', 'dsv4_compress', (o) => (o.params!.ratio = 0), /op \d+ \(dsv4_compress\): ratio 0/],
    ['a position bias of another shape', 'dsv4_compress', (o) => (o.weights!.ape = 'blk.1.attn_compressor_ape.weight'), /compressor position bias 'blk.1.attn_compressor_ape.weight' F32 \[96, 128\] must be F32 \[192, 4\]/],
    ['a compressor norm of another width', 'dsv4_compress', (o) => (o.weights!.norm = 'blk.0.indexer_compressor_norm.weight'), /compressor norm 'blk.0.indexer_compressor_norm.weight' F32 \[64\] must be F32 with 96 elements/],
    ['an attention head wider than its rows', 'dsv4_attention', (o) => (o.params!.head_dim = 128), /op \d+ \(dsv4_attention\): needs a kv layer of width head_dim and no V/],
    ['a negative window', 'dsv4_attention', (o) => (o.params!.window = -1), /op \d+ \(dsv4_attention\): sliding window -1 is negative/],
    ['a selection past its buffer', 'dsv4_attention', (o) => (o.params!.top_k = 64), /op \d+ \(dsv4_attention\): 64 values at offset 0 do not fit buffer 'dsa_sel4'/],
    ['sinks that are not one per head', 'dsv4_attention', (o) => (o.weights!.sinks = 'blk.0.attn_norm.weight'), /attention sinks 'blk.0.attn_norm.weight' must be F32 with 4 elements \(one per head\)/],
    ['more streams than the residual holds', 'dsv4_hc_post', (o) => (o.params!.n = 8), /op \d+ \(dsv4_hc_post\): 1024 values at offset 0 do not fit buffer 'x'/],
    ['no Sinkhorn iterations', 'dsv4_hc_post', (o) => (o.params!.iters = 0), /op \d+ \(dsv4_hc_post\): 4 streams, 0 Sinkhorn iterations/],
    ['a hyper-connection base too short', 'dsv4_hc_post', (o) => (o.weights!.base = 'output_hc_base.weight'), /hyper-connection base 'output_hc_base.weight' F32 \[4\] must be F32 with 24 elements/],
    ['a hash table of another width', 'moe', (o) => (o.weights!.tid2eid = 'blk.0.attn_sinks.weight'), /hash routing table 'blk.0.attn_sinks.weight' must be I32 \[2, n_vocab\], is F32 \[4\]/],
    ['a gating function past sqrt-softplus', 'moe', (o) => (o.params!.gating = 5), /gating 5 is not 0 \(softmax\), 1 \(sigmoid\), 2 \(softmax of the selected\), 3 \(sigmoid of the selected\) or 4 \(sqrt softplus\)/],
  ])('refuses %s', (_what, op, edit, want) => {
    expect(() => load(tampered(f.program, op, edit))).toThrow(expect.objectContaining({ message: expect.stringMatching(want) }));
  });

  it('refuses a kv layer given two packed layouts', () => {
    // The attention reads its compressed rows per block of 8, its compressor writes them per block of 4.
    const ratio = tampered(f.program, 'dsv4_attention', (o) => (o.params!.ratio = 8));
    expect(() => load(ratio)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/program: ops \d+ and \d+ give kv layer \d+ two layouts/) }));
    // A compressor writing its entries (a row per block) into an attention's ring of raw rows.
    const raw = f.program.ops.find((x) => x.op === 'dsv4_attention')!.params!.layer;
    const shared = tampered(f.program, 'dsv4_compress', (o) => (o.params!.out_layer = raw));
    expect(() => load(shared)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/program: ops \d+ and \d+ give kv layer \d+ two layouts/) }));
  });

  it('refuses output groups that do not divide the grouped projection, or its weight of another group width', () => {
    const grouped = (groups: number): ModelProgram => {
      const q: ModelProgram = JSON.parse(JSON.stringify(f.program));
      q.ops.find((o) => o.op === 'matmul' && o.params?.groups)!.params!.groups = groups;
      return q;
    };
    expect(() => load(grouped(5))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/op \d+ \(matmul\): groups 5 do not divide the outputs/) }));
    expect(() => load(grouped(4))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/tensor 'blk.0.attn_output_a.weight' \[192, 64\]: expected 96 inputs/) }));
  });
});

describe('native program checks: early expert reads (tiny-smallthinker)', () => {
  const { f, load } = fixture('tiny-smallthinker');

  it('refuses an expert prefetch with no moe op after it, or reading another buffer than that op routes on', () => {
    const last: ModelProgram = JSON.parse(JSON.stringify(f.program));
    const pre = last.ops.filter((o) => o.op === 'moe_prefetch');
    expect(pre.length).toBe(4);
    // The last block's prefetch moved past its moe op: nothing left to read ahead for.
    const i = last.ops.indexOf(pre[3]);
    last.ops.splice(i, 1);
    last.ops.push(pre[3]);
    expect(() => load(last)).toThrow(/op \d+ \(moe_prefetch\) has no moe op after it/);
    const other = tampered(f.program, 'moe_prefetch', (o) => {
      o.a = 0;
      o.out = 0;
    });
    expect(() => load(other)).toThrow(/op \d+ \(moe_prefetch\) reads another buffer than the router of op \d+ \(moe\)/);
    const writes = tampered(f.program, 'moe_prefetch', (o) => (o.out = 0));
    expect(() => load(writes)).toThrow(/an expert prefetch computes nothing \(out must be a\)/);
  });
});

describe('native program checks: sliding-window MLA (tiny-dots3note)', () => {
  const { f, load } = fixture('tiny-dots3note');

  it('refuses a negative MLA window', () => {
    const p = tampered(f.program, 'mla_attention', (o) => (o.params!.window = -8));
    expect(() => load(p)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/op \d+ \(mla_attention\): sliding window -8 is negative/) }));
  });

  it('refuses a window beside the indexer selection as a program error', () => {
    // The first mla_attention is block 0's, a full block that attends to the indexer's selection.
    const p = tampered(f.program, 'mla_attention', (o) => (o.params!.window = 8));
    expect(() => load(p)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/sliding window or the indexer's selection, not both/) }));
  });
});

describe('native program checks: sinks on sliding blocks, a fused shared expert (tiny-granite-swa-moe)', () => {
  const { f, load } = fixture('tiny-granite-swa-moe');

  it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, RegExp]>([
    ['a shared expert whose up half runs past its fused gate|up buffer', 'swiglu', (o) => (o.params!.b_off = 256), /op \d+ \(swiglu\): 192 values at offset 256 do not fit buffer 'shexp_gate_up384'/],
    ['sinks that are not one per head', 'attention', (o) => (o.weights!.sinks = 'blk.0.attn_norm.weight'), /attention sinks 'blk.0.attn_norm.weight' must be F32 with 4 elements \(one per head\)/],
  ])('refuses %s', (_what, op, edit, want) => {
    expect(() => load(tampered(f.program, op, edit))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });
});

describe('native program checks: MSA block selection (tiny-minimax-m3)', () => {
  const { f, load } = fixture('tiny-minimax-m3');
  /** The program with the first op of kind `op` that has parameter `key` changed by `edit`. */
  const withParam = (op: ProgramOp['op'], key: string, edit: (o: ProgramOp) => void): ModelProgram => {
    const q: ModelProgram = JSON.parse(JSON.stringify(f.program));
    const o = q.ops.find((x) => x.op === op && x.params?.[key] !== undefined);
    if (!o) throw new Error(`no ${op} op with ${key}`);
    edit(o);
    return q;
  };

  it('indexes the routed blocks (1 and 2) only, their attention reading the selection after the 8 query heads', () => {
    const idx = f.program.ops.filter((o) => o.op === 'msa_index');
    expect(idx.map((o) => [o.params!.top_k, o.params!.block, o.params!.local, o.params!.out_off])).toEqual([[4, 4, 2, 512], [4, 4, 2, 512]]);
    const att = f.program.ops.filter((o) => o.op === 'attention');
    expect(att.map((o) => o.params!.sel_off ?? null)).toEqual([null, 512, 512]);
    expect(att.slice(1).every((o) => f.program.buffers[o.a!].width === 8 * 64 + 2 * 4)).toBe(true);
  });

  it.each<[string, ProgramOp['op'], string, (o: ProgramOp) => void, string, RegExp]>([
    ['blocks of no positions', 'msa_index', 'block', (o) => (o.params!.block = 0), 'KAIL_E_BAD_MODEL', /op \d+ \(msa_index\): needs positive n_head, head_dim, top_k and block/],
    ['a selection written past the query buffer', 'msa_index', 'out_off', (o) => (o.params!.out_off = 516), 'KAIL_E_BAD_MODEL', /op \d+ \(msa_index\): 8 values at offset 516 do not fit buffer 'q_msa520' \(out/],
    ['indexer keys wider than their cache', 'msa_index', 'head_dim', (o) => (o.params!.head_dim = 32), 'KAIL_E_INVALID_ARG', /needs a kv layer of width head_dim and no V/],
    ['a selection read past the query buffer', 'attention', 'sel_off', (o) => (o.params!.top_k = 8), 'KAIL_E_BAD_MODEL', /op \d+ \(attention\): 16 values at offset 512 do not fit buffer 'q_msa520' \(a \(block selection\)/],
    ['a selection beside a sliding window', 'attention', 'sel_off', (o) => (o.params!.window = 8), 'KAIL_E_INVALID_ARG', /a block selection \(MSA\) takes causal attention without a window or chunks/],
    ['a selection of blocks of no positions', 'attention', 'sel_off', (o) => (o.params!.block = 0), 'KAIL_E_BAD_MODEL', /a block selection needs positive top_k and block/],
    ['ALiBi over a selection', 'attention', 'sel_off', (o) => (o.params!.alibi = 8), 'KAIL_E_INVALID_ARG', /ALiBi over a block selection \(MSA\) is not supported/],
    ['swigluoai without its limit', 'swiglu', 'oai_alpha', (o) => delete o.params!.limit, 'KAIL_E_BAD_MODEL', /swigluoai needs a positive finite oai_alpha \(is 1\.70\d*\), a positive limit and no situ/],
  ])('refuses %s', (_what, op, key, edit, code, want) => {
    expect(() => load(withParam(op, key, edit))).toThrow(expect.objectContaining({ code, message: expect.stringMatching(want) }));
  });
});

describe('native program checks: xIELU (tiny-apertus)', () => {
  const { f, load } = fixture('tiny-apertus');

  it.each<[string, (o: ProgramOp) => void, RegExp]>([
    ['a missing alpha_n', (o) => delete o.params!.alpha_n, /op \d+ \(xielu\): xIELU parameter alpha_n is missing or not a finite number/],
    ['an infinite beta', (o) => (o.params!.beta = Infinity), /op \d+ \(xielu\): xIELU parameter beta is missing or not a finite number/],
    ['a NaN eps', (o) => (o.params!.eps = NaN), /op \d+ \(xielu\): xIELU parameter eps is missing or not a finite number/],
    ['an output narrower than its input', (o) => (o.out = 0), /op \d+ \(xielu\): \d+ values at offset 0 do not fit buffer 'x'/],
    ['no input', (o) => delete o.a, /op \d+ \(xielu\): needs buffer a/],
  ])('refuses %s', (_what, edit, want) => {
    expect(() => load(tampered(f.program, 'xielu', edit))).toThrow(expect.objectContaining({ code: expect.stringMatching(/KAIL_E_BAD_MODEL|KAIL_E_INVALID_ARG/), message: expect.stringMatching(want) }));
  });
});

describe('native program checks: RWKV-6 (tiny-rwkv6)', () => {
  const { f, load } = fixture('tiny-rwkv6');
  const decay = (p: ModelProgram, edit: (o: ProgramOp) => void) => {
    const q: ModelProgram = JSON.parse(JSON.stringify(p));
    edit(q.ops.find((o) => o.op === 'sigmoid' && o.params?.exp_decay !== undefined)!);
    return q;
  };
  const mix = (p: ModelProgram, edit: (o: ProgramOp) => void) => {
    const q: ModelProgram = JSON.parse(JSON.stringify(p));
    edit(q.ops.find((o) => o.op === 'matmul' && o.params?.groups === 5)!);
    return q;
  };

  it.each<[string, (p: ModelProgram) => ModelProgram, RegExp]>([
    ['an exp_decay other than 1', (p) => decay(p, (o) => (o.params!.exp_decay = 2)), /op \d+ \(sigmoid\): sigmoid exp_decay 2\.0+ is not 1/],
    ['both decays', (p) => decay(p, (o) => (o.params!.decay = 0.5)), /op \d+ \(sigmoid\): sigmoid takes decay or exp_decay, not both/],
    ['a decay past the WKV input', (p) => decay(p, (o) => (o.params!.out_off = 3 * 256 + 1)), /op \d+ \(sigmoid\): 256 values at offset 769 do not fit/],
    ['the grouped LoRA in 4 groups', (p) => mix(p, (o) => (o.params!.groups = 4)), /tensor 'blk\.0\.time_mix_w2\.weight' \[16, 256, 5\]: expected 20 inputs/],
    ['the grouped LoRA without groups', (p) => mix(p, (o) => delete o.params!.groups), /tensor 'blk\.0\.time_mix_w2\.weight' \[16, 256, 5\]: expected 80 inputs/],
    ['a WKV-6 time_first of the wrong width', (p) => tampered(p, 'rwkv_wkv6', (o) => (o.weights!.u = 'blk.0.time_mix_decay_w2.weight')), /WKV6 time_first 'blk\.0\.time_mix_decay_w2\.weight' F32 \[32, 256\] must be F32 with 256 elements/],
  ])('refuses %s', (_what, edit, want) => {
    expect(() => load(edit(f.program))).toThrow(expect.objectContaining({ code: expect.stringMatching(/KAIL_E_BAD_MODEL|KAIL_E_INVALID_ARG/), message: expect.stringMatching(want) }));
  });
});

describe('native program checks: RWKV-6-Qwen2 (tiny-rwkv6qwen2)', () => {
  const { f, load } = fixture('tiny-rwkv6qwen2');
  it.each<[string, (p: ModelProgram) => ModelProgram, RegExp]>([
    ['a gla_scale of 0', (p) => tampered(p, 'rwkv_wkv6', (o) => (o.params!.gla_scale = 0)), /op \d+ \(rwkv_wkv6\): gla_scale 0\.0+ is not a positive number/],
    ['gated linear attention with a time_first', (p) => tampered(p, 'rwkv_wkv6', (o) => (o.weights = { u: 'blk.0.time_mix_decay.weight' })), /WKV6 gated linear attention \(gla_scale\) takes no time_first, has 'blk\.0\.time_mix_decay\.weight'/],
    ['a WKV-6 without time_first or gla_scale', (p) => tampered(p, 'rwkv_wkv6', (o) => delete o.params!.gla_scale), /WKV6 time_first \(missing\) must be F32 with 256 elements/],
  ])('refuses %s', (_what, edit, want) => {
    expect(() => load(edit(f.program))).toThrow(expect.objectContaining({ code: expect.stringMatching(/KAIL_E_BAD_MODEL|KAIL_E_INVALID_ARG/), message: expect.stringMatching(want) }));
  });
});

describe('native program checks: RWKV-7 (tiny-rwkv7)', () => {
  const { f, load } = fixture('tiny-rwkv7');
  const first = (op: ProgramOp['op'], pred: (o: ProgramOp) => boolean) => (p: ModelProgram, edit: (o: ProgramOp) => void) => {
    const q: ModelProgram = JSON.parse(JSON.stringify(p));
    edit(q.ops.find((o) => o.op === op && pred(o))!);
    return q;
  };
  const lerp = first('mul', (o) => Number(o.params?.w_off ?? 0) > 0);

  it('has no KV layers; three recurrent layers per block (two token shifts, one WKV state)', () => {
    expect(f.program.kvKWidth).toEqual([]);
    expect(f.program.rsWidth).toEqual(Array.from({ length: 3 }, () => [256, 4 * 64 * 64, 256]).flat());
  });

  it.each<[string, (p: ModelProgram) => ModelProgram, RegExp]>([
    ['a lerp slice past the fused weight', (p) => lerp(p, (o) => (o.params!.w_off = 5 * 256 + 1)), /scale 'blk.0.time_mix_lerp_fused.weight' must be F32 with at least 1537 elements \(w_off 1281 \+ 256\)/],
    ['a WKV input of five sections', (p) => tampered(p, 'rwkv_wkv7', (o) => (o.params!.head_dim = 48)), /op \d+ \(rwkv_wkv7\): r\|w\|k\|v\|a\|b input is 1536 wide, expected 1152/],
    ['a token shift over a narrower buffer', (p) => tampered(p, 'token_shift', (o) => (o.params!.layer = 1)), /op \d+ \(token_shift\): the recurrent layer's width is not a's/],
    ['a head sum without its values', (p) => tampered(p, 'head_sum_mul', (o) => delete o.b), /op \d+ \(head_sum_mul\): needs buffer b/],
    ['a head sum of more heads than the row', (p) => tampered(p, 'head_sum_mul', (o) => (o.params!.n_head = 5)), /op \d+ \(head_sum_mul\): 320 values at offset 0 do not fit/],
    ['a non-finite decay', (p) => first('sigmoid', (o) => o.params?.decay !== undefined)(p, (o) => (o.params!.decay = Infinity)), /op \d+ \(sigmoid\): sigmoid decay inf is not a finite number/],
    ['a sigmoid past its buffer', (p) => tampered(p, 'sigmoid', (o) => (o.params!.out_off = 1)), /op \d+ \(sigmoid\): 256 values at offset 1 do not fit/],
  ])('refuses %s', (_what, edit, want) => {
    expect(() => load(edit(f.program))).toThrow(expect.objectContaining({ code: expect.stringMatching(/KAIL_E_BAD_MODEL|KAIL_E_INVALID_ARG/), message: expect.stringMatching(want) }));
  });
});

describe("native program checks: Granite Switch's router inputs and switched LoRA (tiny-graniteswitch)", () => {
  const { f, load } = fixture('tiny-graniteswitch');
  it.each<[string, (p: ModelProgram) => ModelProgram, RegExp]>([
    ['activation tokens without as many substitutes', (p) => tampered(p, 'switch_route', (o) => o.ids!.pop()), /op \d+ \(switch_route\): ids must hold the activation tokens, then as many substitutes/],
    ['a negative substitute', (p) => tampered(p, 'switch_route', (o) => (o.ids![5] = -1)), /op \d+ \(switch_route\): substitute token id -1 is negative or too large/],
    ['ids that are not integers', (p) => tampered(p, 'switch_route', (o) => (o.ids![0] = 1.5)), /op \d+ ids must be integers/],
    ['a router gain that is not finite', (p) => tampered(p, 'switch_route', (o) => (o.params!.gain = Infinity)), /op \d+ \(switch_route\): router gain inf is not a finite number/],
    ['router lanes wider than their buffer', (p) => tampered(p, 'switch_route', (o) => (o.params!.head_dim = 65)), /op \d+ \(switch_route\): 196 values at offset 0 do not fit/],
    ['an embedding by row id without its ids', (p) => tampered(p, 'embed', (o) => delete o.b), /op \d+ \(embed\): needs buffer b/],
    ['a switched LoRA without the router slot', (p) => tampered(p, 'switch_lora', (o) => delete o.b), /op \d+ \(switch_lora\): needs buffer b/],
    ['a switched LoRA writing its own input', (p) => tampered(p, 'switch_lora', (o) => (o.out = o.a!)), /op \d+ \(switch_lora\): out must not be a/],
    ['a 2-D adapter tensor', (p) => tampered(p, 'switch_lora', (o) => (o.weights!.lora_a = 'blk.0.attn_qkv.weight')), /switched LoRA 'blk\.0\.attn_qkv\.weight' \[256, 512\] and 'blk\.0\.attn_q\.lora_b' \[4, 256, 5\] must be \[n_in, rank, n_slots\] and \[rank, n_out, n_slots\]/],
    ['adapters wider than the output', (p) => tampered(p, 'switch_lora', (o) => (o.weights!.lora_b = 'blk.0.ffn_gate.lora_b')), /switched LoRA 'blk\.0\.attn_q\.lora_a' \[256, 4, 5\] \/ 'blk\.0\.ffn_gate\.lora_b' \[4, 512, 5\] do not fit 256 inputs and 256 outputs/],
  ])('refuses %s', (_what, edit, want) => {
    expect(() => load(edit(f.program))).toThrow(expect.objectContaining({ code: expect.stringMatching(/KAIL_E_BAD_MODEL|KAIL_E_INVALID_ARG/), message: expect.stringMatching(want) }));
  });
});

describe("native program checks: T5's relative position bias (tiny-t5encoder)", () => {
  const { f, load } = fixture('tiny-t5encoder');
  it.each<[string, (p: ModelProgram) => ModelProgram, RegExp]>([
    ['a bias table of another head count', (p) => tampered(p, 'attention', (o) => (o.weights!.rel_b = 'enc.blk.0.attn_norm.weight')), /relative position bias 'enc\.blk\.0\.attn_norm\.weight' must be F32 or F16 \[4 heads, at least 4 buckets\]/],
    ['a projection matrix as the table', (p) => tampered(p, 'attention', (o) => (o.weights!.rel_b = 'enc.blk.0.attn_q.weight')), /relative position bias 'enc\.blk\.0\.attn_q\.weight' must be F32 or F16 \[4 heads, at least 4 buckets\], is F32 \[256, 192\]/],
  ])('refuses %s', (_what, edit, want) => {
    expect(() => load(edit(f.program))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });
});

describe("native program checks: T5's encoder-decoder passes (tiny-t5)", () => {
  const { f, load } = fixture('tiny-t5');
  // The first op of a kind with (or without) a parameter: the store-only op, the cross reader.
  const edited = (p: ModelProgram, pick: (o: ProgramOp) => boolean, edit: (o: ProgramOp) => void) => {
    const q: ModelProgram = JSON.parse(JSON.stringify(p));
    edit(q.ops.find(pick)!);
    return q;
  };
  const store = (o: ProgramOp) => !!o.params?.store_only;
  const cross = (o: ProgramOp) => !!o.params?.cross;
  it.each<[string, (p: ModelProgram) => ModelProgram, RegExp]>([
    ['a pass other than encoder (1) or decoder (2)', (p) => edited(p, (o) => o.op === 'embed', (o) => (o.params!.pass = 3)), /op 0 \(embed\): pass 3 is not 1 \(encoder only\) or 2 \(decoder only\)/],
    ['a store-only op in the decoder pass', (p) => edited(p, store, (o) => (o.params!.pass = 2)), /a store-only attention op stores k \(b\) and v \(c\) in the encoder pass \(pass 1\)/],
    ['a store-only op without v', (p) => edited(p, store, (o) => delete o.c), /a store-only attention op stores k \(b\) and v \(c\)/],
    ['a cross reader that stores k and v', (p) => edited(p, cross, (o) => Object.assign(o, { b: o.a, c: o.a })), /a cross-attention reader stores nothing and runs in the decoder's passes \(pass 2\)/],
    ['a cross reader with a relative bias', (p) => edited(p, cross, (o) => (o.weights = { rel_b: 'dec.blk.0.attn_rel_b.weight' })), /a cross-attention reader sees every encoder position: no window/],
    ['a cross reader over a sliding window', (p) => edited(p, cross, (o) => (o.params!.window = 4)), /a cross-attention reader sees every encoder position/],
    // (The cache keeps each layer's rows by role: the encoder's for its pass, the decoder's from enc_len.)
    ['a cross reader of an encoder self-attention layer', (p) => edited(p, cross, (o) => (o.params!.layer = 0)), /kv layer 0 holds both encoder and cross-attention rows/],
    ['an attention op in both passes (untagged)', (p) => edited(p, (o) => o.op === 'attention' && o.params!.pass === 2 && !o.params!.cross, (o) => delete o.params!.pass), /an encoder-decoder program's attention ops each run in one pass \(tagged pass 1 or 2\)/],
  ])('refuses %s', (_what, edit, want) => {
    expect(() => load(edit(f.program))).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(want) }));
  });
});

describe('native program checks: a Gemma 4 assistant draft over its target (tiny-gemma4-assistant over tiny-gemma4)', () => {
  const t = { file: '', program: undefined as unknown as ModelProgram, d: '', dp: undefined as unknown as ModelProgram };
  let target: NativeModel | undefined;
  const hparamsOf = (file: string) => {
    const f = native().openGguf(file, { mapData: false });
    try {
      const tensors = new Map<string, GgufTensorInfo>(f.tensors.map((x) => [x.name, x]));
      return { hp: readHParams(new Metadata(f.metadata, f.metadata['general.architecture'] as string), tensors), tensors };
    } finally {
      f.close();
    }
  };
  beforeAll(() => {
    t.file = writeTestModel(dir, 'tiny-gemma4', 'F32');
    t.program = programOf(t.file);
    t.d = writeTestModel(dir, 'tiny-gemma4-assistant', 'F32');
    const d = hparamsOf(t.d);
    t.dp = buildGemma4Assistant(d.hp, d.tensors, { hparams: hparamsOf(t.file).hp, program: t.program, path: t.file });
    // (A batch of 1: the target's sliding ring holds the last 8 positions, its window.)
    target = new (native().Model)(t.file, t.program, { threads: 1, nCtx: 32, nBatch: 1 });
  }, 60_000);
  afterAll(() => target?.close());
  const load = (p: ModelProgram) => new (native().Model)(t.d, p, { threads: 1, nCtx: 32, kvSource: target }).close();

  it('accepts the draft over the target, and refuses it without one', () => {
    expect(() => load(t.dp)).not.toThrow();
    expect(() => new (native().Model)(t.d, t.dp, { threads: 1, nCtx: 32 }).close()).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/no kv_source model was given/) }));
  });

  it.each<[string, (o: ProgramOp) => void, RegExp]>([
    ['a target layer out of range', (o) => (o.params!.ext_layer = 9), /reads kv layer 9 of its source model, which has \d+ kv layers/],
    ['an op that does not say its own position is unseen', (o) => delete o.params!.exclusive, /takes exclusive 1/],
    ['other heads than the target layer caches', (o) => Object.assign(o.params!, { n_head_kv: 1 }), /do not match the source's kv layer/],
    ['a window wider than the target ring holds', (o) => (o.params!.window = 9), /whose ring holds the last 8 positions/],
    ['full attention over a sliding ring', (o) => delete o.params!.window, /a full attention over the source's kv layer/],
    ['k and v of its own', (o) => Object.assign(o, { b: o.a, c: o.a }), /stores no k or v into another model's cache/],
  ])('refuses %s', (_what, edit, want) => {
    expect(() => load(tampered(t.dp, 'attention', edit))).toThrow(expect.objectContaining({ message: expect.stringMatching(want) }));
  });

  it("refuses a target tensor the target does not load", () => {
    const q = tampered(t.dp, 'embed', (o) => (o.weights!.weight = 'target:nothing.weight'));
    expect(() => load(q)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/does not load tensor 'nothing.weight'/) }));
  });
});

// Where llama.cpp's graph gives NaNs (an MTP block norms the zero hidden state of position 0 with
// hnorm; an epsilon of 0 makes that 0/0), the MTP builders refuse the file, as deepseek4's does.
describe('MTP blocks refuse an RMS epsilon of 0 (DeepSeek-V3 nextn, Qwen3.5, Nemotron 3)', () => {
  it.each(['tiny-deepseek3-mtp', 'tiny-qwen35moe-mtp', 'tiny-nemotron-h-moe-mtp'])('%s', (preset) => {
    const f = native().openGguf(writeTestModel(dir, preset, 'F32'), { mapData: false });
    try {
      const arch = f.metadata['general.architecture'] as string;
      const tensors = new Map<string, GgufTensorInfo>(f.tensors.map((x) => [x.name, x]));
      const mtp = (eps?: number) => () => buildMtpProgram(readHParams(new Metadata(eps === undefined ? f.metadata : { ...f.metadata, [`${arch}.attention.layer_norm_rms_epsilon`]: eps }, arch), tensors), tensors);
      expect(mtp()).not.toThrow();
      expect(mtp(1e-30)).not.toThrow();
      expect(mtp(0)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(new RegExp(`^${arch}: layer_norm_rms_epsilon 0: the MTP block norms the zero hidden state of position 0, which needs an epsilon > 0`)) }));
    } finally {
      f.close();
    }
  });
});

describe("native program checks: Talkie's per-head q gain (tiny-talkie)", () => {
  const { f, load } = fixture('tiny-talkie');

  // The first head_rms_norm is block 0's q norm: attn_q_norm {1, 4} with head_gain.
  it.each<[string, (o: ProgramOp) => void, RegExp]>([
    ['a head gain read as a shared norm weight', (o) => delete o.params!.head_gain, /norm 'blk\.0\.attn_q_norm\.weight' must be F32 with 64 elements/],
    ['a head gain of the wrong size', (o) => (o.weights = { weight: 'blk.0.layer_output_scale.weight' }), /head gain 'blk\.0\.layer_output_scale\.weight' must be F32 with 4 elements \(one per head\)/],
    ['a head gain on an L2 norm', (o) => (o.params!.l2 = 1), /a per-head gain goes with an RMS norm only/],
  ])('refuses %s', (_what, edit, want) => {
    expect(f.program.ops.find((o) => o.op === 'head_rms_norm')!.params!.head_gain).toBe(1);
    expect(() => load(tampered(f.program, 'head_rms_norm', edit))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });
});
