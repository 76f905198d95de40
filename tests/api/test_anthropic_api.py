"""Anthropic's Messages API (/v1/messages) on the real engine, driven by the official `anthropic` client:
messages whole and streamed (Anthropic's event sequence), stop sequences, a tool_use round trip,
structured output, count_tokens and Anthropic's errors; then greedy output equal under every protocol,
with speculation and without, and every protocol through a --backend proxy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest
from ui_server import serve_in_thread, stop_servers

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.api.proxy import ProxyService
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.speculation.speculative import SpecConfig
from localchat.runtime.workers.worker import WorkerConfig

MODEL = "smollm2-135m"
QUESTION = [{"role": "user", "content": "Name the capital city of France."}]
GREEDY = {"temperature": 0}  # Anthropic's current client sends sampling fields in extra_body
WEATHER = {"name": "get_weather", "description": "Weather forecast for a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                            "required": ["city"]}}
ONE_CALL = {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}
# An answer that quotes its prompt, so prompt lookup has drafts to offer.
QUOTE = [{"role": "user", "content": "The harbour master wrote: 'The northern pier closes at dusk on Fridays.'\n"
                                     "Repeat exactly what the harbour master wrote."}]


def load(path: Path, **spec) -> Engine:
    return Engine.load(path, EngineConfig(worker=WorkerConfig(n_ctx=2048, n_threads=1, deterministic=True), **spec))


@pytest.fixture(scope="module")
def servers(model_path: Path) -> Iterator[dict[str, str]]:
    """The API on an engine without a drafter, on one drafting by prompt lookup, and a proxy to the first."""
    plain, drafting = load(model_path), load(model_path, lookup=True, spec=SpecConfig(fixed_k=3))
    running = [serve_in_thread(create_app(LocalService(plain, MODEL))),
               serve_in_thread(create_app(LocalService(drafting, MODEL)))]
    running.append(serve_in_thread(create_app(ProxyService(running[0][0]))))
    yield {"plain": running[0][0], "spec": running[1][0], "proxy": running[2][0]}
    stop_servers(running)
    plain.close()
    drafting.close()


@pytest.fixture()
def client(servers: dict[str, str]) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=servers["plain"], api_key="unused", max_retries=0, timeout=120)


def events(url: str, body: dict) -> list[tuple[str, dict]]:
    """The server-sent events of a streamed request: (event name, data)."""
    with httpx.stream("POST", url + "/v1/messages", json={**body, "stream": True}, timeout=120) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        blocks = reply.read().decode().strip().split("\n\n")
    out = []
    for block in blocks:
        name, data = (line.split(": ", 1)[1] for line in block.splitlines())
        out.append((name, json.loads(data)))
    return out


def test_messages_whole_and_streamed_as_anthropics_events(client: anthropic.Anthropic, servers: dict[str, str]):
    whole = client.messages.create(model=MODEL, max_tokens=12, messages=QUESTION, extra_body=GREEDY)
    text = whole.content[0].text
    assert "Paris" in text and whole.type == "message" and whole.role == "assistant" and whole.id.startswith("msg_")
    assert whole.stop_reason == "end_turn" and whole.stop_sequence is None and len(whole.content) == 1
    assert whole.usage.input_tokens + whole.usage.cache_read_input_tokens > 5 and 0 < whole.usage.output_tokens <= 12
    with client.messages.stream(model=MODEL, max_tokens=12, messages=QUESTION, extra_body=GREEDY) as stream:
        assert "".join(stream.text_stream) == text
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == whole.usage.output_tokens
    seen = events(servers["plain"], {"model": MODEL, "max_tokens": 12, "messages": QUESTION, **GREEDY})
    names = [name for name, _ in seen]
    assert names[:3] == ["message_start", "ping", "content_block_start"] and names[-3:] == \
        ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"} and all(name == data["type"] for name, data in seen)
    assert seen[0][1]["message"]["usage"]["input_tokens"] == final.usage.input_tokens + final.usage.cache_read_input_tokens
    # Cut by max_tokens, and ended by a stop sequence, which the answer names.
    cut = client.messages.create(model=MODEL, max_tokens=2, messages=QUESTION, extra_body=GREEDY)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2
    stop = text.split()[2]
    stopped = client.messages.create(model=MODEL, max_tokens=12, messages=QUESTION, stop_sequences=[stop, "nowhere"],
                                     extra_body=GREEDY)
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", stop)
    assert stopped.content[0].text == text[: text.index(stop)]
    # The system prompt as a string or as text blocks is the same prompt (without one, the template's own).
    counted = [client.messages.count_tokens(model=MODEL, messages=QUESTION, system=system).input_tokens
               for system in ("Be brief.", [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])]
    assert counted[0] == counted[1] != client.messages.count_tokens(model=MODEL, messages=QUESTION).input_tokens


def test_a_tool_use_round_trip(client: anthropic.Anthropic):
    ask = [{"role": "user", "content": "What is the weather in Paris tomorrow?"}]
    called = client.messages.create(model=MODEL, max_tokens=48, messages=ask, tools=[WEATHER], tool_choice=ONE_CALL)
    use = called.content[-1]
    assert called.stop_reason == "tool_use" and use.type == "tool_use" and use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER["input_schema"])
    assert use.id.startswith("toolu_")
    with client.messages.stream(model=MODEL, max_tokens=48, messages=ask, tools=[WEATHER],
                                tool_choice={"type": "any", "disable_parallel_tool_use": True}) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_message()
    assert "input_json" in kinds and streamed.content[-1].input == use.input and streamed.stop_reason == "tool_use"
    counted = client.messages.count_tokens(model=MODEL, messages=ask, tools=[WEATHER]).input_tokens
    assert counted == called.usage.input_tokens + called.usage.cache_read_input_tokens  # tools in the prompt too
    result = [*ask, {"role": "assistant", "content": called.content},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 24 C."}]}]
    answered = client.messages.create(model=MODEL, max_tokens=16, messages=result, tools=[WEATHER], extra_body=GREEDY)
    assert answered.usage.input_tokens + answered.usage.cache_read_input_tokens > counted
    assert "24" in answered.content[0].text  # the small model reads the result back
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}
    shaped = client.messages.create(model=MODEL, max_tokens=24, messages=QUESTION, extra_body=GREEDY,
                                    output_config={"format": {"type": "json_schema", "schema": schema}})
    jsonschema.validate(json.loads(shaped.content[0].text), schema)


def test_what_cannot_be_done_is_an_anthropic_error(client: anthropic.Anthropic, servers: dict[str, str]):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}}
    cases = [(dict(messages=[{"role": "user", "content": [image]}]), "'image' block"),
             (dict(messages=QUESTION, tools=[{"type": "web_search_20250305", "name": "web_search"}]), "built-in"),
             (dict(messages=[*QUESTION, {"role": "assistant", "content": "The"}]), "prefilled"),
             (dict(messages=QUESTION, extra_body={"temperature": 7}), "temperature=7"),
             (dict(messages=QUESTION, tool_choice={"type": "sometimes"}), "tool_choice")]
    for extra, words in cases:
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(model=MODEL, max_tokens=4, **extra)
        assert caught.value.body["error"]["type"] == "invalid_request_error" and words in caught.value.message, extra
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.create(model="claude-imaginary", max_tokens=4, messages=QUESTION)
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "not_found_error"
    reply = httpx.post(servers["plain"] + "/v1/messages", json={"model": MODEL, "messages": QUESTION}, timeout=30)
    assert reply.status_code == 400 and "max_tokens is required" in reply.json()["error"]["message"]


def test_thinking_asked_of_a_model_that_does_not_think_is_answered_and_said(client: anthropic.Anthropic,
                                                                           caplog: pytest.LogCaptureFixture):
    """Coding agents send `thinking` always; llama.cpp's server answers it on any model. So do we, without the
    thinking, and say so in a header and the log."""
    plain = client.messages.create(model=MODEL, max_tokens=12, messages=QUESTION, extra_body=GREEDY)
    for thinking in ({"type": "enabled", "budget_tokens": 1024}, {"type": "adaptive"}):
        with caplog.at_level("INFO", logger="localchat.api.local"):
            raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=12, messages=QUESTION,
                                                           thinking=thinking, extra_body=GREEDY)
        assert raw.status_code == 200 and "does not think" in raw.headers["x-localchat-notes"], raw.headers
        answered = raw.parse()
        assert [b.type for b in answered.content] == ["text"] and answered.content[0].text == plain.content[0].text
        assert any("does not do" in r.getMessage() for r in caplog.records), caplog.text
    with client.messages.stream(model=MODEL, max_tokens=12, messages=QUESTION, extra_body=GREEDY,
                                thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        assert "does not think" in stream.response.headers["x-localchat-notes"]
        assert "".join(stream.text_stream) == plain.content[0].text
    with pytest.raises(anthropic.BadRequestError):  # a malformed one is still refused
        client.messages.create(model=MODEL, max_tokens=4, messages=QUESTION, thinking={"type": "sometimes"})


def test_greedy_output_is_the_same_under_every_protocol_with_and_without_speculation(servers: dict[str, str]):
    conversation = [{"role": "system", "content": "Answer in one sentence."}, *QUOTE]
    texts, drafted = {}, {}
    for name in ("plain", "spec", "proxy"):
        url = servers[name]
        reply = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0).chat.completions.create(
            model=MODEL, messages=conversation, max_tokens=16, temperature=0)
        texts[name, "openai"] = reply.choices[0].message.content
        texts[name, "responses"] = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0).responses.create(
            model=MODEL, instructions=conversation[0]["content"], input=QUOTE, max_output_tokens=16, temperature=0,
            store=False).output_text
        drafted[name] = ((reply.model_extra.get("x_localchat") or {}).get("speculation") or {}).get("drafted", 0)
        texts[name, "ollama"] = ollama.Client(host=url, timeout=120).chat(
            model=MODEL, messages=conversation, options={"temperature": 0, "num_predict": 16}).message.content
        message = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0).messages.create(
            model=MODEL, max_tokens=16, system=conversation[0]["content"], messages=QUOTE, extra_body=GREEDY)
        texts[name, "anthropic"] = message.content[0].text
    assert len(set(texts.values())) == 1, texts
    assert drafted["spec"] > 0 and drafted["plain"] == 0  # the drafting engine did draft
    # Streams through the proxy too: Ollama's JSON lines and Anthropic's events are relayed as they come.
    lines = list(ollama.Client(host=servers["proxy"], timeout=120).chat(
        model=MODEL, messages=conversation, options={"temperature": 0, "num_predict": 16}, stream=True))
    assert "".join(p.message.content for p in lines) == texts["plain", "openai"] and lines[-1].done
    with anthropic.Anthropic(base_url=servers["proxy"], api_key="unused", max_retries=0).messages.stream(
            model=MODEL, max_tokens=16, system=conversation[0]["content"], messages=QUOTE,
            extra_body=GREEDY) as stream:
        assert "".join(stream.text_stream) == texts["plain", "openai"]
