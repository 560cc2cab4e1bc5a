// Regression guard of the semantic fuzz harness (semantic-fuzz.ts, run in full by hand): a
// representative subset of its mutations over six architectures, each mutated file served by a
// child process under a memory and a time limit. Every file must be refused with a clean
// KAIL_E_* error that names the problem, or load and serve with finite logits; the ones that
// crashed, hung, allocated from a huge number or produced NaN before the fixes must be refused.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { SUPPORTED_ARCHITECTURES } from '@kailstream/engine';

import { BASE_MODELS, baseModelName, FuzzWorker, writeBaseModel, writeMutation } from './semantic-fuzz';
import type { Outcome } from './semantic-fuzz';
import { mutationsFor, readImage } from './semantic-mutations';

/** Mutations that must be refused, with what the error must say. `<a>` stands for the architecture. */
const REFUSED: Record<string, [string, RegExp][]> = {
  'tiny-llama-F32': [
    ['meta:<a>.block_count:i32max', /block_count' is 2147483647; expected an integer in 1\.\.4096/], // was: a 20 s hang
    ['meta:<a>.block_count:huge', /block_count' is 1099511627776/], // was: Invalid array length
    ['meta:<a>.block_count:negative', /block_count' is -1/],
    ['meta:<a>.block_count:float-for-int', /block_count' is 2\.5/],
    ['meta:<a>.block_count:one', /tensor 'blk\.1\..*' belongs to block 1, but block_count is 1/],
    ['meta:<a>.rope.freq_base:zero', /rope\.freq_base 0 is not positive/], // was: NaN logits
    ['meta:<a>.rope.freq_base:nan', /rope\.freq_base' is NaN, not a finite number/],
    ['meta:<a>.attention.layer_norm_rms_epsilon:negative', /layer_norm_rms_epsilon -1 is not in \[0, 1\)/], // was: NaN logits
    ['meta:<a>.rope.dimension_count:huge', /rope\.dimension_count 1099511627776/], // was: std::vector max_size
    ['meta:<a>.rope.dimension_count:zero', /rope\.dimension_count 0 must equal the head dimension 64/],
    ['rope:dims-gt-head', /rope\.dimension_count 4096 is not an even number of dimensions within the key head \(64\)/], // was: SIGSEGV
    ['heads:head_count-3', /head dimension 85\.3+ is not an integer/],
    ['heads:kv-not-dividing', /head_count 4 is not a multiple of head_count_kv 3/],
    ['perlayer:attention.head_count:short', /has 1 entries for 2 layers/],
    ['tensor:token_embd.weight:swap-dims', /token_embd|embedding/],
    ['tensor:blk.0.attn_q.weight:removed', /lacks tensor 'blk\.0\.attn_q\.weight'/],
    ['tensor:blk.1.ffn_down.weight:type-I32', /I32.*cannot compute/],
    ['tok:tokenizer.ggml.tokens:ints', /tokenizer\.ggml\.tokens/],
    ['template:unclosed-tag', /chat template/],
    ['template:runaway', /range\(\) of 100000000 items is over the chat template limit/], // was: a 20 s hang
  ],
  'tiny-qwen3moe-F32': [
    ['experts:used-gt-count', /expert_used_count 17 is larger than expert_count 16/],
    ['experts:count-half', /router 'blk\.0\.ffn_gate_inp\.weight' .* does not match/],
    ['meta:<a>.expert_count:huge', /expert_count' is 1099511627776/],
    ['tensor:blk.1.ffn_up_exps.weight:shrink-last', /expert tensors .* do not match/],
    ['tensor:blk.1.attn_q_norm.weight:grow-ne0', /attn_q_norm/],
    ['tok:vocab-gt-embd', /the tokenizer has 1088 tokens .* embedding has 1024 rows/],
    ['arch:deepseek2:relabeled', /./],
    ['arch:bogus:relabeled', /architecture 'bogus' is not supported/],
  ],
  'tiny-deepseek3-F32': [
    ['experts:groups-not-dividing', /expert_group_count 3 does not divide expert_count 16/],
    ['experts:groups-more-than-experts', /expert_group_count 32 does not divide/],
    ['experts:groups-used-gt-groups', /expert_group_used_count 9 is larger than expert_group_count 4/],
    ['mla:kv-lora-huge', /kv_lora_rank' is 2147483647/],
    ['meta:<a>.attention.kv_lora_rank:negative', /kv_lora_rank' is -1/],
    ['layers:nextn-gt-blocks', /./],
    ['meta:<a>.rope.scaling.type:bogus', /rope\.scaling\.type 'bogus' is not one of none, linear, yarn/], // was: run as linear scaling
    ['layers:dense-gt-blocks', /./],
    ['tensor:blk.2.exp_probs_b.bias:shrink-last', /exp_probs_b/],
    ['tensor:blk.0.attn_kv_a_mqa.weight:shrink-last', /attn_kv_a_mqa/],
    ['tok:vocab-lt-embd', /the tokenizer has 960 tokens/],
    ['tensor:blk.2.attn_q_a.weight:grow-last', /norm 'blk\.2\.attn_q_a_norm\.weight' must be F32 with 512 elements/], // was: a plain Error (KAIL_E_INTERNAL)
  ],
  'tiny-gpt-oss-F32': [
    ['tensor:blk.0.attn_sinks.weight:removed', /lacks tensor 'blk\.0\.attn_sinks\.weight', which the gpt-oss architecture requires/],
    ['tensor:blk.0.attn_sinks.weight:grow-last', /attention sinks 'blk\.0\.attn_sinks\.weight' must be F32 with 4 elements \(one per head\)/],
    ['tensor:blk.0.ffn_down_exps.bias:swap-dims', /expert down bias 'blk\.0\.ffn_down_exps\.bias' must be F32 \[256, 8\], is F32 \[8, 256\]/],
    ['tensor:blk.2.ffn_gate_inp.bias:type-F16', /router bias 'blk\.2\.ffn_gate_inp\.bias' must be F32 with 8 elements/],
    ['meta:<a>.attention.sliding_window:zero', /sliding_window' is 0; expected an integer in 1\.\./],
    ['meta:<a>.attention.sliding_window:removed', /lacks metadata 'gpt-oss\.attention\.sliding_window'/],
  ],
  'tiny-glm4moe-qknorm-F32': [
    ['meta:<a>.rope.dimension_count:huge', /rope\.dimension_count 1099511627776/],
    ['meta:<a>.nextn_predict_layers:i32max', /nextn_predict_layers' is 2147483647/],
    ['meta:<a>.leading_dense_block_count:huge', /leading_dense_block_count' is 1099511627776/],
    ['tensor:blk.2.attn_k_norm.weight:shrink-ne0', /attn_k_norm/],
  ],
  // An encoder (bert): its own keys and tensors, refused by name.
  'tiny-bert-F32': [
    ['meta:<a>.attention.layer_norm_epsilon:removed', /lacks metadata 'bert\.attention\.layer_norm_epsilon'/],
    ['meta:<a>.attention.layer_norm_epsilon:negative', /layer_norm_epsilon -1 is not in \[0, 1\)/],
    ['tensor:position_embd.weight:shrink-last', /longer than the model's 256 learned positions/],
    ['tensor:token_embd_norm.bias:removed', /lacks tensor 'token_embd_norm\.bias'/],
    ['tensor:position_embd.weight:shrink-ne0', /embedding tensor width does not match/],
  ],
};

/** Mutations a correct engine may either refuse cleanly or serve (what matters: no crash). */
const EITHER: Record<string, string[]> = {
  'tiny-llama-F32': ['meta:<a>.context_length:huge', 'meta:<a>.vocab_size:string', 'perlayer:feed_forward_length:varied', 'tok:tokenizer.ggml.merges:shorter', 'tok:bos_token_id:oob'],
  'tiny-qwen3moe-F32': ['experts:used-eq-count', 'tok:tokenizer.ggml.merges:garbage', 'tensor:blk.0.ffn_gate_inp.weight:type-Q8_0'],
  'tiny-deepseek3-F32': ['tensor:blk.2.ffn_gate_inp.weight:type-F16'],
  'tiny-glm4moe-qknorm-F32': ['perlayer:attention.head_count_kv:right-length'],
};

const OK: Outcome[] = ['clean-error', 'success'];

describe('semantic fuzzing of model files (regression subset)', () => {
  let dir: string;
  let worker: FuzzWorker;
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-semfuzz-'));
    worker = new FuzzWorker({ timeoutMs: 20_000 });
  });
  afterAll(() => {
    worker?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  for (const name of Object.keys(REFUSED)) {
    it(`${name}: each mutation is refused cleanly or served correctly`, async () => {
      const b = BASE_MODELS.find((x) => baseModelName(x) === name)!;
      const base = writeBaseModel(dir, b);
      const ref = await worker.run({ id: `${name}:base`, path: base, streaming: false });
      expect(ref.outcome).toBe('success');
      const img = readImage(base);
      const arch = String(img.kv.get('general.architecture')!.value);
      const all = new Map(mutationsFor(img, SUPPORTED_ARCHITECTURES).map((m) => [m.id, m]));
      const problems: string[] = [];
      const cases: [string, RegExp | null][] = [...REFUSED[name], ...(EITHER[name] ?? []).map((id) => [id, null] as [string, null])];
      for (const [idT, want] of cases) {
        const id = idT.replace('<a>', arch);
        const m = all.get(id);
        if (!m) throw new Error(`${name}: no mutation ${id}`);
        const file = path.join(dir, `${name}-mut.gguf`);
        if (!writeMutation(base, m, file)) throw new Error(`${name}: mutation ${id} did not apply`);
        const r = await worker.run({ id: `${name}:${id}`, path: file, streaming: false });
        const said = `${r.outcome} at ${r.result.stage ?? '?'}: ${r.result.code ?? ''} ${r.result.message ?? ''}`;
        if (!OK.includes(r.outcome)) problems.push(`${id}: ${said}`);
        else if (want && (r.outcome !== 'clean-error' || !want.test(r.result.message ?? ''))) problems.push(`${id}: expected a clean error matching ${want}, got ${said}`);
      }
      expect(problems).toEqual([]);
    }, 60_000);
  }
});
