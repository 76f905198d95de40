"""The chat model files a server may load by name, kept as an index that requests read without
touching the disk.

Looking a name up used to walk every model folder (localchat's own, the hub cache, Ollama's, LM
Studio's) and open each GGUF's first bytes, once per request, on the event loop: ~80 ms with 9
files, more with a big hub cache, and four clients sending unknown names took every other route
from 1 ms to most of a second. Here the walk runs on a thread of its own, at most once per
`max_age_s`, when the index is older than that; a request reads the last walk's result. A file added
meanwhile is found by the next walk, a few seconds later at most.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Callable

from .resolve import servable_files

log = logging.getLogger(__name__)

MAX_AGE_S = 5.0


class ServableIndex:
    """`scan()` (by default `resolve.servable_files`) kept current off the caller's thread."""

    def __init__(self, scan: Callable[[], dict[str, Path]] | None = None, max_age_s: float = MAX_AGE_S) -> None:
        self._scan, self._max_age = scan or servable_files, max_age_s
        self._lock = threading.Lock()
        self._names: dict[str, Path] = {}
        self._when = -float("inf")  # time.monotonic() of the last walk's start
        self._walking = False
        self._walked = threading.Event()

    def names(self) -> dict[str, Path]:
        """The names and files of the last walk; one older than `max_age_s` starts the next in the background.
        Waits only for the very first walk (the server's start, not a request, makes it: `refresh`)."""
        with self._lock:
            stale = time.monotonic() - self._when >= self._max_age
            start = stale and not self._walking
            if start:
                self._walking = True
        if start:
            threading.Thread(target=self._walk, name="localchat-model-index", daemon=True).start()
        self._walked.wait()
        with self._lock:
            return self._names

    def refresh(self) -> dict[str, Path]:
        """Walk now, on this thread (the server's start: off the event loop)."""
        with self._lock:
            self._walking = True
        self._walk()
        return self.names()

    def _walk(self) -> None:
        started = time.monotonic()
        try:
            names = self._scan()
        except Exception:  # a folder that cannot be read: the names known so far stay
            log.exception("could not list the model files here; keeping the names known")
            names = None
        with self._lock:
            if names is not None:
                self._names = names
            self._when, self._walking = started, False
        self._walked.set()
