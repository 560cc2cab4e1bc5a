import { mlaKvBytesPerToken } from './deepseek2';

describe('mlaKvBytesPerToken', () => {
  it('DeepSeek-V3 shape: the latent cache is ~57x smaller than a naive per-head cache', () => {
    const r = mlaKvBytesPerToken({ nLayer: 61, nHead: 128, kvLora: 512, qkNope: 128, qkRope: 64, vHead: 128 });
    expect(r.absorbed).toBe(61 * 576 * 2); // 70,272 bytes
    expect(r.naiveShared).toBe(61 * (128 * 256 + 64) * 2); // 4,005,504 bytes
    expect(r.naiveFull).toBe(61 * 128 * 320 * 2); // 4,997,120 bytes
    expect(r.ratioShared).toBeCloseTo(57.0, 1);
    expect(r.ratioFull).toBeCloseTo(71.1, 1);
  });

  it('scales with the element size', () => {
    const f16 = mlaKvBytesPerToken({ nLayer: 27, nHead: 16, kvLora: 512, qkNope: 128, qkRope: 64, vHead: 128 });
    const f32 = mlaKvBytesPerToken({ nLayer: 27, nHead: 16, kvLora: 512, qkNope: 128, qkRope: 64, vHead: 128, elemBytes: 4 });
    expect(f32.absorbed).toBe(2 * f16.absorbed);
    expect(f32.ratioShared).toBe(f16.ratioShared);
  });
});
