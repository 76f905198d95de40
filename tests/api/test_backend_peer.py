"""`--backend URL` against a server no one here wrote: llama-cpp-python's, started on loopback with the
embedded model. Tools, tool-call deltas, response_format and logprobs pass through unchanged."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest

from localchat.api.app import create_app
from localchat.api.proxy import ProxyService
from test_agent_api import streamed_calls
from ui_server import serve_in_thread

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
REQUESTS = {
    "tools": {"tools": [WEATHER], "tool_choice": NAMED},
    # llama-cpp-python's own spelling of a schema-constrained answer.
    "json_schema": {"response_format": {"type": "json_object", "schema": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    "logprobs": {"logprobs": True, "top_logprobs": 2},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def peer(model_path: Path, tmp_path_factory) -> Iterator[str]:
    port = free_port()
    log = (tmp_path_factory.mktemp("peer") / "server.log").open("wb")  # a pipe nobody reads would fill and stall it
    command = [sys.executable, str(Path(__file__).with_name("peer_server.py")), "--model", str(model_path),
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
               "--chat_format", "chatml-function-calling"]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        while True:  # loading takes what it takes on a busy machine; a crash ends the wait at once
            if process.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {Path(log.name).read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/v1/models", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(30)
        log.close()


@pytest.fixture(scope="module")
def proxy(peer: str) -> Iterator[str]:
    url, server, thread = serve_in_thread(create_app(ProxyService(peer + "/v1")))
    yield url
    server.should_exit = True
    thread.join(10)


def same(value: Any) -> Any:
    """A response without what differs between two identical requests (ids, timestamps)."""
    if isinstance(value, dict):
        return {k: same(v) for k, v in value.items() if k not in ("id", "created")}
    if isinstance(value, list):
        return [same(v) for v in value]
    return value


def events(url: str, body: dict) -> list[Any]:
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as reply:
        assert reply.status_code == 200
        lines = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
    return [same(json.loads(line)) if line != "[DONE]" else line for line in lines]


@pytest.mark.parametrize("kind", sorted(REQUESTS))
@pytest.mark.parametrize("stream", [False, True])
def test_the_peers_answers_pass_through_unchanged(peer: str, proxy: str, kind: str, stream: bool):
    body = {"messages": ASK, "max_tokens": 24, "temperature": 0, "seed": 1, "stream": stream, **REQUESTS[kind]}
    if stream:
        direct, relayed = events(peer, body), events(proxy, body)
    else:
        direct = same(httpx.post(f"{peer}/v1/chat/completions", json=body, timeout=120).json())
        relayed = same(httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=120).json())
    assert relayed == direct
    text = json.dumps(relayed)
    assert {"tools": '"tool_calls"', "json_schema": '"content"', "logprobs": '"top_logprobs"'}[kind] in text


def test_openai_client_through_the_proxy(proxy: str):
    client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0, timeout=120)
    ask = dict(model="any", messages=ASK, tools=[WEATHER], tool_choice=NAMED, max_tokens=24, temperature=0)
    whole = client.chat.completions.create(**ask).choices[0].message.tool_calls[0]
    calls, finish, _ = streamed_calls(client.chat.completions.create(**ask, stream=True))
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == \
        [(whole.function.name, json.loads(whole.function.arguments))]
    assert json.loads(whole.function.arguments)["city"]
