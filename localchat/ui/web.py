"""`localchat` with no command: the chat window and the OpenAI API on one local server."""

from __future__ import annotations

import os
import threading
import webbrowser
from typing import Any, Callable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from ..api.app import ServeOptions, _invalid, add_api, bind_socket, is_loopback, url_of
from ..api.local import LocalService, served_name
from ..api.origins import OriginPolicy, install
from ..runtime.engine import Engine
from ..runtime.sampling import SamplingParams
from .chat.core import ChatCore, Runtime, Sampling
from .chat.store import Store
from .documents.received import MAX_IMPORT_BYTES, UploadLimits, prune
from .documents.uploads import received_dir

DEFAULT_UI_PORT = 7860
UI_USER = "localchat"  # the login name when --api-key protects the window


def create_ui_app(runtime: Runtime, store: Store, api_key: str | None = None,
                  defaults: Sampling | None = None, policy: OriginPolicy | None = None,
                  system_prompt: str = "", runners: Any = None) -> FastAPI:
    """FastAPI with the /v1 routes first, then the chat window mounted at "/"; `system_prompt`: a new chat's;
    `runners`: the models the API loads by name beside the window's (runners/pool.py)."""
    # Gradio's upload route writes here (read when the app is made): our own private folder.
    received = received_dir()
    os.environ["GRADIO_TEMP_DIR"] = str(received)
    prune(received)  # what an earlier run left
    import gradio as gr

    from .components.layout import build_ui
    from .page import CSS, SCRIPT

    service = LocalService(runtime.engine, served_name(runtime.model), defaults.base if defaults else None,
                           runners=runners, thinking_budget=defaults.thinking_budget if defaults else 0)
    runtime.service = service

    app = FastAPI(title="localchat", docs_url=None, redoc_url=None, openapi_url=None)
    # The API routes go first: the mounted window at "/" would otherwise shadow /v1.
    add_api(app, service, api_key)
    app.add_exception_handler(RequestValidationError, _invalid)
    demo = build_ui(ChatCore(runtime, store), defaults, system_prompt)
    # Gradio refuses a file reference that names anything outside its upload folder (a crafted
    # client naming any server path) only once the app "has launched"; a mounted app never
    # launches, so without this the window would copy and read whatever path a client names.
    demo.has_launched = True
    # System fonts only: the default theme fetches web fonts, which an offline machine never gets.
    theme = gr.themes.Soft(font=["system-ui", "sans-serif"], font_mono=["ui-monospace", "monospace"])
    app = gr.mount_gradio_app(
        app, demo, path="", auth=(UI_USER, api_key) if api_key else None,
        auth_message="Log in with the user 'localchat' and the API key localchat was started with.",
        max_file_size=MAX_IMPORT_BYTES, ssr_mode=False, footer_links=[], theme=theme, css=CSS,
        head=SCRIPT, mcp_server=False)
    app.add_middleware(UploadLimits, folder=received)
    install(app, policy or OriginPolicy())  # the origin guard outermost: a refused request uploads nothing
    return app


def run_ui(options: ServeOptions, load: Callable[..., Engine], model: str, open_browser: bool = True,
           defaults: Sampling | None = None, system_prompt: str = "", context_overflow: str = "rolling",
           runners: Any = None, thinking_budget: int = 0) -> int:
    """Serve the window and the API until interrupted; prints the URL and opens the browser."""
    import uvicorn

    host = options.bind_host()
    sock = bind_socket(host, options.port, DEFAULT_UI_PORT)  # before the model loads: fail fast
    engine = load(model)
    store = Store()
    runtime = Runtime(engine, model, load)
    try:
        if defaults is None:
            defaults = Sampling.over(options.sampling or SamplingParams(), context_overflow, thinking_budget)
        app = create_ui_app(runtime, store, options.api_key, defaults, options.policy(sock.getsockname()[1]),
                            system_prompt, runners)
        url = url_of(sock)
        exposed = "" if is_loopback(host) else f" (listening on {host}; log in as '{UI_USER}' with the API key)"
        print(f"localchat: chat at {url}/ and the OpenAI-compatible API at {url}/v1{exposed}. Ctrl-C stops.",
              flush=True)
        if open_browser:
            # A moment later, so the server accepts the browser's first request.
            threading.Timer(1.0, _open, (url,)).start()
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        runtime.engine.close()
        if runners is not None:
            runners.close()
        store.close()
    return 0


def _open(url: str) -> Any:
    try:
        return webbrowser.open(url)
    except Exception:  # no browser on this machine: the printed URL is enough
        return False
