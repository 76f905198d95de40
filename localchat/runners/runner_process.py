"""One model runner process as its supervisor sees it: the process, its pipe and the thread that alone
writes to it, what it was doing when it ended, and how it ended, in words."""

from __future__ import annotations

import queue
import signal
import threading
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler
from typing import Any

from ..errors import LocalchatError, ModelLoadError
from ..runtime.engine import Request
from ..runtime.events import Stream
from . import child
from .child import RunnerInfo

# Signals that come from outside the runner, never from what it was doing: the OOM killer's and a person's.
OUTSIDE = (signal.SIGKILL, signal.SIGTERM)


class LoadCrashError(ModelLoadError):
    """The model file killed its runner while loading (llama.cpp aborted or crashed on it)."""

    def __init__(self, message: str, how: str = "") -> None:
        super().__init__(message)
        self.how = how  # 'crashed (SIGABRT)'


def killed_from_outside(exitcode: int | None) -> bool:
    """Whether a process was ended by a signal that only comes from outside it (SIGKILL, SIGTERM)."""
    return exitcode is not None and -exitcode in OUTSIDE


def ended(exitcode: int | None) -> str:
    """How a process ended, in words: 'crashed (SIGSEGV)', 'was stopped by its watchdog', 'exited (1)'."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"crashed ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"crashed (signal {-exitcode})"
    if exitcode == child.STALL_EXIT:
        return "was stopped by its watchdog"
    return f"exited ({exitcode})"


@dataclass(slots=True)
class InFlight:
    request: Request  # as the runner was given it
    stream: Stream  # the caller's
    text: list[str] = field(default_factory=list)  # what has streamed so far


@dataclass(slots=True)
class Call:
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: LocalchatError | None = None
    again: bool = False  # the runner was ended from outside while it read this: send it to the next one


@dataclass(slots=True)
class RunnerProcess:
    """One runner: its process, its end of the pipe, and what it was doing when it died."""

    process: Any
    conn: Any
    info: RunnerInfo  # what it said of its model when ready
    submitting: set[str] = field(default_factory=set)  # requests whose submit it is reading now
    stalled: str = ""  # the watchdog's words, when it ended the runner
    frozen: str = ""  # how long it was silent, when the server ended it
    receiver: Any = None  # its liveness.Receiver: the pipe read within bounds
    outbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)  # pickled messages to write

    def start_writing(self) -> None:
        """The runner's writer thread: the only one that writes to its pipe, so no caller waits on it."""
        def write() -> None:
            while (data := self.outbox.get()) is not None:
                try:
                    self.conn.send_bytes(data)
                except (OSError, ValueError):
                    return  # the runner is gone: the reader sees its end and fails what waits

        threading.Thread(target=write, name="localchat-runner-write", daemon=True).start()

    def post(self, message: tuple) -> None:
        """Queue a message for the runner (pickled here, so a caller hears of one that does not pickle)."""
        self.outbox.put(bytes(ForkingPickler.dumps(message)))

    def stop_writing(self) -> None:
        self.outbox.put(None)
