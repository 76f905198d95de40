"""A reply that max_tokens cuts in the middle of its tool calls, through every protocol's own client on the
embedded model: the calls that closed come back with the protocol's "cut" reason, never a server error.

SmolLM2 under a required, parallel tools grammar keeps writing calls, so a small max_tokens always cuts
one in the middle."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest

from conftest import MODEL
from test_agent_api import ASK, TIME, WEATHER, WEATHER_ARGS, streamed_calls

CUT = dict(model=MODEL, messages=ASK, tools=[WEATHER, TIME], tool_choice="required", temperature=0, max_tokens=60)
SCHEMAS = {"get_weather": WEATHER_ARGS, "get_time": TIME["function"]["parameters"]}


@pytest.fixture()
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_chat_completions_whole_and_streamed_end_with_length_and_the_closed_calls(client: openai.OpenAI):
    whole = client.chat.completions.create(**CUT).choices[0]
    assert whole.finish_reason == "length"
    made = whole.message.tool_calls or []
    for call in made:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    calls, finish, _ = streamed_calls(client.chat.completions.create(**CUT, stream=True))
    assert finish == "length"
    # The streamed reply carries the same closed calls first (and may have begun the one that was cut).
    assert [(c["name"], c["arguments"]) for c in calls[:len(made)]] == \
        [(m.function.name, m.function.arguments) for m in made]


def test_responses_say_incomplete(client: openai.OpenAI):
    reply = client.responses.create(model=MODEL, input=ASK[0]["content"], tool_choice="required",
                                    tools=[{"type": "function", **f["function"]} for f in (WEATHER, TIME)],
                                    temperature=0, max_output_tokens=60)
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    for item in reply.output:
        if item.type == "function_call":
            jsonschema.validate(json.loads(item.arguments), SCHEMAS[item.name])


def test_anthropic_says_max_tokens(url: str):
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120)
    tools = [{"name": f["function"]["name"], "description": f["function"]["description"],
              "input_schema": f["function"]["parameters"]} for f in (WEATHER, TIME)]
    reply = client.messages.create(model=MODEL, max_tokens=60, messages=ASK, tools=tools,
                                   tool_choice={"type": "any"}, extra_body={"temperature": 0})
    assert reply.stop_reason == "max_tokens"
    for block in reply.content:
        if block.type == "tool_use":
            jsonschema.validate(block.input, SCHEMAS[block.name])
