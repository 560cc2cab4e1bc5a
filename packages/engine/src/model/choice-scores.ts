// llama-perplexity's HellaSwag and Winogrande scores (tools/perplexity/perplexity.cpp
// hellaswag_score, winogrande_score), computed as it computes them so the numbers compare: the same
// file layouts, the same task selection (std::mt19937 seeded 1, libstdc++'s distributions), the
// same tokenization (add_special, no special-token parsing) and the same per-candidate scores.
import { EngineError } from '../errors';
import { logprobs } from '../sampling/logprobs';
import { Mt19937 } from '../sampling/rng';
import { evaluateChoiceTasks, type ChoiceRows } from './choice-eval';
import type { EngineModel } from './model';

/** The lines of a text as std::getline reads them: split at '\n', no empty last line after a final '\n'. */
function getlines(text: string): string[] {
  const lines = text.split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** Mean log-probability of candidate c's tokens after the shared start. */
function meanLogprob(rows: ChoiceRows, cand: readonly number[], c: number, from: number, to: number): number {
  // Tokens from..to-1 are scored, each with the row of the position before it.
  let sum = 0;
  for (let j = from; j < to; j++) sum += logprobs(rows.row(c, j - 1), cand[j]).logprob;
  return sum / (to - from);
}

/** Wilson score interval of a proportion at 95%, as llama-perplexity prints it for HellaSwag. */
export function wilson95(correct: number, n: number): [number, number] {
  const za = 1.95996398454;
  const freq = correct / n;
  const z = (za * za) / n;
  const cnf = (z * Math.sqrt(n * (4 * freq * (1 - freq) + z))) / (za + za);
  return [(freq + z * 0.5 - cnf) / (1 + z), (freq + z * 0.5 + cnf) / (1 + z)];
}

export interface HellaswagTask {
  context: string;
  /** The index (0..3) of the right ending. */
  gold: number;
  endings: [string, string, string, string];
}

/**
 * llama-perplexity's HellaSwag file: 6 lines per task (the context, the right ending's index 0..3,
 * the four endings), as tools/perplexity's README says to extract them from hellaswag_val.jsonl.
 */
export function parseHellaswag(text: string, file = 'the HellaSwag file'): HellaswagTask[] {
  const lines = getlines(text);
  if (lines.length === 0 || lines.length % 6 !== 0) throw new EngineError('KAIL_E_INVALID_ARG', `${file}: ${lines.length} lines; a HellaSwag file has 6 per task (context, label 0-3, four endings)`);
  const tasks: HellaswagTask[] = [];
  for (let i = 0; i < lines.length; i += 6) {
    const label = lines[i + 1].trim();
    if (!/^[0-3]$/.test(label)) throw new EngineError('KAIL_E_INVALID_ARG', `${file}:${i + 2}: the label must be 0, 1, 2 or 3 (the right ending), got '${lines[i + 1].slice(0, 40)}'`);
    tasks.push({ context: lines[i], gold: Number(label), endings: [lines[i + 2], lines[i + 3], lines[i + 4], lines[i + 5]] });
  }
  return tasks;
}

/** The tasks llama-perplexity scores, in its order: n of them (all when n is larger) drawn at random without repeats. */
export function selectHellaswag<T>(tasks: readonly T[], n: number): T[] {
  const left = [...tasks];
  const rng = new Mt19937(1);
  const out: T[] = [];
  for (let i = 0; i < Math.min(n, tasks.length); i++) out.push(left.splice(rng.nextBelow(left.length), 1)[0]);
  return out;
}

export interface ChoiceRunOptions {
  /** Tokens one pass may hold (llama-perplexity's context: tasks share a pass while they fit). */
  tokensPerPass: number;
  onTask?: (done: number, total: number, line: string) => void;
}

export interface HellaswagResult {
  tasks: number;
  correct: number;
  /** acc_norm: the share of tasks whose right ending has the highest mean log-probability. */
  accuracy: number;
  /** Wilson 95% interval of accuracy. */
  interval: [number, number];
  seconds: number;
}

/** A HellaSwag task's ending scores (mean log-probability of each ending's tokens) and the pick: the first highest. */
export function hellaswagPick(cands: readonly (readonly number[])[], rows: ChoiceRows): { scores: number[]; pick: number } {
  const scores = cands.map((cand, c) => meanLogprob(rows, cand, c, rows.prefix, cand.length));
  let pick = 0;
  for (let c = 1; c < scores.length; c++) if (scores[c] > scores[pick]) pick = c;
  return { scores, pick };
}

/** llama-perplexity --hellaswag: acc_norm over `nTasks` tasks (its default 400) of the file's, drawn as it draws them. */
export async function hellaswagScore(model: EngineModel, all: readonly HellaswagTask[], nTasks: number, opts: ChoiceRunOptions): Promise<HellaswagResult> {
  const tasks = selectHellaswag(all, nTasks);
  const seqs = tasks.map((t) => t.endings.map((e) => model.tokenizer.tokenize(`${t.context} ${e}`, { addSpecial: true })));
  let correct = 0;
  const { seconds } = await evaluateChoiceTasks(model, seqs, {
    tokensPerPass: opts.tokensPerPass,
    onTask: (i, rows) => {
      if (hellaswagPick(seqs[i], rows).pick === tasks[i].gold) correct++;
      const [a, b] = wilson95(correct, i + 1);
      opts.onTask?.(i + 1, tasks.length, `${i + 1}\t${((100 * correct) / (i + 1)).toFixed(8)}%\t[${(100 * a).toFixed(4)}%, ${(100 * b).toFixed(4)}%]`);
    },
  });
  return { tasks: tasks.length, correct, accuracy: correct / tasks.length, interval: wilson95(correct, tasks.length), seconds };
}

export interface WinograndeTask {
  /** The sentence before and after the blank ('_'). */
  first: string;
  second: string;
  choices: [string, string];
  /** 1 or 2. */
  answer: number;
}

/**
 * llama-perplexity's Winogrande CSV (index,sentence,option1,option2,answer; e.g. the
 * winogrande-debiased-eval.csv of ikawrakow/winogrande-eval-for-llama.cpp): commas inside double
 * quotes do not separate, a quoted sentence loses its quotes. Lines it cannot read (the header, a
 * sentence without '_', an answer other than 1 or 2) are skipped and counted, as llama-perplexity
 * skips them. As its reader, a last line without a newline is left out (and since llama-perplexity's
 * -f drops a file's one trailing newline, `kail perplexity --winogrande` leaves out a file's last
 * line, as llama-perplexity does: the same tasks and the same random draw of them).
 */
export function parseWinogrande(text: string, file = 'the Winogrande file'): { tasks: WinograndeTask[]; skipped: { line: number; why: string }[] } {
  const tasks: WinograndeTask[] = [];
  const skipped: { line: number; why: string }[] = [];
  // (llama.cpp's loop stops at a line that ends the text without a newline, leaving it out.)
  text.split('\n').slice(0, -1).forEach((line, n) => {
    const commas: number[] = [];
    let quoted = false;
    for (let i = 0; i < line.length && commas.length < 4; i++) {
      if (!quoted) {
        if (line[i] === ',') commas.push(i);
        else if (line[i] === '"') quoted = true;
      } else if (line[i] === '"') quoted = false;
    }
    if (commas.length !== 4) return void skipped.push({ line: n + 1, why: 'not 5 comma-separated fields' });
    const [c0, c1, c2, c3] = commas;
    const sentence = line[c0 + 1] === '"' ? line.slice(c0 + 2, c1 - 1) : line.slice(c0 + 1, c1);
    const where = sentence.indexOf('_');
    if (where < 0) return void skipped.push({ line: n + 1, why: "no '_' in the sentence" });
    // (As istream >> int: leading blanks, then the digits; anything after them ignored.)
    const m = /^\s*([+-]?\d+)/.exec(line.slice(c3 + 1));
    const answer = m ? Number(m[1]) : NaN;
    if (answer !== 1 && answer !== 2) return void skipped.push({ line: n + 1, why: `the answer must be 1 or 2, got '${line.slice(c3 + 1, c3 + 21)}'` });
    tasks.push({ first: sentence.slice(0, where), second: sentence.slice(where + 1), choices: [line.slice(c1 + 1, c2), line.slice(c2 + 1, c3)], answer });
  });
  if (tasks.length === 0) throw new EngineError('KAIL_E_INVALID_ARG', `${file}: no Winogrande tasks (lines of index,sentence with _,option1,option2,answer 1 or 2)`);
  return { tasks, skipped };
}

/**
 * The task indices llama-perplexity's Winogrande and multiple-choice runs take: with 0 < n < count,
 * n drawn at random (std::mt19937(1), its float arithmetic, swap-remove); else all, in order.
 */
export function drawTaskIndices(count: number, n: number): number[] {
  const aux = Array.from({ length: count }, (_, i) => i);
  if (!(n > 0 && n < count)) return aux;
  const rng = new Mt19937(1);
  const scale = 2 ** -32; // 1 / (1.f + (float)UINT32_MAX)
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    // int(scale * rng() * aux.size()) in float; a draw that rounds up to 1 would index past the end.
    const j = Math.min(aux.length - 1, Math.trunc(Math.fround(Math.fround(Math.fround(rng.nextUint32()) * scale) * Math.fround(aux.length))));
    out.push(aux[j]);
    aux[j] = aux[aux.length - 1];
    aux.pop();
  }
  return out;
}

/** llama-perplexity's Winogrande selection (drawTaskIndices). */
export function selectWinogrande<T>(tasks: readonly T[], n: number): T[] {
  return drawTaskIndices(tasks.length, n).map((i) => tasks[i]);
}

export interface WinograndeResult {
  tasks: number;
  correct: number;
  accuracy: number;
  /** llama-perplexity's ± : 100 x sqrt(p (1 - p) / (n - 1)) in percent points (NaN below 2 tasks). */
  sigma: number;
  skippedLines: number;
  seconds: number;
}

/** Where llama-perplexity reads the logits row for flat index k of a two-candidate task: the shared start's, then candidate 0's, then 1's. */
function flatRow(rows: ChoiceRows, len0: number, k: number): Float32Array {
  const p = rows.prefix;
  if (k === 0) return rows.row(0, p - 1);
  if (k <= len0 - p) return rows.row(0, p + k - 1);
  return rows.row(1, p + k - (len0 - p) - 1);
}

/**
 * A Winogrande task's option scores and its pick (1 or 2), from its two token sequences and the
 * token counts of the sentence up to and with each option (`bases`).
 */
export function winograndePick(seqs: readonly (readonly number[])[], bases: readonly number[], rows: ChoiceRows): { score1: number; score2: number; result: number } {
  const [s0, s1] = seqs;
  const p = rows.prefix;
  // Past three tokens of its own on both sides, the choice words are left out of the score
  // (only what follows them counts); the last token is left out when more than one remains.
  const skipChoice = s0.length - p > 3 && s1.length - p > 3;
  // llama-perplexity reads the rows by a flat index over the task's logits (the shared start's
  // last row, candidate 0's rows, candidate 1's): kept so, so the scores are its. When the choice
  // is not skipped, candidate 1's first token is scored with candidate 0's last row (its FIXME).
  const score = (cand: readonly number[], nBase: number, li0: number) => {
    const last = cand.length - nBase > 1 ? 1 : 0;
    let sum = 0;
    let li = li0;
    // (In float, as llama-perplexity sums them.)
    for (let j = nBase - 1; j < cand.length - 1 - last; j++) sum = Math.fround(sum + logprobs(flatRow(rows, s0.length, li++), cand[j + 1]).logprob);
    return Math.fround(sum / (cand.length - nBase - last));
  };
  const nb1 = skipChoice ? bases[0] : p;
  const nb2 = skipChoice ? bases[1] : p;
  const score1 = score(s0, nb1, nb1 - p);
  const score2 = score(s1, nb2, s0.length - p + nb2 - p);
  return { score1, score2, result: score1 > score2 ? 1 : 2 };
}

/** llama-perplexity --winogrande: the share of tasks where the right option scores higher. */
export async function winograndeScore(model: EngineModel, parsed: { tasks: readonly WinograndeTask[]; skipped: readonly unknown[] }, nTasks: number, opts: ChoiceRunOptions): Promise<WinograndeResult> {
  const tasks = selectWinogrande(parsed.tasks, nTasks);
  const tok = (s: string) => model.tokenizer.tokenize(s, { addSpecial: true });
  const seqs = tasks.map((t) => [tok(t.first + t.choices[0] + t.second), tok(t.first + t.choices[1] + t.second)]);
  const bases = tasks.map((t) => [tok(t.first + t.choices[0]).length, tok(t.first + t.choices[1]).length]);
  let correct = 0;
  const { seconds } = await evaluateChoiceTasks(model, seqs, {
    tokensPerPass: opts.tokensPerPass,
    onTask: (i, rows) => {
      const { score1, score2, result } = winograndePick(seqs[i], bases[i], rows);
      if (result === tasks[i].answer) correct++;
      opts.onTask?.(i + 1, tasks.length, `${i + 1}\t${((100 * correct) / (i + 1)).toFixed(4)}\t${score1.toFixed(6).padStart(10)}  ${score2.toFixed(6).padStart(10)}  ${result}  ${tasks[i].answer}`);
    },
  });
  const pr = correct / tasks.length;
  return { tasks: tasks.length, correct, accuracy: pr, sigma: tasks.length > 1 ? 100 * Math.sqrt((pr * (1 - pr)) / (tasks.length - 1)) : NaN, skippedLines: parsed.skipped.length, seconds };
}

export interface MultipleChoiceTask {
  /** The question (or the text to continue). */
  question: string;
  answers: string[];
  /** 1 for a right answer, per answer (llama-perplexity scores the single-answer set, mc1). */
  labels: number[];
}

/**
 * llama-perplexity's --multiple-choice file (the binary ARC, MMLU and TruthfulQA sets of
 * ikawrakow/validation-datasets-for-llama.cpp): u32 task count, a u32 byte offset per task, then
 * the tasks: the question (u32 length, UTF-8 bytes), then two answer sets (mc1, single right
 * answer; mc2, not scored), each a u32 count (at most 100), the answers as strings and an i32
 * label each. Reads the tasks llama-perplexity would read for `nTasks` (0: all, in order; fewer:
 * drawn as drawTaskIndices draws them, each read at its offset). A damaged file is an error naming
 * the task; so is one with an empty question or answer, as llama-perplexity refuses those.
 */
export function readMultipleChoice(buf: Buffer, nTasks: number, file = 'the multiple-choice file'): { tasks: MultipleChoiceTask[]; available: number } {
  const bad = (why: string) => new EngineError('KAIL_E_INVALID_ARG', `${file}: ${why}`);
  if (buf.length < 4) throw bad('too short for a task count');
  const n = buf.readUInt32LE(0);
  if (n === 0) throw bad('no tasks');
  if (4 + 4 * n > buf.length) throw bad(`${n} tasks announced, but the file ends inside their offsets`);
  const readTask = (idx: number, at: number): { task: MultipleChoiceTask; end: number } => {
    let p = at;
    const where = `task ${idx + 1} (at byte ${at})`;
    const u32 = (what: string) => {
      if (p + 4 > buf.length) throw bad(`${where}: the file ends inside ${what}`);
      const v = buf.readUInt32LE(p);
      p += 4;
      return v;
    };
    const str = (what: string) => {
      const len = u32(`${what}'s length`);
      if (p + len > buf.length) throw bad(`${where}: ${what} of ${len} bytes runs past the end`);
      const v = buf.toString('utf8', p, p + len);
      p += len;
      return v;
    };
    const set = (name: string) => {
      const count = u32(`${name}'s answer count`);
      if (count > 100) throw bad(`${where}: ${count} answers in ${name}; at most 100`);
      const answers = Array.from({ length: count }, (_, i) => str(`${name} answer ${i + 1}`));
      const labels = Array.from({ length: count }, () => u32(`${name}'s labels`) | 0);
      return { answers, labels };
    };
    const question = str('the question');
    const mc1 = set('mc1');
    set('mc2');
    if (!question) throw bad(`${where}: the question is empty`);
    if (mc1.answers.length === 0) throw bad(`${where}: no answers`);
    const empty = mc1.answers.findIndex((a) => a === '');
    if (empty >= 0) throw bad(`${where}: answer ${empty + 1} is empty`);
    return { task: { question, ...mc1 }, end: p };
  };
  const tasks: MultipleChoiceTask[] = [];
  if (nTasks === 0 || nTasks >= n) {
    let at = 4 + 4 * n;
    for (let i = 0; i < n; i++) {
      const r = readTask(i, at);
      tasks.push(r.task);
      at = r.end;
    }
  } else for (const i of drawTaskIndices(n, nTasks)) tasks.push(readTask(i, buf.readUInt32LE(4 + 4 * i)).task);
  return { tasks, available: n };
}

/** Writes tasks in llama-perplexity's --multiple-choice layout (readMultipleChoice's), mc2 a copy of mc1. */
export function writeMultipleChoice(tasks: readonly MultipleChoiceTask[]): Buffer {
  const u32 = (v: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v >>> 0);
    return b;
  };
  const str = (v: string) => {
    const b = Buffer.from(v, 'utf8');
    return Buffer.concat([u32(b.length), b]);
  };
  const set = (t: MultipleChoiceTask) => Buffer.concat([u32(t.answers.length), ...t.answers.map(str), ...t.labels.map(u32)]);
  const bodies = tasks.map((t) => Buffer.concat([str(t.question), set(t), set(t)]));
  const offsets: number[] = [];
  let at = 4 + 4 * tasks.length;
  for (const b of bodies) {
    offsets.push(at);
    at += b.length;
  }
  return Buffer.concat([u32(tasks.length), ...offsets.map(u32), ...bodies]);
}

export interface MultipleChoiceResult {
  tasks: number;
  correct: number;
  accuracy: number;
  /** sqrt(p (1 - p) / (n - 1)), as llama-perplexity's ± (a fraction; NaN below 2 tasks). */
  sigma: number;
  /** What picking at random would score: tasks over answers. */
  chance: number;
  seconds: number;
}

/** llama-perplexity --multiple-choice: the share of tasks whose highest-scoring answer (mean log-probability, as HellaSwag's) is a right one. */
export async function multipleChoiceScore(model: EngineModel, tasks: readonly MultipleChoiceTask[], opts: ChoiceRunOptions): Promise<MultipleChoiceResult> {
  const seqs = tasks.map((t) => t.answers.map((a) => model.tokenizer.tokenize(`${t.question} ${a}`, { addSpecial: true })));
  let correct = 0;
  const { seconds } = await evaluateChoiceTasks(model, seqs, {
    tokensPerPass: opts.tokensPerPass,
    onTask: (i, rows) => {
      if (tasks[i].labels[hellaswagPick(seqs[i], rows).pick] === 1) correct++;
      opts.onTask?.(i + 1, tasks.length, `${i + 1}\t${((100 * correct) / (i + 1)).toFixed(8)}`);
    },
  });
  const n = tasks.length;
  const p = correct / n;
  const answers = tasks.reduce((a, t) => a + t.answers.length, 0);
  return { tasks: n, correct, accuracy: p, sigma: n > 1 ? Math.sqrt((p * (1 - p)) / (n - 1)) : NaN, chance: n / answers, seconds };
}
