"""Chat templates of four tool-calling families, written for these tests from the families' published
prompt formats (the layout of tools, calls and results; not the vendors' files)."""

# Qwen2.5 / Qwen3: ChatML turns, tools in <tools> in the system turn, calls in <tool_call>,
# results in <tool_response> inside user turns.
QWEN25 = """\
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}{% else %}You are Qwen, created by Alibaba Cloud. You are a helpful assistant.{% endif %}

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role != 'system' %}<|im_start|>system
You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}{% if not tools %}<|im_start|>system
{{ message.content }}<|im_end|>
{% endif %}
{%- elif message.role == 'assistant' %}<|im_start|>assistant
{{ message.content }}
{%- for tool_call in message.tool_calls or [] %}
{%- set call = tool_call.function if tool_call.function is defined else tool_call %}
<tool_call>
{"name": "{{ call.name }}", "arguments": {{ call.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}
<tool_response>
{{ message.content }}
</tool_response>
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>
{% endif %}
{%- else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

# Hermes 2 Pro / Hermes 3: ChatML, a function-calling system prompt, results in a `tool` turn.
HERMES = """\
{%- if tools %}<|im_start|>system
You are a function calling AI model. You are provided with function signatures within <tools></tools> XML tags. You may call one or more functions to assist with the user query. Don't make assumptions about what values to plug into functions. Here are the available tools: <tools> {{ tools | tojson }} </tools> For each function call return a json object with function name and arguments within <tool_call></tool_call> XML tags as follows:
<tool_call>
{"name": <function-name>, "arguments": <args-dict>}
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant
{%- for tool_call in message.tool_calls %}
<tool_call>
{"name": "{{ tool_call.function.name }}", "arguments": {{ tool_call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>tool
<tool_response>
{"name": "{{ message.name }}", "content": {{ message.content | tojson }}}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

# Llama 3.1+: header-delimited turns, an ipython environment, tools as JSON in the first user turn,
# calls as a bare {"name", "parameters"} object, results in an ipython turn.
LLAMA31 = """\
{{- bos_token }}<|start_header_id|>system<|end_header_id|>

{% if tools %}Environment: ipython
{% endif %}Cutting Knowledge Date: December 2023
Today Date: 26 Jul 2024

{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}<|eot_id|>
{%- set ns = namespace(first_user=true) %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- elif message.role == 'user' and tools and ns.first_user %}{% set ns.first_user = false %}<|start_header_id|>user<|end_header_id|>

Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.

Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}. Do not use variables.

{% for tool in tools %}{{ tool | tojson(indent=4) }}

{% endfor %}{{ message.content }}<|eot_id|>
{%- elif message.role == 'assistant' and message.tool_calls %}
{%- if message.tool_calls | length != 1 %}{{ raise_exception('This model only supports single tool-calls at once!') }}{% endif %}
{%- set call = message.tool_calls[0].function %}<|start_header_id|>assistant<|end_header_id|>

{% if call.name in (builtin_tools or []) %}<|python_tag|>{% endif %}{"name": "{{ call.name }}", "parameters": {{ call.arguments | tojson }}}<|eot_id|>
{%- elif message.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>

{{ message.content }}<|eot_id|>
{%- else %}<|start_header_id|>{{ message.role }}<|end_header_id|>

{{ message.content }}<|eot_id|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""

# Mistral (v3 tokenizer, Nemo): [INST] turns, tools in [AVAILABLE_TOOLS] before the last user turn,
# calls as a [TOOL_CALLS] JSON list with 9-character ids, results in [TOOL_RESULTS].
MISTRAL = """\
{{- bos_token }}
{%- set ns = namespace(last_user=0) %}
{%- for message in messages %}{% if message.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}
{%- for message in messages %}
{%- if message.role == 'user' %}
{%- if tools and loop.index0 == ns.last_user %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}
{%- if loop.index0 == ns.last_user and messages[0].role == 'system' %}[INST]{{ messages[0].content }}

{{ message.content }}[/INST]{% else %}[INST]{{ message.content }}[/INST]{% endif %}
{%- elif message.role == 'assistant' and message.tool_calls %}[TOOL_CALLS][
{%- for tool_call in message.tool_calls %}
{%- if tool_call.id is not string or tool_call.id | length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}
{{- {"name": tool_call.function.name, "arguments": tool_call.function.arguments, "id": tool_call.id} | tojson }}
{%- if not loop.last %}, {% endif %}
{%- endfor %}]{{ eos_token }}
{%- elif message.role == 'assistant' %}{{ message.content }}{{ eos_token }}
{%- elif message.role == 'tool' %}[TOOL_RESULTS]{{ {"content": message.content, "call_id": message.tool_call_id} | tojson }}[/TOOL_RESULTS]
{%- endif %}
{%- endfor %}"""

FAMILIES = {"hermes": HERMES, "qwen2.5": QWEN25, "llama3": LLAMA31, "mistral": MISTRAL}
FORMAT_OF = {"hermes": "hermes", "qwen2.5": "hermes", "llama3": "llama3", "mistral": "mistral"}
