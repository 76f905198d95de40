"""One status line on stderr while a slow start runs (model load, prompt read), gone before the answer."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Iterable, Iterator, TextIO

from .runtime.events import Event, PrefillProgress

CLEAR = "\r\x1b[K"  # back to column 0, erase to the end of the line


class ProgressLine:
    """Redraws `status` and the seconds since start in place, once a second has passed.

    Only on a terminal: a redrawn line in a log file or a pipe is noise. stdout is never touched,
    so `localchat chat ... | cat` and `--json` output stay clean while stderr shows the line.
    """

    def __init__(self, out: TextIO | None = None, delay: float = 1.0, interval: float = 0.2,
                 enabled: bool = True) -> None:
        self._out = out or sys.stderr
        self._delay, self._interval = delay, interval
        self._enabled = enabled and _is_terminal(self._out)
        self._start = time.monotonic()
        self._status = ""
        self._shown = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "ProgressLine":
        if self._enabled:
            self._thread = threading.Thread(target=self._run, name="progress-line", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    def set(self, status: str) -> None:
        """What is happening now; shown from the next redraw."""
        with self._lock:
            self._status = status

    def note(self, text: str) -> None:
        """A line of its own on stderr, printed above the status line."""
        with self._lock:
            if self._shown:
                self._out.write(CLEAR)
            print(text, file=self._out, flush=True)
            if self._shown:
                self._draw()

    def clear(self) -> None:
        """Stop redrawing and erase the line (the answer comes next); safe to call twice."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            if self._shown:
                self._out.write(CLEAR)
                self._out.flush()
                self._shown = False

    def _run(self) -> None:
        if self._stop.wait(self._delay):
            return
        while True:
            with self._lock:
                if self._stop.is_set():
                    return
                if self._status:
                    self._draw()
            if self._stop.wait(self._interval):
                return

    def _draw(self) -> None:
        text = f"localchat: {self._status} ({time.monotonic() - self._start:.0f} s)"
        # A line wider than the terminal wraps, and a carriage return cannot take a wrapped line back.
        self._out.write(CLEAR + text[:_width(self._out) - 1])
        self._out.flush()
        self._shown = True


def follow(events: Iterable[Event], line: ProgressLine) -> Iterator[Event]:
    """Pass a request's events through, showing how much of the prompt is read; the line is
    cleared before the first event of the answer (text, the end, or an error) is handed on."""
    try:
        for event in events:
            if isinstance(event, PrefillProgress):
                if event.done < event.total:
                    line.set(f"reading the prompt, {event.done} of {event.total} tokens")
                continue
            line.clear()
            yield event
    finally:
        line.clear()


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def _width(out: TextIO) -> int:
    try:
        return os.get_terminal_size(out.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80
