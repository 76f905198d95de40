"""The models a server loads by name, on demand, as Ollama and LM Studio do: a request that names another
model on this machine loads it in a runner of its own when memory allows (the least recently used idle one
is unloaded first to make room; otherwise the request hears why, a 503), and each is unloaded once it has
been idle past its keep-alive. The model the server started with (or the window chose) is not here: it
stays loaded while the server runs.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import NoRoomError
from ..units import size_text

log = logging.getLogger(__name__)

FOREVER = math.inf  # a keep-alive that never unloads (Ollama's negative keep_alive)


def free_memory() -> int:
    """Bytes the machine can give a new runner now (the loaded runners' memory already counted out)."""
    import psutil

    return psutil.virtual_memory().available


@dataclass(slots=True)
class _Held:
    engine: Any  # a SupervisedEngine
    path: Path
    needs: int  # bytes, as the planner's fit model counts them
    keep_alive: float  # seconds idle before it is unloaded
    leases: int = 0  # requests between choosing it and submitting to it
    used: float = 0.0  # time.monotonic() of the last lease's end


class Runners:
    """Runners of models loaded by name, by the name they were asked for."""

    def __init__(self, open_file: Callable[[Path], Any], needs: Callable[[Path], int], keep_alive_s: float,
                 free: Callable[[], int] = free_memory, room: Callable[[int], int] | None = None) -> None:
        """`open_file(path)` starts a runner on a file (blocking until loaded); `needs(path)` the bytes it will
        take; `free()` the machine's free bytes now; `room(free)` what of them may be planned (the fit
        model's budget)."""
        from ..planning.fit import budget

        self._open, self._needs, self._free = open_file, needs, free
        self._room = room or (lambda free: budget(free, "cpu"))
        self.keep_alive_s = keep_alive_s
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()  # the table
        self._loading = threading.Lock()  # one load (and its room-making) at a time
        self._closed = False
        self._wake = threading.Event()
        threading.Thread(target=self._reap, name="localchat-runners-reaper", daemon=True).start()

    @contextlib.contextmanager
    def lease(self, name: str, path: Path, keep_alive_s: float | None = None) -> Iterator[Any]:
        """The engine of `name` (its file at `path`), loaded now if it is not; it is not unloaded while the
        lease lasts or while it answers. Blocks while loading: call it off the event loop."""
        held = self._take(name, path)
        try:
            yield held.engine
        finally:
            with self._lock:
                held.leases -= 1
                held.used = time.monotonic()
                if keep_alive_s is not None:
                    held.keep_alive = keep_alive_s
            self._wake.set()  # a keep-alive of 0 unloads it as soon as its answer ends

    def engine_of(self, name: str) -> Any:
        """The engine of `name` if it is loaded, else None (nothing is loaded)."""
        with self._lock:
            held = self._held.get(name)
            return held.engine if held is not None else None

    def loaded(self) -> dict[str, float]:
        """The loaded models by name, each with the time.time() it unloads at when idle until then (inf: never)."""
        now_mono, now = time.monotonic(), time.time()
        out = {}
        with self._lock:
            for name, held in self._held.items():
                idle_for = now_mono - self._idle_since(held) if self._idle(held) else 0.0
                out[name] = now + max(0.0, held.keep_alive - idle_for)
        return out

    def unload(self, name: str) -> bool:
        """Unload `name` once its answers end; False if it is not loaded. One a request holds (chosen, not yet
        submitted to) is unloaded by the reaper when that lease ends: closing it now would fail that request."""
        with self._lock:
            held = self._held.get(name)
            if held is None:
                return False
            if held.leases:
                held.keep_alive = 0.0
                held = None
            else:
                del self._held[name]
        if held is None:
            self._wake.set()
        else:
            held.engine.close_when_done()
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            held, self._held = list(self._held.values()), {}
        self._wake.set()
        for h in held:
            h.engine.close()

    # -- loading and unloading -------------------------------------------------------------

    def _take(self, name: str, path: Path) -> _Held:
        with self._lock:
            held = self._held.get(name)
            if held is not None:
                held.leases += 1
                return held
        with self._loading:
            with self._lock:
                held = self._held.get(name)
                if held is not None:  # loaded while this request waited for the loading lock
                    held.leases += 1
                    return held
            needs = self._needs(path)
            self._make_room(name, needs)
            log.info("loading %s on demand (%s)", name, path.name)
            engine = self._open(path)
            held = _Held(engine, path, needs, self.keep_alive_s, leases=1, used=time.monotonic())
            with self._lock:
                self._held[name] = held
            self._wake.set()
            return held

    def _make_room(self, name: str, needs: int) -> None:
        """Unload idle runners, the least recently used first, until `needs` bytes fit; NoRoomError if they
        cannot."""
        while True:
            room = self._room(self._free())
            if needs <= room:
                return
            with self._lock:
                idle = sorted((h for h in self._held.values() if self._idle(h)), key=self._idle_since)
                victim = next((n for n, h in self._held.items() if idle and h is idle[0]), None)
                if victim is not None:
                    self._held.pop(victim)
                busy = sorted(self._held)
            if victim is None:
                beside = f" beside {', '.join(busy)} (answering now)" if busy else ""
                raise NoRoomError(f"there is no memory to load {name}: it needs about {size_text(needs)} and "
                                  f"{size_text(room)} is free{beside}. Try again when the answers end, close "
                                  "other programs, or use the loaded model.")
            log.info("unloading %s to make room for %s", victim, name)
            idle[0].engine.close()  # waits for the process to end: its memory is back before the next look

    @staticmethod
    def _idle(held: _Held) -> bool:
        return held.leases == 0 and held.engine.idle_since is not None

    @staticmethod
    def _idle_since(held: _Held) -> float:
        return max(held.used, held.engine.idle_since or 0.0)

    def _reap(self) -> None:
        """Unload each runner idle past its keep-alive; sleeps until the next one is due."""
        while True:
            now = time.monotonic()
            with self._lock:
                if self._closed:
                    return
                due = [n for n, h in self._held.items()
                       if self._idle(h) and now - self._idle_since(h) >= h.keep_alive]
                expired = [self._held.pop(n) for n in due]
                waits = [h.keep_alive - (now - self._idle_since(h)) for h in self._held.values() if self._idle(h)]
                # A runner still answering is looked at again soon: its answer's end starts its idle time.
                busy = any(not self._idle(h) for h in self._held.values())
            for name, held in zip(due, expired):
                log.info("unloading %s: idle for %.0f s", name, held.keep_alive)
                held.engine.close()
            wait = min([w for w in waits if w < FOREVER] + ([1.0] if busy else []) + [3600.0])
            self._wake.wait(max(0.05, wait))
            self._wake.clear()
