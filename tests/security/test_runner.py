"""Nothing takes the server down: the model runs in a supervised runner process (localchat/runners/),
so a grammar or schema that stalls llama.cpp, a model file that aborts it and a killed runner cost
the requests to blame, while the server keeps answering everyone else."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Iterator

import gguf
import httpx
import pytest
from conftest import MODEL, wait_until
from ui_server import serve_in_thread

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.assemble import open_engine, open_supervised
from localchat.config import Settings
from localchat.errors import EngineError, ModelLoadError
from localchat.models import bad_files
from localchat.models.derive import random_weights_like
from localchat.models.importers import LocalModel
from localchat.runners.supervisor import SupervisedEngine
from localchat.runtime.constraints.grammar import Grammar
from localchat.runtime.engine import Request
from localchat.runtime.sampling import SamplingParams
from localchat.ui.chat.session import Runtime
from localchat.ui.models.models_html import local_table

# The grammar: every token doubles the matcher's stacks (10 tokens 12.8 s, 14 over a minute).
AMBIGUOUS = 'root ::= s\ns ::= "a" s "b" | "a" s "c"'
# A schema that passes every size, depth and count check and converts to an ambiguous grammar: two
# alternatives that read the same nonempty arrays of themselves, so every "[" doubles the matcher's
# stacks and no answer can end.
_NESTED = {"type": "array", "items": {"$ref": "#/$defs/x"}, "minItems": 1}
RECURSIVE = {"$defs": {"x": {"anyOf": [_NESTED, dict(_NESTED)]}}, "type": "object",
             "properties": {"v": {"$ref": "#/$defs/x"}}, "required": ["v"]}
STALL_FLOOR_S = 10.0  # the watchdog's patience here: 100 times this model's steps, even on a busy machine


def settings_of(path: Path) -> Settings:
    # Deterministic: an answer sent again after a restart goes on exactly as it would have.
    return Settings(model=str(path), n_ctx=2048, n_threads=1, speculation=False, kv_disk_mb=0, deterministic=True)


@pytest.fixture(scope="module")
def supervised(model_path: Path) -> Iterator[SupervisedEngine]:
    with SupervisedEngine(functools.partial(open_engine, settings_of(model_path)), stall_floor_s=STALL_FLOOR_S) as e:
        yield e


@pytest.fixture(scope="module")
def served(supervised: SupervisedEngine) -> Iterator[str]:
    url, server, thread = serve_in_thread(create_app(LocalService(supervised, MODEL)))
    yield url
    server.should_exit = True
    thread.join(10)


def chat(url: str, content: str, max_tokens: int = 48, **extra) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0,
            "max_tokens": max_tokens, **extra}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=600)


def test_stalling_grammars_and_schemas_cost_only_their_requests(served: str, supervised: SupervisedEngine):
    """The ambiguous grammar, the recursive schema and the same schema as a tool's parameters, sent
    beside a plain chat: the watchdog ends the stalled step, the three fail naming their grammar, and
    the chat goes on in the restarted runner."""
    restarts = supervised.restarts
    results: dict[str, httpx.Response] = {}
    requests = {
        "grammar": lambda: httpx.post(served + "/v1/completions", timeout=600, json={
            "model": MODEL, "prompt": "a", "max_tokens": 40, "temperature": 0, "grammar": AMBIGUOUS}),
        "schema": lambda: chat(served, "Give JSON.", response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": RECURSIVE}}),
        "tool": lambda: chat(served, "Call the tool.", tool_choice="required", parallel_tool_calls=False, tools=[
            {"type": "function", "function": {"name": "nest", "parameters": RECURSIVE}}]),
        "chat": lambda: chat(served, "Count from one to twenty.", max_tokens=64),
    }
    threads = [threading.Thread(target=lambda k=k, f=f: results.__setitem__(k, f())) for k, f in requests.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert supervised.restarts > restarts
    innocent = results.pop("chat")
    for name, r in results.items():
        assert r.status_code == 500, (name, r.status_code, r.text[:300])
        message = r.json()["error"]["message"]
        assert "watchdog" in message and "grammar" in message, (name, message)
    assert innocent.status_code == 200, innocent.text
    assert innocent.json()["choices"][0]["message"]["content"]
    assert httpx.get(served + "/v1/models", timeout=60).status_code == 200


def test_an_answer_in_flight_when_the_runner_stalls_goes_on(supervised: SupervisedEngine):
    """A request that was not to blame is sent again with what it had streamed as its beginning: its
    caller sees one answer, no error."""
    ask = Request(messages=[{"role": "user", "content": "Name ten animals."}],
                  sampling=SamplingParams(temperature=0, max_tokens=80, ignore_eos=True))
    alone = supervised.submit(ask).result().text
    stream = supervised.submit(ask)
    events = iter(stream)
    first = next(e for e in events if getattr(e, "text", ""))  # it has begun answering
    restarts = supervised.restarts
    stalled = supervised.submit(Request(prompt="a", sampling=SamplingParams(temperature=0, max_tokens=40,
                                                                          grammar=Grammar(AMBIGUOUS))))
    texts, errors = [first.text], []
    for event in events:
        if event.kind == "token":
            texts.append(event.text)
        elif event.kind == "error":
            errors.append(event.message)
    with pytest.raises(EngineError, match="watchdog"):
        stalled.result()
    assert supervised.restarts == restarts + 1
    assert not errors
    # Deterministic, so the same answer as alone across the restart (up to how the text streamed so far
    # is tokenized again as the resumed answer's beginning).
    assert len(os.path.commonprefix(["".join(texts), alone])) >= 0.8 * len(alone), ("".join(texts), alone)


def test_a_killed_runner_comes_back_and_its_answer_goes_on(supervised: SupervisedEngine):
    """A kill from outside (the OOM killer's, a person's) names no request: the answer goes on in the
    new runner (tests/security/test_runner_faults.py kills one with two answers streaming)."""
    stream = supervised.submit(Request(messages=[{"role": "user", "content": "Tell a long story."}],
                                       sampling=SamplingParams(temperature=0, max_tokens=120, ignore_eos=True)))
    events = iter(stream)
    next(e for e in events if getattr(e, "text", ""))
    restarts, pid = supervised.restarts, supervised.pid
    os.kill(pid, signal.SIGKILL)  # as the OOM killer would
    failed = [e for e in events if e.kind == "error"]
    assert not failed, failed
    assert supervised.restarts == restarts + 1 and supervised.pid != pid
    again = supervised.submit(Request(prompt="The capital of France is", sampling=SamplingParams(
        temperature=0, max_tokens=4))).result()
    assert again.finish_reason == "length" and again.text


def crafted(base: Path, target: Path, change) -> Path:
    shutil.copy(base, target)
    reader = gguf.GGUFReader(target, "r+")
    change(reader.fields)
    del reader  # the memory map writes the change back
    return target


def _block_count(fields) -> None:
    field = fields["llama.block_count"]
    field.parts[field.data[0]][0] = 100_000


def _duplicate_token(fields) -> None:
    """Two token strings made the same (the second <|...|> token spelled as the first)."""
    field = fields["tokenizer.ggml.tokens"]
    seen: dict[int, bytes] = {}
    for index in field.data:
        text = bytes(field.parts[index])
        if len(text) in seen and text != seen[len(text)]:
            field.parts[index][:] = list(seen[len(text)])
            return
        seen.setdefault(len(text), text)


@pytest.mark.parametrize("change", [_block_count, _duplicate_token], ids=["block_count", "duplicate_token"])
def test_a_model_file_that_aborts_llama_cpp_is_marked_and_the_old_model_stays(model_path: Path, tmp_path: Path,
                                                                              change):
    base = random_weights_like(model_path, tmp_path / "base.gguf")
    bad = crafted(base, tmp_path / "bad.gguf", change)

    def load(model: str, n_ctx: int | None = None, progress=None):
        return open_supervised(settings_of(Path(model)), progress=progress)

    runtime = Runtime(load(str(base)), str(base), load)
    try:
        with pytest.raises(ModelLoadError, match=r"crashed \(SIGABRT\)"):
            runtime.switch(str(bad))
        assert runtime.model == str(base)  # the previous model stays, and answers
        assert runtime.engine.submit(Request(prompt="a", sampling=SamplingParams(max_tokens=2))).result().text
        assert "SIGABRT" in (bad_files.reason_for(bad) or "")
        with pytest.raises(ModelLoadError, match="marked bad"):  # kept: no second crash to learn it again
            runtime.switch(str(bad))
        shown = local_table([LocalModel("bad", bad, bad.stat().st_size, "path")])
        assert "does not load" in shown and "SIGABRT" in shown
        crafted(base, bad, lambda fields: None)  # a new copy of the file is a new file
        assert bad_files.reason_for(bad) is None
    finally:
        runtime.engine.close()


def test_how_a_runner_ended_is_said_in_words():
    from localchat.runners.child import STALL_EXIT
    from localchat.runners.supervisor import ended

    assert ended(-signal.SIGSEGV) == "crashed (SIGSEGV)"
    assert ended(STALL_EXIT) == "was stopped by its watchdog"
    assert ended(1) == "exited (1)"


def test_localchat_serve_answers_from_a_runner_and_outlives_it(model_path: Path, tmp_path: Path):
    """The real command: `localchat serve` loads its model in a runner process; killing that process
    costs no more than a restart, and the server answers again."""
    import socket
    import subprocess
    import sys

    import psutil

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "LOCALCHAT_N_CTX": "1024", "LOCALCHAT_N_THREADS": "1", "LOCALCHAT_SPECULATION": "false"}
    log = tmp_path / "serve.log"  # a file, not a pipe: llama.cpp's log would fill a pipe nobody reads
    with log.open("wb") as sink:
        server = subprocess.Popen([sys.executable, "-m", "localchat", "serve", "--port", str(port)], env=env,
                                  stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
    url = f"http://127.0.0.1:{port}"
    try:
        def answering() -> bool:
            assert server.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                return chat(url, "Say hi.", max_tokens=4).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answering, 600, "the server's first answer")
        runners = [p for p in psutil.Process(server.pid).children() if "spawn_main" in " ".join(p.cmdline())]
        assert len(runners) == 1, runners  # the model is in its own process, not the server's
        runners[0].kill()
        wait_until(answering, 600, "an answer after the runner was killed")
        assert server.poll() is None
    finally:
        server.terminate()
        server.wait(60)
