import { EngineError } from '../errors';
import { JsonRecognizer, type ByteRecognizer } from './json-constraint';
import type { ChatTemplate } from '../tokenizer/chat-template';
import { compareBytes, compileJsonSchema, compileJsonValueSchema, enc, type JsonGrammar } from './json-schema';

/**
 * Forced tool calls (OpenAI's `tool_choice: "required"` or a named function): the output is held,
 * by constrained decoding, to calls written in the model's own tool-call format, each naming one of
 * the request's tools with arguments that follow its parameters schema, then end of generation.
 * llama.cpp does the same with a grammar built per format (`common/chat.cpp`), not lazy when the
 * call is required. The API's parser (`apps/api/src/openai/tool-calls.ts`) reads the calls back.
 *
 * Formats, found in the chat template's text (what the model was trained to write):
 * - `hermes`: Qwen2.5/Qwen3 (and their MoE), QwQ, Hermes, Granite:
 *   `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`, calls one per line
 * - `llama3`: Llama 3.1-3.3: `{"name": "f", "parameters": {...}}` as the whole answer (one call)
 * - `deepseek-v3.1`: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`
 * - `deepseek-r1`: DeepSeek V3/R1: as V3.1 with `function<｜tool▁sep｜>f\n```json\n{...}\n```` per call
 * - `kimi`: Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}<|tool_call_end|>…<|tool_calls_section_end|>`
 * - `mistral` (Mixtral 8x22B, Nemo, Small, Ministral, Devstral), in one of three layouts read from a
 *   call the template renders: a JSON list `[TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "…"}]`
 *   (with or without the id: 9 letters or digits), or calls `[TOOL_CALLS]f[ARGS]{...}`, with
 *   `[CALL_ID]id` before `[ARGS]` in Small 3.2's
 * - `xml` (Qwen3-Coder and its MoE, Qwen3.5, Nemotron 3, StepFun 3.5, Seed-OSS):
 *   `<tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>` (Seed-OSS's
 *   tag is `seed:tool_call`), values as GLM's; the layout is read from a rendered call
 * - `glm` (GLM-4.5/4.6/4.7, Ling, Laguna): `<tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n…</tool_call>`,
 *   a value raw text for a string parameter, else JSON; the whitespace between the parts differs
 *   between templates (none in GLM-4.7-Flash's) and is read from a call the template renders
 *   (`toolCallSyntax`)
 *
 * - `harmony` (gpt-oss): one message to the function, its recipient in the channel part,
 *   `<|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}`, or in the role part as
 *   the template writes earlier calls, ` to=functions.f<|channel|>commentary json<|message|>{...}`
 *   (the generation prompt ends with `<|start|>assistant`); then the output ends (gpt-oss ends a
 *   call with `<|call|>` and waits for its result)
 *
 * - `tool-calls-list` (MiniMax-M1, Apriel): `<tool_calls>[{"name": "f", "arguments": {...}}, …]</tool_calls>`,
 *   or one call object per line inside `<tool_calls>` (the layout read from a rendered call)
 * - `minimax` (MiniMax-M2): `<minimax:tool_call>\n<invoke name="f"><parameter name="k">v</parameter>…</invoke>\n</minimax:tool_call>`,
 *   values as GLM's, the whitespace read from a rendered call (each forced call in its own wrapper)
 *
 * Others (a template without tools, layouts not recognized) are refused with an error naming the reason: `auto` still works there.
 */
export type ToolCallFormat = 'hermes' | 'llama3' | 'deepseek-v3.1' | 'deepseek-r1' | 'kimi' | 'mistral' | 'glm' | 'xml' | 'minimax' | 'tool-calls-list' | 'harmony';

/** The format a chat template writes tool calls in, or a reason forced calls cannot be written. */
export function toolCallFormat(template: string): ToolCallFormat | { unsupported: string } {
  if (template.includes('<minimax:tool_call>') && template.includes('<invoke name=')) return 'minimax';
  if (template.includes('<｜tool▁call▁begin｜>')) return template.includes('```json') ? 'deepseek-r1' : 'deepseek-v3.1';
  if (template.includes('<|tool_call_begin|>')) return 'kimi';
  if (template.includes('<arg_key>')) return 'glm';
  if (template.includes('<|channel|>') && template.includes('to=')) return 'harmony';
  if (template.includes('<tool_calls>')) return 'tool-calls-list';
  if (template.includes('<function=') && template.includes('<parameter=')) return 'xml';
  if (template.includes('<tool_call>')) {
    if (template.includes('{"name": "') || template.includes('{\\"name\\": \\"') || template.includes('"name": <function-name>')) return 'hermes';
    return { unsupported: 'a <tool_call> body that is not Hermes JSON' };
  }
  if (template.includes('<|start_header_id|>') && template.includes('"parameters"')) return 'llama3';
  if (template.includes('[TOOL_CALLS]')) return 'mistral';
  return { unsupported: 'no known tool-call format in the chat template' };
}

/** The whitespace a GLM-style template writes between the parts of a call. */
export interface GlmLayout {
  /** After the name, before the first key (or the end). */
  afterName: string;
  /** Between `</arg_key>` and `<arg_value>`. */
  keyValue: string;
  /** Between `</arg_value>` and the next `<arg_key>`. */
  betweenPairs: string;
  /** Between the last `</arg_value>` and `</tool_call>`. */
  beforeClose: string;
}

/** How a Mistral template writes calls: a JSON list (after `gap`, ids or not), or `name[ARGS]` calls (ids or not). */
export type MistralLayout = { list: true; gap: string; ids: boolean } | { list: false; ids: boolean };

/** The tag and whitespace of a Qwen3-Coder-style call (`<tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>…`). */
export interface XmlLayout {
  /** `tool_call`, or Seed-OSS's `seed:tool_call`. */
  tag: string;
  afterOpen: string;
  afterFunction: string;
  /** Around a value, inside `<parameter=k>…</parameter>`. */
  valueLead: string;
  valueTrail: string;
  between: string;
  beforeFunctionClose: string;
  beforeClose: string;
}

/** The whitespace of a MiniMax-M2 call: after `<minimax:tool_call>`, after the name's `">`, between pairs, before `</invoke>`, before the wrapper's close. */
export interface MinimaxLayout {
  afterOpen: string;
  afterName: string;
  between: string;
  beforeInvokeClose: string;
  beforeClose: string;
}

/** A `<tool_calls>` list: a JSON list (`list`) or one call per line, with ids or not (Apriel's), and the whitespace inside the tags. */
export interface CallsListLayout {
  list: boolean;
  ids: boolean;
  afterOpen: string;
  beforeClose: string;
}

/** A format, with the layout GLM-style, XML-style, MiniMax, `<tool_calls>` and Mistral templates differ in. */
export type ToolCallSyntax =
  | { format: Exclude<ToolCallFormat, 'glm' | 'mistral' | 'xml' | 'minimax' | 'tool-calls-list'> }
  | { format: 'tool-calls-list'; layout: CallsListLayout }
  | { format: 'glm'; layout: GlmLayout }
  | { format: 'xml'; layout: XmlLayout }
  | { format: 'minimax'; layout: MinimaxLayout }
  | { format: 'mistral'; layout: MistralLayout };

const PROBE_NAME = 'kail_probe_fn';

/**
 * How a chat template writes tool calls: the format found in its text and, for GLM-style ones,
 * the layout read from a call it renders (two arguments, so every gap shows).
 */
export function toolCallSyntax(t: ChatTemplate): ToolCallSyntax | { unsupported: string } {
  const format = toolCallFormat(t.source);
  if (typeof format !== 'string') return format;
  if (format !== 'glm' && format !== 'mistral' && format !== 'xml' && format !== 'minimax' && format !== 'tool-calls-list') return { format };
  const tools = [{ type: 'function', function: { name: PROBE_NAME, parameters: { type: 'object', properties: { kail_a: { type: 'string' }, kail_b: { type: 'integer' } } } } }];
  let text: string;
  try {
    text = t.render(
      [
        { role: 'user', content: 'probe' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call00001', type: 'function', function: { name: PROBE_NAME, arguments: { kail_a: 'kail_x', kail_b: 2 } } }] },
        { role: 'tool', content: 'ok', tool_call_id: 'call00001', name: PROBE_NAME },
      ],
      { addGenerationPrompt: false, tools },
    );
  } catch (e) {
    return { unsupported: `a template that fails on a call (${(e as Error).message})` };
  }
  if (format === 'mistral') {
    const list = new RegExp(`\\[TOOL_CALLS\\](\\s*)\\[\\{"name": "${PROBE_NAME}", "arguments": \\{"kail_a": "kail_x", "kail_b": 2\\}(, "id": "call00001")?\\}\\]`).exec(text);
    if (list) return { format, layout: { list: true, gap: list[1], ids: !!list[2] } };
    const calls = new RegExp(`\\[TOOL_CALLS\\]${PROBE_NAME}(\\[CALL_ID\\]call00001)?\\[ARGS\\]\\{`).exec(text);
    if (calls) return { format, layout: { list: false, ids: !!calls[1] } };
    return { unsupported: 'Mistral calls in a layout not recognized' };
  }
  if (format === 'tool-calls-list') {
    const call = `\\{"name": "${PROBE_NAME}", "arguments": \\{"kail_a": "kail_x", "kail_b": 2\\}(, "id": "call00001")?\\}`;
    const x = new RegExp(`<tool_calls>(\\s*)(\\[)?${call}(\\])?(\\s*)</tool_calls>`).exec(text);
    if (!x || !!x[2] !== !!x[4]) return { unsupported: 'a <tool_calls> list in a layout not recognized' };
    return { format, layout: { list: !!x[2], ids: !!x[3], afterOpen: x[1], beforeClose: x[5] } };
  }
  if (format === 'minimax') {
    const x = new RegExp(
      `<minimax:tool_call>(\\s*)<invoke name="${PROBE_NAME}">(\\s*)<parameter name="kail_a">kail_x</parameter>(\\s*)<parameter name="kail_b">2</parameter>(\\s*)</invoke>(\\s*)</minimax:tool_call>`,
    ).exec(text);
    if (!x) return { unsupported: 'MiniMax <invoke> calls in a layout not recognized' };
    return { format, layout: { afterOpen: x[1], afterName: x[2], between: x[3], beforeInvokeClose: x[4], beforeClose: x[5] } };
  }
  if (format === 'xml') {
    const x = new RegExp(
      `<((?:seed:)?tool_call)>(\\s*)<function=${PROBE_NAME}>(\\s*)<parameter=kail_a>(\\s*)kail_x(\\s*)</parameter>(\\s*)<parameter=kail_b>\\s*2\\s*</parameter>(\\s*)</function>(\\s*)</\\1>`,
    ).exec(text);
    if (!x) return { unsupported: 'XML-style <function=...> calls in a layout not recognized' };
    return { format, layout: { tag: x[1], afterOpen: x[2], afterFunction: x[3], valueLead: x[4], valueTrail: x[5], between: x[6], beforeFunctionClose: x[7], beforeClose: x[8] } };
  }
  const m = new RegExp(
    `<tool_call>${PROBE_NAME}(\\s*)<arg_key>kail_a</arg_key>(\\s*)<arg_value>kail_x</arg_value>(\\s*)<arg_key>kail_b</arg_key>\\s*<arg_value>2</arg_value>(\\s*)</tool_call>`,
  ).exec(text);
  if (!m) return { unsupported: 'GLM-style calls in a layout not recognized' };
  return { format, layout: { afterName: m[1], keyValue: m[2], betweenPairs: m[3], beforeClose: m[4] } };
}

/**
 * A program over output bytes. `choice` picks among byte strings (none a prefix of another) and
 * goes on at the chosen one's target; `text` is any bytes up to and including its terminator;
 * `json` a value of the grammar (a number or literal ends at the first byte that cannot continue
 * it, which the next step takes); `end` accepts the text so far and, when `more` >= 0, lets it go
 * on at step `more` (another call).
 */
export type PatternStep =
  | { op: 'lit'; bytes: Uint8Array }
  | { op: 'json'; grammar: JsonGrammar }
  | { op: 'text'; until: Uint8Array; fail: Int32Array }
  /** Free text that may end the output, or go on at step `next` once `until` appears (a lazy constraint's trigger). */
  | { op: 'lazy'; until: Uint8Array; fail: Int32Array; next: number }
  /** Exactly `count` bytes, each one marked in `allowed` (256 entries). */
  | { op: 'chars'; allowed: Uint8Array; count: number }
  | { op: 'choice'; values: Uint8Array[]; targets: number[] }
  | { op: 'jump'; to: number }
  | { op: 'end'; more: number };

export interface OutputPattern {
  steps: PatternStep[];
}

/** The recognizer of a pattern's texts (see ByteRecognizer). */
export class PatternRecognizer implements ByteRecognizer {
  private pc = 0;
  /** Bytes matched in the current lit or choice step, or of a text step's terminator. */
  private off = 0;
  /** A choice's candidates still matching: [lo, hi) of its sorted values. */
  private lo = 0;
  private hi = 0;
  /** One JSON recognizer per json step. */
  private readonly json: (JsonRecognizer | undefined)[];

  constructor(readonly pattern: OutputPattern) {
    this.json = pattern.steps.map((s) => (s.op === 'json' ? new JsonRecognizer(s.grammar) : undefined));
    this.enter(0);
  }

  get done(): boolean {
    return this.pattern.steps[this.pc].op === 'end';
  }

  /** Done, or in a lazy step's free text (the output may end there). */
  mayEnd(): boolean {
    const op = this.pattern.steps[this.pc].op;
    return op === 'end' || op === 'lazy';
  }

  assign(o: PatternRecognizer): void {
    this.pc = o.pc;
    this.off = o.off;
    this.lo = o.lo;
    this.hi = o.hi;
    const j = this.json[this.pc];
    if (j) j.assign(o.json[this.pc]!);
  }

  feed(bytes: Uint8Array): boolean {
    for (let i = 0; i < bytes.length; i++) if (!this.byte(bytes[i])) return false;
    return true;
  }

  stringRoom(): number {
    const j = this.json[this.pc];
    return j && this.pattern.steps[this.pc].op === 'json' ? j.stringRoom() : -1;
  }

  /** Goes to step pc, following jumps, and sets up its state. */
  private enter(pc: number): void {
    const steps = this.pattern.steps;
    for (let hops = 0; steps[pc].op === 'jump'; hops++) {
      if (hops > steps.length) throw new EngineError('KAIL_E_INTERNAL', 'output pattern: a loop of jumps');
      pc = (steps[pc] as { to: number }).to;
    }
    this.pc = pc;
    this.off = 0;
    const s = steps[pc];
    if (s.op === 'choice') {
      this.lo = 0;
      this.hi = s.values.length;
    } else if (s.op === 'json') this.json[pc]!.reset();
  }

  private byte(b: number): boolean {
    const s = this.pattern.steps[this.pc];
    switch (s.op) {
      case 'lit':
        if (s.bytes[this.off] !== b) return false;
        if (++this.off === s.bytes.length) this.enter(this.pc + 1);
        return true;
      case 'json': {
        const j = this.json[this.pc]!;
        if (!j.byte(b)) {
          // A top-level number or literal that b does not continue ended before b (the
          // recognizer is then done), and b belongs to the next step.
          if (!j.done) return false;
          this.enter(this.pc + 1);
          return this.byte(b);
        }
        if (j.done) this.enter(this.pc + 1);
        return true;
      }
      case 'chars':
        if (!s.allowed[b]) return false;
        if (++this.off === s.count) this.enter(this.pc + 1);
        return true;
      case 'text':
      case 'lazy': {
        // Knuth-Morris-Pratt over the terminator.
        let k = this.off;
        while (k > 0 && s.until[k] !== b) k = s.fail[k - 1];
        if (s.until[k] === b) k++;
        if (k === s.until.length) this.enter(s.op === 'lazy' ? s.next : this.pc + 1);
        else this.off = k;
        return true;
      }
      case 'choice': {
        const off = this.off;
        let lo = this.lo;
        while (lo < this.hi && s.values[lo][off] < b) lo++;
        let hi = lo;
        while (hi < this.hi && s.values[hi][off] === b) hi++;
        if (lo === hi) return false;
        this.lo = lo;
        this.hi = hi;
        this.off = off + 1;
        if (hi - lo === 1 && s.values[lo].length === off + 1) this.enter(s.targets[lo]);
        return true;
      }
      case 'end':
        if (s.more < 0) return false;
        this.enter(s.more);
        return this.byte(b);
      case 'jump':
        throw new EngineError('KAIL_E_INTERNAL', 'output pattern: stopped on a jump');
    }
  }
}

/** A request's tools, as OpenAI sends them. */
export interface ToolDef {
  type?: string;
  function: { name: string; parameters?: unknown };
}

export interface ForcedToolCalls {
  /** The one tool to call (a named tool_choice), or undefined for any of them ("required"). */
  name?: string;
  /** Several calls allowed (OpenAI's parallel_tool_calls, default true). */
  parallel: boolean;
  /**
   * The prompt left the model's reasoning open: any text up to `</think>` first (the reasoning,
   * free), then a blank line, then the calls (llama.cpp's reasoning-then-grammar).
   */
  reasoning?: boolean;
}

/** What comes before a constrained answer: with an open reasoning block, its free text, `</think>` and a blank line. */
const REASONING_END = '</think>';
function reasoningFirst(b: Builder, reasoning: boolean | undefined): void {
  if (!reasoning) return;
  b.textUntil(REASONING_END);
  b.lit('\n\n');
}

type ChoiceStep = Extract<PatternStep, { op: 'choice' }>;

/** A choice step over texts sorted bytewise; throws when one is a prefix of another (the choice would be ambiguous). */
function choiceStep(branches: { text: string; target: number }[], what = 'tools'): ChoiceStep {
  const order = branches.map((b) => ({ ...b, bytes: enc(b.text) })).sort((a, b) => compareBytes(a.bytes, b.bytes));
  for (let i = 1; i < order.length; i++) {
    const a = order[i - 1].bytes;
    const b = order[i].bytes;
    if (a.length <= b.length && compareBytes(a, b.subarray(0, a.length)) === 0)
      throw new EngineError('KAIL_E_INVALID_ARG', `${what}: ${JSON.stringify(order[i - 1].text)} and ${JSON.stringify(order[i].text)} cannot be told apart`);
  }
  return { op: 'choice', values: order.map((o) => o.bytes), targets: order.map((o) => o.target) };
}

/**
 * Output that is exactly one of `choices` (vLLM's guided_choice): non-empty strings, none a prefix
 * of another; with `reasoning` (the prompt left <think> open), free reasoning up to </think> and a
 * blank line first.
 */
export function choicePattern(choices: readonly string[], reasoning = false): OutputPattern {
  if (choices.length === 0 || choices.some((c) => c.length === 0)) throw new EngineError('KAIL_E_INVALID_ARG', 'output choices must be non-empty strings, at least one');
  const b = new Builder();
  reasoningFirst(b, reasoning);
  const unique = [...new Set(choices)];
  b.steps.push(choiceStep(unique.map((text) => ({ text, target: b.steps.length + 1 })), 'output choices'), { op: 'end', more: -1 });
  return { steps: b.steps };
}

/** Knuth-Morris-Pratt's failure table of a terminator. */
function kmpFailure(u: Uint8Array): Int32Array {
  const fail = new Int32Array(u.length);
  for (let i = 1, k = 0; i < u.length; i++) {
    while (k > 0 && u[i] !== u[k]) k = fail[k - 1];
    if (u[i] === u[k]) k++;
    fail[i] = k;
  }
  return fail;
}

/**
 * Tool calls held to their schemas only once the model starts one (tool_choice auto with strict
 * tools, llama.cpp's lazy grammar): free text that may end the output, until the format's call
 * marker, then the calls as forcedToolCallPattern writes them (to any of the tools). Undefined for
 * a format whose calls start without a marker of their own (Llama 3's bare JSON, harmony).
 */
export function lazyToolCallPattern(syntax: ToolCallSyntax, tools: readonly ToolDef[], parallel: boolean): OutputPattern | undefined {
  if (syntax.format === 'llama3' || syntax.format === 'harmony') return undefined;
  const forced = forcedToolCallPattern(syntax, tools, { parallel });
  const first = forced.steps[0];
  const starts = first.op === 'lit' ? [first.bytes] : first.op === 'choice' ? first.values : [];
  const text = (u: Uint8Array) => Buffer.from(u).toString('utf8');
  // (A choice's openings that start elsewhere, such as GLM's "\n<tool_call>", are the free text's.)
  const marker = CALL_MARKERS.find((m) => starts.some((v) => text(v).startsWith(m)));
  if (!marker) return undefined;
  const cut = enc(marker).length;
  // Step 0 waits for the marker, then goes on at a copy of the old first step without the marker's
  // bytes (appended at the end); the old steps move one on and stay as they were (a jump back
  // to the first call, for another one, still writes the marker).
  const shift = (t: number) => t + 1;
  const steps: PatternStep[] = forced.steps.map((st) => {
    switch (st.op) {
      case 'choice':
        return { ...st, targets: st.targets.map(shift) };
      case 'jump':
        return { ...st, to: shift(st.to) };
      case 'end':
        return st.more >= 0 ? { ...st, more: shift(st.more) } : st;
      default:
        return st;
    }
  });
  const next = steps.length + 1;
  const rest: PatternStep[] = [];
  if (first.op === 'lit') {
    if (first.bytes.length > cut) rest.push({ op: 'lit', bytes: first.bytes.subarray(cut) });
    rest.push({ op: 'jump', to: 2 });
  } else {
    const c = steps[0] as ChoiceStep;
    const kept = c.values.map((v, i) => ({ v, t: c.targets[i] })).filter(({ v }) => text(v).startsWith(marker));
    const values = kept.map(({ v }) => v.subarray(cut));
    if (values.length === 1 && values[0].length === 0) rest.push({ op: 'jump', to: kept[0].t });
    else if (values.some((v) => v.length === 0)) return undefined;
    else rest.push({ op: 'choice', values, targets: kept.map(({ t }) => t) });
  }
  const u = enc(marker);
  return { steps: [{ op: 'lazy', until: u, fail: kmpFailure(u), next }, ...steps, ...rest] };
}

/** The markers a lazy pattern waits for: what opens a call (or a list of them) in each format that has one. */
const CALL_MARKERS = ['<tool_call>', '<｜tool▁calls▁begin｜>', '<|tool_calls_section_begin|>', '[TOOL_CALLS]', '<minimax:tool_call>', '<tool_calls>'];

/** Builds a pattern step by step; `choice` branches are filled in after it. */
class Builder {
  readonly steps: PatternStep[] = [];
  lit(s: string): void {
    if (s.length) this.steps.push({ op: 'lit', bytes: enc(s) });
  }
  /** Any text, then `until`. */
  textUntil(until: string): void {
    const u = enc(until);
    this.steps.push({ op: 'text', until: u, fail: kmpFailure(u) });
  }
  /** A choice among texts (none a prefix of another), each going on at its target (filled in later when -1). */
  choice(branches: { text: string; target: number }[]): ChoiceStep {
    const step = choiceStep(branches);
    this.steps.push(step);
    return step;
  }
  /**
   * The end of a call: with `parallel`, `again` (going on at step `target`, another call) or
   * `close`; else `close`. Then the end of the output.
   */
  againOrClose(again: string, target: number, close: string, parallel: boolean): void {
    if (parallel) this.choice([{ text: again, target }, { text: close, target: this.next + 1 }]);
    else this.lit(close);
    this.steps.push({ op: 'end', more: -1 });
  }
  /**
   * One branch per (text, grammar): the text, then a JSON object of the grammar; every branch then
   * goes on after them. Texts are sorted bytewise and must not be prefixes of one another.
   */
  calls(branches: { text: string; grammar: JsonGrammar }[], before?: () => void): void {
    const choice = this.choice(branches.map((b, i) => ({ text: b.text, target: i })));
    const grammars = choice.targets.map((i) => branches[i].grammar);
    const jumps: { op: 'jump'; to: number }[] = [];
    grammars.forEach((grammar, i) => {
      choice.targets[i] = this.steps.length;
      before?.();
      this.steps.push({ op: 'json', grammar });
      const j = { op: 'jump' as const, to: -1 };
      jumps.push(j);
      this.steps.push(j);
    });
    for (const j of jumps) j.to = this.steps.length;
  }
  get next(): number {
    return this.steps.length;
  }
}

/**
 * The texts of a call written as key/value pairs (GLM's `<arg_key>`/`<arg_value>`, Qwen3-Coder's
 * `<function=f><parameter=k>`): the call's openers (alternatives), what comes before and after the
 * name, a pair's parts, and the closings.
 */
interface PairLayout {
  opens: string[];
  beforeName: string;
  afterName: string;
  /** A pair: keyOpen, the key, keyEnd + valueOpen, the value, valueClose. */
  keyOpen: string;
  keyEnd: string;
  valueOpen: string;
  valueClose: string;
  /** Between one pair's valueClose and the next keyOpen. */
  between: string;
  /** The end of a call without pairs (after afterName), and after the last pair. */
  closeEmpty: string;
  closeAfterPairs: string;
}

function glmPairs(l: GlmLayout): PairLayout {
  return {
    opens: ['<tool_call>', '\n<tool_call>'],
    beforeName: '',
    afterName: l.afterName,
    keyOpen: '<arg_key>',
    keyEnd: '</arg_key>',
    valueOpen: `${l.keyValue}<arg_value>`,
    valueClose: '</arg_value>',
    between: l.betweenPairs,
    closeEmpty: '</tool_call>',
    closeAfterPairs: `${l.beforeClose}</tool_call>`,
  };
}

function xmlPairs(l: XmlLayout): PairLayout {
  const close = `</${l.tag}>`;
  return {
    opens: [`<${l.tag}>`, `\n<${l.tag}>`],
    beforeName: `${l.afterOpen}<function=`,
    afterName: `>${l.afterFunction}`,
    keyOpen: '<parameter=',
    keyEnd: '>',
    valueOpen: l.valueLead,
    valueClose: `${l.valueTrail}</parameter>`,
    between: l.between,
    closeEmpty: `</function>${l.beforeClose}${close}`,
    closeAfterPairs: `${l.beforeFunctionClose}</function>${l.beforeClose}${close}`,
  };
}

function minimaxPairs(l: MinimaxLayout): PairLayout {
  const close = `${l.beforeClose}</minimax:tool_call>`;
  return {
    opens: ['<minimax:tool_call>', '\n<minimax:tool_call>'],
    beforeName: `${l.afterOpen}<invoke name="`,
    afterName: `">${l.afterName}`,
    keyOpen: '<parameter name="',
    keyEnd: '">',
    valueOpen: '',
    valueClose: '</parameter>',
    between: l.between,
    closeEmpty: `</invoke>${close}`,
    closeAfterPairs: `${l.beforeInvokeClose}</invoke>${close}`,
  };
}

/**
 * Calls as key/value pairs (PairLayout). Declared keys come in the schema's order, each at most
 * once, optional ones skippable and required ones not (as the JSON grammar's objects); a value is
 * raw text for a string parameter, else JSON; a tool without declared parameters takes any keys,
 * with raw-text values. The name is chosen together with what follows it (the first key or the
 * end), so names that are prefixes of one another stay apart.
 */
function pairCalls(b: Builder, tools: readonly ToolDef[], l: PairLayout, parallel: boolean): void {
  const start = b.next;
  const opens = b.choice(l.opens.map((text) => ({ text, target: -1 })));
  opens.targets = opens.targets.map(() => b.next);
  b.lit(l.beforeName);
  const nameChoice = b.choice([]); // filled in once every tool's steps are placed
  const names: { text: string; target: number }[] = [];
  /** Targets that mean "the end of the call", set once its step is placed. */
  const END = -2;
  const pair = (first: boolean, key: string) => `${first ? l.afterName : l.between}${l.keyOpen}${key}${l.keyEnd}${l.valueOpen}`;
  const close = (first: boolean) => (first ? l.afterName + l.closeEmpty : l.closeAfterPairs);
  const choices: ChoiceStep[] = [];
  for (const t of tools) {
    const name = t.function.name;
    const params = (t.function.parameters ?? {}) as { properties?: unknown; required?: unknown };
    const declared = params.properties !== null && typeof params.properties === 'object' ? Object.entries(params.properties as Record<string, unknown>) : [];
    const required = new Set(Array.isArray(params.required) ? params.required : []);
    if (declared.length === 0) {
      // Any keys: (key text, value text) pairs, then the end.
      const key = b.next;
      b.textUntil(l.keyEnd);
      b.lit(l.valueOpen);
      b.textUntil(l.valueClose);
      choices.push(b.choice([
        { text: `${l.between}${l.keyOpen}`, target: key },
        { text: close(false), target: END },
      ]));
      names.push({ text: `${name}${l.afterName}${l.keyOpen}`, target: key }, { text: name + close(true), target: END });
      continue;
    }
    // What may come at position p: each later key up to the next required one, and the end when
    // no required key is left.
    const branchesAt = (p: number) => {
      const out: { text: string; target: number }[] = [];
      for (let k = p; k < declared.length; k++) {
        out.push({ text: pair(p === 0, declared[k][0]), target: k });
        if (required.has(declared[k][0])) return out;
      }
      out.push({ text: close(p === 0), target: END });
      return out;
    };
    // Position choices 1..n (position 0's is folded into the name), then one value block per key.
    const at: ChoiceStep[] = [];
    for (let p = 1; p <= declared.length; p++) at[p] = b.choice(branchesAt(p));
    const valueAt: number[] = [];
    declared.forEach(([key, schema], k) => {
      valueAt[k] = b.next;
      if ((schema as { type?: unknown } | null)?.type === 'string') b.textUntil(l.valueClose);
      else {
        let grammar: JsonGrammar;
        try {
          grammar = compileJsonValueSchema(schema);
        } catch (e) {
          throw new EngineError('KAIL_E_INVALID_ARG', `tool '${name}' parameter '${key}': ${(e as Error).message}`);
        }
        b.steps.push({ op: 'json', grammar });
        b.lit(l.valueClose);
      }
      b.steps.push({ op: 'jump', to: b.steps.indexOf(at[k + 1]) });
    });
    const resolve = (target: number) => (target === END ? END : valueAt[target]);
    for (let p = 1; p <= declared.length; p++) {
      at[p].targets = at[p].targets.map(resolve);
      choices.push(at[p]);
    }
    for (const x of branchesAt(0)) names.push({ text: name + x.text, target: resolve(x.target) });
  }
  const after = b.next;
  for (const c of choices) c.targets = c.targets.map((t) => (t === END ? after : t));
  Object.assign(nameChoice, choiceStep(names.map((n) => ({ text: n.text, target: n.target === END ? after : n.target }))));
  b.steps.push({ op: 'end', more: parallel ? start : -1 });
}

/**
 * A JSON response (`response_format`) after a reasoning model's open reasoning: any text up to
 * `</think>` and a blank line, then the JSON (so the reasoning is free and the answer is held).
 */
export function reasoningThenJsonPattern(grammar: JsonGrammar): OutputPattern {
  const b = new Builder();
  reasoningFirst(b, true);
  b.steps.push({ op: 'json', grammar }, { op: 'end', more: -1 });
  return { steps: b.steps };
}

/** Letters and digits: a Mistral call id's characters. */
const ALNUM = (() => {
  const a = new Uint8Array(256);
  for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789') a[c.charCodeAt(0)] = 1;
  return a;
})();

/** Mistral's calls, in the template's layout (see MistralLayout); ids are 9 letters or digits. */
function mistralCalls(b: Builder, defs: { name: string; grammar: JsonGrammar }[], l: MistralLayout, parallel: boolean): void {
  const id = (before: string, after: string) => {
    b.lit(before);
    b.steps.push({ op: 'chars', allowed: ALNUM, count: 9 });
    b.lit(after);
  };
  if (l.list) {
    b.lit(`[TOOL_CALLS]${l.gap}[{"name": "`);
    const call = b.next;
    b.calls(defs.map((d) => ({ text: `${JSON.stringify(d.name).slice(1, -1)}", "arguments": `, grammar: d.grammar })));
    if (l.ids) id(', "id": "', '"}');
    else b.lit('}');
    // Another call, or the end of the list.
    b.againOrClose(', {"name": "', call, ']', parallel);
    return;
  }
  const start = b.next;
  b.lit('[TOOL_CALLS]');
  if (l.ids) b.calls(defs.map((d) => ({ text: `${d.name}[CALL_ID]`, grammar: d.grammar })), () => id('', '[ARGS]'));
  else b.calls(defs.map((d) => ({ text: `${d.name}[ARGS]`, grammar: d.grammar })));
  b.steps.push({ op: 'end', more: parallel ? start : -1 });
}

/**
 * The pattern of forced calls of `tools` in `format`: names as written in the template's format,
 * arguments following each tool's parameters (widened where the schema uses keywords the grammar
 * does not enforce, as a tool's schema describes the function rather than promising the caller).
 */
export function forcedToolCallPattern(syntax: ToolCallSyntax, tools: readonly ToolDef[], choice: ForcedToolCalls): OutputPattern {
  const format = syntax.format;
  if (!tools.length) throw new EngineError('KAIL_E_INVALID_ARG', 'tool_choice requires a call, but the request has no tools');
  tools.forEach((t, i) => {
    const f = (t as { function?: unknown } | null)?.function;
    if (f === null || typeof f !== 'object' || Array.isArray(f)) throw new EngineError('KAIL_E_INVALID_ARG', `tools[${i}] must be an object with a 'function' object`);
  });
  const chosen = choice.name === undefined ? tools : tools.filter((t) => t.function.name === choice.name);
  if (!chosen.length) throw new EngineError('KAIL_E_INVALID_ARG', `tool_choice names the function '${choice.name}', which is not among the request's tools`);
  const names = new Set<string>();
  const defs = chosen.map((t, i) => {
    const name = t.function?.name;
    if (typeof name !== 'string' || name.length === 0) throw new EngineError('KAIL_E_INVALID_ARG', `tools[${i}].function.name must be a non-empty string`);
    if (names.has(name)) throw new EngineError('KAIL_E_INVALID_ARG', `tools: the function name '${name}' appears twice`);
    names.add(name);
    let grammar: JsonGrammar;
    try {
      grammar = compileJsonSchema(t.function.parameters ?? { type: 'object' }, { widen: true });
    } catch (e) {
      throw new EngineError('KAIL_E_INVALID_ARG', `tool '${name}' parameters: ${(e as Error).message}`);
    }
    return { name, grammar };
  });
  const b = new Builder();
  reasoningFirst(b, choice.reasoning);
  // A name inside a JSON string is written escaped; in a DeepSeek header, as it is.
  const jsonName = (n: string) => JSON.stringify(n).slice(1, -1);
  switch (format) {
    case 'hermes': {
      const start = b.next;
      b.lit('<tool_call>\n{"name": "');
      b.calls(defs.map((d) => ({ text: `${jsonName(d.name)}", "arguments": `, grammar: d.grammar })));
      b.lit('}\n</tool_call>');
      const end = b.next;
      b.steps.push({ op: 'end', more: choice.parallel ? end + 1 : -1 });
      b.lit('\n');
      b.steps.push({ op: 'jump', to: start });
      break;
    }
    case 'llama3':
      // One call: Llama 3's format has no way to write several.
      b.lit('{"name": "');
      b.calls(defs.map((d) => ({ text: `${jsonName(d.name)}", "parameters": `, grammar: d.grammar })));
      b.lit('}');
      b.steps.push({ op: 'end', more: -1 });
      break;
    case 'deepseek-v3.1':
    case 'deepseek-r1': {
      const r1 = format === 'deepseek-r1';
      const head = r1 ? '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' : '<｜tool▁call▁begin｜>';
      b.lit('<｜tool▁calls▁begin｜>' + head);
      const call = b.next;
      b.calls(defs.map((d) => ({ text: r1 ? `${d.name}\n\`\`\`json\n` : `${d.name}<｜tool▁sep｜>`, grammar: d.grammar })));
      b.lit(r1 ? '\n```<｜tool▁call▁end｜>' : '<｜tool▁call▁end｜>');
      // Another call's header, or the closing marker.
      b.againOrClose(head, call, '<｜tool▁calls▁end｜>', choice.parallel);
      break;
    }
    case 'kimi': {
      const head = '<|tool_call_begin|>functions.';
      b.lit('<|tool_calls_section_begin|>' + head);
      const call = b.next;
      // The header is the call's id: functions.<name>:<index>.
      const index = compileJsonValueSchema({ type: 'integer' });
      b.calls(defs.map((d) => ({ text: `${d.name}:`, grammar: d.grammar })), () => {
        b.steps.push({ op: 'json', grammar: index });
        b.lit('<|tool_call_argument_begin|>');
      });
      b.lit('<|tool_call_end|>');
      b.againOrClose(head, call, '<|tool_calls_section_end|>', choice.parallel);
      break;
    }
    case 'mistral':
      mistralCalls(b, defs, syntax.layout, choice.parallel);
      break;
    case 'harmony':
      // One call (the model waits for its result), with the recipient in either part of the header.
      b.calls(
        defs.flatMap((d) => [
          { text: `<|channel|>commentary to=functions.${d.name} <|constrain|>json<|message|>`, grammar: d.grammar },
          { text: ` to=functions.${d.name}<|channel|>commentary json<|message|>`, grammar: d.grammar },
        ]),
      );
      b.steps.push({ op: 'end', more: -1 });
      break;
    case 'glm':
      pairCalls(b, chosen, glmPairs(syntax.layout), choice.parallel);
      break;
    case 'xml':
      pairCalls(b, chosen, xmlPairs(syntax.layout), choice.parallel);
      break;
    case 'minimax':
      pairCalls(b, chosen, minimaxPairs(syntax.layout), choice.parallel);
      break;
    case 'tool-calls-list': {
      const l = syntax.layout;
      b.lit(`<tool_calls>${l.afterOpen}${l.list ? '[' : ''}{"name": "`);
      const call = b.next;
      b.calls(defs.map((d) => ({ text: `${jsonName(d.name)}", "arguments": `, grammar: d.grammar })));
      if (l.ids) {
        // An id: any JSON string (Apriel's template writes the call's own).
        b.lit(', "id": ');
        b.steps.push({ op: 'json', grammar: compileJsonValueSchema({ type: 'string' }) });
      }
      b.lit('}');
      // Another call (after a comma in a list, on the next line otherwise), or the closing tag.
      b.againOrClose(l.list ? ', {"name": "' : '\n{"name": "', call, `${l.list ? ']' : ''}${l.beforeClose}</tool_calls>`, choice.parallel);
      break;
    }
  }
  return { steps: b.steps };
}
