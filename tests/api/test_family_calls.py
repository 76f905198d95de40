"""Each family's own tool-call form end to end on the real runtime: SmolLM2 copied with a family's real chat
template (its markers are plain text to SmolLM2's vocabulary, which is all the grammar and the parser need),
asked with tool_choice required through the `openai` client. The grammar writes the family's form, the
family's parser reads the call back, whole and streamed, and the result goes back through the template."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import jsonschema
import openai
import pytest
from test_agent_api import ASK, TIME, WEATHER, WEATHER_ARGS, streamed_calls
from ui_server import serve_in_thread

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
FAMILIES = ["Qwen3-Coder.jinja", "GLM-4.6.jinja", "Kimi-K2-Instruct.jinja", "deepseek-ai-DeepSeek-V3.1.jinja",
            "deepseek-ai-DeepSeek-V3.2.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja", "openai-gpt-oss-120b.jinja",
            "google-gemma-4-31B-it.jinja", "Kimi-K3.jinja", "llama-4-pythonic.jinja"]
SCHEMAS = {"get_weather": WEATHER_ARGS, "get_time": TIME["function"]["parameters"]}
MARKERS = ("<tool_call>", "<function=", "<arg_key>", "<|tool_call", "tool▁call", "｜DSML｜", "[TOOL_CALLS]", "[ARGS]",
           "<|channel|>", "<|message|>", "to=functions", '<|"|>', "call:", "<|open|>", "<|sep|>", "get_weather(")
MODEL = "smollm2-family"


@pytest.fixture(scope="module", params=FAMILIES)
def client(request, model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    copy = tmp_path_factory.mktemp("family") / "smollm2-family.gguf"
    tool = Path(sys.executable).with_name("gguf-new-metadata")
    subprocess.run([str(tool), "--chat-template-file", str(TEMPLATES / request.param), str(model_path), str(copy)],
                   check=True, capture_output=True)
    config = EngineConfig(worker=WorkerConfig(n_ctx=4096, n_threads=1, deterministic=True))
    with Engine.load(copy, config) as engine:
        url, server, thread = serve_in_thread(create_app(LocalService(engine, MODEL)))
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=180)
        server.should_exit = True
        thread.join(10)


def test_a_required_call_in_the_familys_own_form_whole_streamed_and_answered(client: openai.OpenAI):
    asked = dict(model=MODEL, messages=ASK, tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False,
                 temperature=0, max_tokens=320, reasoning_effort="none")
    whole = client.chat.completions.create(**asked).choices[0]
    assert whole.finish_reason == "tool_calls", whole
    assert not any(m in (whole.message.content or "") for m in MARKERS)
    [call] = whole.message.tool_calls
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    calls, finish, content = streamed_calls(client.chat.completions.create(**asked, stream=True))
    assert finish == "tool_calls" and not content.strip()
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == \
        [(call.function.name, json.loads(call.function.arguments))]
    # The result goes back through the family's template, and the model answers from it.
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
               {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 C."}]
    answered = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER, TIME], temperature=0,
                                              max_tokens=16, tool_choice="none", reasoning_effort="none")
    assert answered.choices[0].finish_reason in ("stop", "length") and answered.usage.prompt_tokens > 50


def test_parallel_calls_left_at_the_default_never_fail(client: openai.OpenAI):
    reply = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
                                           temperature=0, max_tokens=160, reasoning_effort="none")
    choice = reply.choices[0]
    assert choice.finish_reason in ("tool_calls", "length")
    for call in choice.message.tool_calls or []:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
