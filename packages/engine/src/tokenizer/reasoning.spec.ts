import { ReasoningSplitter, splitReasoning } from './reasoning';

describe('splitReasoning', () => {
  it('takes a leading <think> block out of the answer', () => {
    expect(splitReasoning('<think>\nThe user greets.\n</think>\n\nHello!', false)).toEqual({ reasoning: 'The user greets.', content: 'Hello!' });
    expect(splitReasoning('  <think>a</think>b', false)).toEqual({ reasoning: 'a', content: 'b' });
    expect(splitReasoning('<think></think>\n\nHi', false)).toEqual({ reasoning: '', content: 'Hi' });
  });

  it('leaves text alone that does not open with the block, and takes only the first block', () => {
    expect(splitReasoning('Hello <think>x</think>', false)).toEqual({ reasoning: '', content: 'Hello <think>x</think>' });
    expect(splitReasoning('<thinking>no</thinking>', false)).toEqual({ reasoning: '', content: '<thinking>no</thinking>' });
    expect(splitReasoning('<think>a</think>b<think>c</think>', false)).toEqual({ reasoning: 'a', content: 'b<think>c</think>' });
    expect(splitReasoning('', false)).toEqual({ reasoning: '', content: '' });
  });

  it('starts in the block when the prompt opened it, and keeps a cut-off block as reasoning', () => {
    expect(splitReasoning('Let me see.\n</think>\n\n42', true)).toEqual({ reasoning: 'Let me see.', content: '42' });
    expect(splitReasoning('<think>Let me see, first', false)).toEqual({ reasoning: 'Let me see, first', content: '' });
    expect(splitReasoning('still thinking </thi', true)).toEqual({ reasoning: 'still thinking </thi', content: '' });
  });

  it('streams the same split in any chunking', () => {
    const texts: [string, boolean][] = [
      ['<think>\nStep one.\nStep two. </think>\n\nThe answer is 4.', false],
      ['\n\n<think>a < b and </thin k></think>  ok', false],
      ['Opened by the template.</think>Done', true],
      ['No reasoning here, <think> later.', false],
      ['<think>never closed  ', false],
    ];
    let seed = 5;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
    for (const [text, open] of texts) {
      const whole = splitReasoning(text, open);
      for (let trial = 0; trial < 50; trial++) {
        const s = new ReasoningSplitter(open);
        let reasoning = '';
        let content = '';
        for (let i = 0; i < text.length; ) {
          const n = 1 + Math.floor(rnd() * 6);
          const out = s.push(text.slice(i, i + n));
          reasoning += out.reasoning;
          content += out.content;
          i += n;
        }
        const end = s.finish();
        expect({ reasoning: reasoning + end.reasoning, content: content + end.content }).toEqual(whole);
      }
    }
  });
});
