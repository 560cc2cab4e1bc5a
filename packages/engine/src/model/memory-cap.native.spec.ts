// Under a real memory cap (a memory cgroup, page cache included): expert streaming with O_DIRECT
// completes in a group capped at the process's own baseline + 2 x its RAM budget, with the tokens of
// an uncapped in-memory run, while that in-memory run (weights read through the page cache) is
// charged more than the cap. Skips, saying why, where memory cgroups are not writable (not root).
import fs from 'node:fs';
import path from 'node:path';

import { tempDir, testHardwareProfile, writeTestModel } from '../testing';
import { formatBytes } from './byte-size';
import { profileDefaults } from './hardware-profile';
import { createMemoryCgroup, evictFromPageCache, type MemoryCgroup } from './memory-cgroup';
import { planModel } from './model';

const ENGINE = path.resolve(__dirname, '../../dist/index.js');
const PROMPT = [1, 17, 99, 3, 250, 7, 42, 8];

// Runs in the child: loads the model (or nothing), generates, prints one JSON line.
const CHILD = `
const [engine, file, optsJson, profileJson] = process.argv.slice(1);
const e = require(engine);
(async () => {
  if (!file) { e.systemInfo(); console.log('{}'); return; }
  const opts = JSON.parse(optsJson);
  // With a profile: its defaults, as kail run takes them without --ram (the group's limit read here).
  const d = profileJson && e.profileDefaults(JSON.parse(profileJson), 'profile.json', require('fs').statSync(file).size, {});
  if (d) Object.assign(opts, { ramBytes: d.ramBytes, ramReserveBytes: 0 });
  const m = e.EngineModel.load(file, opts);
  const r = await e.generate(m, ${JSON.stringify(PROMPT)}, { maxTokens: 8, sampling: { temperature: 0 } });
  const st = m.runtime.stats().stream;
  m.close();
  console.log(JSON.stringify({ tokens: r.tokens, stream: st && { directIo: st.directIo, bytesRead: e.summarizeStream(st).bytesRead, peakBytes: st.peakBytes },
    ...(d ? { ramBytes: d.ramBytes, lines: d.lines, limit: e.cgroupMemoryLimit() } : {}) }));
})().catch((err) => { console.error(err.message); process.exit(3); });
`;

const probe = createMemoryCgroup(`kail-cap-probe-${process.pid}`);
const can = typeof probe !== 'string';
if (typeof probe !== 'string') probe.remove();
const maybe = can && fs.existsSync(ENGINE) ? it : it.skip;
if (!can) {
  // eslint-disable-next-line no-console
  console.log(`memory-cap test skipped: ${probe}`);
} else if (!fs.existsSync(ENGINE)) {
  // eslint-disable-next-line no-console
  console.log(`memory-cap test skipped: ${ENGINE} is missing (npx nx run engine:build)`);
}

describe('expert streaming under a memory cgroup cap', () => {
  const dir = tempDir();
  const groups: MemoryCgroup[] = [];
  afterAll(() => {
    for (const g of groups) g.remove();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  function inGroup(name: string, limit: number, args: string[]) {
    const g = createMemoryCgroup(`kail-cap-${name}-${process.pid}`) as MemoryCgroup;
    groups.push(g);
    g.setLimit(limit);
    const r = g.run(process.execPath, ['-e', CHILD, ENGINE, ...args]);
    return { r, peak: g.peak(), oomKills: g.oomKills(), out: r.status === 0 ? JSON.parse(r.stdout.trim().split('\n').pop()!) : null };
  }

  maybe(
    'O_DIRECT streaming stays under baseline + 2 x budget with the in-memory tokens; the page-cache run needs more',
    () => {
      // ~110 MB: 2 MoE layers x 64 experts of 3 x 512 x 512 in Q8_0.
      const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0', 1, ['--layers', '2', '--experts', '64', '--expert-ff', '512', '--dim', '512']);
      const size = fs.statSync(file).size;
      const opts = { threads: 2, nCtx: 64, nBatch: 16 };
      const p = planModel(file, { ...opts, ramBytes: 2 ** 40, ramReserveBytes: 0 });
      const ramBytes = p.fixedBytes + 8 * p.nMoeLayers * p.expertEntryBytes;

      const base = inGroup('base', 0, []);
      expect(base.r.status).toBe(0);
      const cap = base.peak + 2 * ramBytes;
      expect(cap).toBeLessThan(size); // the cap is smaller than the model

      evictFromPageCache(file);
      const mem = inGroup('mem', 0, [file, JSON.stringify(opts)]);
      expect(mem.r.stderr).toBe('');
      expect(mem.out.stream).toBeNull();

      evictFromPageCache(file);
      const st = inGroup('stream', cap, [file, JSON.stringify({ ...opts, ramBytes, ramReserveBytes: 0 })]);
      // eslint-disable-next-line no-console
      console.log(
        `memory cap: model ${formatBytes(size)}, baseline ${formatBytes(base.peak)}, budget ${formatBytes(ramBytes)}, cap ${formatBytes(cap)}; ` +
          `streaming peak ${formatBytes(st.peak)} (read ${formatBytes(st.out?.stream?.bytesRead ?? 0)}), in-memory uncapped peak ${formatBytes(mem.peak)}`,
      );
      expect(st.r.stderr).toBe('');
      expect(st.r.status).toBe(0);
      expect(st.oomKills).toBe(0);
      expect(st.peak).toBeLessThanOrEqual(cap);
      expect(st.out.stream.directIo).toBe(true);
      expect(st.out.tokens).toEqual(mem.out.tokens);
      expect(mem.peak).toBeGreaterThan(cap);

      // No --ram, a profile taken outside the group (its budget holds the whole model): the run
      // reads the group's limit, plans under it, streams, and gives the same tokens.
      evictFromPageCache(file);
      const profile = testHardwareProfile(dir, 0.8 * 2 ** 33); // 80% of 8 GiB "available when profiled"
      const auto = inGroup('auto', cap, [file, JSON.stringify(opts), JSON.stringify(profile)]);
      // eslint-disable-next-line no-console
      console.log(`memory cap, budget from the group: ${formatBytes(auto.out?.ramBytes ?? 0)} (cap ${formatBytes(cap)}), peak ${formatBytes(auto.peak)}; ${auto.out?.lines?.[0]}`);
      expect(auto.r.stderr).toBe('');
      expect(auto.r.status).toBe(0);
      expect(auto.oomKills).toBe(0);
      expect(cap - auto.out.limit.limitBytes).toBeGreaterThanOrEqual(0); // the kernel rounds the limit down to a page
      expect(cap - auto.out.limit.limitBytes).toBeLessThan(4096);
      expect(auto.out.ramBytes).toBeLessThan(cap);
      expect(auto.out.lines[0]).toMatch(/^--ram .* of the .* the memory cgroup .* leaves \(limit .*so experts stream$/);
      expect(auto.out.stream.directIo).toBe(true);
      expect(auto.out.tokens).toEqual(mem.out.tokens);
      // Outside any limit the same profile runs the model in memory.
      expect(profileDefaults(profile, 'profile.json', size, {}, 0, null).ramBytes).toBeUndefined();
    },
    180_000,
  );
});
