"""The chat window on a real socket with a real engine, started by the tests that need it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import uvicorn

from localchat.api.app import bind_socket, url_of
from localchat.runners.pool import Runners
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig
from localchat.ui.chat.core import Runtime, Sampling
from localchat.ui.chat.store import Store

# Greedy and short: the answers are deterministic and the tests stay quick on two cores.
DEFAULTS = Sampling(temperature=0.0, top_p=1.0, max_tokens=48)


def serve_in_thread(app) -> tuple[str, uvicorn.Server, threading.Thread]:
    """Run `app` on a free loopback port; returns its URL once it accepts requests."""
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the test server did not start within 30 s"
        time.sleep(0.02)
    return url_of(sock), server, thread


def stop_servers(running: list[tuple[str, uvicorn.Server, threading.Thread]]) -> None:
    """Stop servers started by serve_in_thread, all at once, then wait for each."""
    for _, server, _ in running:
        server.should_exit = True
    for _, _, thread in running:
        thread.join(10)


@dataclass(slots=True)
class RunningUI:
    url: str
    runtime: Runtime
    store: Store


def start_ui(model_path: Path, store_path: Path, api_key: str | None = None,
             system_prompt: str = "", defaults: Sampling = DEFAULTS, by_name: bool = False) -> Iterator[RunningUI]:
    """Yield a running app (window + API) and stop it afterwards; `by_name`: the API loads other models here by
    name, each on an engine of its own, as `localchat` does (runners/pool.py)."""
    from localchat.ui.web import create_ui_app

    def load(path: str, n_ctx: int | None = None, progress=None) -> Engine:
        return Engine.load(path, EngineConfig(worker=WorkerConfig(n_ctx=n_ctx or 4096, n_threads=1, n_seq_max=4),
                                              on_load_progress=progress))

    runtime = Runtime(load(str(model_path)), str(model_path), load)
    store = Store(store_path)
    runners = Runners(lambda path: load(str(path)), lambda path: path.stat().st_size, 60.0) if by_name else None
    app = create_ui_app(runtime, store, api_key, defaults, system_prompt=system_prompt, runners=runners)
    sock = bind_socket("127.0.0.1", None, 17860)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = url_of(sock)
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline, "the app did not start within 60 s"
        time.sleep(0.1)
    httpx.get(url + "/", timeout=10)
    try:
        yield RunningUI(url, runtime, store)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        runtime.engine.close()
        if runners is not None:
            runners.close()
        store.close()
