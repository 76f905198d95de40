"""The server's side of a model runner: the Engine's surface (submit, prompt_tokens, count_tokens,
n_ctx, template, worker, close_when_done...) over a child process that it starts, watches and restarts.

When the runner dies (a signal, an abort, the OOM killer, its own watchdog) every request in flight
hears why, a new runner loads the same model, and the requests that were not to blame go on in it:
each is sent again with the text it had streamed as the answer's forced beginning (`Request.forced`),
so its caller sees one answer, a pause, and no error. The ones to blame fail with the cause: a
request whose submit was being read when the runner died (its grammar is parsed there), or, when a
step stalled under a grammar, the requests with one (a step that stalled with none, every request: the
message names what the step held and blames no grammar). A crash in the middle of
a step names no culprit, so then every request in flight fails rather than crashing the next runner.
A runner ended from outside (SIGKILL or SIGTERM: the OOM killer, a person) or frozen (silent past the
liveness bound, liveness.py: it is then killed) names no request: every answer goes on in the new one.

Every wait is bounded: a runner that says nothing (not even its heartbeat) for `silence_s` is ended,
which wakes every call waiting on it. Nothing here holds a lock while it writes to the pipe: each
runner has a writer thread, and callers (the event loop's cancel among them) only queue messages.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import logging
import multiprocessing.util  # noqa: F401 - its exit hook first, so the one below runs before it
import signal
import threading
import time
from typing import Any, Callable

from ..errors import EngineError, LocalchatError
from ..runtime.backends.residence import DeviceMemory
from ..runtime.constraints.resample import Resampled, checked
from ..runtime.engine import Request
from ..runtime.events import Done, Failed, Stream, TextDelta
from ..runtime.templates.chat_template import ChatTemplate
from .liveness import SILENCE_S, Silent
from .runner_process import Call, InFlight, LoadCrashError, RunnerProcess, ended, killed_from_outside, start_runner

__all__ = ["LoadCrashError", "SupervisedEngine", "ended"]

log = logging.getLogger(__name__)

STALL_FLOOR_S = 20.0  # the watchdog's least patience with one step (child.py scales it up from measured steps)
MAX_RESTARTS = 5  # in a row without an answer finishing between them: then the runner stays down
RESTART_WAIT_S = 600.0  # the most a call waits for a restarting runner (a big model's load) before it fails


# Set as the interpreter exits, before multiprocessing ends the runners (atexit runs the hooks
# registered last first): a runner ended then is not restarted.
_EXITING = threading.Event()
atexit.register(_EXITING.set)


class SupervisedEngine:
    """An Engine in a runner process, restarted with the same model when it dies."""

    def __init__(self, opener: Callable[..., Any], progress: Callable[[float], None] | None = None,
                 stall_floor_s: float = STALL_FLOOR_S, silence_s: float = SILENCE_S) -> None:
        """`opener(progress=...)` loads the engine; it runs in the runner, so it must pickle (a
        functools.partial of a module-level function). A runner silent for `silence_s` is ended."""
        self._opener, self._floor, self._silence = opener, stall_floor_s, silence_s
        self._lock = threading.Lock()  # the tables below and idle_since; never held across pipe I/O
        self._flight: dict[str, InFlight] = {}
        self._calls: dict[int, Call] = {}
        self._ids = itertools.count(1)
        self._closing = False
        self._up = threading.Event()  # a runner is ready to take requests (clear while one restarts)
        self._drained = threading.Event()
        self.restarts = 0  # runners started after the first (tests and the status read it)
        self._failures = 0
        self.idle_since: float | None = time.monotonic()  # when its last answer ended; None while answering
        self._runner = self._start(progress)
        self._up.set()
        self.info = self._runner.info  # a restart loads the same model: its facts stay
        self.n_ctx = self.info.n_ctx
        self.worker = self.info  # the loaded model's facts: model_path, describe(), n_ctx_train, config
        self.placement, self.drafter_name = self.info.placement, self.info.drafter
        self.template = ChatTemplate(self.info.chat_template, self.info.bos_text, self.info.eos_text)

    # -- the Engine's surface -------------------------------------------------------------

    def residences(self) -> dict:
        """As Engine.residences, from the runner now serving (a restart may place the layers anew)."""
        return self._runner.info.residences

    def submit(self, request: Request) -> Stream | Resampled:
        """As Engine.submit: bad requests raise here; an answer with a check is checked here."""
        return checked(self._submit, request)

    def devices(self) -> list[DeviceMemory]:
        """As Engine.devices, read in the runner now; none while it restarts (a look must not wait on a load)."""
        return self._call("devices") if self._up.is_set() else []

    def prompt_tokens(self, request: Request) -> list[int]:
        return self._call("prompt_tokens", _sendable(request))

    def count_tokens(self, text: str) -> int:
        return self._call("count_tokens", text)

    def cancel(self, request_id: str) -> None:
        self._send(("cancel", request_id))  # queued: the event loop never waits on the pipe

    def close(self) -> None:
        """End the runner now; requests in flight end with an error."""
        self._end(("close",))

    def close_when_done(self) -> threading.Thread:
        """The runner ends once the answers it is giving have ended (a model switch); returns the waiter."""
        self._end(("drain",))
        waiter = threading.Thread(target=self._drained.wait, name="localchat-runner-retire", daemon=True)
        waiter.start()
        return waiter

    @property
    def pid(self) -> int:
        """The runner process's id (it changes with a restart)."""
        return self._runner.process.pid

    def __enter__(self) -> "SupervisedEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests and calls ---------------------------------------------------------------

    def _submit(self, request: Request) -> Stream:
        rid = f"run-{next(self._ids)}"
        stream = Stream(rid, self.cancel)
        with self._lock:
            self.idle_since = None
            self._flight[rid] = InFlight(_sendable(request), stream)
        try:
            self._call_on("submit", rid, self._flight[rid].request)
        except LocalchatError:
            self._ended(rid)
            raise
        return stream

    def _call(self, method: str, *args: Any) -> Any:
        return self._call_on("call", None, method, *args)

    def _call_on(self, kind: str, rid: str | None, *args: Any) -> Any:
        """Send a submit or a call and wait for its reply (the runner answers them in order). Sent once
        more when the runner was ended from outside while it read it: that names no request."""
        for attempt in (1, 2):
            runner, pending = self._send_call(kind, rid, args)
            pending.done.wait()  # bounded: a silent runner is ended, and its end wakes every call
            with self._lock:
                runner.submitting.discard(rid)
            if not (pending.again and attempt == 1):
                break
        if pending.error is not None:
            raise pending.error
        return pending.value

    def _send_call(self, kind: str, rid: str | None, args: tuple) -> tuple[RunnerProcess, Call]:
        call, pending = next(self._ids), Call()
        message = (kind, call, rid, *args) if rid is not None else (kind, call, *args)
        while True:
            # A request that comes while a runner restarts goes to the new one.
            if not self._up.wait(RESTART_WAIT_S):
                raise EngineError(f"the model runner has been restarting for {RESTART_WAIT_S:.0f} s; try again "
                                  "later, or restart localchat if it does not come back.")
            with self._lock:
                if self._closing:
                    raise EngineError("the model runner is shut down; start a new one.")
                if not self._up.is_set():
                    continue  # it died since: a call left on it would never hear back
                runner = self._runner
                self._calls[call] = pending
                if rid is not None:
                    runner.submitting.add(rid)
                break
        try:
            runner.post(message)
        except Exception as exc:  # a request that does not pickle: a bug of ours, that request's error
            with self._lock:
                self._calls.pop(call, None)
                runner.submitting.discard(rid)
            raise EngineError(f"internal error: the request could not be sent to the model runner ({exc!r})") \
                from exc
        return runner, pending

    def _send(self, message: tuple) -> None:
        with self._lock:
            runner = self._runner
        runner.post(message)  # a dead runner's writer drops it: its requests end with its death

    def _end(self, message: tuple) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            runner = self._runner
        runner.post(message)
        if message[0] == "close":
            runner.process.join(10)
            if runner.process.is_alive():
                runner.process.kill()

    def _ended(self, rid: str) -> None:
        with self._lock:
            self._flight.pop(rid, None)
            if not self._flight:
                self.idle_since = time.monotonic()

    # -- the runner process ---------------------------------------------------------------

    def _start(self, progress: Callable[[float], None] | None) -> RunnerProcess:
        """Start a runner and wait until its model is loaded (then read it on a thread of its own); raise
        what stopped it otherwise."""
        runner = start_runner(self._opener, self._floor, self._silence, progress)
        threading.Thread(target=self._read, args=(runner,), name="localchat-runner-read", daemon=True).start()
        return runner

    def _read(self, runner: RunnerProcess) -> None:
        """Pass the runner's replies and events on, until it ends; then, whatever happened, `_died`."""
        try:
            self._read_until_end(runner)
        except Exception:  # a bug of ours: the runner is ended rather than left with nobody reading it
            log.exception("reading a model runner failed; ending it")
            runner.process.kill()
        finally:
            runner.stop_writing()
            runner.receiver.close()
            runner.process.join()
            runner.conn.close()
            try:
                self._died(runner)
            except Exception:
                log.exception("the model runner's end could not be handled; it is left stopped")
                self._stop_for_good(EngineError("internal error: the model runner ended and could not be "
                                                "restarted. Restart localchat."))

    def _read_until_end(self, runner: RunnerProcess) -> None:
        while True:
            try:
                message = runner.receiver.receive()
            except Silent as silent:
                # Frozen (SIGSTOP, a debugger, swapped out, a driver deadlock): its watchdog is inside it.
                runner.frozen = f"it stopped answering: {silent}"
                log.error("the model runner %s; ending it", runner.frozen)
                runner.process.kill()
                return
            except (EOFError, OSError):
                return
            except Exception:  # a message that does not unpickle here: a bug of ours; the runner starts anew
                log.exception("a model runner's message could not be read")
                runner.process.kill()
                return
            kind = message[0]
            if kind == "event":
                self._event(message[1], message[2])
            elif kind == "reply":
                _, call, value, error = message
                with self._lock:
                    pending = self._calls.pop(call, None)
                if pending is not None:
                    pending.value, pending.error = value, error
                    pending.done.set()
            elif kind == "stalled":
                _, seconds, limit, what, runner.stalled_grammar = message
                runner.stalled = f"one step ({what}) ran {seconds:.1f} s, past the {limit:.1f} s it may take"

    def _event(self, rid: str, event: Any) -> None:
        with self._lock:
            flight = self._flight.get(rid)
        if flight is None:
            return
        if isinstance(event, TextDelta):
            flight.text.append(event.text)
        elif isinstance(event, (Done, Failed)):
            self._ended(rid)
            self._failures = 0
        flight.stream.put(event)

    def _died(self, runner: RunnerProcess) -> None:
        """The runner ended: a planned end closes the streams; any other is a crash, and a restart."""
        how = ended(runner.process.exitcode)
        outside = bool(runner.frozen) or killed_from_outside(runner.process.exitcode)
        with self._lock:
            calls, self._calls = self._calls, {}
            flights = dict(self._flight)
            closing = self._closing or _EXITING.is_set()
            # Before the waiting submits wake and leave `submitting`; an end from outside blames none.
            blamed = set() if outside else self._blamed(runner, flights)
            reading = set(runner.submitting)
            self._up.clear()
        if runner.frozen:
            how = f"was ended ({runner.frozen})"
        elif outside:
            how = f"was ended from outside ({signal.Signals(-runner.process.exitcode).name}: the system ran " \
                  "short of memory, or another program ended it)"
        crash = EngineError(f"the model runner {how}" + (f" ({runner.stalled})" if runner.stalled else "")
                            + (" while reading this request; it was restarted. Check the request's grammar, "
                               "schema or tools, or send it again." if not closing else "."))
        for pending in calls.values():
            pending.error, pending.again = crash, outside and not closing
            pending.done.set()
        if closing:
            for rid, flight in flights.items():
                self._ended(rid)
                flight.stream.put(Failed(EngineError("the model runner was shut down before this request finished.")))
            self._drained.set()
            self._up.set()  # what waits sees the end
            return
        log.error("the model runner %s%s; restarting it", how, f" ({runner.stalled})" if runner.stalled else "")
        for rid in blamed:
            self._ended(rid)
            flights[rid].stream.put(Failed(self._blame(how, runner, flights[rid], rid in reading, len(flights))))
        self._restart(how, {rid: f for rid, f in flights.items() if rid not in blamed and rid not in reading})

    def _blamed(self, runner: RunnerProcess, flights: dict[str, InFlight]) -> set[str]:
        """The requests the runner's end is laid to (see the module's note)."""
        if runner.stalled:
            grammared = {rid for rid, f in flights.items() if f.request.sampling.grammar is not None}
            return grammared if grammared and runner.stalled_grammar else set(flights)
        reading = {rid for rid in flights if rid in runner.submitting}
        return reading or set(flights)

    def _blame(self, how: str, runner: RunnerProcess, flight: InFlight, read: bool, num_flights: int) -> EngineError:
        cause = "its grammar" if flight.request.sampling.grammar is not None else "this request"
        if runner.stalled and runner.stalled_grammar and flight.request.sampling.grammar is not None:
            return EngineError(f"the model runner {how}: {runner.stalled} while answering with {cause}, so it was "
                               "ended and restarted. Simplify the grammar or schema (an ambiguous one makes "
                               "llama.cpp's matcher grow with every token) and send it again.")
        if runner.stalled:  # no grammar was running: the step was slow, not spinning on one
            return EngineError(f"the model runner {how}: {runner.stalled} while answering this request, which has "
                               "no grammar, so it was ended and restarted. The machine is likely too busy (other "
                               "programs on its cores) or too slow for this model; send it again, or free the CPU.")
        if not read and num_flights > 1:
            # In the middle of a step: every answer in it ends, and none of them is named.
            return EngineError(f"the model runner {how} in the middle of a step, which names no one request, so "
                               f"the {num_flights} answers in flight ended; it was restarted. Send it again.")
        return EngineError(f"the model runner {how} while answering with {cause}; it was restarted. "
                           "Send it again; if it fails the same way, change the grammar, schema or tools.")

    def _restart(self, how: str, survivors: dict[str, InFlight]) -> None:
        """A new runner with the same model; the requests not to blame go on in it."""
        self._failures += 1
        try:
            if self._failures > MAX_RESTARTS:
                raise EngineError(f"the model runner ended {MAX_RESTARTS} times in a row; it is left stopped. "
                                  "Restart localchat.")
            runner = self._start(None)
        except Exception as exc:  # ours or not: what waits must hear it, never wait on a reader that died
            if not isinstance(exc, LocalchatError):
                log.exception("the model runner could not be restarted")
            self._stop_for_good(EngineError(f"the model runner {how} and could not be restarted: {exc}"), survivors)
            return
        with self._lock:
            closing = self._closing or _EXITING.is_set()
            if not closing:
                self._runner = runner
                self.restarts += 1
        if closing:  # closed while the new one loaded: it must not outlive its engine holding a model
            runner.post(("close",))
            self._stop_for_good(EngineError("the model runner was shut down before this request finished."),
                                survivors)
            return
        self._up.set()
        for rid, flight in survivors.items():
            self._resume(rid, flight)

    def _stop_for_good(self, error: EngineError, survivors: dict[str, InFlight] | None = None) -> None:
        """Leave the runner stopped: later calls hear it is shut down, these requests hear `error`."""
        with self._lock:
            self._closing = True
            survivors = dict(self._flight) if survivors is None else survivors
        self._drained.set()
        self._up.set()  # what waits sees the end
        for rid, flight in survivors.items():
            self._ended(rid)
            flight.stream.put(Failed(error))

    def _resume(self, rid: str, flight: InFlight) -> None:
        """Send a request again, beginning with what it had streamed; its caller's stream goes on."""
        request = flight.request
        said = "".join(flight.text)
        again = dataclasses.replace(request, forced=request.forced + said)
        flight.request, flight.text = again, []  # the engine counts forced tokens against max_tokens
        try:
            self._call_on("submit", rid, again)
        except LocalchatError as exc:
            self._ended(rid)
            flight.stream.put(Failed(EngineError(f"the model runner was restarted and this request could not "
                                                 f"go on: {exc}")))


def _sendable(request: Request) -> Request:
    """The request as the runner takes it: the grammar's answer check stays on this side."""
    grammar = request.sampling.grammar
    if grammar is None or grammar.check is None:
        return request
    return dataclasses.replace(request, sampling=dataclasses.replace(
        request.sampling, grammar=dataclasses.replace(grammar, check=None)))
