import { EngineError } from '../errors';
import { Mt19937 } from './rng';
import { StopMatcher, type StopStep } from './stop';

/** Feeds the pieces and returns everything emitted plus the final step. */
function feed(m: StopMatcher, pieces: string[]): { text: string; last: StopStep } {
  let text = '';
  let last: StopStep = { text: '', done: false };
  for (const p of pieces) {
    last = m.push(p);
    text += last.text;
    if (last.done) break;
  }
  return { text, last };
}

describe('StopMatcher', () => {
  it('holds back a stop string split across pieces and never emits it', () => {
    const m = new StopMatcher({ stop: ['\nUser:'] });
    expect(m.push('Hel')).toEqual({ text: 'Hel', done: false });
    expect(m.push('lo\nUser:')).toEqual({ text: 'lo', done: true, reason: 'stop', stop: '\nUser:' });
  });

  it('holds a possible start until the next piece settles it', () => {
    const m = new StopMatcher({ stop: ['\nUser:'] });
    expect(m.push('Hello\nUs')).toEqual({ text: 'Hello', done: false });
    expect(m.held).toBe('\nUs');
    expect(m.push('e')).toEqual({ text: '', done: false });
    expect(m.push('s are')).toEqual({ text: '\nUses are', done: false });
    expect(m.held).toBe('');
  });

  it('releases held text on flush when generation ends for another reason', () => {
    const m = new StopMatcher({ stop: ['</s>'] });
    expect(m.push('done </')).toEqual({ text: 'done ', done: false });
    expect(m.flush()).toBe('</');
    expect(m.done).toBe(true);
    expect(() => m.push('x')).toThrow(EngineError);
  });

  it('cuts at a stop string that arrives whole inside one piece', () => {
    const m = new StopMatcher({ stop: ['###'] });
    expect(feed(m, ['a ### b'])).toEqual({ text: 'a ', last: { text: 'a ', done: true, reason: 'stop', stop: '###' } });
  });

  it('can stop at the very start', () => {
    const m = new StopMatcher({ stop: ['\n\n'] });
    expect(m.push('\n')).toEqual({ text: '', done: false });
    expect(m.push('\nmore')).toEqual({ text: '', done: true, reason: 'stop', stop: '\n\n' });
  });

  it('picks the stop string that completes first, the longer one on a tie', () => {
    expect(feed(new StopMatcher({ stop: ['abcd', 'bc'] }), ['abcd']).last).toMatchObject({ text: 'a', stop: 'bc' });
    expect(feed(new StopMatcher({ stop: ['c', 'abc'] }), ['xabc']).last).toMatchObject({ text: 'x', stop: 'abc' });
  });

  it('ends on an end-of-generation token, releasing held text and dropping the token text', () => {
    const m = new StopMatcher({ stop: ['\nUser:'], eogTokens: new Set([2, 151645]) });
    expect(m.pushToken(10, 'Bye\n')).toEqual({ text: 'Bye', done: false });
    expect(m.pushToken(151645, '<|im_end|>')).toEqual({ text: '\n', done: true, reason: 'eog', token: 151645 });
    expect(m.done).toBe(true);
  });

  it('reports the same end with no text for pieces after it', () => {
    const m = new StopMatcher({ stop: ['x'] });
    m.push('ax');
    expect(m.push('more')).toEqual({ text: '', done: true, reason: 'stop', stop: 'x' });
    expect(m.pushToken(3, 'y')).toEqual({ text: '', done: true, reason: 'stop', stop: 'x' });
  });

  it('passes text straight through without stop strings', () => {
    const m = new StopMatcher({ eogTokens: new Set([0]) });
    expect(m.pushToken(5, 'any \nUser: text')).toEqual({ text: 'any \nUser: text', done: false });
    expect(m.pushToken(0, '')).toEqual({ text: '', done: true, reason: 'eog', token: 0 });
  });

  it('rejects empty stop strings', () => {
    expect(() => new StopMatcher({ stop: ['ok', ''] })).toThrow(/non-empty/);
  });

  it('gives the same output however the text is split', () => {
    const rng = new Mt19937(21);
    const alphabet = 'ab\n:U';
    const stops = ['\nU:', 'aab', 'b\n\n', 'ba:'];
    for (let trial = 0; trial < 300; trial++) {
      const len = 1 + Math.floor(rng.nextDouble() * 30);
      let text = '';
      for (let i = 0; i < len; i++) text += alphabet[Math.floor(rng.nextDouble() * alphabet.length)];

      const byChar = new StopMatcher({ stop: stops });
      const expected = feed(byChar, [...text]);
      const pieces: string[] = [];
      for (let i = 0; i < text.length; ) {
        const n = 1 + Math.floor(rng.nextDouble() * 6);
        pieces.push(text.slice(i, i + n));
        i += n;
      }
      const chunked = new StopMatcher({ stop: stops });
      const got = feed(chunked, pieces);
      const tail = got.last.done ? '' : chunked.flush();
      const expectedTail = expected.last.done ? '' : byChar.flush();
      expect(got.text + tail).toBe(expected.text + expectedTail);
      expect(got.last.done).toBe(expected.last.done);
      if (expected.last.done) expect((got.last as { stop: string }).stop).toBe((expected.last as { stop: string }).stop);
      // Nothing emitted ever contains a stop string.
      for (const s of stops) expect(got.text + tail).not.toContain(s);
    }
  });
});
