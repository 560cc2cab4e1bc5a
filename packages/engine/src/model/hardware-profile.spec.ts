// profileDefaults: what a run takes from the hardware profile when its flags are absent.
import { testHardwareProfile } from '../testing';
import { profileDefaults, profileRamBudget } from './hardware-profile';
import type { CgroupMemoryLimit } from './memory-cgroup';

const GIB = 2 ** 30;

describe('profileDefaults', () => {
  const base = testHardwareProfile('/tmp', 8 * GIB);
  const withGpu = { ...base, gpus: [{ index: 0, name: 'Test GPU', totalBytes: 24 * GIB, freeBytes: 23 * GIB, usableBytes: 21 * GIB }] };

  it('streams a model larger than the RAM budget and gives the GPU to the VRAM tier, saying why', () => {
    const d = profileDefaults(withGpu, 'profile.json', 20 * GIB, {}, 0, null);
    expect(d.ramBytes).toBe(8 * GIB);
    expect(d.vramBytes).toBe(21 * GIB);
    expect(d.lines.some((l) => l.startsWith('--vram 21.00 GiB from profile.json: GPU #0 Test GPU'))).toBe(true);
  });

  it('takes no VRAM tier for a model that runs in memory, or without a GPU', () => {
    const fits = profileDefaults(withGpu, 'profile.json', 2 * GIB, {}, 0, null);
    expect(fits.ramBytes).toBeUndefined();
    expect(fits.vramBytes).toBeUndefined();
    expect(profileDefaults(base, 'profile.json', 20 * GIB, {}, 0, null).vramBytes).toBeUndefined();
    // A GPU with no usable memory left (a display holds it) is no tier either.
    const full = { ...withGpu, gpus: [{ ...withGpu.gpus[0], usableBytes: 0 }] };
    expect(profileDefaults(full, 'profile.json', 20 * GIB, {}, 0, null).vramBytes).toBeUndefined();
  });

  it('gives a later model what the loaded models\' VRAM tiers leave of the GPU, saying so', () => {
    const d = profileDefaults(withGpu, 'profile.json', 20 * GIB, {}, 5 * GIB, null);
    expect(d.vramBytes).toBe(16 * GIB);
    expect(d.lines.some((l) => l.startsWith('--vram 16.00 GiB from profile.json: GPU #0 Test GPU') && l.includes('less the 5.00 GiB the loaded models'))).toBe(true);
    expect(profileDefaults(withGpu, 'profile.json', 20 * GIB, {}, 30 * GIB, null).vramBytes).toBe(0);
    // A budget given by flag is not cut.
    expect(profileDefaults(withGpu, 'profile.json', 20 * GIB, { vramBytes: 20 * GIB }, 5 * GIB, null).vramBytes).toBe(20 * GIB);
  });

  it('keeps what the flags give, 0 included', () => {
    expect(profileDefaults(withGpu, 'profile.json', 20 * GIB, { vramBytes: GIB }, 0, null).vramBytes).toBe(GIB);
    const off = profileDefaults(withGpu, 'profile.json', 20 * GIB, { vramBytes: 0 }, 0, null);
    expect(off.vramBytes).toBe(0);
    expect(off.lines.some((l) => l.startsWith('--vram'))).toBe(false);
  });

  it('plans under what is available now when that is less than when profiled, naming a memory cgroup that limits it', () => {
    // The test profile: 8 GiB available when profiled, budget 6 GiB (a 75% share).
    const t = testHardwareProfile('/tmp', 6 * GIB);
    const p = { ...t, memory: { ...t.memory, availableBytes: 8 * GIB } };
    const limit = (headroom: number): CgroupMemoryLimit => ({ dir: '/sys/fs/cgroup/box', version: 2, limitBytes: 4 * GIB, usedBytes: 4 * GIB - headroom, reclaimableBytes: 0, headroomBytes: headroom });
    const capped = profileDefaults(p, 'profile.json', 5 * GIB, {}, 0, { availableBytes: 4 * GIB, cgroup: limit(4 * GIB) });
    expect(capped.ramBytes).toBe(3 * GIB); // 75% of the 4 GiB the group leaves
    const line = capped.lines.find((l) => l.startsWith('--ram 3.00 GiB'));
    expect(line).toContain('75% of the 4.00 GiB the memory cgroup /sys/fs/cgroup/box leaves (limit 4.00 GiB');
    expect(line).toContain("less than profile.json's 6.00 GiB");
    expect(line).toContain('so experts stream');
    // Without a cgroup: other programs took memory since the profile.
    const busy = profileDefaults(p, 'profile.json', 5 * GIB, {}, 0, { availableBytes: 2 * GIB, cgroup: null });
    expect(busy.ramBytes).toBe(1.5 * GIB);
    expect(busy.lines[0]).toContain("75% of the 2.00 GiB available now, less than profile.json's 6.00 GiB (profiled with 8.00 GiB available)");
    // The same model fits the profile's own budget: without the limit it runs in memory.
    expect(profileDefaults(p, 'profile.json', 5 * GIB, {}, 0, null).ramBytes).toBeUndefined();
    expect(profileDefaults(p, 'profile.json', 5 * GIB, {}, 0, { availableBytes: 16 * GIB, cgroup: null }).ramBytes).toBeUndefined();
    // A shortfall of less than a tenth keeps the profile's budget (7.5 GiB x 75% = 5.63 GiB > 0.9 x 6 GiB).
    expect(profileRamBudget(p, 'profile.json', { availableBytes: 7.5 * GIB, cgroup: null }).bytes).toBe(6 * GIB);
    expect(profileRamBudget(p, 'profile.json', { availableBytes: 7 * GIB, cgroup: null }).bytes).toBe(5.25 * GIB);
    // A hand-edited profile without its memory record takes the default 80% share.
    const bare = { ...p, memory: undefined } as unknown as typeof p;
    expect(profileRamBudget(bare, 'profile.json', { availableBytes: 4 * GIB, cgroup: null })).toEqual({
      bytes: 3276 * 2 ** 20, // 80% of 4 GiB, rounded down to a MiB
      why: "80% of the 4.00 GiB available now, less than profile.json's 6.00 GiB (the profile records no available memory)",
    });
    // More room now changes nothing; a cgroup roomier than MemAvailable is not named; a flag always wins.
    expect(profileRamBudget(p, 'profile.json', { availableBytes: 16 * GIB, cgroup: limit(16 * GIB) })).toEqual({ bytes: 6 * GIB, why: 'from profile.json: test' });
    expect(profileRamBudget(p, 'profile.json', { availableBytes: 2 * GIB, cgroup: limit(3 * GIB) }).why).not.toContain('cgroup');
    expect(profileDefaults(p, 'profile.json', 5 * GIB, { ramBytes: 5 * GIB }, 0, { availableBytes: GIB, cgroup: limit(GIB) }).ramBytes).toBe(5 * GIB);
  });
});
