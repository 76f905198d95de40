"""The API tests' server: the real API app on the embedded model, one engine per module, deterministic
(so greedy answers can be compared across protocols and runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from ui_server import serve_in_thread

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def engine(model_path: Path) -> Iterator[Engine]:
    # One thread: the suite must pass beside other work on a two-core machine.
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_threads=1, deterministic=True))
    with Engine.load(model_path, config) as engine:
        yield engine


@pytest.fixture(scope="module")
def url(engine: Engine, embedding_model_path: Path) -> Iterator[str]:
    """`localchat serve`'s app (loopback, no key) on the module's engine, the embedding model fetched."""
    url, server, thread = serve_in_thread(create_app(LocalService(engine, MODEL)))
    yield url
    server.should_exit = True
    thread.join(10)
