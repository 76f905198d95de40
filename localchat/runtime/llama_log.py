"""Route llama.cpp's own log into Python logging: quiet by default, shown with --verbose."""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import deque
from contextlib import contextmanager
from typing import Iterator

import llama_cpp

log = logging.getLogger("localchat.llama_cpp")

# ggml log levels: 1 debug, 2 info, 3 warn, 4 error, 5 continuation of the previous line.
# Its errors surface as our own typed errors, so they stay below WARNING here.
_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.INFO, 4: logging.INFO}
_state = {"ggml_level": 1}
# The latest warnings and errors, so a failed model load can say what llama.cpp objected to.
recent_problems: deque[str] = deque(maxlen=8)
# Lines a thread asked to see (`captured()`): llama.cpp logs a load on the thread that loads.
_capture = threading.local()


@llama_cpp.llama_log_callback
def _on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    message = text.decode("utf-8", errors="replace").rstrip("\n")
    if level != 5:
        _state["ggml_level"] = level
    if not message:
        return
    lines = getattr(_capture, "lines", None)
    if lines is not None and len(lines) < 100_000:
        lines.append(message)
    if _state["ggml_level"] >= 3:
        recent_problems.append(message.strip())
    log.log(_LEVELS.get(_state["ggml_level"], logging.DEBUG), "%s", message)


_installed = False


def install() -> None:
    """Point llama.cpp's log at our callback once; the module keeps the callback alive."""
    global _installed
    if not _installed:
        llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))
        _installed = True


@contextmanager
def captured() -> Iterator[list[str]]:
    """Every line llama.cpp logs on this thread meanwhile, debug lines included (where a load put each
    layer and buffer is said only there)."""
    install()
    outer = getattr(_capture, "lines", None)
    _capture.lines = lines = []
    try:
        yield lines
    finally:
        _capture.lines = outer
        if outer is not None:
            outer.extend(lines)
