"""The real chat templates of the families localchat reads (tests/data/templates/, copied from the llama.cpp
source llama-cpp-python vendors; Llama 4's, which it lacks, written to Meta's prompt format), rendered in the sandbox with tools, a past call, its result, earlier
thinking and each thinking switch: the family and thinking style known from each, every client string in
the prompt as message text (never template text that may become a control token)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localchat.api.constraints import constrain
from localchat.api.thinking import switches_for
from localchat.runtime.templates.chat_template import ChatTemplate
from localchat.runtime.templates.thinking import closed_by_prompt, opened_by_prompt, thinking_style

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "days": {"type": "integer"}},
                                                "required": ["city"]}}}
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning": "The weather tool answers this.", "tool_calls": [
        {"id": "call_abc123", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 2})}}]},
    {"role": "tool", "tool_call_id": "call_abc123", "content": "Sunny, 24 C."},
    {"role": "assistant", "content": "It is sunny.", "reasoning": "Read the result back."},
    {"role": "user", "content": "And tomorrow?"},
]
# template -> (tool-call family, thinking style or None)
FAMILIES = {
    "Qwen-Qwen3-0.6B.jinja": ("hermes", "think"),
    "Qwen3-Coder.jinja": ("qwen3-xml", None),
    "Qwen3.5-4B.jinja": ("qwen3-xml", "think"),
    "GLM-4.6.jinja": ("glm", "think"),
    "GLM-4.7-Flash.jinja": ("glm", "think"),
    "Kimi-K2-Instruct.jinja": ("kimi", None),
    "Kimi-K2-Thinking.jinja": ("kimi", "think"),
    "Kimi-K3.jinja": ("kimi-k3", "xtml"),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("deepseek-v3.1", "think"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("deepseek", "think"),
    "deepseek-ai-DeepSeek-V3.2.jinja": ("deepseek-dsml", "think"),
    "deepseek-ai-DeepSeek-V4.jinja": ("deepseek-dsml", "think"),
    "openai-gpt-oss-120b.jinja": ("harmony", "harmony"),
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": ("mistral-args", None),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": ("mistral-args", "mistral"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("mistral", None),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("llama3", None),
    "llama-4-pythonic.jinja": ("pythonic", None),
    "google-gemma-4-31B-it.jinja": ("gemma4", "gemma4"),
    "smollm2-thinking.jinja": ("hermes", "think"),
}


def test_every_template_here_is_named():
    assert {p.name for p in TEMPLATES.glob("*.jinja")} == set(FAMILIES) | {"unsloth-mistral-Devstral-Small-2507.jinja",
                                                                          "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"}


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("thinking", [None, False, True, "high"])
def test_a_real_template_renders_tools_calls_results_and_thinking_switches(name: str, thinking):
    template = ChatTemplate((TEMPLATES / name).read_text(encoding="utf-8"), "<s>", "</s>")
    plan = constrain(CONVERSATION, template.source, [WEATHER], "auto", True, None)
    style = thinking_style(template.source)
    assert (plan.fmt.name, style.name if style else None) == FAMILIES[name]
    prompt = template.render(plan.messages, tools=plan.tools, switches=switches_for(style, thinking, None))
    own = "".join(text for text, is_template in prompt.pieces if is_template)
    for client_text in ("Be brief.", "Weather in Paris?", "Sunny, 24 C.", "And tomorrow?"):
        assert client_text in prompt and client_text not in own, client_text
    assert "get_weather" in prompt and "Paris" in prompt
    if style is not None and style.switch in ("enable_thinking", "thinking") and thinking is False:
        # Switched off, the prompt closes the thinking itself (or never opens it).
        assert closed_by_prompt(style, prompt) or not opened_by_prompt(style, prompt)
    if style is not None and style.name == "harmony" and thinking == "high":
        assert "Reasoning: high" in prompt


def test_a_template_may_queue_ids_in_a_list_and_change_nothing_else():
    # Kimi K2's templates append call ids to a list and pop them for the results; the sandbox lets a list
    # grow that way (its size is bounded as every value's is), and changes nothing else in place.
    queue = ChatTemplate("{% set q = namespace(ids=[]) %}{% for m in messages %}{% set _ = q.ids.append(m.content) %}"
                         "{% endfor %}{{ q.ids.pop(0) }}|{{ q.ids | length }}")
    assert queue.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "a|1"
    from localchat.errors import RequestError

    with pytest.raises(RequestError):
        ChatTemplate("{% set d = {} %}{% set _ = d.update({'a': 1}) %}").render([{"role": "user", "content": "a"}])
