// A load with --override-kv computes as a file that holds those values: Mixtral routed to one
// expert per token by `llama.expert_used_count=int:1` gives bit for bit the logits of the same
// weights written with one expert used (gen-model seeds weights per tensor name), and its summary
// and residency plan count one expert; a tokenizer key drops the BOS; and overrides the model
// cannot take are refused with an error naming them.
import fs from 'node:fs';

import { EngineModel, planModel } from './model';
import { parseKvOverrides } from './kv-override';
import { tempDir, writeTestModel } from '../testing';

describe('loads with --override-kv', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const opts = { threads: 2, nCtx: 64, kvType: 'f32' as const };
  const tokens = [1, 17, 300, 42, 999, 5, 77, 512];

  async function logits(file: string, over: string[] = []): Promise<{ logits: Float32Array; model: EngineModel }> {
    const model = EngineModel.load(file, { ...opts, kvOverrides: parseKvOverrides(over) });
    try {
      return { logits: await model.evaluate(0, tokens, 'all'), model };
    } finally {
      model.close();
    }
  }

  it("llama.expert_used_count=int:1 computes as a file written with one expert used; summary and plan count one", async () => {
    const two = writeTestModel(dir, 'tiny-mixtral', 'F32', 1);
    const one = writeTestModel(dir, 'tiny-mixtral', 'F32', 1, ['--experts-used', '1']);
    const a = await logits(two);
    const b = await logits(one);
    const o = await logits(two, ['llama.expert_used_count=int:1']);
    expect(a.model.hparams.nExpertUsed).toBe(2);
    expect(o.model.hparams.nExpertUsed).toBe(1);
    expect(o.logits).toEqual(b.logits);
    expect(o.logits).not.toEqual(a.logits);
    expect(o.model.summary.expertUsedCount).toBe(1);
    expect(o.model.summary.bytesPerToken).toBe(b.model.summary.bytesPerToken);
    expect(o.model.summary.bytesPerToken).toBeLessThan(a.model.summary.bytesPerToken);
    const ram = 64 << 20;
    const planOver = planModel(two, { ...opts, ramBytes: ram, kvOverrides: parseKvOverrides(['llama.expert_used_count=int:1']) });
    const planOne = planModel(one, { ...opts, ramBytes: ram });
    const planTwo = planModel(two, { ...opts, ramBytes: ram });
    expect(planOver.coldReadBytesPerToken).toBe(planOne.coldReadBytesPerToken);
    expect(planOver.coldReadBytesPerToken).toBeLessThan(planTwo.coldReadBytesPerToken);
  });

  it('the same with experts streaming from storage under a RAM budget', async () => {
    const two = writeTestModel(dir, 'tiny-mixtral', 'F32', 1);
    const one = writeTestModel(dir, 'tiny-mixtral', 'F32', 1, ['--experts-used', '1']);
    const full = planModel(two, { ...opts, ramBytes: 2 ** 40, ramReserveBytes: 0 });
    // Room for two experts per layer of the eight: most reads come from storage.
    const stream = { ...opts, ramBytes: full.fixedBytes + 2 * full.nMoeLayers * full.expertEntryBytes, ramReserveBytes: 0, kvOverrides: parseKvOverrides(['llama.expert_used_count=int:1']) };
    const m = EngineModel.load(two, stream);
    try {
      expect(m.plan).not.toBeNull();
      const got = await m.evaluate(0, tokens, 'all');
      expect(got).toEqual((await logits(one)).logits);
    } finally {
      m.close();
    }
  });

  it('tokenizer.ggml.add_bos_token=bool:false drops the BOS the file asks for', () => {
    const file = writeTestModel(dir, 'tiny-mixtral', 'F32', 1);
    const a = EngineModel.load(file, opts);
    const b = EngineModel.load(file, { ...opts, kvOverrides: parseKvOverrides(['tokenizer.ggml.add_bos_token=bool:false']) });
    try {
      const withBos = a.tokenizer.tokenize('hello world', { addSpecial: true });
      expect(withBos[0]).toBe(a.tokenizer.vocab.special.bos);
      expect(b.tokenizer.tokenize('hello world', { addSpecial: true })).toEqual(withBos.slice(1));
    } finally {
      a.close();
      b.close();
    }
  });

  it.each([
    ['llama.expert_used_count=str:one', 'KAIL_E_INVALID_ARG', /the model's 'llama.expert_used_count' is a number, not a string/],
    ['llama.expert_used_count=int:9', 'KAIL_E_BAD_MODEL', /expert_used_count 9 is larger than expert_count 8 \(with --override-kv llama\.expert_used_count=int:9\)/],
    // The file is fine; the override does not fit its tensors: the error says which override was in play.
    ['llama.attention.head_count=int:2', 'KAIL_E_BAD_MODEL', /rope.dimension_count 32 must equal the head dimension 128 \(with --override-kv llama\.attention\.head_count=int:2\)$/],
    ['llama.block_count=int:0', 'KAIL_E_BAD_MODEL', /block_count/],
    ['general.architecture=str:nonesuch', 'KAIL_E_UNSUPPORTED', /architecture 'nonesuch' is not supported/],
  ])('refuses %s with %s, naming it', (over, code, why) => {
    const file = writeTestModel(dir, 'tiny-mixtral', 'F32', 1);
    let err: { code?: string; message?: string } | undefined;
    try {
      EngineModel.load(file, { ...opts, kvOverrides: parseKvOverrides([over]) }).close();
    } catch (e) {
      err = e as typeof err;
    }
    expect(err?.code).toBe(code);
    expect(err?.message).toMatch(why);
  });

  it("a tensor the override does not fit, found by the native core: the error names the tensor and the override", () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32', 1);
    expect(() => EngineModel.load(file, { ...opts, kvOverrides: parseKvOverrides(['qwen3moe.attention.head_count=int:2']) })).toThrow(
      /tensor 'blk\.0\.attn_q\.weight' \[256, 512\]: expected 256 outputs \(with --override-kv qwen3moe\.attention\.head_count=int:2\)/,
    );
    // The same file without it loads.
    EngineModel.load(file, opts).close();
  });
});
