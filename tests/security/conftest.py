"""The attack suite's servers: a real engine on the real small model behind the real API, on loopback."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
from ui_server import RunningUI, serve_in_thread, start_ui  # noqa: F401 - serve_in_thread for the tests

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig

MODEL = "smollm2-135m"
# Module-scoped, not session-scoped: the default-mode models these servers load must be closed
# before the deterministic tests outside this package (a process switches kernels only without models).


@pytest.fixture(scope="module")
def engine(model_path: Path) -> Iterator[Engine]:
    # One thread: the suite must pass beside other work on a two-core machine.
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_threads=1, n_seq_max=8))
    with Engine.load(model_path, config) as engine:
        yield engine


@pytest.fixture(scope="module")
def window(model_path: Path, tmp_path_factory) -> Iterator[RunningUI]:
    """The chat window and its API on one server, as `localchat` runs them."""
    yield from start_ui(model_path, tmp_path_factory.mktemp("window") / "conversations.sqlite3")


@pytest.fixture(scope="module")
def api(engine: Engine, embedding_model_path: Path) -> Iterator[str]:
    """The URL of `localchat serve`'s app (no key, loopback) on the shared engine, the embedding model fetched."""
    url, server, thread = serve_in_thread(create_app(LocalService(engine, MODEL)))
    yield url
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def supervised_api(model_path: Path) -> Iterator[str]:
    """The URL of the app as production serves it: the engine in a supervised runner process. The route
    tests of keep_alive, the Responses store's file and the runner's faults run on it; the rest of the
    suite uses the in-process engine (`api`), whose internals (steps, idle) they read."""
    import functools

    from localchat.assemble import open_engine
    from localchat.config import Settings
    from localchat.runners.supervisor import SupervisedEngine

    settings = Settings(model=str(model_path), n_ctx=2048, n_threads=1, speculation=False, kv_disk_mb=0)
    with SupervisedEngine(functools.partial(open_engine, settings)) as supervised:
        url, server, thread = serve_in_thread(create_app(LocalService(supervised, MODEL)))
        yield url
        server.should_exit = True
        thread.join(10)


def wait_until(check, seconds: float = 60.0, what: str = "the condition") -> None:
    """Poll `check` until it is true; fail after a generous deadline."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what} did not hold within {seconds:.0f} s"
        time.sleep(0.05)


def best_of(repeats: int, work) -> float:
    """The shortest of `repeats` timings of work(): the one least disturbed by other programs."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def idle(engine: Engine) -> bool:
    """No sequence left in the engine (running or waiting)."""
    return not (engine.scheduler.running or engine.scheduler.waiting)


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator:
    """mount(size, name): a folder on a tmpfs of its own (a real small disk that fills: ENOSPC, not a mock),
    unmounted when the test ends. Skips with the reason where mounts are not permitted (they need root)."""
    mounted: list[Path] = []

    def mount(size: str = "2m", name: str = "small-disk") -> Path:
        where = tmp_path / name
        where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"a small disk needs a tmpfs mount, which is not permitted here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "--lazy", str(where)], capture_output=True, check=False)


def fill(folder: Path) -> Path:
    """A file in `folder` written until its disk is full (ENOSPC); delete it to free the disk again."""
    import errno

    filler = folder / "filler"
    with filler.open("wb", buffering=0) as out:
        chunk = b"\0" * 65536
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    return filler
