// Group-limited routing (expert_group_count / expert_group_used_count) is read for every routed
// architecture, as llama.cpp's loader reads it for all of them and build_moe_ffn applies it
// whenever the count is above 1. Numerics of group-limited routing are checked against llama.cpp
// on tiny-deepseek3 and tiny-bailingmoe2 (tools/src/parity/parity-moe-families.native.spec.ts).
import fs from 'node:fs';

import { programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe.each(['tiny-hy-v3', 'tiny-smallthinker', 'tiny-mimo2', 'tiny-lfm2moe', 'tiny-nemotron-h-moe', 'tiny-jamba', 'tiny-minimax-01-interval', 'tiny-kimi-linear', 'tiny-kimi-k3', 'tiny-bailingmoe3', 'tiny-step35', 'tiny-bailingmoe'])('%s', (preset) => {
  it('routes within the file\'s expert groups when it has them', () => {
    const f = testModelFile(dir, preset);
    const arch = String(f.kv['general.architecture']);
    const plain = programOf(f.kv, f.tensors).ops.filter((o) => o.op === 'moe');
    expect(plain.length).toBeGreaterThan(0);
    expect(plain.every((o) => !(Number(o.params!.n_group ?? 0) > 1))).toBe(true);
    const grouped = programOf({ ...f.kv, [`${arch}.expert_group_count`]: 2, [`${arch}.expert_group_used_count`]: 1 }, f.tensors).ops.filter((o) => o.op === 'moe');
    expect(grouped.map((o) => [o.params!.n_group, o.params!.n_group_used])).toEqual(plain.map(() => [2, 1]));
  }, 60_000);
});
