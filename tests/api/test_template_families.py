"""Each tool-calling family on a tiny random-weight GGUF with SmolLM2's vocabulary and that family's
chat template: the server finds the family in the file, renders past calls its way, and reads back
the calls the grammar makes the model write, whole and streamed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import gguf
import jsonschema
import openai
import pytest
from family_templates import FAMILIES, FORMAT_OF
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata
from test_agent_api import streamed_calls
from ui_server import serve_in_thread

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.api.tool_formats import detect
from localchat.models.derive import random_weights_like
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig

ARGS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                         "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                           "parameters": ARGS}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def with_template(source: Path, template: str, target: Path) -> Path:
    """A copy of the GGUF `source` whose chat template is `template`."""
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(target, arch=reader.fields["general.architecture"].contents())
    details = {gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(gguf.GGUFValueType.STRING, template)}
    copy_with_new_metadata(reader, writer, details, [])
    return target


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, model_path: Path, tmp_path_factory) -> Iterator[tuple[str, Engine, openai.OpenAI]]:
    tiny = random_weights_like(model_path)
    path = with_template(tiny, FAMILIES[request.param], tmp_path_factory.mktemp("family") / f"{request.param}.gguf")
    config = EngineConfig(worker=WorkerConfig(n_ctx=1024, n_threads=1, deterministic=True))
    with Engine.load(path, config) as engine:
        url, server, thread = serve_in_thread(create_app(LocalService(engine, "tiny")))
        yield request.param, engine, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        server.should_exit = True
        thread.join(10)


def test_the_family_is_found_in_the_file(family):
    name, engine, _ = family
    assert engine.template.source == FAMILIES[name]
    assert detect(engine.template.source).name == FORMAT_OF[name]


def test_required_calls_parse_whole_and_streamed(family):
    _, _, client = family
    ask = dict(model="tiny", messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
               temperature=0, max_tokens=160)
    whole = client.chat.completions.create(**ask).choices[0]
    assert whole.finish_reason == "tool_calls"
    (call,) = whole.message.tool_calls
    schema = ARGS if call.function.name == "get_weather" else TOOLS[1]["function"]["parameters"]
    jsonschema.validate(json.loads(call.function.arguments), schema)
    calls, finish, _ = streamed_calls(client.chat.completions.create(**ask, stream=True))
    assert finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for c in calls] == [(call.function.name, call.function.arguments)]


def test_a_named_function_is_the_one_called(family):
    _, _, client = family
    named = {"type": "function", "function": {"name": "get_time"}}
    reply = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice=named,
                                           parallel_tool_calls=False, temperature=0.9, seed=3,
                                           max_tokens=64).choices[0]
    assert reply.finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in reply.message.tool_calls] == [("get_time", {})]


def test_past_calls_and_results_go_back_in_the_familys_own_form(family):
    name, engine, client = family
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                     {"role": "user", "content": "And tomorrow?"}]
    reply = client.chat.completions.create(model="tiny", messages=history, tools=TOOLS, tool_choice="none",
                                           temperature=0, max_tokens=4)
    assert reply.choices[0].finish_reason in ("stop", "length")
    from localchat.api.constraints import constrain

    plan = constrain([dict(m, content=m["content"] or "") for m in history], engine.template.source, TOOLS, "auto", None, None)
    prompt = engine.template.render(plan.messages, tools=plan.tools)
    written = {"hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
               "llama3": '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}',
               "mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}'}
    assert written[FORMAT_OF[name]] in prompt and "sunny" in prompt
