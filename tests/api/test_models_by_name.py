"""Models by name, on demand: a request naming another model on this machine loads it in a runner of its
own (runners/pool.py), /v1/models and /api/ps say which are loaded, an idle one unloads after its
keep-alive (Ollama's keep_alive included), and a machine without room says so with a 503 or makes room
by unloading the least recently used idle model."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import psutil
import pytest

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.api.protocols.ollama import keep_alive_s
from localchat.assemble import open_supervised
from localchat.config import Settings
from localchat.errors import RequestError
from localchat.models.resolve import servable_files
from localchat.paths import models_dir
from localchat.planning.fit import ModelSize
from localchat.runners.pool import Runners
from ui_server import serve_in_thread

SERVED = "smollm2-135m"
N_CTX = 1024


def settings_of(path: Path) -> Settings:
    return Settings(model=str(path), n_ctx=N_CTX, n_threads=1, speculation=False, kv_disk_mb=0)


def needs(path: Path) -> int:
    return ModelSize.of(path).bytes_for(N_CTX)


def until(check: Callable[[], bool], what: str, limit_s: float = 300.0) -> None:
    """Wait for `check()`; the limit only stops a broken run from hanging."""
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)


def name_of(path: Path) -> str:
    return next(name for name, found in servable_files().items() if found.resolve() == path.resolve())


@pytest.fixture(scope="module")
def served(model_path: Path) -> Iterator:
    with open_supervised(settings_of(model_path)) as engine:
        yield engine


def serve(engine, runners: Runners) -> tuple[str, Callable[[], None]]:
    url, server, thread = serve_in_thread(create_app(LocalService(engine, SERVED, runners=runners)))

    def stop() -> None:
        server.should_exit = True
        thread.join(10)
        runners.close()
    return url, stop


def ask(url: str, model: str, **extra) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", timeout=600, json={
        "model": model, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 4,
        "temperature": 0, **extra})


def listed(url: str) -> dict[str, bool]:
    return {m["id"]: m["x_localchat"]["loaded"] for m in httpx.get(f"{url}/v1/models").json()["data"]}


def running(url: str) -> dict[str, str]:
    return {m["name"]: m["expires_at"] for m in httpx.get(f"{url}/api/ps").json()["models"]}


def test_a_request_naming_another_model_loads_it_and_an_idle_one_unloads(served, q8_model_path: Path):
    runners = Runners(lambda path: open_supervised(settings_of(path)), needs, keep_alive_s=600)
    url, stop = serve(served, runners)
    other = name_of(q8_model_path)
    try:
        assert listed(url)[SERVED] is True and listed(url)[other] is False
        assert list(running(url)) == [f"{SERVED}:latest"]

        reply = ask(url, other)
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == other and reply.json()["choices"][0]["message"]["content"]
        assert listed(url)[other] is True
        pid = runners.engine_of(other).pid
        assert psutil.pid_exists(pid) and pid != served.pid  # a runner of its own
        expires = running(url)[other if ":" in other else f"{other}:latest"]
        assert expires != "2999-12-31T23:59:59Z"  # it unloads when idle; the served model never does

        # Ollama's keep_alive 0: unloaded as soon as its answer ends, its process gone.
        done = httpx.post(f"{url}/api/generate", timeout=600, json={
            "model": other, "prompt": "Say hi.", "stream": False, "keep_alive": 0, "options": {"num_predict": 2}})
        assert done.status_code == 200, done.text
        until(lambda: listed(url)[other] is False, "the model unloaded after its keep_alive of 0")
        until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
              "the runner process ended")
        assert listed(url)[SERVED] is True  # the served model stays

        # Ollama's way to load a model (a request with nothing to generate), then to unload it.
        loaded = httpx.post(f"{url}/api/generate", timeout=600, json={"model": other, "keep_alive": "1h"}).json()
        assert loaded["done_reason"] == "load" and listed(url)[other] is True
        unloaded = httpx.post(f"{url}/api/generate", timeout=600, json={"model": other, "keep_alive": 0}).json()
        assert unloaded["done_reason"] == "unload"
        until(lambda: listed(url)[other] is False, "the model unloaded when asked")
    finally:
        stop()


def test_the_keep_alive_setting_unloads_a_model_idle_that_long(served, q8_model_path: Path):
    runners = Runners(lambda path: open_supervised(settings_of(path)), needs, keep_alive_s=1.0)
    url, stop = serve(served, runners)
    other = name_of(q8_model_path)
    try:
        assert ask(url, other).status_code == 200
        until(lambda: listed(url)[other] is False, "the idle model unloaded after its keep-alive")
    finally:
        stop()


def test_without_room_a_request_gets_a_503_or_the_least_recently_used_idle_model_makes_way(
        served, q8_model_path: Path):
    # A described machine with room for one of the two other models at a time: its free memory is what
    # it has less what the loaded runners hold (we have no such small machine to run on).
    twin = models_dir() / "twin-of-the-q8.gguf"  # a second file where localchat keeps its models
    twin.write_bytes(q8_model_path.read_bytes())
    room_for_one = int(needs(q8_model_path) * 1.5)
    runners: Runners

    def free() -> int:
        return room_for_one - sum(needs(Path(runners.engine_of(n).worker.model_path)) for n in runners.loaded())

    runners = Runners(lambda path: open_supervised(settings_of(path)), needs, keep_alive_s=600, free=free,
                      room=lambda free: free)
    url, stop = serve(served, runners)
    first = name_of(q8_model_path)
    try:
        assert ask(url, first).status_code == 200
        try:
            second = ask(url, "twin-of-the-q8")  # the first one is idle: it is unloaded to make room
            assert second.status_code == 200, second.text
            assert set(runners.loaded()) == {"twin-of-the-q8"}

            tiny = Runners(lambda path: open_supervised(settings_of(path)), needs, keep_alive_s=600,
                           free=lambda: needs(q8_model_path) // 2, room=lambda free: free)
            url2, stop2 = serve(served, tiny)
            try:
                refused = ask(url2, first)
                assert refused.status_code == 503
                message = refused.json()["error"]["message"]
                assert "no memory to load" in message and "free" in message
                assert ask(url2, SERVED).status_code == 200  # the served model answers on
            finally:
                stop2()
        finally:
            twin.unlink()
    finally:
        stop()


def test_an_unknown_model_name_is_a_404_that_points_at_the_list(served):
    runners = Runners(lambda path: open_supervised(settings_of(path)), needs, keep_alive_s=600)
    url, stop = serve(served, runners)
    try:
        reply = ask(url, "/etc/passwd")  # names only: never a path
        assert reply.status_code == 404 and "GET /v1/models" in reply.json()["error"]["message"]
    finally:
        stop()


def test_ollama_keep_alive_reads_seconds_and_durations():
    assert keep_alive_s(None) is None
    assert keep_alive_s(0) == 0 and keep_alive_s("0") == 0
    assert keep_alive_s(30) == 30 and keep_alive_s("5m") == 300 and keep_alive_s("1h30m") == 5400
    assert keep_alive_s(-1) == float("inf") and keep_alive_s("-1m") == float("inf")
    with pytest.raises(RequestError, match="not a duration"):
        keep_alive_s("soon")
