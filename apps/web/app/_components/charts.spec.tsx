import { renderToString } from 'react-dom/server';

import { cellSize, ExpertHeatmap, heatColor } from './expert-heatmap';
import { LineChart, niceMax, runs } from './line-chart';

describe('LineChart', () => {
  it('breaks a line where values are missing and picks a readable axis top', () => {
    expect(runs([[1, 1], [2, null], [3, 2], [4, 3]])).toEqual([[[1, 1]], [[3, 2], [4, 3]]]);
    expect(niceMax(0)).toBe(1);
    expect(niceMax(7.3)).toBe(10);
    expect(niceMax(180)).toBe(200);
    expect(niceMax(2.3e9)).toBe(2.5e9);
  });

  it('draws one path per run, a dashed budget line and the latest value in the legend', () => {
    const html = renderToString(
      <LineChart
        title="Memory"
        windowSeconds={10}
        format={(v) => `${v}B`}
        series={[
          { name: 'used', color: '#fff', points: [[0, 1], [1000, null], [2000, 3], [3000, 4]] },
          { name: 'budget', color: '#f00', dashed: true, points: [[0, 8], [3000, 8]] },
        ]}
      />,
    );
    expect((html.match(/data-series="used"/g) ?? []).length).toBe(2);
    expect(html).toContain('stroke-dasharray="5 4"');
    expect(html).toMatch(/data-legend="used">4B</);
    expect(html).toMatch(/data-legend="budget">8B</);
    // Axis top: a nice number above the data (8 -> 10).
    expect(html).toContain('>10B<');
  });
});

describe('ExpertHeatmap', () => {
  const layers = [
    { layer: 0, counts: [0, 5, 10, 0], resident: [1, 2] },
    { layer: 1, counts: [1, 0, 0, 2], resident: [] },
    { layer: 2, counts: [0, 0, 0, 7], resident: [3] },
  ];

  it('colours from dark (0) to bright (max) on a square-root scale', () => {
    expect(heatColor(0)).toBe('rgb(22,24,32)');
    expect(heatColor(1)).toBe('rgb(252,255,164)');
    // sqrt(0.25) = 0.5 -> the middle stop.
    expect(heatColor(0.25)).toBe('rgb(188,55,84)');
    expect(cellSize(48, 128, 920)).toEqual({ cw: 6, ch: 8 });
  });

  it('draws layers × experts cells with their counts and marks the resident experts', () => {
    const html = renderToString(<ExpertHeatmap layers={layers} max={10} windowLabel="last 60 s" />);
    expect((html.match(/<rect /g) ?? []).length).toBe(12);
    expect((html.match(/class="resident"/g) ?? []).length).toBe(3);
    expect(html).toContain('data-count="10"');
    expect(html).toContain('fill="rgb(252,255,164)"');
    expect(html).toContain('3 layers × 4 experts, last 60 s');
  });

  it('says there is nothing to draw yet instead of an empty grid', () => {
    expect(renderToString(<ExpertHeatmap layers={[]} max={0} windowLabel="x" />)).toContain('heatmap-empty');
  });
});
