import { GoTemplateError } from './go-template';
import { OllamaTemplate } from './ollama-template';
import type { ChatMessage } from './chat-template';

// Written for these tests in the style of Ollama's llama3.1 and qwen2.5 templates.
const LLAMA3 = `{{- if or .System .Tools }}<|start_header_id|>system<|end_header_id|>
{{- if .System }}

{{ .System }}
{{- end }}
{{- if .Tools }}

You may call these functions: {{ json $.Tools }}
{{- end }}<|eot_id|>
{{- end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 }}
{{- if eq .Role "user" }}<|start_header_id|>user<|end_header_id|>

{{ .Content }}<|eot_id|>{{ if $last }}<|start_header_id|>assistant<|end_header_id|>

{{ end }}
{{- else if eq .Role "assistant" }}<|start_header_id|>assistant<|end_header_id|>
{{- if .ToolCalls }}

{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "parameters": {{ .Function.Arguments }}}{{ end }}
{{- else }}

{{ .Content }}
{{- end }}{{ if not $last }}<|eot_id|>{{ end }}
{{- else if eq .Role "tool" }}<|start_header_id|>ipython<|end_header_id|>

{{ .Content }}<|eot_id|>{{ if $last }}<|start_header_id|>assistant<|end_header_id|>

{{ end }}
{{- end }}
{{- end }}`;

const QWEN25 = `{{- if .Messages }}
{{- if or .System .Tools }}<|im_start|>system
{{- if .System }}
{{ .System }}
{{- end }}
{{- if .Tools }}

# Tools

<tools>
{{- range .Tools }}
{"type": "function", "function": {{ .Function }}}
{{- end }}
</tools>
{{- end }}<|im_end|>
{{ end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|im_start|>user
{{ .Content }}<|im_end|>
{{ else if eq .Role "assistant" }}<|im_start|>assistant
{{ if .Content }}{{ .Content }}
{{- else if .ToolCalls }}<tool_call>
{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}
{{ end }}</tool_call>
{{- end }}{{ if not $last }}<|im_end|>
{{ end }}
{{- else if eq .Role "tool" }}<|im_start|>user
<tool_response>
{{ .Content }}
</tool_response><|im_end|>
{{ end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ end }}
{{- end }}
{{- else }}
{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{ if .Prompt }}<|im_start|>user
{{ .Prompt }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ end }}{{ .Response }}{{ if .Response }}<|im_end|>{{ end }}`;


const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Get the weather',
      parameters: {
        type: 'object',
        properties: { unit: { type: ['string', 'null'], enum: ['c', 'f'], extra: 'dropped' }, city: { type: 'string', description: 'City' } },
        required: ['city'],
      },
    },
  },
];
const TOOLS_JSON =
  '[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","required":["city"],' +
  '"properties":{"city":{"type":"string","description":"City"},"unit":{"type":["string","null"],"enum":["c","f"]}}}}}]';
const TOOL_CHAT: ChatMessage[] = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"unit":"c","city":"Paris"}' } }] },
  { role: 'tool', content: '18C', tool_call_id: 'c1', name: 'get_weather' },
];

const LEGACY = '{{ if .System }}<|system|>\n{{ .System }}<|end|>\n{{ end }}{{ if .Prompt }}<|user|>\n{{ .Prompt }}<|end|>\n{{ end }}<|assistant|>\n{{ .Response }}<|end|>\n';

describe('Ollama templates', () => {
  it('renders a llama3-style template with .Messages, tools and tool calls', () => {
    const t = new OllamaTemplate(LLAMA3);
    expect(t.usesMessages).toBe(true);
    expect(t.render({ messages: TOOL_CHAT, tools: TOOLS })).toBe(
      '<|start_header_id|>system<|end_header_id|>\n\nBe brief.\n\nYou may call these functions: ' +
        TOOLS_JSON +
        '<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>' +
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city":"Paris","unit":"c"}}<|eot_id|>' +
        '<|start_header_id|>ipython<|end_header_id|>\n\n18C<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
    expect(t.render({ messages: [{ role: 'user', content: 'Hi' }] })).toBe(
      '<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
  });

  it('renders a qwen2.5-style template: $last from slice, tools printed through String()', () => {
    const t = new OllamaTemplate(QWEN25);
    expect(t.render({ messages: TOOL_CHAT, tools: TOOLS })).toBe(
      '<|im_start|>system\nBe brief.\n\n# Tools\n\n<tools>\n{"type": "function", "function": ' +
        TOOLS_JSON.slice('[{"type":"function","function":'.length, -2) +
        '}\n</tools><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n' +
        '{"name": "get_weather", "arguments": {"city":"Paris","unit":"c"}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
    );
    // a prefilled assistant turn is left open
    expect(t.render({ messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hel' }] })).toBe(
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHel',
    );
  });

  it('renders a legacy template turn by turn, the last turn cut after .Response', () => {
    const t = new OllamaTemplate(LEGACY);
    expect(t.usesMessages).toBe(false);
    const chat: ChatMessage[] = [
      { role: 'system', content: 'S' },
      { role: 'user', content: 'U1' },
      { role: 'assistant', content: 'A1' },
      { role: 'user', content: 'U2' },
    ];
    const first = '<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n';
    expect(t.render({ messages: chat })).toBe(first + '<|user|>\nU2<|end|>\n<|assistant|>\n');
    expect(t.render({ messages: [...chat, { role: 'assistant', content: 'Sure' }] })).toBe(first + '<|user|>\nU2<|end|>\n<|assistant|>\nSure');
    // a system message after a turn closes it
    expect(
      t.render({
        messages: [
          { role: 'user', content: 'U1' },
          { role: 'assistant', content: 'A1' },
          { role: 'system', content: 'S2' },
          { role: 'user', content: 'U2' },
          { role: 'tool', content: 'ignored' },
        ],
      }),
    ).toBe('<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n<|system|>\nS2<|end|>\n<|user|>\nU2<|end|>\n<|assistant|>\n');
  });

  it('cuts inside a branch and drops an action whose pipeline loses its arguments', () => {
    const t = new OllamaTemplate('{{ if .Prompt }}[{{ .Prompt }}]{{ .Response }}{{ "after" }}{{ end }}-{{ .Response | printf "%s" }}');
    expect(t.render({ messages: [{ role: 'user', content: 'p' }, { role: 'assistant', content: 'r' }] })).toBe('[p]r');
    const piped = new OllamaTemplate('A{{ .Prompt }}{{ .Response | printf "<%s>" }}B');
    expect(piped.render({ messages: [{ role: 'user', content: 'p' }] })).toBe('Ap');
    expect(piped.render({ messages: [{ role: 'user', content: 'p' }, { role: 'assistant', content: 'r' }, { role: 'user', content: 'q' }] })).toBe('Ap<r>BAq');
  });

  it('appends {{ .Response }} to a template without .Messages or .Response', () => {
    const t = new OllamaTemplate('{{ .System }} USER: {{ .Prompt }} ASSISTANT:');
    expect(t.render({ messages: [{ role: 'user', content: 'hi' }] })).toBe(' USER: hi ASSISTANT:');
    expect(
      t.render({
        messages: [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: 'b' },
          { role: 'user', content: 'c' },
        ],
      }),
    ).toBe(' USER: a ASSISTANT:b USER: c ASSISTANT:');
  });

  it('collates: system messages joined, consecutive messages of a role merged (tool messages kept apart)', () => {
    const t = new OllamaTemplate('{{ .System }}|{{ range .Messages }}{{ .Role }}:{{ .Content }};{{ end }}');
    const messages: ChatMessage[] = [
      { role: 'system', content: 'A' },
      { role: 'system', content: 'B' },
      { role: 'user', content: 'x' },
      { role: 'user', content: [{ type: 'text', text: 'y1' }, { type: 'image_url' }, { type: 'text', text: 'y2' }] },
      { role: 'tool', content: 't1' },
      { role: 'tool', content: 't2' },
    ];
    expect(t.render({ messages })).toBe('A\n\nB|system:A\n\nB;user:x\n\ny1\ny2;tool:t1;tool:t2;');
  });

  it('fills in the middle with .Prompt and .Suffix', () => {
    const t = new OllamaTemplate('{{ if .Suffix }}<PRE> {{ .Prompt }} <SUF>{{ .Suffix }} <MID>{{ else }}{{ .Prompt }}{{ end }}');
    expect(t.render({ messages: [], prompt: 'def f(', suffix: 'return x' })).toBe('<PRE> def f( <SUF>return x <MID>');
    expect(t.render({ messages: [{ role: 'user', content: 'def f(' }] })).toBe('def f(');
  });

  it('passes messages as Ollama structs: JSON with omitempty, thinking, tool names, think flags', () => {
    const t = new OllamaTemplate('{{ range .Messages }}{{ json . }}|{{ .ToolName }}|{{ len .ToolCalls }}\n{{ end }}{{ if .IsThinkSet }}think={{ .Think }}{{ end }}{{ if .Tools }}tools{{ end }}');
    const messages: ChatMessage[] = [
      { role: 'user', content: 'q' },
      {
        role: 'assistant',
        content: '',
        reasoning_content: 'hm',
        tool_calls: [
          { id: 'a', type: 'function', function: { name: 'f', arguments: { x: 1, b: [true, null] } } },
          { type: 'function', function: { name: 'g', arguments: '{}' } },
        ],
      },
      { role: 'tool', content: 'out', name: 'f', tool_call_id: 'a' },
    ];
    expect(t.render({ messages, think: true, isThinkSet: true })).toBe(
      '{"role":"user","content":"q"}||0\n' +
        '{"role":"assistant","content":"","thinking":"hm","tool_calls":[{"id":"a","function":{"name":"f","arguments":{"b":[true,null],"x":1}}},' +
        '{"function":{"index":1,"name":"g","arguments":{}}}]}||2\n' +
        '{"role":"tool","content":"out","tool_name":"f","tool_call_id":"a"}|f|0\nthink=true',
    );
  });

  it('prints a one-type property as a string and exposes struct errors', () => {
    const props = '{{ range .Tools }}{{ range $k, $v := .Function.Parameters.Properties }}{{ $k }}={{ $v.Type }};{{ end }}{{ end }}';
    const t = new OllamaTemplate('{{ range .Messages }}{{ end }}' + props);
    expect(t.render({ messages: [], tools: TOOLS })).toBe('city=string;unit=[string null];');
    const nils = new OllamaTemplate('{{ range .Messages }}{{ end }}{{ json .Tools }} {{ .Tools }} {{ range .Tools }}{{ json .Function.Parameters }} {{ .Function.Parameters.Properties }} {{ len .Function.Parameters.Properties }}{{ end }}');
    expect(nils.render({ messages: [] })).toBe('null [] ');
    expect(nils.render({ messages: [], tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] })).toBe(
      '[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":null}}}] [{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":null}}}] {"type":"object","properties":null} map[] 0',
    );
    // without .Messages the template is a legacy one, which gets no tools
    expect(new OllamaTemplate(props).render({ messages: [], tools: TOOLS })).toBe('');
    const bad = new OllamaTemplate('{{ range .Messages }}{{ .Name }}{{ end }}');
    expect(() => bad.render({ messages: [{ role: 'user', content: 'x' }] })).toThrow(
      'template: :1:24: executing "" at <.Name>: can\'t evaluate field Name in type *api.Message',
    );
  });

  it('refuses bad templates and bad tool call arguments', () => {
    expect(() => new OllamaTemplate('{{ if .Messages }}')).toThrow(GoTemplateError);
    const t = new OllamaTemplate(LLAMA3);
    const call = (args: unknown): ChatMessage[] => [{ role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'f', arguments: args } }] }];
    expect(() => t.render({ messages: call('{nope') })).toThrow('message 0, tool call 0 (f): arguments are not valid JSON');
    expect(() => t.render({ messages: call('[1]') })).toThrow('message 0, tool call 0 (f): arguments are not a JSON object');
    expect(() => t.render({ messages: call(7) })).toThrow(GoTemplateError);
  });
});
