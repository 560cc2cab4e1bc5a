// The real chat templates llama.cpp keeps for its own tests (models/templates in the llama.cpp
// source that node-llama-cpp, a devDependency, ships as a git bundle): every one must render a
// plain chat; every one that shows tools must render a conversation with a call and its result;
// and where the engine can force a call in the template's format, the call the template itself
// writes for an earlier turn must be one the forced-call pattern accepts.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { forcedToolCallPattern, PatternRecognizer, toolCallSyntax, type ToolCallSyntax } from '../sampling/tool-call-grammar';
import { tempDir } from '../testing';
import { ChatTemplate, type ChatMessage } from './chat-template';

/** node-llama-cpp's git bundle of its llama.cpp source, found upward from here (its package exports no files). */
function findBundle(): string {
  for (let d = __dirname; ; d = path.dirname(d)) {
    const p = path.join(d, 'node_modules', 'node-llama-cpp', 'llama', 'gitRelease.bundle');
    if (fs.existsSync(p)) return p;
    if (path.dirname(d) === d) throw new Error('node-llama-cpp (a devDependency) is not installed: its llama/gitRelease.bundle holds the templates');
  }
}

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'get', description: 'Look something up', parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } } },
];
const question: ChatMessage = { role: 'user', content: 'What is the weather in Paris?' };
const call: ChatMessage = { role: 'assistant', content: null, tool_calls: [{ id: 'call_abc123', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris', days: 2 } } }] };
const plain: ChatMessage[] = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Hello' },
  { role: 'assistant', content: 'Hi there' },
  { role: 'user', content: 'How are you?' },
];
const withTools: ChatMessage[] = [
  { role: 'system', content: 'You are a helpful assistant.' },
  question,
  call,
  { role: 'tool', content: '{"temperature": 20}', tool_call_id: 'call_abc123', name: 'get_weather' },
  { role: 'assistant', content: 'It is 20 degrees in Paris.' },
  { role: 'user', content: 'Thanks' },
];
const OPENERS: Record<string, string[]> = {
  hermes: ['<tool_call>'],
  glm: ['<tool_call>'],
  xml: ['<tool_call>', '<seed:tool_call>'],
  llama3: ['{"name"'],
  kimi: ['<|tool_calls_section_begin|>'],
  mistral: ['[TOOL_CALLS]'],
  'deepseek-v3.1': ['<｜tool▁calls▁begin｜>'],
  'deepseek-r1': ['<｜tool▁calls▁begin｜>'],
  harmony: [' to=functions.'],
  minimax: ['<minimax:tool_call>'],
  'tool-calls-list': ['<tool_calls>'],
};

describe("llama.cpp's bundled chat templates", () => {
  const dir = tempDir('kail-templates-');
  let files: string[] = [];
  const load = (f: string) => new ChatTemplate(fs.readFileSync(path.join(dir, 'models', 'templates', f), 'utf8'), { bosToken: '<s>', eosToken: '</s>' });

  beforeAll(() => {
    const bare = path.join(dir, 'bare.git');
    execFileSync('git', ['clone', '--bare', '--quiet', findBundle(), bare]);
    const tar = execFileSync('git', ['--git-dir', bare, 'archive', 'HEAD', 'models/templates'], { maxBuffer: 64 << 20 });
    execFileSync('tar', ['-x', '-C', dir], { input: tar });
    files = fs.readdirSync(path.join(dir, 'models', 'templates')).filter((f) => f.endsWith('.jinja')).sort();
  }, 60_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  const failures = (f: (name: string, t: ChatTemplate) => string | null) => {
    const out: string[] = [];
    for (const name of files) {
      try {
        const why = f(name, load(name));
        if (why) out.push(`${name}: ${why}`);
      } catch (e) {
        out.push(`${name}: ${(e as Error).message.slice(0, 200)}`);
      }
    }
    return out;
  };

  it('render a plain chat, every one', () => {
    expect(files.length).toBeGreaterThanOrEqual(60);
    expect(failures((_, t) => (t.render(plain, { addGenerationPrompt: true }).includes('How are you?') ? null : 'the last message is missing'))).toEqual([]);
  });

  it('render a conversation with a tool call and its result, every one that shows tools', () => {
    let showing = 0;
    expect(
      failures((_, t) => {
        if (!t.caps.tools) return null; // the engine refuses tools for these, with a clear error
        showing++;
        const out = t.render(withTools, { addGenerationPrompt: true, tools });
        return out.includes('get_weather') && out.includes('Thanks') ? null : 'the call or the last message is missing';
      }),
    ).toEqual([]);
    expect(showing).toBeGreaterThanOrEqual(50);
  });

  it('write earlier calls that the forced-call pattern of their format accepts', () => {
    let forcible = 0;
    expect(
      failures((_, t) => {
        const syntax = toolCallSyntax(t);
        if ('unsupported' in syntax || !t.caps.tools) return null;
        forcible++;
        const full = Buffer.from(t.render(withTools.slice(1, 4), { addGenerationPrompt: false, tools }), 'utf8');
        const after = full.indexOf(Buffer.from(question.content as string)) + Buffer.byteLength(question.content as string);
        const found = OPENERS[syntax.format].map((o) => full.indexOf(Buffer.from(o), after)).filter((i) => i >= 0);
        if (!found.length) return `no ${OPENERS[syntax.format].join(' or ')} after the question`;
        let start = Math.min(...found);
        if ((syntax.format === 'glm' || syntax.format === 'xml' || syntax.format === 'minimax') && full[start - 1] === 0x0a) start--; // the newline some write before the opener
        const r = new PatternRecognizer(forcedToolCallPattern(syntax, tools, { parallel: true }));
        let n = start;
        let done = false;
        for (; n < full.length && r.feed(full.subarray(n, n + 1)); n++) done ||= r.done;
        return r.done || done ? null : `the pattern stops at ${JSON.stringify(full.subarray(start, n + 20).toString())}`;
      }),
    ).toEqual([]);
    expect(forcible).toBeGreaterThanOrEqual(20);
  });

  it("read MiniMax-M2's <invoke> calls as the minimax format, with the whitespace its template writes", () => {
    const t = load('MiniMax-M2.jinja');
    const syntax = toolCallSyntax(t);
    expect(syntax).toEqual({ format: 'minimax', layout: expect.objectContaining({ afterOpen: '\n' }) });
    // The call the template writes for the conversation is one the forced pattern accepts, whole.
    const full = Buffer.from(t.render(withTools.slice(1, 4), { addGenerationPrompt: false, tools }), 'utf8');
    // (The first wrapper is the system prompt's example; the call comes after the question.)
    const after = full.indexOf(Buffer.from(question.content as string));
    const start = full.indexOf(Buffer.from('<minimax:tool_call>'), after);
    const end = full.indexOf(Buffer.from('</minimax:tool_call>'), start) + '</minimax:tool_call>'.length;
    expect(start).toBeGreaterThan(0);
    const r = new PatternRecognizer(forcedToolCallPattern(syntax as ToolCallSyntax, tools, { parallel: false }));
    expect(r.feed(full.subarray(start, end))).toBe(true);
    expect(r.done).toBe(true);
  });

  it("give gpt-oss an earlier call turn's reasoning_content as its analysis message", () => {
    const t = load('openai-gpt-oss-120b.jinja');
    const turn: ChatMessage = { ...call, reasoning_content: 'They want Paris weather.' };
    const out = t.render([question, turn, withTools[3]], { addGenerationPrompt: true, tools });
    expect(out).toContain('<|start|>assistant<|channel|>analysis<|message|>They want Paris weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>');
    expect(out.endsWith('<|start|>assistant')).toBe(true);
  });
});
