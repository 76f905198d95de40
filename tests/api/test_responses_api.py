"""OpenAI's Responses API (/v1/responses) on the real engine, driven by the official `openai` client and
the `openai-agents` SDK: responses whole and streamed (the typed event sequence), a function-call round
trip by previous_response_id and by the whole input, structured output, stored responses (GET, DELETE,
store: false, the bounds), and what cannot be done refused with OpenAI's errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import agents
import httpx
import jsonschema
import openai
import pytest

from localchat.api.response_store import ResponseStore
from conftest import MODEL

WEATHER_ARGS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"]}
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather forecast for a city.",
           "parameters": WEATHER_ARGS}
ASK = "What is the weather in Paris tomorrow?"
CAPITAL = "Name the capital city of France."


@pytest.fixture()
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_a_response_whole_and_streamed_as_the_typed_events(client: openai.OpenAI):
    whole = client.responses.create(model=MODEL, input=CAPITAL, instructions="Answer in one sentence.",
                                    max_output_tokens=16, temperature=0)
    assert whole.id.startswith("resp_") and whole.object == "response" and whole.status == "completed"
    assert "Paris" in whole.output_text and [item.type for item in whole.output] == ["message"]
    assert whole.usage.input_tokens > 10 and 0 < whole.usage.output_tokens <= 16
    assert whole.usage.total_tokens == whole.usage.input_tokens + whole.usage.output_tokens
    assert whole.instructions == "Answer in one sentence."
    events = list(client.responses.create(model=MODEL, input=CAPITAL, instructions="Answer in one sentence.",
                                          max_output_tokens=16, temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"} and len(kinds) > 10
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    completed = events[-1].response
    assert deltas == whole.output_text == completed.output_text
    assert events[2].item.id == completed.output[0].id == events[-2].item.id  # one item, named alike throughout


def test_a_function_call_round_trip_by_previous_response_id_and_by_the_whole_input(client: openai.OpenAI):
    named = {"type": "function", "name": "get_weather"}
    first = client.responses.create(model=MODEL, input=ASK, tools=[WEATHER], tool_choice=named, temperature=0,
                                    parallel_tool_calls=False, max_output_tokens=64)
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER_ARGS)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 degrees."}
    # The tools stay offered (the call in the history needs them); "none" asks for the answer in words.
    went_on = client.responses.create(model=MODEL, previous_response_id=first.id, input=[result], tools=[WEATHER],
                                      tool_choice="none", temperature=0, max_output_tokens=24)
    assert went_on.status in ("completed", "incomplete") and went_on.output_text.strip()
    assert went_on.previous_response_id == first.id
    # The same conversation sent whole, as a client that keeps its own history does: the same answer.
    sent_whole = client.responses.create(
        model=MODEL, input=[{"role": "user", "content": ASK}, call.model_dump(exclude_none=True), result],
        tools=[WEATHER], tool_choice="none", temperature=0, max_output_tokens=24, store=False)
    assert sent_whole.output_text == went_on.output_text
    # Streamed: the arguments arrive in pieces, and their whole is the call's.
    events = list(client.responses.create(model=MODEL, input=ASK, tools=[WEATHER], tool_choice=named,
                                          parallel_tool_calls=False, temperature=0, max_output_tokens=64,
                                          stream=True))
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert len(pieces) > 3 and "".join(pieces) == done.arguments == call.arguments
    assert events[-1].response.output[0].arguments == call.arguments


def test_structured_output_follows_text_format(client: openai.OpenAI):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "population": {"type": "integer", "minimum": 0}},
              "required": ["city", "population"], "additionalProperties": False}
    for temperature in (0, 0.8, 1.2):
        reply = client.responses.create(model=MODEL, input="Describe Paris as JSON.", temperature=temperature,
                                        max_output_tokens=64, text={"format": {"type": "json_schema",
                                                                               "name": "city", "schema": schema}})
        jsonschema.validate(json.loads(reply.output_text), schema)


def test_stored_responses_are_read_deleted_and_not_kept_when_asked(client: openai.OpenAI):
    kept = client.responses.create(model=MODEL, input=CAPITAL, max_output_tokens=4, temperature=0)
    again = client.responses.retrieve(kept.id)
    assert again.model_dump() == kept.model_dump()
    assert client.responses.delete(kept.id) is None  # the client reads the deletion's 200 as done
    with pytest.raises(openai.NotFoundError, match="no stored response"):
        client.responses.retrieve(kept.id)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model=MODEL, input="And Spain?", previous_response_id=kept.id, max_output_tokens=4)
    unkept = client.responses.create(model=MODEL, input=CAPITAL, max_output_tokens=4, store=False)
    assert unkept.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("../../conversations")  # an id is only ever looked up, never a path


def test_what_cannot_be_done_is_refused_with_openais_errors(client: openai.OpenAI, url: str):
    refusals = [({"tools": [{"type": "web_search"}]}, "tools.0", "built-in tool"),
                ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
                 "input.0.content.0", "text only"),
                ({"background": True}, "background", "background runs"),
                ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0.type", "item_reference"),
                ({"tool_choice": {"type": "file_search"}}, "tool_choice", "file_search"),
                ({"max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1")]
    for extra, param, words in refusals:
        body = {"model": MODEL, "input": CAPITAL, **extra}
        reply = httpx.post(url + "/v1/responses", json=body, timeout=60)
        error = reply.json()["error"]
        assert reply.status_code == 400 and error["param"] == param and words in error["message"], (extra, error)
    short = client.responses.create(model=MODEL, input="Count from one to twenty in words.", max_output_tokens=3,
                                    temperature=0)
    assert short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens"
    assert short.output[0].status == "incomplete" and short.usage.output_tokens == 3


def test_the_store_keeps_the_newest_within_its_bounds(tmp_path: Path):
    store = ResponseStore(tmp_path / "responses.sqlite3", max_stored=3, max_bytes=10_000)
    for i in range(5):
        store.put({"id": f"resp_{i}"}, [{"role": "user", "content": str(i)}])
    assert len(store) == 3 and store.get("resp_1") is None and store.get("resp_4")[1][0]["content"] == "4"
    store.put({"id": "resp_big"}, [{"role": "user", "content": "x" * 6_000}])
    store.put({"id": "resp_bigger"}, [{"role": "user", "content": "y" * 6_000}])
    assert store.get("resp_big") is None and store.get("resp_bigger") is not None  # the oldest went first
    assert oct((tmp_path / "responses.sqlite3").stat().st_mode & 0o777) == "0o600"


def test_an_openai_agents_agent_with_one_function_tool_completes_a_run(url: str):
    agents.set_tracing_disabled(True)  # its traces would go to OpenAI's servers
    asked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather forecast for a city."""
        asked.append(city)
        return f"Sunny and 21 degrees in {city}."

    model = agents.OpenAIResponsesModel(model=MODEL, openai_client=openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120))
    # Required on the first turn; the SDK sets it back to auto after a call, so the agent then answers.
    settings = agents.ModelSettings(tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=48)
    agent = agents.Agent(name="forecaster", instructions="Answer weather questions with the tool.", model=model,
                         tools=[get_weather], model_settings=settings)
    async def both() -> tuple:
        result = await agents.Runner.run(agent, ASK, max_turns=4)
        streaming = agents.Runner.run_streamed(agent, ASK, max_turns=4)
        seen = [event.type async for event in streaming.stream_events()]
        return result, streaming.final_output, seen

    result, streamed, seen = asyncio.run(both())  # one event loop: the client's connections belong to it
    assert asked and isinstance(result.final_output, str) and result.final_output.strip()
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"] and kinds[-1] == "message_output_item"
    assert streamed == result.final_output and "raw_response_event" in seen and len(asked) == 2
