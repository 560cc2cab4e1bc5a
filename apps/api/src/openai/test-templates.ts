// Chat templates the API's tests load into their test models.

/**
 * In the style of Qwen2.5's (tools in the system turn, calls and tool answers in Hermes tags):
 * calls as <tool_call>{"name": …, "arguments": …}</tool_call>.
 */
export const HERMES_TEMPLATE = [
  "{%- if tools %}<|im_start|>system\nYou may call functions. Signatures:\n<tools>\n{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\nAnswer with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>.<|im_end|>\n{%- endif %}",
  "{%- for message in messages %}",
  "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n{%- for tc in message.tool_calls %}\n<tool_call>\n{\"name\": \"{{ tc.function.name }}\", \"arguments\": {{ tc.function.arguments | tojson }}}\n</tool_call>{%- endfor %}<|im_end|>\n",
  "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>\n",
  "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}",
  '{%- endfor %}',
  "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}",
].join('');

/**
 * ChatML whose generation prompt opens the reasoning (as DeepSeek-R1's and QwQ's do): the answer
 * starts inside a <think> block, and an assistant turn's reasoning_content is shown in one.
 */
export const THINK_TEMPLATE = [
  '{%- for message in messages %}',
  "{%- if message.role == 'assistant' and message.reasoning_content %}<|im_start|>assistant\n<think>\n{{ message.reasoning_content }}\n</think>\n\n{{ message.content }}<|im_end|>\n",
  "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}",
  '{%- endfor %}',
  "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{%- endif %}",
].join('');
