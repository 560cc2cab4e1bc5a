import { EngineError } from '../errors';
import { drawTaskIndices, parseHellaswag, parseWinogrande, readMultipleChoice, selectHellaswag, selectWinogrande, wilson95, writeMultipleChoice } from './choice-scores';

describe("llama-perplexity's HellaSwag and Winogrande inputs", () => {
  it('draws the tasks llama-perplexity draws (std::mt19937(1) and libstdc++, checked with g++ 12)', () => {
    // g++ 12: a vector of 0..49; 12 times, uniform_int_distribution<size_t>(0, size - 1), erase it.
    const ids = Array.from({ length: 50 }, (_, i) => i);
    expect(selectHellaswag(ids, 12)).toEqual([20, 49, 35, 45, 0, 6, 15, 48, 8, 12, 4, 22]);
    // All tasks when asked for more: still in the drawn order, each once.
    const all = selectHellaswag(ids, 400);
    expect(all.slice(0, 3)).toEqual([20, 49, 35]);
    expect([...all].sort((a, b) => a - b)).toEqual(ids);
    // g++ 12: 0..1266, int(scale * rng() * size) in float with scale = 1 / (1.f + (float)rng.max()), swap-remove.
    const wg = Array.from({ length: 1267 }, (_, i) => i);
    expect(selectWinogrande(wg, 12)).toEqual([528, 1262, 911, 1178, 0, 161, 381, 1258, 184, 296, 116, 498]);
    expect(selectWinogrande(wg, 0)).toEqual(wg);
    expect(selectWinogrande(wg, 5000)).toEqual(wg);
  });

  it('reads a HellaSwag file, 6 lines a task, and names what is wrong with a bad one', () => {
    const task = ['Ctx: a man', '2', 'e0', 'e1', 'e2', 'e3'];
    expect(parseHellaswag([...task, ...task].join('\n') + '\n')).toHaveLength(2);
    expect(parseHellaswag(task.join('\n'))[0]).toEqual({ context: 'Ctx: a man', gold: 2, endings: ['e0', 'e1', 'e2', 'e3'] });
    expect(() => parseHellaswag(task.slice(0, 5).join('\n'), 'hs.txt')).toThrow('hs.txt: 5 lines; a HellaSwag file has 6 per task');
    expect(() => parseHellaswag('', 'hs.txt')).toThrow('hs.txt: 0 lines');
    expect(() => parseHellaswag(['c', '4', 'a', 'b', 'c', 'd'].join('\n'), 'hs.txt')).toThrow("hs.txt:2: the label must be 0, 1, 2 or 3 (the right ending), got '4'");
  });

  it("reads Winogrande's CSV as llama-perplexity does: quoted commas, the blank, answers 1 or 2", () => {
    const csv = [
      'index,sentence,option1,option2,answer',
      '0,Sarah was a much better surgeon than Maria so _ always got the easier cases.,Sarah,Maria,2',
      '1,"Because of the rain, _ stayed in.",the cat,the dog,1\r',
      '2,no blank,a,b,1',
      '3,a _ b,x,y,0',
    ].join('\n') + '\n';
    const { tasks, skipped } = parseWinogrande(csv);
    expect(tasks).toEqual([
      { first: 'Sarah was a much better surgeon than Maria so ', second: ' always got the easier cases.', choices: ['Sarah', 'Maria'], answer: 2 },
      { first: 'Because of the rain, ', second: ' stayed in.', choices: ['the cat', 'the dog'], answer: 1 },
    ]);
    expect(skipped).toEqual([
      { line: 1, why: "no '_' in the sentence" },
      { line: 4, why: "no '_' in the sentence" },
      { line: 5, why: "the answer must be 1 or 2, got '0'" },
    ]);
    expect(() => parseWinogrande('a,b\n', 'wg.csv')).toThrow('wg.csv: no Winogrande tasks');
    // A last line that no newline ends is left out, as llama.cpp's reader leaves it.
    expect(parseWinogrande(csv.slice(0, -1)).skipped.map((x) => x.line)).toEqual([1, 4]);
    expect(parseWinogrande(`${csv}4,x _ y,a,b,1`).tasks).toHaveLength(2);
  });

  it("gives llama-perplexity's Wilson interval", () => {
    const [a, b] = wilson95(50, 100);
    expect(a).toBeCloseTo(0.4038, 4);
    expect(b).toBeCloseTo(0.5962, 4);
  });

  it("reads llama-perplexity's multiple-choice file: all tasks in order, or those drawn, each at its offset; a damaged one is named", () => {
    const tasks = Array.from({ length: 7 }, (_, i) => ({ question: `Question ${i}: é?`, answers: Array.from({ length: 2 + (i % 4) }, (_, a) => `answer ${a}`), labels: Array.from({ length: 2 + (i % 4) }, (_, a) => (a === i % 2 ? 1 : 0)) }));
    const buf = writeMultipleChoice(tasks);
    expect(readMultipleChoice(buf, 0)).toEqual({ tasks, available: 7 });
    expect(readMultipleChoice(buf, 9).tasks).toEqual(tasks);
    const drawn = drawTaskIndices(7, 3);
    expect(readMultipleChoice(buf, 3).tasks).toEqual(drawn.map((i) => tasks[i]));
    expect(() => readMultipleChoice(buf.subarray(0, buf.length - 3), 0, 'mc.bin')).toThrow(/mc\.bin: task 7 \(at byte \d+\): the file ends inside mc2's labels/);
    expect(() => readMultipleChoice(buf.subarray(0, 10), 0, 'mc.bin')).toThrow('mc.bin: 7 tasks announced, but the file ends inside their offsets');
    expect(() => readMultipleChoice(Buffer.alloc(4), 0, 'mc.bin')).toThrow('mc.bin: no tasks');
    expect(() => readMultipleChoice(writeMultipleChoice([{ question: 'q', answers: ['a', ''], labels: [1, 0] }]), 0, 'mc.bin')).toThrow('mc.bin: task 1 (at byte 8): answer 2 is empty');
    const many = Buffer.concat([writeMultipleChoice([{ question: 'q', answers: [], labels: [] }]).subarray(0, 8), Buffer.from([1, 0, 0, 0, 113, 200, 0, 0, 0])]);
    expect(() => readMultipleChoice(many, 0, 'mc.bin')).toThrow('mc.bin: task 1 (at byte 8): 200 answers in mc1; at most 100');
  });

  it('reads damaged and random files of each kind with a clear error or a result, never another exception', () => {
    let x = 12345;
    const rnd = (n: number) => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) % n);
    const good = writeMultipleChoice(Array.from({ length: 5 }, (_, i) => ({ question: `q${i}`, answers: ['a', 'bb', 'ccc'], labels: [0, 1, 0] })));
    const hs = ['ctx', '1', 'a', 'b', 'c', 'd'].join('\n');
    const wg = '0,a _ b,x,y,1\n1,"c, _ d",p,q,2';
    const outcomes = { ok: 0, refused: 0 };
    const attempt = (f: () => unknown) => {
      try {
        f();
        outcomes.ok++;
      } catch (e) {
        if (!(e instanceof EngineError)) throw e;
        outcomes.refused++;
      }
    };
    for (let i = 0; i < 3000; i++) {
      const b = Buffer.from(good);
      for (let k = 0; k < 1 + rnd(4); k++) b[rnd(b.length)] = rnd(256);
      const cut = b.subarray(0, rnd(b.length + 1));
      attempt(() => readMultipleChoice(cut, rnd(4)));
      const noise = Buffer.from(Array.from({ length: rnd(64) }, () => rnd(256)));
      attempt(() => readMultipleChoice(noise, 0));
      const t = (i % 2 ? hs : wg).split('');
      for (let k = 0; k < 1 + rnd(3); k++) t[rnd(t.length)] = String.fromCharCode(rnd(128));
      attempt(() => parseHellaswag(t.join('')));
      attempt(() => parseWinogrande(t.join('')));
    }
    expect(outcomes.ok).toBeGreaterThan(100);
    expect(outcomes.refused).toBeGreaterThan(100);
  });
});
