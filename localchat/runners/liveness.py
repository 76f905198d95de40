"""Liveness seen from outside a runner: the runner says it is alive over the pipe every second, and
the server treats a runner silent past a bound as a crash.

A runner's own watchdog cannot see a runner that is not running: one stopped (SIGSTOP, a debugger),
swapped out, or deadlocked in a driver is frozen with its watchdog inside it. The heartbeat comes from
a thread of its own, which runs while llama.cpp computes (ctypes lets go of the GIL), so a long step
is never silence; the watchdog still judges steps. Any message counts as a sign of life.

Both runners (the chat model's and the embedding model's) write through an `Outbox` and are read
through `receive`: one shape of supervision for both.
"""

from __future__ import annotations

import os
import threading
from typing import Any

HEARTBEAT_S = 1.0  # how often a runner says it is alive
SILENCE_S = 20.0  # a runner silent this long is frozen: the server ends it and starts another
# The first word may come late: a spawned runner imports the program (llama.cpp's bindings, numpy) first.
START_S = 120.0


class Silent(Exception):
    """The runner said nothing within the bound."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"it said nothing for {seconds:.0f} s")
        self.seconds = seconds


def receive(conn: Any, within: float) -> Any:
    """The next message from a runner, heartbeats (("alive",)) included; Silent when none came within
    `within` seconds, EOFError or OSError when the runner ended."""
    if not conn.poll(within):
        raise Silent(within)
    return conn.recv()


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
