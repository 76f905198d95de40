"""The MCP tests' servers: the project's own fixture server (fixture_server.py) over Streamable HTTP, started
as a user's MCP server would be; and localchat's API app on the embedded model, with its own MCP server at /mcp."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from ui_server import serve_in_thread

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.mcp_server import build_server
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig

from mcp_fixtures import FIXTURE, MODEL, free_port


def _serving(flag: str, path: str) -> Iterator[str]:
    """The fixture server on an HTTP transport; its URL once it listens."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(FIXTURE), flag, str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, f"the fixture server ({flag}) stopped at its start"
            assert time.monotonic() < deadline, f"the fixture server ({flag}) did not listen within 120 s"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}{path}"
    process.terminate()  # a client connection still open (this process's) may hold uvicorn's graceful stop
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@pytest.fixture(scope="session")
def http_fixture() -> Iterator[str]:
    """The fixture server on Streamable HTTP; its /mcp URL."""
    yield from _serving("--http", "/mcp")


@pytest.fixture(scope="session")
def sse_fixture() -> Iterator[str]:
    """The fixture server on the old HTTP+SSE transport; its /sse URL."""
    yield from _serving("--sse", "/sse")


@pytest.fixture(scope="module")
def engine(model_path: Path) -> Iterator[Engine]:
    # One thread: the suite must pass beside other work on a two-core machine.
    config = EngineConfig(worker=WorkerConfig(n_ctx=4096, n_threads=1, deterministic=True))
    with Engine.load(model_path, config) as engine:
        yield engine


@pytest.fixture(scope="module")
def url(engine: Engine) -> Iterator[str]:
    """`localchat serve`'s app (loopback, no key) on the module's engine, with /mcp."""
    service = LocalService(engine, MODEL)
    url, server, thread = serve_in_thread(create_app(service, mcp=build_server(service)))
    yield url
    server.should_exit = True
    thread.join(10)
