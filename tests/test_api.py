"""The OpenAI-compatible API on a real socket, a real engine and the official `openai` client."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import openai
import pytest
import uvicorn
from ui_server import serve_in_thread, stop_servers

from localchat.api.app import ServeOptions, bind_socket, create_app
from localchat.api.local import LocalService
from localchat.api.proxy import ProxyService
from localchat.cli import main
from localchat.errors import ConfigError
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig

MODEL = "smollm2-135m"
KEY = "test-key-5f2a"
QUESTION = [{"role": "user", "content": "Name the capital city of France."}]
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"  # continues for as long as it is allowed to


@pytest.fixture(scope="module")
def engine(model_path: Path) -> Iterator[Engine]:
    # Deterministic: a prompt reused from the KV cache gives the same greedy tokens as a fresh one.
    # One thread: on a busy shared machine, two spinning threads can each wait on the other.
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_threads=1, deterministic=True))
    with Engine.load(model_path, config) as engine:
        yield engine


def start(service, api_key: str | None = None) -> tuple[str, uvicorn.Server, threading.Thread]:
    return serve_in_thread(create_app(service, api_key))


@pytest.fixture(scope="module")
def servers(engine: Engine) -> Iterator[dict[str, str]]:
    """One engine behind four servers: open, keyed, and proxies forwarding to each of them."""
    running = [start(LocalService(engine, MODEL)), start(LocalService(engine, MODEL), api_key=KEY)]
    running.append(start(ProxyService(running[0][0])))
    running.append(start(ProxyService(running[1][0], api_key=KEY)))
    yield {"open": running[0][0], "keyed": running[1][0], "proxy": running[2][0], "keyed_proxy": running[3][0]}
    stop_servers(running)


def client_for(url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


@pytest.fixture()
def client(servers: dict[str, str]) -> openai.OpenAI:
    return client_for(servers["open"])


def ask(client: openai.OpenAI, **extra):
    extra.setdefault("max_tokens", 24)
    extra.setdefault("messages", QUESTION)
    return client.chat.completions.create(model=MODEL, temperature=0, **extra)


def wait_idle(engine: Engine, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while engine.scheduler.running or engine.scheduler.waiting:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def streamed_text(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_models_lists_the_served_model(client: openai.OpenAI):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL]
    assert models[0].object == "model" and models[0].owned_by == "localchat"
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-imaginary")


def test_chat_streams_the_same_text_as_it_answers_whole(client: openai.OpenAI):
    whole = ask(client)
    text = whole.choices[0].message.content
    assert "Paris" in text
    assert whole.id.startswith("chatcmpl-") and whole.object == "chat.completion"
    assert whole.model == MODEL and whole.created > 1_700_000_000
    assert whole.choices[0].message.role == "assistant" and whole.choices[0].finish_reason in ("stop", "length")
    usage = whole.usage
    assert usage.prompt_tokens > 5 and 0 < usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert whole.model_extra["x_localchat"]["tokens_per_s"] > 0

    chunks = list(ask(client, stream=True, stream_options={"include_usage": True}))
    assert streamed_text(chunks) == text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [whole.choices[0].finish_reason]
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].object == "chat.completion.chunk"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == usage.prompt_tokens


def test_max_tokens_ends_with_length(client: openai.OpenAI):
    for limit in ({"max_tokens": 3}, {"max_completion_tokens": 3, "max_tokens": None}):
        answer = ask(client, **limit)
        assert answer.choices[0].finish_reason == "length"
        assert answer.usage.completion_tokens == 3


def test_stop_strings_end_the_answer_before_them(client: openai.OpenAI):
    text = ask(client).choices[0].message.content
    word = "Paris" if "Paris" in text else text.split()[2]
    expected = text[: text.index(word)]
    answer = ask(client, stop=[word, "never-seen-stop"])
    assert answer.choices[0].message.content == expected and answer.choices[0].finish_reason == "stop"
    chunks = list(ask(client, stop=word, stream=True))
    assert streamed_text(chunks) == expected


def test_text_completions_whole_and_streamed(client: openai.OpenAI):
    whole = client.completions.create(model=MODEL, prompt=COUNTING, max_tokens=8, temperature=0)
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    assert whole.choices[0].text.strip().startswith("13")
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 8
    chunks = list(client.completions.create(model=MODEL, prompt=COUNTING, max_tokens=8, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_bad_requests_are_openai_errors(client: openai.OpenAI, servers: dict[str, str]):
    cases = [
        (dict(n=9), "n", None),
        (dict(max_tokens=-1), "max_tokens", None),
        (dict(temperature=7), "temperature", None),
        (dict(messages=[]), "messages", None),
        (dict(messages=[{"role": "user", "content": "word " * 3000}]), "messages", "context_length_exceeded"),
    ]
    for extra, param, code in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=MODEL, **{"messages": QUESTION, "max_tokens": 8, **extra})
        error = caught.value
        assert error.status_code == 400 and error.type == "invalid_request_error", extra
        assert error.param == param, (extra, error.body)
        if code:
            assert error.code == code
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-imaginary", messages=QUESTION, max_tokens=4)
    assert caught.value.code == "model_not_found"

    url = f"{servers['open']}/v1/chat/completions"
    for body in (b"{not json", b'{"model": "x", "messages": "hi"}', b"[1, 2]", b"{}"):
        reply = httpx.post(url, content=body, headers={"Content-Type": "application/json"})
        assert reply.status_code == 400, body
        assert reply.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(f"{servers['open']}/v1/embeddings").status_code == 404


def test_api_key_is_required_when_set(servers: dict[str, str]):
    url = servers["keyed"]
    for key in ("wrong-key", KEY + "x", KEY[:-1]):
        with pytest.raises(openai.AuthenticationError) as caught:
            client_for(url, key).models.list()
        assert caught.value.code == "invalid_api_key"
    reply = httpx.post(f"{url}/v1/chat/completions", json={"messages": QUESTION})
    assert reply.status_code == 401 and reply.headers["www-authenticate"] == "Bearer"
    assert reply.json()["error"]["code"] == "invalid_api_key"
    assert ask(client_for(url, KEY), max_tokens=2).usage.completion_tokens == 2


def test_listening_beyond_loopback_needs_a_key(capsys: pytest.CaptureFixture[str]):
    for args, message in [(["serve", "--listen"], "set LOCALCHAT_API_KEY"),
                          (["serve", "--host", "0.0.0.0", "--api-key", KEY], "add --listen"),
                          (["serve", "--host", "192.168.1.5"], "add --listen")]:
        assert main(args) == 1
        assert message in capsys.readouterr().err, args
    assert ServeOptions(listen=True, api_key=KEY).bind_host() == "0.0.0.0"
    assert ServeOptions().bind_host() == "127.0.0.1"


def test_a_taken_default_port_moves_to_the_next_free_one():
    taken = bind_socket("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        moved = bind_socket("127.0.0.1", None, default_port=port)
        assert moved.getsockname()[1] > port
        moved.close()
        with pytest.raises(ConfigError, match="in use"):
            bind_socket("127.0.0.1", port)
    finally:
        taken.close()


def test_a_client_leaving_mid_answer_cancels_it(servers: dict[str, str], engine: Engine):
    body = {"model": MODEL, "prompt": COUNTING, "max_tokens": 1500, "temperature": 0}
    for server in ("open", "proxy"):  # the proxy passes the disconnect on to its backend
        steps = engine.steps
        # A generous read timeout: on a busy machine the first chunk may take longer than httpx's 5 s.
        with httpx.stream("POST", f"{servers[server]}/v1/completions", json={**body, "stream": True},
                          timeout=120) as reply:
            for line in reply.iter_lines():
                if line.startswith("data: {"):
                    break
            assert engine.scheduler.running, "the request should still be generating"
        assert wait_idle(engine, seconds=120), f"{server}: the engine kept generating for a client that left"
        assert engine.steps - steps < 1000, f"{server}: the request ran (nearly) to its end after its client left"
    # Without streaming, a client that times out has left too. Cancelled, the request ends long
    # before its 1,500 tokens (counted in engine steps, so a busy machine cannot fake a pass).
    steps = engine.steps
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{servers['open']}/v1/completions", json=body, timeout=1.0)
    assert wait_idle(engine, seconds=120), "a non-streaming request outlived its client"
    assert engine.steps - steps < 1000, "the request ran (nearly) to its end after its client left"


def test_backend_proxy_forwards_everything(servers: dict[str, str], client: openai.OpenAI):
    proxied = client_for(servers["proxy"])
    assert [m.id for m in proxied.models.list().data] == [MODEL]
    assert proxied.models.retrieve(MODEL).id == MODEL
    direct = ask(client).choices[0].message.content
    assert ask(proxied).choices[0].message.content == direct
    assert streamed_text(ask(proxied, stream=True)) == direct
    with pytest.raises(openai.BadRequestError) as caught:
        ask(proxied, n=9)
    assert caught.value.param == "n"
    # The proxy's own key for a keyed backend; its clients need none.
    assert ask(client_for(servers["keyed_proxy"]), max_tokens=2).usage.completion_tokens == 2
    url, server, thread = start(ProxyService("http://127.0.0.1:9/v1"))  # nothing listens on port 9
    try:
        with pytest.raises(openai.InternalServerError) as caught:
            client_for(url).models.list()
    finally:
        server.should_exit = True
        thread.join(10)
    assert caught.value.status_code == 502 and caught.value.code == "backend_unavailable"


def test_serve_command_prints_its_url_and_serves(servers: dict[str, str]):
    process = subprocess.Popen([sys.executable, "-m", "localchat", "serve", "--port", "0", "--backend",
                                f"{servers['open']}/v1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert "http://127.0.0.1:" in line, (line, process.stderr.read() if process.poll() is not None else "")
        url = line.split("API at ")[1].split(",")[0]
        assert [m["id"] for m in httpx.get(f"{url}/models", timeout=10).json()["data"]] == [MODEL]
    finally:
        process.terminate()
        process.wait(10)


def test_the_default_system_prompt_goes_to_chat_requests_that_bring_none(engine, servers):
    prompt = "You are a ship's cook. Mention soup in every answer."
    url, server, thread = start(LocalService(engine, MODEL, system_prompt=prompt))
    try:
        given, plain = client_for(url), client_for(servers["open"])
        mine = [{"role": "system", "content": prompt}, *QUESTION]
        with_default = ask(given)
        same = ask(plain, messages=mine)
        assert with_default.usage.prompt_tokens == same.usage.prompt_tokens
        assert with_default.choices[0].message.content == same.choices[0].message.content
        # A request's own system turn (or developer turn) is kept, not joined by the default one.
        own = [{"role": "developer", "content": "Answer in one word."}, *QUESTION]
        assert ask(given, messages=own).usage.prompt_tokens == ask(plain, messages=own).usage.prompt_tokens
        # Without it the template's own default system turn (SmolLM2 has one) would be there instead.
        assert ask(plain).usage.prompt_tokens != with_default.usage.prompt_tokens
    finally:
        server.should_exit = True
        thread.join(10)
