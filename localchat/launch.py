"""Starting the servers: the OpenAI-compatible API alone (`localchat serve`), and the chat window
with the API beside it (`localchat ui`, or `localchat` without a command)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Callable

from .api.app import ServeOptions
from .assemble import on_demand, open_supervised
from .config import Settings
from .errors import LocalchatError

log = logging.getLogger("localchat")


def _limit_tools(settings: Settings) -> None:
    """The settings' bounds on a model's tool use, for every chat and request of this process."""
    from .mcp_host.limits import configure

    configure(settings.mcp_call_timeout, settings.mcp_result_chars, settings.mcp_steps)


def serve_api(options: ServeOptions, settings_for: Callable[[str | None], Settings], progress: bool) -> int:
    """Serve the API from a local model, or forward it to `options.backend`; runs until stopped.
    `settings_for(model)`: the settings of the configured model (None) or of another one a request names."""
    from .api.app import serve
    from .api.local import served_name
    from .mcp_server import build_server
    from .progress_line import ProgressLine

    options.bind_host()  # refuse an unsafe address before spending time on a model
    if options.backend:
        return serve(options)
    chosen = settings_for(None)
    _limit_tools(chosen)
    with ProgressLine(enabled=progress) as line, open_supervised(chosen, status=line.set) as engine:
        line.clear()  # the banner comes next
        runners = on_demand(settings_for)
        try:
            return serve(options, engine, served_name(chosen.model), system_prompt=chosen.system_prompt,
                         runners=runners, thinking_budget=chosen.thinking_budget, mcp_of=build_server)
        finally:
            runners.close()


def serve_mcp(settings_for: Callable[[str | None], Settings]) -> int:
    """`localchat mcp`: localchat's own MCP server over stdio until the client closes it. Standard output is the
    protocol's alone: everything else this process and its runner print goes to standard error."""
    import asyncio
    import os
    import sys

    from .api.local import LocalService, served_name
    from .mcp_server import build_server

    wire_in, wire_out = os.dup(0), os.dup(1)
    os.dup2(2, 1)  # before the runner starts: a child inherits fd 1, and the wire is not its to write
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = os.fdopen(wire_in, "r", encoding="utf-8", errors="replace")
    sys.stdout = os.fdopen(wire_out, "w", encoding="utf-8")
    chosen = settings_for(None)
    _limit_tools(chosen)
    with open_supervised(chosen) as engine:
        service = LocalService(engine, served_name(chosen.model), None, chosen.system_prompt, None,
                               chosen.thinking_budget)

        async def run() -> None:
            try:
                await build_server(service).run_stdio_async()
            finally:
                await service.aclose()

        asyncio.run(run())
    return 0


def open_window(options: ServeOptions, settings_for: Callable[[str | None], Settings], browser: bool,
                verbose: bool) -> int:
    """Serve the window (and the API) until stopped; `settings_for(model)` gives the settings of the
    configured model (None) or of one the window switches to."""
    from .ui import instance
    from .ui.web import DEFAULT_UI_PORT, run_ui

    instance.log_to_file(verbose)
    # A plain start (a double-click) while a window runs opens that one; a start that names a
    # host, port or --listen asks for a server of its own, which the next plain start ignores.
    plain = options.host is None and options.port is None and not options.listen
    if plain:
        running = instance.running_instance()
        if running is not None:
            print(f"localchat is already running at {running.url}/ (process {running.pid}); "
                  f"{'opening it' if browser else 'open that address'} instead of starting another.",
                  flush=True)
            if browser:
                instance.open_browser(running.url)
            return 0
    host = options.bind_host()  # refuse an unsafe address before spending time on a model
    settings = settings_for(None)
    _limit_tools(settings)
    options.port, url = instance.reserve_url(host, options.port, DEFAULT_UI_PORT)

    def load(model: str, n_ctx: int | None = None, progress: Callable[[float], None] | None = None):
        chosen = settings if model == settings.model else settings_for(model)
        # A context length the window asks for replaces the settings' (and the tuned profile's) for this load.
        return open_supervised(chosen if n_ctx is None else dataclasses.replace(chosen, n_ctx=n_ctx), progress=progress)

    try:
        with instance.recorded(url) if plain else contextlib.nullcontext():
            return run_ui(options, load, settings.model, open_browser=browser, system_prompt=settings.system_prompt,
                          context_overflow=settings.context_overflow, runners=on_demand(settings_for),
                          thinking_budget=settings.thinking_budget)
    except LocalchatError as exc:
        # Into the log file (the console shows it once, below): a bundle's window may close unread.
        log.info("stopped: %s", exc)
        raise
