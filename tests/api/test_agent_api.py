"""What agents and editors need, driven by real clients on the embedded model: tool calls (whole and
streamed), structured output under a grammar, logprobs, model names; `openai` and pydantic-ai."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from localchat.runtime.engine import Engine
from conftest import MODEL

SEEDS = range(20)
WEATHER_ARGS = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 24},
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer"}}, "required": ["city", "unit"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast for a city.",
                                            "parameters": WEATHER_ARGS}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time now in a time zone.",
                                         "parameters": {"type": "object", "properties": {
                                             "zone": {"type": "string", "maxLength": 32}}, "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris tomorrow?"}]


@pytest.fixture()
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def each_seed(fn, seeds=SEEDS) -> list:
    """fn(seed) for every seed, several at once: the engine batches them."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(fn, seeds))


def streamed_calls(stream) -> tuple[list[dict], str | None, str]:
    """Tool-call deltas put back together the way OpenAI's docs tell clients to."""
    calls: dict[int, dict] = {}
    finish, content = None, ""
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = delta.id or call["id"]
            # OpenAI sends the name once; some servers (llama-cpp-python's) repeat it in every delta.
            call["name"] = call["name"] or ((delta.function.name or "") if delta.function else "")
            call["arguments"] += (delta.function.arguments or "") if delta.function else ""
    return [calls[i] for i in sorted(calls)], finish, content


def test_required_gives_a_schema_valid_call_every_time(client: openai.OpenAI):
    def call(seed: int):
        return client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
                                              parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=64)
    for reply in each_seed(call):
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1, choice
        made = choice.message.tool_calls[0]
        assert made.id.startswith("call_") and made.type == "function"
        schema = {"get_weather": WEATHER_ARGS, "get_time": TIME["function"]["parameters"]}[made.function.name]
        jsonschema.validate(json.loads(made.function.arguments), schema)


def test_a_named_function_is_the_one_called_and_streams_in_pieces(client: openai.OpenAI):
    named = {"type": "function", "function": {"name": "get_time"}}
    ask = dict(model=MODEL, messages=ASK, tools=[WEATHER, TIME], tool_choice=named, temperature=0.7, seed=5,
               parallel_tool_calls=False, max_completion_tokens=64)
    whole = client.chat.completions.create(**ask).choices[0].message.tool_calls
    calls, finish, content = streamed_calls(client.chat.completions.create(
        **ask, stream=True, stream_options={"include_usage": True}))
    assert finish == "tool_calls" and content == ""
    assert [(c["name"], c["arguments"]) for c in calls] == [(w.function.name, w.function.arguments) for w in whole]
    assert calls[0]["name"] == "get_time" and calls[0]["id"].startswith("call_")
    jsonschema.validate(json.loads(calls[0]["arguments"]), TIME["function"]["parameters"])


def test_arguments_arrive_over_several_chunks_and_usage_comes_last(client: openai.OpenAI):
    stream = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required",
                                            parallel_tool_calls=False, temperature=0, max_tokens=64, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    pieces = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert pieces[0].id and pieces[0].function.name == "get_weather"
    assert not any(p.id or p.function.name for p in pieces[1:])  # the name and id come once, as OpenAI's do
    assert sum(bool(p.function.arguments) for p in pieces) > 3  # incrementally, not in one lump
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_auto_gives_content_or_a_valid_call_never_a_malformed_one(client: openai.OpenAI):
    def call(seed: int):
        return client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], temperature=1.0, seed=seed,
                                              max_tokens=48)
    kinds = set()
    for reply in each_seed(call, range(10)):
        message = reply.choices[0].message
        if message.tool_calls:
            kinds.add("call")
            assert reply.choices[0].finish_reason == "tool_calls"
            jsonschema.validate(json.loads(message.tool_calls[0].function.arguments), WEATHER_ARGS)
        else:
            kinds.add("content")
            assert message.content and "<tool_call>" not in message.content
    assert kinds


def test_a_tool_result_round_trips_into_the_next_answer(client: openai.OpenAI):
    first = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required",
                                           parallel_tool_calls=False, temperature=0, max_tokens=64).choices[0].message
    call = first.tool_calls[0]
    history = ASK + [first.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny, 21 C"}'}]
    reply = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER], tool_choice="none",
                                           temperature=0, max_tokens=24)
    assert reply.choices[0].finish_reason in ("stop", "length") and reply.choices[0].message.content


SCHEMAS = [
    {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "sure": {"type": "boolean"}},
     "required": ["answer", "sure"]},
    {"type": "object", "properties": {"scores": {"type": "array", "items": {"type": "integer"}, "minItems": 1,
                                                 "maxItems": 3}}, "required": ["scores"], "additionalProperties": False},
    {"type": "object", "properties": {"city": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 16}, "country": {"type": "string", "minLength": 2, "maxLength": 2}},
        "required": ["name", "country"]}}, "required": ["city"]},
    {"type": "object", "properties": {"note": {"anyOf": [{"type": "string", "maxLength": 12}, {"type": "null"}]},
                                      "kind": {"const": "fact"}}, "required": ["kind", "note"]},
    {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 1, "maxItems": 2},
]


def test_json_schema_output_validates_over_seeds_and_schemas(client: openai.OpenAI):
    def answer(job: tuple[int, int]):
        n, seed = job
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Answer in JSON: is Paris in France?"}],
            response_format={"type": "json_schema", "json_schema": {"name": f"s{n}", "schema": SCHEMAS[n]}},
            temperature=1.0, seed=seed, max_tokens=80)
        return n, reply.choices[0]
    for n, choice in each_seed(answer, [(n, seed) for n in range(len(SCHEMAS)) for seed in SEEDS]):
        assert choice.finish_reason == "stop", (n, choice.message.content)
        jsonschema.validate(json.loads(choice.message.content), SCHEMAS[n])


def test_json_object_and_keywords_once_refused(client: openai.OpenAI):
    reply = client.chat.completions.create(model=MODEL, messages=ASK, response_format={"type": "json_object"},
                                           temperature=0, max_tokens=60)
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content), dict)
    checker = jsonschema.FormatChecker()
    for schema in [{"type": "integer", "minimum": 3, "maximum": 7}, {"type": "string", "format": "email"},
                   {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5}]:
        reply = client.chat.completions.create(model=MODEL, max_tokens=80, temperature=0, messages=[
            {"role": "user", "content": "The address and number of the Paris tourist office?"}],
                                               response_format={"type": "json_schema",
                                                                "json_schema": {"name": "x", "schema": schema}})
        jsonschema.validate(json.loads(reply.choices[0].message.content), schema, format_checker=checker)
    args = {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                                                                "maximum": 99},
                                                    "minItems": 2, "maxItems": 4, "uniqueItems": True}},
            "required": ["xs"]}
    reply = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=80, temperature=0,
                                           tool_choice="required", parallel_tool_calls=False,
                                           tools=[{"type": "function", "function": {"name": "f", "parameters": args}}])
    jsonschema.validate(json.loads(reply.choices[0].message.tool_calls[0].function.arguments), args)
    with pytest.raises(openai.BadRequestError, match="dynamicRef") as caught:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"$dynamicRef": "#node"}}})
    assert caught.value.param.startswith("response_format")


class Capital(BaseModel):
    country: Literal["France", "Spain", "Italy"]
    city: str = Field(max_length=20)
    population_millions: int


def test_parse_with_a_pydantic_model(client: openai.OpenAI):
    reply = client.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": "The capital of France?"}],
                                          response_format=Capital, temperature=0, max_tokens=60)
    parsed = reply.choices[0].message.parsed
    assert isinstance(parsed, Capital) and parsed.country in ("France", "Spain", "Italy")


def test_logprobs_chat_and_completions_whole_and_streamed(client: openai.OpenAI):
    ask = dict(model=MODEL, messages=ASK, temperature=0, max_tokens=8, logprobs=True, top_logprobs=3)
    whole = client.chat.completions.create(**ask).choices[0]
    tokens = whole.logprobs.content
    assert "".join(t.token for t in tokens) == whole.message.content
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 3 for t in tokens)
    assert all(t.top_logprobs[0].logprob >= t.logprob - 1e-4 for t in tokens)  # greedy took the best
    streamed = [t for c in client.chat.completions.create(**ask, stream=True) if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in tokens]
    text = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0,
                                     logprobs=2).choices[0]
    assert "".join(text.logprobs.tokens) == text.text and all(len(t) <= 2 for t in text.logprobs.top_logprobs)
    assert text.logprobs.text_offset[0] == 0


def test_completions_take_a_grammar_or_a_response_format(client: openai.OpenAI):
    grammar = 'root ::= ("yes" | "no") "."'
    text = client.completions.create(model=MODEL, prompt="Is Paris in France? Answer:", max_tokens=8,
                                     extra_body={"grammar": grammar}).choices[0].text
    assert text in ("yes.", "no.")
    answer = client.completions.create(model=MODEL, prompt="Paris as JSON:", max_tokens=60, temperature=0, extra_body={
        "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMAS[0]}}}).choices[0]
    jsonschema.validate(json.loads(answer.text), SCHEMAS[0])


def test_the_model_answers_to_its_id_file_name_and_catalog_name(client: openai.OpenAI, engine: Engine):
    card = client.models.list().data[0]
    file = engine.worker.model_path
    assert set(card.model_extra["x_localchat"]["aliases"]) >= {file.name, file.stem}
    for name in (MODEL, file.name, file.stem):
        assert client.chat.completions.create(model=name, messages=ASK, max_tokens=2).choices


def test_pydantic_ai_agent_gets_its_structured_output(url: str):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=f"{url}/v1", api_key="unused"))
    agent = Agent(model, output_type=Capital, model_settings={"temperature": 0, "max_tokens": 80,
                                                                      "parallel_tool_calls": False})
    result = agent.run_sync("What is the capital of France?")
    assert isinstance(result.output, Capital)


def test_chat_command_answers_under_a_json_schema_file(model_path: Path, tmp_path: Path, capsys):
    from localchat.cli import main

    schema_file = tmp_path / "answer.json"
    schema_file.write_text(json.dumps(SCHEMAS[0]))
    code = main(["chat", "--model", str(model_path), "--json-schema", str(schema_file), "--temperature", "0",
                 "--max-tokens", "60", "Is Paris in France?"])
    assert code == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), SCHEMAS[0])
    schema_file.write_text(json.dumps({"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 3,
                                       "uniqueItems": True}))
    assert main(["chat", "--model", str(model_path), "--json-schema", str(schema_file), "--max-tokens", "40",
                 "List three numbers."]) == 0
    out = capsys.readouterr().out
    assert jsonschema.Draft202012Validator({"uniqueItems": True, "items": {"minimum": 1}}).is_valid(json.loads(out))
    schema_file.write_text('{"$dynamicRef": "#node"}')
    assert main(["chat", "--model", str(model_path), "--json-schema", str(schema_file), "hi"]) == 1
    assert "'$dynamicRef'" in capsys.readouterr().err


def test_a_chat_longer_than_the_context_is_refused_unless_early_turns_may_go(client: openai.OpenAI, url: str):
    filler = " ".join(f"item{j}" for j in range(60))
    messages = [{"role": "system", "content": "Answer briefly."}]
    for i in range(30):
        messages += [{"role": "user", "content": f"Note {i}: {filler}"}, {"role": "assistant", "content": f"Noted {i}."}]
    messages.append({"role": "user", "content": "What was the last note?"})
    with pytest.raises(openai.BadRequestError, match="context") as caught:
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8)
    assert caught.value.code == "context_length_exceeded"
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0,
                                           extra_body={"x_localchat": {"context_overflow": "rolling"}})
    (note,) = reply.model_extra["x_localchat"]["notes"]
    assert note.endswith("early turns left out to fit the context") and reply.usage.prompt_tokens <= 2048 - 8
    # OpenAI's Responses API asks for the same with truncation: auto.
    answer = client.responses.create(model=MODEL, input=messages[1:], instructions=messages[0]["content"],
                                     max_output_tokens=8, temperature=0, truncation="auto", store=False)
    assert answer.truncation == "auto" and answer.model_extra["x_localchat"]["notes"][0].endswith("context")
    bad = httpx.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": messages[-1:],
                                                         "x_localchat": {"context_overflow": "sideways"}}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "x_localchat.context_overflow"
