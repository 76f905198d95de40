"""Faults injected into the model runner from outside: a runner frozen past the liveness bound, one
killed mid-stream, one killed while loading, one that restarts while its engine closes, and a state
file of each bad kind in its folder at start. The server goes on answering throughout."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import psutil
import pytest

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.assemble import open_engine, open_supervised
from localchat.errors import EngineError
from localchat.models import bad_files
from localchat.runners.runner_process import LoadCrashError
from localchat.runners.supervisor import SupervisedEngine
from localchat.runtime.engine import Request
from localchat.runtime.sampling import SamplingParams
from conftest import MODEL, wait_until
from test_kv_files import BAD_HEADERS, crafted
from test_runner import settings_of
from ui_server import serve_in_thread

SILENCE_S = 4.0  # the liveness bound here: far past a heartbeat (1 s) even with one core busy


def runner_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def runners_alive() -> list[psutil.Process]:
    """This process's model runners still alive (spawned children that are not zombies)."""
    out = []
    for proc in psutil.Process().children():
        try:
            if "spawn_main" in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(scope="module")
def supervised(model_path: Path) -> Iterator[SupervisedEngine]:
    opener = functools.partial(open_engine, settings_of(model_path))
    with SupervisedEngine(opener, stall_floor_s=10.0, silence_s=SILENCE_S) as engine:
        yield engine


@pytest.fixture(scope="module")
def served(supervised: SupervisedEngine) -> Iterator[str]:
    url, server, thread = serve_in_thread(create_app(LocalService(supervised, MODEL)))
    yield url
    server.should_exit = True
    thread.join(10)


def long_answer(n: int = 60) -> Request:
    return Request(messages=[{"role": "user", "content": "Name ten animals."}],
                   sampling=SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))


def stream_in_thread(engine: SupervisedEngine, request: Request) -> tuple[threading.Thread, dict]:
    """Stream `request` on a thread; the dict gets 'texts', 'errors' and 'started' (an Event)."""
    out: dict = {"texts": [], "errors": [], "started": threading.Event()}

    def run() -> None:
        for event in engine.submit(request):
            if event.kind == "token":
                out["texts"].append(event.text)
                out["started"].set()
            elif event.kind == "error":
                out["errors"].append(event.message)
                out["started"].set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def same_answer(texts: list[str], alone: str) -> bool:
    # Deterministic: the same answer across the restart, up to how the streamed text is tokenized again.
    return len(os.path.commonprefix(["".join(texts), alone])) >= 0.8 * len(alone)


def test_a_frozen_runner_is_ended_after_the_bound_and_both_answers_go_on(supervised: SupervisedEngine,
                                                                         served: str):
    """The issue's second finding: `kill -STOP` of the runner hung every chat forever, and the waiting
    requests held the default executor, so a database read (GET /v1/responses/{id}) hung too."""
    alone = supervised.submit(long_answer()).result().text
    restarts, pid = supervised.restarts, supervised.pid
    streams = [stream_in_thread(supervised, long_answer()) for _ in range(2)]
    for _, out in streams:
        assert out["started"].wait(300)
    os.kill(pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        # More waiting model calls than the default executor has threads (6 on two cores).
        waiting = [threading.Thread(target=lambda: httpx.post(served + "/v1/chat/completions", timeout=600, json={
            "model": MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2}), daemon=True)
            for _ in range(8)]
        for thread in waiting:
            thread.start()
        # A database read and the model list answer while the runner is frozen.
        t0 = time.monotonic()
        assert httpx.get(served + "/v1/responses/resp_" + "0" * 24, timeout=60).status_code == 404
        assert httpx.get(served + "/v1/models", timeout=60).status_code == 200
        other_routes_s = time.monotonic() - t0
        wait_until(lambda: not runner_alive(pid), 300, "the frozen runner to be ended")
        noticed_s = time.monotonic() - frozen_at
        wait_until(lambda: supervised.restarts > restarts, 300, "the frozen runner's restart")
        restarted_s = time.monotonic() - frozen_at
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    print(f"frozen runner: ended after {noticed_s:.1f} s (bound {SILENCE_S} s), a new one answering after "
          f"{restarted_s:.1f} s; other routes answered in {other_routes_s:.2f} s meanwhile")
    assert other_routes_s < SILENCE_S  # not behind the frozen runner
    assert SILENCE_S <= noticed_s
    for thread, out in streams:
        thread.join(300)
        assert not out["errors"], out["errors"]
        assert same_answer(out["texts"], alone), ("".join(out["texts"]), alone)
    for thread in waiting:
        thread.join(300)


def test_a_runner_killed_from_outside_mid_stream_blames_nobody_and_both_answers_go_on(
        supervised: SupervisedEngine):
    """The issue's tenth finding: kill -9 of the runner failed every answer in flight, each told
    "this request" was to blame, though an OOM kill or a person's says nothing of any request."""
    alone = supervised.submit(long_answer()).result().text
    restarts, pid = supervised.restarts, supervised.pid
    streams = [stream_in_thread(supervised, long_answer()) for _ in range(2)]
    for _, out in streams:
        assert out["started"].wait(300)
    os.kill(pid, signal.SIGKILL)  # as the OOM killer would
    for thread, out in streams:
        thread.join(300)
        assert not out["errors"], out["errors"]
        assert same_answer(out["texts"], alone), ("".join(out["texts"]), alone)
    assert supervised.restarts == restarts + 1 and supervised.pid != pid


def test_cancel_never_waits_on_a_full_pipe_to_a_frozen_runner(supervised: SupervisedEngine):
    """Code review: the supervisor held its lock while writing to the pipe, and cancel (called from
    the event loop) took that lock: a runner that stopped reading froze the server's event loop."""
    pid = supervised.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        big = "word " * 100_000  # more than the pipe's buffer: its write waits for a reader
        callers = [threading.Thread(target=lambda: _ignore(supervised.count_tokens, big), daemon=True)
                   for _ in range(2)]
        for thread in callers:
            thread.start()
        cancelled = threading.Event()
        canceller = threading.Thread(target=lambda: (supervised.cancel("run-none"), cancelled.set()), daemon=True)
        time.sleep(0.5)  # let the callers reach the pipe first; cancel must not wait behind them
        canceller.start()
        assert cancelled.wait(SILENCE_S / 2), "cancel waited on the pipe"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    for thread in callers:
        thread.join(300)


def _ignore(call, *args) -> None:
    try:
        call(*args)
    except EngineError:
        pass


def test_a_runner_killed_while_loading_does_not_mark_its_file_bad(model_path: Path):
    """Code review: a runner killed by SIGKILL or SIGTERM while loading marked the model file "does
    not load" for good, though the kill came from outside."""
    before = {p.pid for p in runners_alive()}
    errors: list[BaseException] = []

    def load() -> None:
        try:
            open_supervised(settings_of(model_path)).close()
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            errors.append(exc)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    wait_until(lambda: [p for p in runners_alive() if p.pid not in before], 120, "the runner to start")
    (runner,) = [p for p in runners_alive() if p.pid not in before]
    runner.send_signal(signal.SIGTERM)
    loader.join(300)
    assert errors and isinstance(errors[0], EngineError) and not isinstance(errors[0], LoadCrashError), errors
    assert "SIGTERM" in str(errors[0])
    assert bad_files.reason_for(model_path) is None


def test_closing_while_a_runner_restarts_leaves_no_runner_behind(model_path: Path):
    """Code review: `_restart` did not look again at a closing engine, so a runner started for it after
    it closed lived on, holding its model."""
    engine = SupervisedEngine(functools.partial(open_engine, settings_of(model_path)), silence_s=SILENCE_S)
    first = engine.pid
    before = {p.pid for p in runners_alive()} - {first}
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: [p for p in runners_alive() if p.pid not in before | {first}], 120, "the restart to begin")
    engine.close()  # while the new runner loads
    wait_until(lambda: not [p for p in runners_alive() if p.pid not in before], 120, "every runner of it to end")
    with pytest.raises(EngineError, match="shut down"):
        engine.submit(long_answer(4))


def test_state_files_of_every_bad_kind_at_start_cost_nothing(model_path: Path, tmp_path: Path, monkeypatch):
    """The issue's first finding, on the real runner: a fresh server with bad files in its model's
    kv-states folder loads, answers, restores the good state, and the bad files are gone."""
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))  # the runners are spawned with it
    settings = dataclasses.replace(settings_of(model_path), kv_disk_mb=64)
    document = "\n".join(f"Entry {i}: the depot in sector {i % 9} keeps {i * 17 % 97} barrels." for i in range(80))
    ask = Request(messages=[{"role": "user", "content": document + "\nWhich sector keeps barrels 40?"}],
                  sampling=SamplingParams(temperature=0, max_tokens=8))
    with open_supervised(settings) as engine:
        fresh = engine.submit(ask).result()
    assert fresh.stats.prompt_tokens > 1024
    wait_until(lambda: list((tmp_path / "data" / "kv-states").rglob("*.kv")), 60, "the state to be saved")
    (good,) = (tmp_path / "data" / "kv-states").rglob("*.kv")
    folder = good.parent
    for i, header in enumerate(BAD_HEADERS.values()):
        crafted(folder, [i] * 8, header if not isinstance(header, dict) else {"identity": "x", **header})
    (folder / "noise.kv").write_bytes(os.urandom(4096))
    (folder / "empty.kv").write_bytes(b"")
    os.mkfifo(folder / "fifo.kv")
    with open_supervised(settings) as engine:
        again = engine.submit(ask).result()
    assert again.text == fresh.text and again.stats.cached_tokens > 1000  # the good state was restored
    assert sorted(folder.iterdir()) == [good]


def test_a_frozen_embedding_runner_is_ended_and_the_call_goes_on(embedding_model_path: Path):
    """The embedding model's runner is watched the same way: a call to a frozen one waited forever, with
    the embedder's lock held, so every later document read and /v1/embeddings call waited too."""
    from localchat.runners.embedding import SupervisedEmbedder

    embedder = SupervisedEmbedder(embedding_model_path, silence_s=SILENCE_S)
    try:
        first = embedder.embed(["The keeper lit the lamp at dusk."])[0]
        pid = embedder.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            frozen_at = time.monotonic()
            again = embedder.embed(["The keeper lit the lamp at dusk."])[0]
            took = time.monotonic() - frozen_at
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        print(f"frozen embedding runner: the call came back from a new runner after {took:.1f} s")
        assert embedder.pid != pid and embedder.restarts == 1
        assert max(abs(a - b) for a, b in zip(first, again)) < 1e-5
    finally:
        embedder.close()
