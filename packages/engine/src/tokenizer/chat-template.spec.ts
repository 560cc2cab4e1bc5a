import { CHATML_TEMPLATE, ChatTemplate } from './chat-template';
import type { ChatMessage } from './chat-template';
import { bpeMetadata } from './test-vocabs';
import { Tokenizer } from './tokenizer';

const messages: ChatMessage[] = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Hi!' },
  { role: 'assistant', content: 'Hello.' },
  { role: 'user', content: 'Bye?' },
];

// Qwen2's template, as in its GGUF
const QWEN2_TEMPLATE =
  "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Meta-Llama-3-8B-Instruct's template
const LLAMA3_TEMPLATE =
  "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

describe('chat templates', () => {
  it('renders a ChatML template, with and without the generation prompt', () => {
    const t = new ChatTemplate(QWEN2_TEMPLATE);
    expect(t.render(messages)).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n' +
        '<|im_start|>user\nBye?<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(t.render([{ role: 'user', content: 'Hi!' }], { addGenerationPrompt: false })).toBe(
      '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n',
    );
  });

  it('renders a Llama-3 template with bos_token, dropping the BOS the tokenizer adds itself', () => {
    const tokens = { bosToken: '<|begin_of_text|>', eosToken: '<|end_of_text|>' };
    const expected =
      '<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n';
    const msgs = [{ role: 'user', content: '  Hi!\n' }];
    expect(new ChatTemplate(LLAMA3_TEMPLATE, tokens).render(msgs)).toBe('<|begin_of_text|>' + expected);
    expect(new ChatTemplate(LLAMA3_TEMPLATE, { ...tokens, addBos: true }).render(msgs)).toBe(expected);
  });

  it('falls back to ChatML (llama.cpp\'s default) when the model has no template', () => {
    const expected = '<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n';
    for (const source of [undefined, '', 'chatml']) {
      const t = new ChatTemplate(source);
      expect(t.usesDefault).toBe(true);
      expect(t.source).toBe(CHATML_TEMPLATE);
      expect(t.render([{ role: 'user', content: 'Hi!' }])).toBe(expected);
    }
  });

  it('takes the template and BOS/EOS texts from the model, and its output tokenizes with parseSpecial', () => {
    const meta = bpeMetadata(
      [['H', 'i']],
      [{ text: '<|begin_of_text|>' }, { text: '<|start_header_id|>' }, { text: '<|end_header_id|>' }, { text: '<|eot_id|>' }],
      {
        'tokenizer.ggml.pre': 'llama-bpe',
        'tokenizer.ggml.bos_token_id': 257,
        'tokenizer.ggml.eos_token_id': 260,
        'tokenizer.chat_template': LLAMA3_TEMPLATE,
      },
    );
    const tok = Tokenizer.fromMetadata(meta);
    const t = ChatTemplate.fromTokenizer(tok);
    const prompt = t.render([{ role: 'user', content: 'Hi' }]);
    expect(prompt.startsWith('<|start_header_id|>')).toBe(true); // BOS left to the tokenizer
    const ids = tok.tokenize(prompt, { addSpecial: true, parseSpecial: true });
    expect(ids.slice(0, 2)).toEqual([257, 258]);
    expect(ids.filter((id) => tok.vocab.isControl(id))).toEqual([257, 258, 259, 260, 258, 259]);
    expect(tok.detokenize(ids, { special: true })).toBe('<|begin_of_text|>' + prompt);
  });

  it('merges a system message into the first user turn when the template cannot show it, as llama.cpp does', () => {
    // google/gemma-7b-it and the expected text from llama.cpp's tests/test-chat-template.cpp
    const gemma = new ChatTemplate(
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
    );
    expect(gemma.caps).toMatchObject({ systemRole: false, stringContent: true, typedContent: false });
    expect(gemma.render(messages)).toBe(
      '<start_of_turn>user\nBe brief.\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n' +
        '<start_of_turn>user\nBye?<end_of_turn>\n<start_of_turn>model\n',
    );
    // a template that shows the system message keeps it; "developer" is a system message
    expect(new ChatTemplate(QWEN2_TEMPLATE).caps.systemRole).toBe(true);
    expect(new ChatTemplate(undefined).render([{ role: 'developer', content: 'D' }])).toBe(
      '<|im_start|>system\nD<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('turns content parts into text for templates that only take strings', () => {
    const parts = [{ type: 'text', text: 'a' }, { type: 'image' }, { type: 'text', text: 'b' }];
    expect(new ChatTemplate(undefined).render([{ role: 'user', content: parts }], { addGenerationPrompt: false })).toBe(
      '<|im_start|>user\na\nb<|im_end|>\n',
    );
  });

  it('passes tools and extra variables, and reports template errors', () => {
    const t = new ChatTemplate(
      "{% if tools %}{{ tools | length }} tools;{% endif %}{% if not enable_thinking %}no-think;{% endif %}{{ x }}",
    );
    expect(t.render([], { tools: [{ type: 'function' }], enableThinking: false, variables: { x: 'X' } })).toBe('1 tools;no-think;X');
    const strict = new ChatTemplate("{{ raise_exception('roles must alternate') }}");
    expect(() => strict.render(messages)).toThrow(/roles must alternate/);
    expect(() => new ChatTemplate('{% for %}')).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL' }));
  });

  it('renders a template that loops over tools unguarded in a chat without tools (as Python Jinja does)', () => {
    const t = new ChatTemplate("{%- for tool in tools %}[{{ tool.function.name }}]{%- endfor %}{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{%- endfor %}");
    const msgs = [{ role: 'user', content: 'hi' }];
    expect(t.render(msgs, { addGenerationPrompt: false })).toBe('user: hi');
    expect(t.render(msgs, { addGenerationPrompt: false, tools: [{ type: 'function', function: { name: 'f' } }] })).toBe('[f]user: hi');
  });

  it('finds what a template renders (caps) also when the template calls range()', () => {
    // It drops system messages, so the system text must be merged into the user's.
    const t = new ChatTemplate("{%- for i in range(messages|length) %}{%- if messages[i].role != 'system' %}<{{ messages[i].role }}>{{ messages[i].content }}{%- endif %}{%- endfor %}");
    expect(t.caps).toMatchObject({ systemRole: false, stringContent: true });
    const msgs = [{ role: 'system', content: 'S' }, { role: 'user', content: 'U' }];
    expect(t.render(msgs, { addGenerationPrompt: false })).toBe('<user>S\nU');
  });

  it("has Python's list.append and list.pop (Kimi-K2's template queues tool call ids with them)", () => {
    const t = new ChatTemplate(
      "{%- set q = namespace(ids=[]) -%}{%- for m in messages -%}{%- set _ = q.ids.append(m.content) -%}{%- endfor -%}" +
        "{{ q.ids | join(',') }}|{{ q.ids.length }}|{{ q.ids.pop(0) }}|{{ q.ids.pop() }}|{{ q.ids | join(',') }}|{{ q.ids.length }}",
    );
    const msgs = ['a', 'b', 'c', 'd'].map((content) => ({ role: 'user', content }));
    expect(t.render(msgs, { addGenerationPrompt: false })).toBe('a,b,c,d|4|a|d|b,c|2');
    expect(() => new ChatTemplate('{{ [].pop() }}').render(msgs)).toThrow(/pop from empty list/);
  });

  it("bounds range() (a model file's template must not hold the event loop) and keeps its Python semantics", () => {
    const t = new ChatTemplate('{% for i in range(3) %}{{ i }}{% endfor %}|{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}|{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}');
    expect(t.render([])).toBe('012|135|531');
    const runaway = new ChatTemplate('{% for i in range(100000000) %}x{% endfor %}');
    expect(() => runaway.render(messages)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/range\(\) of 100000000 items is over the chat template limit/) }));
  });

  // Expected texts below are Python Jinja's (jinja2 3.1) unless said otherwise.
  const py = (source: string, variables: Record<string, unknown> = {}) => new ChatTemplate(source).render([], { addGenerationPrompt: false, variables });

  it("prints lists, dicts and booleans as Python's repr, with |string, {{ }} and ~ (Apriel's and Functionary's tool|string)", () => {
    const tool = { name: 'f', required: true, default: null, enum: [1, 2.5], d: "it's", q: 'say "hi"\n' };
    const repr = `{'name': 'f', 'required': True, 'default': None, 'enum': [1, 2.5], 'd': "it's", 'q': 'say "hi"\\n'}`;
    expect(py("{{ tool|string }}|{{ tool }}|{{ [true, none] }}|{{ 'x' ~ [1] }}|{{ true }}|{{ ('a', 2) }}", { tool })).toBe(
      `${repr}|${repr}|[True, None]|x[1]|True|('a', 2)`,
    );
    // tojson stays JSON
    expect(py('{{ tool|tojson }}', { tool })).toBe('{"name": "f", "required": true, "default": null, "enum": [1, 2.5], "d": "it\'s", "q": "say \\"hi\\"\\n"}');
  });

  it('concatenates none and undefined beside a string as nothing, as llama.cpp does (firefunction adds an undefined `functions`)', () => {
    // Python raises here; llama.cpp's Jinja treats them as '' (its workaround for such templates)
    expect(py("{{ 'a' + n + 'b' ~ u ~ 'c' }}", { n: null })).toBe('abc');
  });

  it("applies filters to an undefined value as Python's Jinja does (Hermes's `param.description|trim`)", () => {
    expect(py("[{{ p.description|trim }}][{{ p.enum|length }}][{{ p.title|default }}][{{ p.x|upper }}][{% for k, v in p.props|items %}{{ k }}{% endfor %}][{{ p.examples|join(', ') }}][{{ p.x|string }}][{{ p.x|first }}]", { p: { type: 'string' } })).toBe(
      '[][0][][][][][][]',
    );
    expect(py("{{ p.x|default('d') }}", { p: {} })).toBe('d');
  });

  it("has dicts keyed by numbers (Seed-OSS's thinking-budget table)", () => {
    expect(py("{% set d = {0: 'zero', 512: 'half', 16384: 'max'} %}{{ d[512] }}|{{ 16384 in d }}|{{ d.get(0) }}|{% for k, v in d|dictsort(reverse=true) %}{{ k + 1 }}={{ v }},{% endfor %}|{% for k in d %}{{ k * 2 }},{% endfor %}|{{ d|tojson }}|{{ d }}")).toBe(
      `half|True|zero|16385=max,513=half,1=zero,|0,1024,32768,|{"0": "zero", "512": "half", "16384": "max"}|{0: 'zero', 512: 'half', 16384: 'max'}`,
    );
  });

  it("unpacks tuples in for loops (Functionary's `for field, name in [('maximum', 'Maximum'), …]`)", () => {
    expect(py("{% for field, label in [('maximum', 'Max'), ('minimum', 'Min')] %}{{ field }}={{ label }};{% endfor %}{{ [('a', 1)]|tojson }}")).toBe('maximum=Max;minimum=Min;[["a", 1]]');
  });

  it("has the min and max filters (MiniCPM5's template)", () => {
    expect(py("{{ [3, 1, 2]|min }}{{ [3, 1, 2]|max }}{{ ['b', 'A', 'c']|min }}{{ ['b', 'A', 'c']|max(case_sensitive=true) }}{{ [{'n': 2}, {'n': 1}]|min(attribute='n') }}|{{ []|max }}|")).toBe(
      "13Ac{'n': 1}||",
    );
  });

  it("has Python's str.format (Hunyuan's template builds its tokens with it), rsplit, find, count and strip with characters", () => {
    expect(py("{{ '<{}|{}>'.format('a', 1) }} {{ '{1}{0}{{x}}'.format('a', 'b') }} {{ '{n}!{0!r}'.format('s', n=2) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a b  c '.rsplit(None, 1) }}|{{ 'abcabc'.find('c') }}{{ 'abcabc'.find('c', 3) }}{{ 'abc'.find('x') }}|{{ 'abcabc'.count('bc') }}|{{ '\\n\\nhi\\n'.lstrip('\\n') }}|{{ 'xxhixy'.strip('xy') }}|{{ '--a--'.rstrip('-') }}|")).toBe(
      "<a|1> ba{x} 2!'s'|['a,b', 'c']|['  a b', 'c']|25-1|2|hi\n|hi|--a|",
    );
    expect(() => py("{{ '{:>4}'.format('a') }}")).toThrow(/format spec/);
  });

  it("passes tool call ids as 9 alphanumeric characters to templates that demand them (Mistral's), keeping calls and results paired", () => {
    const check = (what: string) => `{%- if ${what}|length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- endif %}`;
    const source =
      `{%- for m in messages %}{%- if m.tool_calls %}{%- for c in m.tool_calls %}${check('c.id')}[CALL {{ c.id }}]{%- endfor %}` +
      `{%- elif m.role == 'tool' %}${check('m.tool_call_id')}[RESULT {{ m.tool_call_id }}: {{ m.content }}]{%- else %}[{{ m.role }}: {{ m.content }}]{%- endif %}{%- endfor %}`;
    const chat = (ids: string[]): ChatMessage[] => [
      { role: 'user', content: 'Q' },
      { role: 'assistant', content: null, tool_calls: ids.map((id) => ({ id, type: 'function', function: { name: 'f', arguments: {} } })) },
      ...ids.map((id) => ({ role: 'tool', content: `R${id}`, tool_call_id: id })),
    ];
    const t = new ChatTemplate(source);
    expect(t.caps.shortToolCallIds).toBe(true);
    const ids = ['call_4f1c9a0b7e2d4c6a8b3e5f70', 'a1b2c3d4e'];
    const out = t.render(chat(ids), { addGenerationPrompt: false });
    const m = /^\[user: Q\]\[CALL ([A-Za-z0-9]{9})\]\[CALL a1b2c3d4e\]\[RESULT ([A-Za-z0-9]{9}): Rcall_4f1c9a0b7e2d4c6a8b3e5f70\]\[RESULT a1b2c3d4e: Ra1b2c3d4e\]$/.exec(out);
    expect(m?.[1]).toBe(m?.[2]);
    expect(t.render(chat(ids), { addGenerationPrompt: false })).toBe(out); // the same on every request
    // other templates see the ids as they are
    const plain = new ChatTemplate('{%- for m in messages %}{%- for c in m.tool_calls or [] %}[{{ c.id }}]{%- endfor %}{{ m.tool_call_id }}{%- endfor %}');
    expect(plain.caps.shortToolCallIds).toBe(false);
    expect(plain.render(chat(ids), { addGenerationPrompt: false })).toBe(`[${ids[0]}][${ids[1]}]${ids[0]}${ids[1]}`);
  });

  it("passes a call's arguments as JSON text to a template that prints them as they are (DeepSeek-R1's distills), as an object to the rest", () => {
    const chat: ChatMessage[] = [
      { role: 'user', content: 'Q' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: { city: 'Paris', n: 2 } } }] },
    ];
    const raw = new ChatTemplate('{%- for m in messages %}{%- for c in m.tool_calls or [] %}[{{ c.function.arguments }}]{%- endfor %}{%- endfor %}');
    expect(raw.caps.stringArguments).toBe(true);
    expect(raw.render(chat, { addGenerationPrompt: false })).toBe('[{"city":"Paris","n":2}]'); // not {'city': 'Paris', 'n': 2}
    const json = new ChatTemplate('{%- for m in messages %}{%- for c in m.tool_calls or [] %}[{{ c.function.arguments | tojson }}]{%- endfor %}{%- endfor %}');
    expect(json.caps.stringArguments).toBe(false);
    expect(json.render(chat, { addGenerationPrompt: false })).toBe('[{"city": "Paris", "n": 2}]');
    const pairs = new ChatTemplate('{%- for m in messages %}{%- for c in m.tool_calls or [] %}{%- for k, v in c.function.arguments.items() %}[{{ k }}={{ v }}]{%- endfor %}{%- endfor %}{%- endfor %}');
    expect(pairs.caps.stringArguments).toBe(false);
    expect(pairs.render(chat, { addGenerationPrompt: false })).toBe('[city=Paris][n=2]');
  });

  it("finds that a template needs non-null content when it reads the content of earlier tool-calling turns only (QwQ's)", () => {
    const t = new ChatTemplate(
      "{%- for m in messages %}{%- if m.role == 'assistant' %}{%- set content = m.content %}{%- if not loop.last %}{%- set content = m.content.split('</think>')[-1] %}{%- endif %}" +
        '<a>{{ content }}{%- for c in m.tool_calls or [] %}<call {{ c.function.name }}>{%- endfor %}{%- else %}<{{ m.role }}>{{ m.content }}{%- endif %}{%- endfor %}',
    );
    expect(t.caps.nonNullContent).toBe(true);
    const msgs: ChatMessage[] = [
      { role: 'user', content: 'Q' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: {} } }] },
      { role: 'tool', content: 'R', tool_call_id: 'c1' },
    ];
    expect(t.render(msgs, { addGenerationPrompt: false })).toBe('<user>Q<a><call f><tool>R');
  });
});

describe('chat templates in Ollama\'s Go format', () => {
  it('render through the same path: the tokenizer\'s BOS taken off, tools found by trial, think from enable_thinking, parse errors as bad arguments', () => {
    const src = '<s>{{ if .Tools }}[tools {{ len .Tools }}]{{ end }}{{ range .Messages }}<{{ .Role }}>{{ .Content }}{{ end }}{{ if .IsThinkSet }}{{ if .Think }}<think{{ with .ThinkLevel }} {{ . }}{{ end }}>{{ else }}<nothink>{{ end }}{{ end }}<assistant>';
    const t = new ChatTemplate(src, { bosToken: '<s>', addBos: true }, 'go');
    expect([t.format, t.source, t.usesDefault]).toEqual(['go', src, false]);
    const chat: ChatMessage[] = [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'Hi' }, { type: 'text', text: 'there' }] }];
    // (developer is system, parts are text joined by lines, the leading BOS is the tokenizer's to add.)
    expect(t.render(chat)).toBe('<system>Be brief.<user>Hi\nthere<assistant>');
    expect(t.render(chat, { variables: { enable_thinking: false } })).toBe('<system>Be brief.<user>Hi\nthere<nothink><assistant>');
    expect(t.render(chat, { variables: { reasoning_effort: 'high' } })).toBe('<system>Be brief.<user>Hi\nthere<think high><assistant>');
    expect(t.render(chat, { variables: { enable_thinking: true } })).toBe('<system>Be brief.<user>Hi\nthere<think><assistant>');
    const tool = { type: 'function', function: { name: 'f', description: 'd', parameters: { type: 'object', properties: {} } } };
    expect(t.render(chat, { tools: [tool] })).toBe('[tools 1]<system>Be brief.<user>Hi\nthere<assistant>');
    expect(t.caps.tools).toBe(false); // it counts them but never shows one
    expect(new ChatTemplate('{{ json .Tools }}{{ range .Messages }}{{ .Content }}{{ end }}', {}, 'go').caps.tools).toBe(true);
    expect(() => new ChatTemplate('{{ .Prompt ', {}, 'go')).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/^cannot parse the Ollama template: template: :1: unclosed action/) }));
    expect(() => new ChatTemplate('{{ index .Messages 5 }}', {}, 'go').render(chat)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/^chat template failed: .*index out of range/) }));
  });
});
