import { LineLimits } from './line-limits';

/** Feeds pieces in order; the kept text, and whether (and where) it ended. */
function run(limits: LineLimits, pieces: string[], ms: number[] = []): { text: string; ended: number } {
  let text = '';
  for (const [i, p] of pieces.entries()) {
    const r = limits.push(p, ms[i] ?? 0);
    text += r.text;
    if (r.end) return { text, ended: i };
  }
  return { text, ended: -1 };
}

describe('LineLimits (llama-server n_indent, t_max_predict_ms)', () => {
  it('n_indent: the first line is free; a later line with less indentation is cut before its first other character', () => {
    expect(run(new LineLimits(4, 0), ['x = 1\n    y = 2\n  z = 3\n    w'])).toEqual({ text: 'x = 1\n    y = 2\n  ', ended: 0 });
    // A tab is one character of indentation, as in llama-server.
    expect(run(new LineLimits(2, 0), ['a\n\t\tb\n\tc'])).toEqual({ text: 'a\n\t\tb\n\t', ended: 0 });
    // An empty line is too little indentation (llama-server checks the character after the spaces).
    expect(run(new LineLimits(2, 0), ['a\n  b\n\n  c'])).toEqual({ text: 'a\n  b\n', ended: 0 });
    // Enough indentation everywhere: no end.
    expect(run(new LineLimits(2, 0), ['def f():\n  return 1\n  '])).toEqual({ text: 'def f():\n  return 1\n  ', ended: -1 });
  });

  it('n_indent: the same cut however the text is split into tokens', () => {
    const text = 'if x:\n    a()\n    b()\nelse:\n    c()';
    const whole = run(new LineLimits(4, 0), [text]).text;
    expect(whole).toBe('if x:\n    a()\n    b()\n');
    for (const size of [1, 2, 3, 5, 7]) {
      const pieces = Array.from({ length: Math.ceil(text.length / size) }, (_, i) => text.slice(i * size, (i + 1) * size));
      expect(run(new LineLimits(4, 0), pieces).text).toBe(whole);
    }
  });

  it('t_max_predict_ms: past the time, the output ends after the next piece with a newline (kept whole)', () => {
    const l = new LineLimits(0, 100);
    expect(run(l, ['a\n', 'b', 'c', 'd\ne', 'f'], [50, 120, 130, 140, 150])).toEqual({ text: 'a\nbcd\ne', ended: 3 });
    expect(run(new LineLimits(0, 100), ['abc', 'def'], [500, 600])).toEqual({ text: 'abcdef', ended: -1 });
    expect(new LineLimits(0, 0).active).toBe(false);
  });
});
