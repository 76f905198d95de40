"""The model runner: a child process holding one Engine, driven by the server over a pipe.

llama.cpp aborts or segfaults on some inputs (a crafted model file, a grammar its parser cannot
take) and can spin for minutes inside one step (an ambiguous grammar doubles its stacks per token).
In the server's own process that would take the window, the API and every answer in flight with it;
in a runner it costs one process, which the server's supervisor (supervisor.py) restarts.

The protocol, one pickled tuple per message (both sides are this program):
- in: ("submit", call, rid, request), ("cancel", rid), ("call", call, method, args), ("drain",), ("close",)
- out: ("progress", share) while loading, then ("ready", RunnerInfo) or ("load_failed", error);
  ("reply", call, value, error) per call or submit; ("event", rid, event) per stream event;
  ("stalled", seconds, limit, what the step held, its rows under a grammar) just before the watchdog
  ends the process; ("alive",) every second from the start (liveness.py: the server ends a runner that falls silent).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import EngineError, LocalchatError
from ..runtime.engine import Engine
from ..runtime.step_clock import Running
from ..runtime.worker_types import WorkerConfig
from .liveness import Outbox

log = logging.getLogger(__name__)

# What the runner answers as calls: the engine's read-only questions (devices: its GPUs' memory, read now).
CALLS = ("prompt_tokens", "count_tokens", "devices")
# A step may run this many times what its tokens cost in the steps before it (per token: a step that reads
# a 512-token prompt chunk is held to 512 tokens' worth, not to a one-token decode step), and never less than
# the floor: a step far past both is llama.cpp spinning (an ambiguous grammar), not work. A median, not the
# slowest: the steps of a grammar that slows with every token must not raise the limit they are held to.
STALL_FACTOR = 50
# Before any step is measured (a fresh runner): a slow CPU shared with other programs reads a few prompt tokens
# a second, so a step may take this long per token it holds, and the floor at least.
FRESH_TOKEN_S = 0.5
STALL_EXIT = 70  # the runner's exit status after its watchdog ended a stalled step


@dataclass(slots=True)
class RunnerInfo:
    """What the server shows and needs of the loaded model, read once when the runner is ready."""

    model_path: Path
    description: str  # the worker's describe()
    n_ctx: int
    n_ctx_train: int
    config: WorkerConfig
    chat_template: str | None  # None: the file has none that works, and ChatML stands in (a base model, mostly)
    bos_text: str
    eos_text: str
    placement: str
    drafter: str
    residences: dict  # role -> where llama.cpp put that worker's layers (runtime/backends/residence.py)

    def describe(self) -> str:
        return self.description

    @classmethod
    def of(cls, engine: Engine) -> "RunnerInfo":
        worker, template = engine.worker, engine.template
        # The fallback's source is ChatML, not the file's: sent as the file's own, the server took it for a chat
        # model's template (no base-model note, no stop at ChatML's markers).
        own = None if template.fallback else template.source
        return cls(Path(getattr(worker, "model_path", "")), worker.describe(), engine.n_ctx, worker.n_ctx_train,
                   worker.config, own, template.bos_token, template.eos_token, engine.placement,
                   engine.drafter_name, engine.residences())


def serve(conn: Any, opener: Callable[..., Engine], stall_floor_s: float) -> None:
    """The runner process's main: load through `opener(progress=...)`, then answer until told to stop
    or the server goes away."""
    # Written at once, from whichever thread has it (the engine's, for stream events): a thread
    # between them would wake once more per token, on cores llama.cpp's threads are using.
    outbox = Outbox(conn)
    outbox.beat()  # from the start: a load may take minutes, and a frozen one must be seen
    send = outbox.send
    try:
        engine = opener(progress=lambda share: send(("progress", share)))
    except LocalchatError as exc:
        send(("load_failed", exc))
        os._exit(0)
    send(("ready", RunnerInfo.of(engine)))
    threading.Thread(target=_watch, args=(engine, outbox, stall_floor_s), name="localchat-runner-watchdog",
                     daemon=True).start()
    _answer(conn, engine, send)


def _answer(conn: Any, engine: Engine, send: Callable[[tuple], None]) -> None:
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the server is gone: nobody is left to answer
            os._exit(0)
        kind = message[0]
        if kind in ("submit", "call"):
            send(("reply", message[1], *_reply(engine, send, message)))
        elif kind == "cancel":
            engine.cancel(message[1])
        elif kind == "drain":  # a model switch: the answers in flight end here, cancels still come
            closer = engine.close_when_done()
            threading.Thread(target=lambda: (closer.join(), os._exit(0)), daemon=True).start()
        elif kind == "close":
            engine.close()
            os._exit(0)  # llama.cpp's threads need no goodbye


def _reply(engine: Engine, send: Callable[[tuple], None], message: tuple) -> tuple[Any, LocalchatError | None]:
    """A submit's or a call's (value, error)."""
    try:
        if message[0] == "submit":
            _, _, rid, request = message
            request.id = rid  # the server's name for it: the events go back under it
            engine.submit_unchecked(request, sink=lambda event: send(("event", rid, event)))
            return None, None
        _, _, method, *args = message
        if method not in CALLS:
            raise EngineError(f"the model runner has no call {method!r}.")
        return getattr(engine, method)(*args), None
    except LocalchatError as exc:
        return None, exc
    except Exception as exc:  # a bug: that request fails, the runner keeps serving
        log.exception("the model runner failed a %s", message[0])
        return None, EngineError(f"internal error in the model runner: {exc!r}")


def stall_limit(running: Running, per_token: float | None, floor_s: float) -> float:
    """The seconds the step in progress may run before the watchdog ends it (see STALL_FACTOR)."""
    per = STALL_FACTOR * per_token if per_token is not None else FRESH_TOKEN_S
    return max(floor_s, per * max(running.tokens, 1))


def _watch(engine: Engine, outbox: Outbox, floor_s: float) -> None:
    """End the process when one step runs far past what its tokens cost in the steps before it: nothing can
    interrupt llama.cpp inside a step, and every other request waits behind it."""
    while True:
        time.sleep(min(1.0, floor_s / 4))
        running = engine.clock.running
        if running is None:
            continue
        limit = stall_limit(running, engine.clock.per_token, floor_s)
        seconds = time.perf_counter() - running.started
        # The same step, as planned when the limit was taken (a step planned since is judged at the next look).
        if seconds > limit and engine.clock.running is running:
            log.error("a step %s ran %.1f s (limit %.1f s): ending the runner", running.words(), seconds, limit)
            # Its last word is worth a second, no more: a writer stuck on the pipe must not keep it alive.
            outbox.send_within(("stalled", seconds, limit, running.words(), running.grammar_rows), 1.0)
            os._exit(STALL_EXIT)
