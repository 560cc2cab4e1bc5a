// Ollama Modelfile templates: a TEMPLATE (Go text/template, see go-template.ts) parsed and executed
// as Ollama's template/template.go does (Parse appends `{{ .Response }}` to templates that name
// neither .Messages nor .Response; Execute collates the messages, then renders fill-in-the-middle,
// the whole conversation at once, or a legacy System/Prompt/Response template turn by turn, the
// last turn cut after `.Response`), with Ollama's api types modelled as Go structs.

import type { ChatMessage } from './chat-template';
import { GoInt, GoStruct, GoStructType, GoTemplate, GoTemplateError, goJsonMarshal, goSprint, withGoMethods } from './go-template';
import type { WalkedNode } from './go-template';

const asJson = { string: (v: GoStruct) => goJsonMarshal(v) };

const MESSAGE = new GoStructType('*api.Message', [
  { name: 'Role', json: 'role' },
  { name: 'Content', json: 'content' },
  { name: 'Thinking', json: 'thinking', omitempty: true },
  { name: 'Images', json: 'images', omitempty: true },
  { name: 'ToolCalls', json: 'tool_calls', omitempty: true },
  { name: 'ToolName', json: 'tool_name', omitempty: true },
  { name: 'ToolCallID', json: 'tool_call_id', omitempty: true },
]);
const TOOL_CALL = new GoStructType('api.ToolCall', [
  { name: 'ID', json: 'id', omitempty: true },
  { name: 'Function', json: 'function' },
]);
const TOOL_CALL_FUNCTION = new GoStructType('api.ToolCallFunction', [
  { name: 'Index', json: 'index', omitempty: true },
  { name: 'Name', json: 'name' },
  { name: 'Arguments', json: 'arguments' },
]);
const TOOL = new GoStructType(
  'api.Tool',
  [
    { name: 'Type', json: 'type' },
    { name: 'Items', json: 'items', omitempty: true },
    { name: 'Function', json: 'function' },
  ],
  asJson,
);
const TOOL_FUNCTION = new GoStructType(
  'api.ToolFunction',
  [
    { name: 'Name', json: 'name' },
    { name: 'Description', json: 'description', omitempty: true },
    { name: 'Parameters', json: 'parameters' },
  ],
  asJson,
);
const TOOL_FUNCTION_PARAMETERS = new GoStructType(
  'api.ToolFunctionParameters',
  [
    { name: 'Type', json: 'type' },
    { name: 'Defs', json: '$defs', omitempty: true },
    { name: 'Items', json: 'items', omitempty: true },
    { name: 'Required', json: 'required', omitempty: true },
    { name: 'Properties', json: 'properties' },
  ],
  asJson,
);
const TOOL_PROPERTY = new GoStructType('api.ToolProperty', [
  { name: 'AnyOf', json: 'anyOf', omitempty: true },
  { name: 'Type', json: 'type', omitempty: true },
  { name: 'Items', json: 'items', omitempty: true },
  { name: 'Description', json: 'description', omitempty: true },
  { name: 'Enum', json: 'enum', omitempty: true },
]);

/** A nil Go slice or map: empty (prints `[]` or `map[]`, has length 0) but marshalled as null. */
const nil = <T extends object>(empty: T, typeName: string): T => withGoMethods(empty, { typeName, json: () => null });

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const str = (v: unknown) => (typeof v === 'string' ? v : '');

/** Ollama's PropertyType: a list of type names, marshalled (and printed) as a plain string when it has one. */
function propertyType(v: unknown): string[] {
  const types = typeof v === 'string' ? [v] : Array.isArray(v) ? v.filter((t): t is string => typeof t === 'string') : [];
  return withGoMethods(types, {
    typeName: 'api.PropertyType',
    string: () => (types.length === 1 ? types[0] : goSprint([[...types]])),
    json: () => (types.length === 1 ? types[0] : [...types]),
  });
}

function toolProperty(p: unknown): GoStruct {
  const o = isObject(p) ? p : {};
  return new GoStruct(TOOL_PROPERTY, {
    AnyOf: Array.isArray(o.anyOf) ? o.anyOf.map(toolProperty) : [],
    Type: propertyType(o.type),
    Items: o.items ?? null,
    Description: str(o.description),
    Enum: Array.isArray(o.enum) ? o.enum : [],
  });
}

/** An OpenAI-style tool definition as Ollama's api.Tool. */
function toTool(t: unknown): GoStruct {
  const o = isObject(t) ? t : {};
  const f = isObject(o.function) ? o.function : {};
  const p = isObject(f.parameters) ? f.parameters : {};
  const props = isObject(p.properties) ? p.properties : undefined;
  const parameters = new GoStruct(TOOL_FUNCTION_PARAMETERS, {
    Type: str(p.type),
    Defs: p.$defs ?? null,
    Items: p.items ?? null,
    Required: Array.isArray(p.required) ? p.required.filter((r) => typeof r === 'string') : [],
    Properties: props ? Object.fromEntries(Object.entries(props).map(([k, v]) => [k, toolProperty(v)])) : nil({}, 'map[string]api.ToolProperty'),
  });
  return new GoStruct(TOOL, {
    Type: str(o.type),
    Items: o.items ?? null,
    Function: new GoStruct(TOOL_FUNCTION, { Name: str(f.name), Description: str(f.description), Parameters: parameters }),
  });
}

/** A tool call's arguments as Ollama's map, which prints as its JSON. */
function toolCallArguments(args: unknown, where: string): Record<string, unknown> {
  let v = args ?? {};
  if (typeof v === 'string') {
    try {
      v = JSON.parse(v);
    } catch {
      throw new GoTemplateError(`${where}: arguments are not valid JSON`);
    }
  }
  if (!isObject(v)) throw new GoTemplateError(`${where}: arguments are not a JSON object`);
  const map: Record<string, unknown> = { ...v };
  return withGoMethods(map, { typeName: 'api.ToolCallFunctionArguments', string: () => goJsonMarshal({ ...map }) });
}

/** A message's fields as Ollama's api.Message holds them (before collation). */
interface Message {
  role: string;
  content: string;
  thinking: string;
  toolCalls: GoStruct[];
  toolName: string;
  toolCallId: string;
}

function contentText(content: ChatMessage['content']): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .filter((p): p is { type: 'text'; text: string } => isObject(p) && p.type === 'text' && typeof p.text === 'string')
    .map((p) => p.text)
    .join('\n');
}

function toMessage(m: ChatMessage, i: number): Message {
  const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
  return {
    role: m.role,
    content: contentText(m.content),
    thinking: str(m.reasoning_content),
    toolCalls: calls.map((c, j) => {
      const o = isObject(c) ? c : {};
      const f = isObject(o.function) ? o.function : {};
      const fn = new GoStruct(TOOL_CALL_FUNCTION, {
        Index: new GoInt(j),
        Name: str(f.name),
        Arguments: toolCallArguments(f.arguments, `message ${i}, tool call ${j} (${str(f.name)})`),
      });
      return new GoStruct(TOOL_CALL, { ID: str(o.id), Function: fn });
    }),
    toolName: m.role === 'tool' ? str(m.name) : '',
    toolCallId: str(m.tool_call_id),
  };
}

const messageStruct = (m: Message) =>
  new GoStruct(MESSAGE, {
    Role: m.role,
    Content: m.content,
    Thinking: m.thinking,
    Images: [],
    ToolCalls: m.toolCalls,
    ToolName: m.toolName,
    ToolCallID: m.toolCallId,
  });

/** Ollama's collate: the system messages' contents joined, and consecutive messages of one role (but tool) merged. */
function collate(messages: readonly Message[]): [string, Message[]] {
  const system: string[] = [];
  const collated: Message[] = [];
  for (const m of messages) {
    if (m.role === 'system') system.push(m.content);
    const last = collated[collated.length - 1];
    if (last && last.role === m.role && m.role !== 'tool') {
      last.content += '\n\n' + m.content;
      continue;
    }
    collated.push({ ...m });
  }
  return [system.join('\n\n'), collated];
}

/** What a render takes: the chat (OpenAI-shaped, as the chat path has it) and Ollama's request values. */
export interface OllamaTemplateValues {
  messages: readonly ChatMessage[];
  /** Tool definitions (OpenAI function format). */
  tools?: readonly unknown[];
  /** `.Think`. Default: false. */
  think?: boolean;
  /** `.ThinkLevel`: the level a request's think gave ("high", "medium", "low"). Default: ''. */
  thinkLevel?: string;
  /** `.IsThinkSet`: the request said whether to think. Default: false. */
  isThinkSet?: boolean;
  /** With `suffix`, a fill-in-the-middle request: the template gets only `.Prompt` and `.Suffix`. */
  prompt?: string;
  suffix?: string;
}

/** An Ollama Modelfile TEMPLATE, rendered as Ollama renders it. */
export class OllamaTemplate {
  /** The template uses .Messages (or .Document): the conversation is rendered in one execution. */
  readonly usesMessages: boolean;
  /** Ollama's Vars(): the template's field and variable names, lower-cased (what Ollama reads its capabilities from). */
  readonly vars: readonly string[];
  private readonly template: GoTemplate;

  /** Throws GoTemplateError when `source` does not parse. */
  constructor(readonly source: string) {
    let template = new GoTemplate(source);
    const vars = template.vars();
    if (!vars.includes('messages') && !vars.includes('response')) template = template.withAppendedField('Response');
    this.template = template;
    this.vars = vars;
    this.usesMessages = vars.includes('messages') || vars.includes('document');
  }

  /** The prompt text for `values`. Throws GoTemplateError when the template fails or a tool call's arguments are bad. */
  render(values: OllamaTemplateValues): string {
    const [system, messages] = collate(values.messages.map(toMessage));
    // (Every execution's thinking fields, as Ollama's template.Values gives them.)
    const thinking = { Think: values.think ?? false, ThinkLevel: values.thinkLevel ?? '', IsThinkSet: values.isThinkSet ?? false };
    if (values.prompt && values.suffix) {
      return this.template.execute({ Prompt: values.prompt, Suffix: values.suffix, Response: '', ...thinking });
    }
    if (this.usesMessages) {
      return this.template.execute({
        System: system,
        Messages: messages.map(messageStruct),
        Tools: values.tools ? values.tools.map(toTool) : nil([], 'api.Tools'),
        Response: '',
        ...thinking,
        Query: '',
        Document: '',
        Instruction: '',
      });
    }

    let out = '';
    let turn = { system: '', prompt: '', response: '' };
    const data = () => ({ System: turn.system, Prompt: turn.prompt, Response: turn.response, ...thinking });
    const execute = () => {
      out += this.template.execute(data());
      turn = { system: '', prompt: '', response: '' };
    };
    for (const m of messages) {
      if (m.role === 'system') {
        if (turn.prompt !== '' || turn.response !== '') execute();
        turn.system = m.content;
      } else if (m.role === 'user') {
        if (turn.response !== '') execute();
        turn.prompt = m.content;
      } else if (m.role === 'assistant') turn.response = m.content;
    }
    let cut = false;
    const last = this.template.withoutNodes((n: WalkedNode) => {
      if (n.kind === 'field' && n.idents.includes('Response')) {
        cut = true;
        return false;
      }
      return cut;
    });
    return out + last.execute(data());
  }
}
