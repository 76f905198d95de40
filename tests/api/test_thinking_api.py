"""A thinking model end to end on the real runtime, through each protocol's official client: SmolLM2 copied
with a thinking template (tests/data/templates/smollm2-thinking.jinja: the prompt opens the <think> block,
as Qwen3-2507-Thinking's and DeepSeek-R1's do), steered by a grammar (chat completions take llama.cpp's
`grammar`) to think and then answer or call a tool. The thinking comes back apart in every protocol's own
shape, never with a marker in it; a switch closes it in the prompt; a budget closes it in the answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import anthropic
import ollama
import openai
import pytest
from thinking_model import ANSWER, THOUGHT, thinking_copy
from ui_server import serve_in_thread

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig

MODEL = "smollm2-thinking"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL = ('root ::= thought "\\n</think>\\n\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": '
        '{\\"city\\": \\"Paris\\"}}\\n</tool_call>"\n' + THOUGHT)
MARKERS = ("<think>", "</think>", "<tool_call>", "<|im_end|>")


@pytest.fixture(scope="module")
def url(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = thinking_copy(model_path, tmp_path_factory.mktemp("thinking"))
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_threads=1, deterministic=True))
    with Engine.load(path, config) as engine:
        url, server, thread = serve_in_thread(create_app(LocalService(engine, MODEL)))
        yield url
        server.should_exit = True
        thread.join(10)


@pytest.fixture()
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def clean(*texts: str | None) -> bool:
    return all(not any(m in (t or "") for m in MARKERS) for t in texts)


def test_chat_completions_return_the_thinking_apart_whole_and_streamed(client: openai.OpenAI):
    asked = dict(model=MODEL, messages=ASK, temperature=0, max_tokens=120, extra_body={"grammar": ANSWER})
    whole = client.chat.completions.create(**asked)
    message = whole.choices[0].message
    thought = message.model_extra["reasoning_content"]
    assert thought and message.content and clean(thought, message.content)
    assert whole.choices[0].finish_reason == "stop"
    # Of the answer's tokens, those it thought in (the rest wrote the answer), counted as the window counts them.
    assert 0 < whole.usage.completion_tokens_details.reasoning_tokens < whole.usage.completion_tokens
    reasoning, content = "", ""
    for chunk in client.chat.completions.create(**asked, stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            content += delta.content or ""
    assert (reasoning, content) == (thought, message.content)  # greedy: the same answer, streamed


def test_a_tool_call_after_the_thinking(client: openai.OpenAI):
    reply = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], temperature=0, max_tokens=120,
                                           extra_body={"grammar": CALL})
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and clean(choice.message.model_extra["reasoning_content"])
    assert [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls] == \
        [("get_weather", {"city": "Paris"})]
    assert not choice.message.content


def test_the_switch_closes_the_thinking_in_the_prompt(client: openai.OpenAI):
    on = client.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=8)
    off = client.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=8,
                                         extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert on.choices[0].message.model_extra.get("reasoning_content")  # the prompt opened it: all thinking so far
    assert "reasoning_content" not in off.choices[0].message.model_extra and off.choices[0].message.content
    assert off.usage.prompt_tokens > on.usage.prompt_tokens  # "\n\n</think>\n\n" in the prompt
    effort = client.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=8,
                                            reasoning_effort="none")
    assert effort.choices[0].message.content == off.choices[0].message.content


def test_anthropic_thinking_blocks_and_a_budget_that_closes_the_thinking(url: str):
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120)
    reply = client.messages.create(model=MODEL, max_tokens=40, messages=ASK, extra_body={"temperature": 0},
                                   thinking={"type": "enabled", "budget_tokens": 8})
    kinds = [block.type for block in reply.content]
    assert kinds[0] == "thinking" and "text" in kinds, kinds
    assert clean(reply.content[0].thinking, *(b.text for b in reply.content if b.type == "text")), reply.content
    with client.messages.stream(model=MODEL, max_tokens=40, messages=ASK, extra_body={"temperature": 0},
                                thinking={"type": "enabled", "budget_tokens": 8}) as stream:
        streamed = stream.get_final_message()
    assert [b.type for b in streamed.content] == kinds
    assert streamed.content[0].thinking == reply.content[0].thinking
    off = client.messages.create(model=MODEL, max_tokens=8, messages=ASK, extra_body={"temperature": 0},
                                 thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"]


def test_ollama_think_and_message_thinking(url: str):
    client = ollama.Client(host=url)
    thought = client.chat(model=MODEL, messages=ASK, think=True, options={"temperature": 0, "num_predict": 12})
    assert thought.message.thinking and clean(thought.message.thinking) and not thought.message.content
    parts = list(client.chat(model=MODEL, messages=ASK, think=True, stream=True,
                             options={"temperature": 0, "num_predict": 12}))
    assert "".join(p.message.thinking or "" for p in parts) == thought.message.thinking
    plain = client.chat(model=MODEL, messages=ASK, think=False, options={"temperature": 0, "num_predict": 8})
    assert plain.message.content and not plain.message.thinking


def test_responses_give_a_reasoning_item(client: openai.OpenAI):
    reply = client.responses.create(model=MODEL, input=ASK[0]["content"], temperature=0, max_output_tokens=12,
                                    reasoning={"effort": "high"})
    item = reply.output[0]
    assert item.type == "reasoning" and item.content[0].text and clean(item.content[0].text)
    assert reply.usage.output_tokens_details.reasoning_tokens > 0


def test_tools_grammars_that_wait_for_the_thinking_compile_and_answer(client: openai.OpenAI):
    # The prompt opened the thinking: auto waits for its close before the trigger counts; required holds from
    # the close. SmolLM2 under them thinks on until max_tokens: what is checked is that llama.cpp took the
    # grammar and its trigger pattern, and the reply is the thinking, cut.
    for choice in ("auto", "required"):
        reply = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice=choice,
                                               temperature=0, max_tokens=12)
        message = reply.choices[0].message
        assert reply.choices[0].finish_reason == "length" and message.model_extra["reasoning_content"], choice
        assert clean(message.model_extra["reasoning_content"])


@pytest.fixture(scope="module")
def hybrid(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    """SmolLM2 with Qwen3's own template: the model may open a thinking block itself, or not."""
    qwen3 = Path(__file__).resolve().parents[1] / "data" / "templates" / "Qwen-Qwen3-0.6B.jinja"
    path = thinking_copy(model_path, tmp_path_factory.mktemp("hybrid"), qwen3)
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_threads=1, deterministic=True))
    with Engine.load(path, config) as engine:
        url, server, thread = serve_in_thread(create_app(LocalService(engine, MODEL)))
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
        server.should_exit = True
        thread.join(10)


def test_a_model_that_may_think_gets_a_call_after_its_thinking_or_at_once(hybrid: openai.OpenAI):
    # Required: an optional thinking block, then the call; auto: the trigger counts only outside a block
    # (a lookahead in llama.cpp's trigger pattern).
    required = hybrid.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required",
                                              parallel_tool_calls=False, temperature=0, max_tokens=160)
    choice = required.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].function.name == "get_weather"
    assert clean(choice.message.content, choice.message.model_extra.get("reasoning_content"))
    auto = hybrid.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], temperature=0, max_tokens=24)
    assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")
