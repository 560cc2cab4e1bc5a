// profileDefaults: what a run takes from the hardware profile when its flags are absent.
import { testHardwareProfile } from '../testing';
import { profileDefaults } from './hardware-profile';

const GIB = 2 ** 30;

describe('profileDefaults', () => {
  const base = testHardwareProfile('/tmp', 8 * GIB);
  const withGpu = { ...base, gpus: [{ index: 0, name: 'Test GPU', totalBytes: 24 * GIB, freeBytes: 23 * GIB, usableBytes: 21 * GIB }] };

  it('streams a model larger than the RAM budget and gives the GPU to the VRAM tier, saying why', () => {
    const d = profileDefaults(withGpu, 'profile.json', 20 * GIB, {});
    expect(d.ramBytes).toBe(8 * GIB);
    expect(d.vramBytes).toBe(21 * GIB);
    expect(d.lines.some((l) => l.startsWith('--vram 21.00 GiB from profile.json: GPU #0 Test GPU'))).toBe(true);
  });

  it('takes no VRAM tier for a model that runs in memory, or without a GPU', () => {
    const fits = profileDefaults(withGpu, 'profile.json', 2 * GIB, {});
    expect(fits.ramBytes).toBeUndefined();
    expect(fits.vramBytes).toBeUndefined();
    expect(profileDefaults(base, 'profile.json', 20 * GIB, {}).vramBytes).toBeUndefined();
    // A GPU with no usable memory left (a display holds it) is no tier either.
    const full = { ...withGpu, gpus: [{ ...withGpu.gpus[0], usableBytes: 0 }] };
    expect(profileDefaults(full, 'profile.json', 20 * GIB, {}).vramBytes).toBeUndefined();
  });

  it('gives a later model what the loaded models\' VRAM tiers leave of the GPU, saying so', () => {
    const d = profileDefaults(withGpu, 'profile.json', 20 * GIB, {}, 5 * GIB);
    expect(d.vramBytes).toBe(16 * GIB);
    expect(d.lines.some((l) => l.startsWith('--vram 16.00 GiB from profile.json: GPU #0 Test GPU') && l.includes('less the 5.00 GiB the loaded models'))).toBe(true);
    expect(profileDefaults(withGpu, 'profile.json', 20 * GIB, {}, 30 * GIB).vramBytes).toBe(0);
    // A budget given by flag is not cut.
    expect(profileDefaults(withGpu, 'profile.json', 20 * GIB, { vramBytes: 20 * GIB }, 5 * GIB).vramBytes).toBe(20 * GIB);
  });

  it('keeps what the flags give, 0 included', () => {
    expect(profileDefaults(withGpu, 'profile.json', 20 * GIB, { vramBytes: GIB }).vramBytes).toBe(GIB);
    const off = profileDefaults(withGpu, 'profile.json', 20 * GIB, { vramBytes: 0 });
    expect(off.vramBytes).toBe(0);
    expect(off.lines.some((l) => l.startsWith('--vram'))).toBe(false);
  });
});
