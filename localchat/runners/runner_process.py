"""One model runner process as its supervisor sees it: how it is started and waited for until its model
is loaded, the process, its pipe and the thread that alone writes to it, what it was doing when it ended,
and how it ended, in words."""

from __future__ import annotations

import multiprocessing
import queue
import signal
import threading
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

from ..errors import EngineError, LocalchatError, ModelLoadError
from ..runtime.engine import Request
from ..runtime.events import Stream
from . import child
from .child import RunnerInfo
from .liveness import START_S, Receiver, Silent

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
    stalled_grammar: int = 0  # the rows of the stalled step under a grammar
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


def start_runner(opener: Callable[..., Any], stall_floor_s: float, silence_s: float,
                 progress: Callable[[float], None] | None) -> RunnerProcess:
    """Start a runner on `opener` and wait until its model is loaded; raise what stopped it otherwise: a
    LoadCrashError when llama.cpp crashed on the file, an EngineError when it was ended from outside or
    fell silent (neither says anything of the file)."""
    context = multiprocessing.get_context("spawn")  # never fork: the server runs threads
    ours, theirs = context.Pipe()
    process = context.Process(target=child.serve, args=(theirs, opener, stall_floor_s),
                              name="localchat-runner", daemon=True)
    process.start()
    theirs.close()
    receiver = Receiver(ours, silence_s, process.kill)
    within = max(START_S, silence_s)  # the first word comes after the program's imports
    while True:
        try:
            message = receiver.receive(within)
        except Silent as silent:
            receiver.close()
            process.kill()
            process.join()
            ours.close()
            raise EngineError(f"the model runner stopped answering while loading the model ({silent}); it "
                              "was ended. Try again; if it happens again, the log says where it stopped.") \
                from None
        except (EOFError, OSError):
            receiver.close()
            process.join()
            ours.close()
            how = ended(process.exitcode)
            if process.exitcode is not None and process.exitcode < 0 and not killed_from_outside(process.exitcode):
                # llama.cpp aborted or crashed on the file. A kill from outside says nothing of the
                # file (the OOM killer, a person): it must not mark it bad.
                raise LoadCrashError(f"the model runner {how} while loading the model: llama.cpp could not read "
                                     "this file. Choose another file or download it again.", how) from None
            if killed_from_outside(process.exitcode):
                raise EngineError(f"the model runner was ended from outside ({how[len('crashed ('):-1]}: the "
                                  "system ran short of memory, or another program ended it) while loading the "
                                  "model; try again, with fewer programs running if memory is short.") from None
            raise EngineError(f"the model runner {how} before the model was loaded; the log says why.") from None
        within = silence_s
        if message[0] == "progress":
            if progress is not None:
                progress(message[1])
        elif message[0] == "load_failed":
            receiver.close()
            process.join()
            ours.close()
            raise message[1]
        elif message[0] == "ready":
            runner = RunnerProcess(process, ours, message[1], receiver=receiver)
            runner.start_writing()
            return runner
