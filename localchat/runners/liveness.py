"""Liveness seen from outside a runner: the runner says it is alive over the pipe every second, and
the server treats a runner silent past a bound as a crash.

A runner's own watchdog cannot see a runner that is not running: one stopped (SIGSTOP, a debugger),
swapped out, or deadlocked in a driver is frozen with its watchdog inside it. The heartbeat comes from
a thread of its own, which runs while llama.cpp computes (ctypes lets go of the GIL), so a long step
is never silence; the watchdog still judges steps. Any message counts as a sign of life.

Both runners (the chat model's and the embedding model's) write through an `Outbox` and are read
through a `Receiver`: one shape of supervision for both.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

HEARTBEAT_S = 1.0  # how often a runner says it is alive
SILENCE_S = 20.0  # a runner silent this long is frozen: the server ends it and starts another
# The first word may come late: a spawned runner imports the program (llama.cpp's bindings, numpy) first.
START_S = 120.0


class Silent(Exception):
    """The runner said nothing within the bound."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"it said nothing for {seconds:.0f} s")
        self.seconds = seconds


class Receiver:
    """The server's end of a runner's pipe, read within bounds: a runner silent for `within` seconds
    raises Silent, and one that stops in the middle of a message (frozen while it wrote a long reply) is
    ended by `on_stuck` from a watcher thread, so the read sees the pipe close instead of waiting forever."""

    def __init__(self, conn: Any, within: float, on_stuck: Callable[[], None]) -> None:
        self.conn, self.within = conn, within
        self._on_stuck = on_stuck
        self._reading_since: float | None = None  # set while a message is read after poll saw its start
        self._closed = threading.Event()
        threading.Thread(target=self._watch, name="localchat-runner-receiver", daemon=True).start()

    def receive(self, within: float | None = None) -> Any:
        """The next message, heartbeats (("alive",)) included; Silent when none began within `within`
        seconds (default: the receiver's own bound), EOFError or OSError when the runner ended."""
        within = self.within if within is None else within
        if not self.conn.poll(within):
            raise Silent(within)
        self._reading_since = time.monotonic()
        try:
            return self.conn.recv()
        finally:
            self._reading_since = None

    def close(self) -> None:
        """Stop the watcher (the pipe is the caller's to close)."""
        self._closed.set()

    def _watch(self) -> None:
        while not self._closed.wait(min(1.0, self.within / 4)):
            since = self._reading_since
            if since is not None and time.monotonic() - since > self.within:
                self._on_stuck()
                return


class Outbox:
    """A runner's end of the pipe: one message at a time from any thread, and a heartbeat beside them."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        # Messages go out whole, one at a time. The server reads the pipe all the time, so a writer waits
        # only for another's write; nothing else is ever done under this lock.
        self._lock = threading.Lock()

    def send(self, message: tuple) -> None:
        """Write a message; the process ends when the server is gone (nobody is left to answer)."""
        with self._lock:
            self._write(message)

    def send_within(self, message: tuple, seconds: float) -> bool:
        """Write a message unless another write holds the pipe past `seconds`: for the heartbeat and the
        watchdog, which must never wait on a stuck writer. False when it was not sent."""
        if not self._lock.acquire(timeout=seconds):
            return False
        try:
            self._write(message)
        finally:
            self._lock.release()
        return True

    def beat(self, interval: float = HEARTBEAT_S) -> None:
        """Say "alive" every `interval` seconds from a thread of its own, for the life of the process."""
        def loop() -> None:
            stop = threading.Event()
            while not stop.wait(interval):
                self.send_within(("alive",), interval)

        threading.Thread(target=loop, name="localchat-runner-heartbeat", daemon=True).start()

    def _write(self, message: tuple) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError):  # the server is gone
            os._exit(0)
