"""`localchat selftest`: load the model, generate, serve the window and the API, then report.

It finds the model as `localchat chat` does (assemble.model_file): a model already here (in a desktop
bundle the embedded one) needs no network, and one that is not is fetched. Every HTTP request goes
to the server it starts on a loopback port. That makes it the check a built bundle runs in CI with
networking blocked.
"""

from __future__ import annotations

import contextlib
import platform
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO
from urllib.parse import urljoin

from . import __version__
from .units import size_text

QUESTION = "Name the capital city of France."
MAX_TOKENS = 24
SERVER_START_S = 60.0
HTTP_TIMEOUT_S = 30.0


def launch_time() -> float:
    """When this process started (epoch seconds): cold start counts the loader and imports too."""
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # no psutil or no process table: the first import of localchat is close enough
        return _IMPORTED


_IMPORTED = time.time()


@dataclass(slots=True)
class Check:
    """One line of the summary."""

    name: str
    ok: bool
    seconds: float
    detail: str


class SelfTest:
    """Runs the checks in order; a check whose prerequisite failed is reported as skipped."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.checks: list[Check] = []
        self.launched = launch_time()
        self.first_token_at: float | None = None

    def run(self, name: str, action: Callable[[], str]) -> bool:
        start = time.perf_counter()
        try:
            detail, ok = action(), True
        except Exception as exc:  # the selftest reports every failure instead of stopping at it
            detail, ok = f"{type(exc).__name__}: {exc}", False
        self.checks.append(Check(name, ok, time.perf_counter() - start, detail))
        return ok

    def skip(self, name: str, reason: str) -> None:
        self.checks.append(Check(name, False, 0.0, f"skipped: {reason}"))

    def report(self) -> int:
        failed = [c for c in self.checks if not c.ok]
        kind = "bundle" if getattr(sys, "frozen", False) else "Python package"
        print(f"localchat {__version__} selftest ({kind}, Python {platform.python_version()}, "
              f"{platform.system()} {platform.machine()})", file=self.out)
        width = max(len(c.name) for c in self.checks)
        for check in self.checks:
            status = "OK  " if check.ok else "FAIL"
            print(f"  {status} {check.name:<{width}} {check.seconds:7.2f} s  {_one_line(check.detail)}",
                  file=self.out)
        if self.first_token_at is not None:
            print(f"cold start (launch to first token): {self.first_token_at - self.launched:.2f} s", file=self.out)
        else:
            print("cold start (launch to first token): - (no token)", file=self.out)
        verdict = "passed" if not failed else f"FAILED ({len(failed)} of {len(self.checks)} checks)"
        print(f"selftest {verdict}", file=self.out, flush=True)
        return 0 if not failed else 1


def _one_line(text: str, limit: int = 100) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def run_selftest(model: str | None, out: TextIO = sys.stdout) -> int:
    """Run every check and print the summary; 0 when all passed, 1 otherwise."""
    test = SelfTest(out)
    state: dict[str, Any] = {}
    try:
        _run_checks(test, state, model)
    finally:
        with contextlib.suppress(Exception):  # already reported by the shutdown check
            _close(state)
    return test.report()


def _run_checks(test: SelfTest, state: dict[str, Any], model: str | None) -> None:
    from .assemble import model_file, open_engine

    def find_model() -> str:
        from .config import load_settings
        from .models.download import bundled_model_dir

        settings = load_settings({"model": model})
        path = model_file(settings.model)
        state["settings"] = settings
        bundled = bundled_model_dir()
        where = "from the bundle" if bundled is not None and path.parent == bundled else "local"
        return f"{settings.model} {where}: {path.name} ({size_text(path.stat().st_size)})"

    def load() -> str:
        engine = open_engine(state["settings"])
        state["engine"] = engine
        return engine.worker.describe()

    def generate() -> str:
        from .runtime.engine import Request
        from .runtime.events import Failed, Stats, TextDelta
        from .runtime.sampling import SamplingParams

        request = Request(messages=[{"role": "user", "content": QUESTION}],
                          sampling=SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS))
        parts: list[str] = []
        stats = None
        for event in state["engine"].submit(request):
            if isinstance(event, TextDelta):
                if test.first_token_at is None:
                    test.first_token_at = time.time()
                parts.append(event.text)
            elif isinstance(event, Stats):
                stats = event
            elif isinstance(event, Failed):
                raise event.error
        answer = "".join(parts).strip()
        if not answer:
            raise RuntimeError("the model produced no text")
        rate = f", {stats.completion_tokens} tokens at {stats.tokens_per_s:.0f} tok/s" if stats else ""
        return f"{answer!r}{rate}"

    def serve() -> str:
        state["url"] = _start_server(state)
        return state["url"]

    def get_models() -> str:
        response = state["http"].get("/v1/models")
        response.raise_for_status()
        ids = [m.get("id") for m in response.json().get("data", [])]
        if not ids:
            raise RuntimeError(f"/v1/models listed no model: {response.text[:200]}")
        return f"{response.status_code}, models: {', '.join(map(str, ids))}"

    def get_window() -> str:
        response = state["http"].get("/")
        response.raise_for_status()
        if "<html" not in response.text.lower():
            raise RuntimeError(f"/ did not answer with a page: {response.text[:200]}")
        detail = f"{response.status_code}, {len(response.content)} bytes"
        # The page alone comes from one template; its script proves the frontend files are there too.
        script = re.search(r'<script[^>]+src="([^"]+\.js)"', response.text)
        if script:
            asset = state["http"].get(urljoin(state["url"] + "/", script.group(1)))
            asset.raise_for_status()
            detail += f"; its script {asset.status_code}, {len(asset.content)} bytes"
        return detail

    def shut_down() -> str:
        _close(state)
        return "server and engine stopped"

    if not test.run("model", find_model):
        for name in ("load", "generate", "serve", "GET /v1/models", "GET /", "shutdown"):
            test.skip(name, "no model")
        return
    if not test.run("load", load):
        for name in ("generate", "serve", "GET /v1/models", "GET /", "shutdown"):
            test.skip(name, "the model did not load")
        return
    test.run("generate", generate)
    if test.run("serve", serve):
        test.run("GET /v1/models", get_models)
        test.run("GET /", get_window)
    else:
        test.skip("GET /v1/models", "no server")
        test.skip("GET /", "no server")
    test.run("shutdown", shut_down)


def _start_server(state: dict[str, Any]) -> str:
    """The window and the API on a free loopback port, served from a background thread."""
    import httpx
    import uvicorn

    from .api.app import bind_socket, url_of
    from .ui.chat.core import Runtime
    from .ui.chat.store import Store
    from .ui.web import create_ui_app

    # A throwaway store: the selftest must not add conversations to the user's own.
    state["tmp"] = tempfile.TemporaryDirectory(prefix="localchat-selftest-")
    state["store"] = Store(Path(state["tmp"].name) / "conversations.sqlite3")
    app = create_ui_app(Runtime(state["engine"], state["settings"].model), state["store"])
    sock = bind_socket("127.0.0.1", 0)
    url = url_of(sock)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="selftest-server", daemon=True)
    state["server"], state["thread"] = server, thread
    thread.start()
    deadline = time.monotonic() + SERVER_START_S
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server stopped while starting (see the messages above)")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server did not start within {SERVER_START_S:.0f} s")
        time.sleep(0.05)
    # trust_env=False: a proxy from the environment must not stand between us and loopback.
    state["http"] = httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S, trust_env=False)
    return url


def _close(state: dict[str, Any]) -> None:
    """Stop whatever was started, in reverse order; safe to call twice."""
    if (http := state.pop("http", None)) is not None:
        http.close()
    if (server := state.pop("server", None)) is not None:
        server.should_exit = True
        thread = state.pop("thread")
        thread.join(timeout=15)
        if thread.is_alive():
            raise RuntimeError("the server did not stop within 15 s")
    if (engine := state.pop("engine", None)) is not None:
        engine.close()
    if (store := state.pop("store", None)) is not None:
        store.close()
    if (tmp := state.pop("tmp", None)) is not None:
        tmp.cleanup()
