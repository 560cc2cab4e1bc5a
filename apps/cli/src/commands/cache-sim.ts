import path from 'node:path';
import type { Command } from 'commander';
import { readRoutingTrace, simulateCache } from '@kailstream/engine/core';

interface CacheSimOpts {
  trace: string;
  slots: number;
  policy: string[];
  json?: boolean;
}

function slotCount(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 1 << 20) throw new Error(`--slots must be an integer in 1..${1 << 20}, got '${v}'`);
  return n;
}

export function registerCacheSim(program: Command): void {
  program
    .command('cache-sim')
    .description("replay a routing trace through the expert cache: each policy's hit rate next to Belady's optimal (MIN)")
    .requiredOption('--trace <file>', 'routing trace, JSON lines with layer, token_idx, experts (and problem_id, gating_probs; without problem_id a (token_idx, layer) pair seen again starts the next prompt)')
    .requiredOption('--slots <n>', 'expert slots per layer', slotCount)
    .option(
      '--policy <name>',
      'a policy to compare, repeatable, options after a colon (lfu:half_life=16); default: every policy. ' +
        'lru, the default policy and belady always run',
      (v: string, acc: string[]) => [...acc, v],
      [] as string[],
    )
    .option('--json', 'print one JSON object: {"slots","accesses","default_policy","hit_rate":{policy: rate}}')
    .action((o: CacheSimOpts) => {
      const trace = readRoutingTrace(o.trace);
      const r = simulateCache(trace, o.slots, o.policy.length ? o.policy : undefined);
      if (o.json) {
        const hitRate: Record<string, number> = {};
        for (const p of r.policies) hitRate[p] = r.hitRate[p];
        process.stdout.write(JSON.stringify({ slots: r.slots, accesses: r.accesses, default_policy: r.defaultPolicy, hit_rate: hitRate }) + '\n');
        return;
      }
      const out: string[] = [];
      out.push(
        `trace: ${path.basename(o.trace)}: ${trace.records} records, ${trace.tokens} tokens in ${trace.problems} problem(s), ` +
          `${layersText(trace.layerIds)}, ${trace.experts} experts, top-${trace.k}`,
      );
      out.push(`cache: ${r.slots} slots per layer, demand fetch; ${r.accesses} expert accesses`);
      out.push('');
      const width = Math.max(8, ...r.policies.map((p) => p.length + 2));
      out.push(`${'policy'.padEnd(width)} ${'hit rate'.padStart(8)} ${'hits'.padStart(9)} ${'gap closed'.padStart(11)}`);
      for (const p of r.policies) {
        const gap = r.gapClosed[p];
        const name = p === r.defaultPolicy ? `${p} *` : p;
        out.push(
          `${name.padEnd(width)} ${(100 * r.hitRate[p]).toFixed(2).padStart(7)}% ${String(r.hits[p]).padStart(9)} ${(gap === null ? '-' : gap.toFixed(2)).padStart(11)}`,
        );
      }
      out.push('');
      out.push('* the default policy. gap closed: share of the way from LRU to Belady (belady = 1).');
      process.stdout.write(out.join('\n') + '\n');
    });
}

/** "32 layers", or where the ids are not 0..n-1 which they are: "4 layers (1..4)", "3 layers (0, 2, 5)". */
function layersText(ids: number[]): string {
  const n = `${ids.length} layer${ids.length === 1 ? '' : 's'}`;
  if (ids[0] === 0 && ids[ids.length - 1] === ids.length - 1) return n;
  const contiguous = ids[ids.length - 1] - ids[0] === ids.length - 1;
  return `${n} (${contiguous ? `${ids[0]}..${ids[ids.length - 1]}` : ids.length <= 8 ? ids.join(', ') : `${ids.slice(0, 4).join(', ')}, …, ${ids[ids.length - 1]}`})`;
}
