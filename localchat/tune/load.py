"""How much of the machine other programs used while the wizard measured: a speed measured beside a busy
program says more about that program than about this machine, and the profile must not keep it.

Other programs' share is the whole machine's busy CPU time minus this process's own, over the same wall
time, in cores: llama.cpp's threads are ours, so a model run at full speed counts for nothing, and a
compiler, a video call or a test suite beside it counts for the cores it took. /proc/stat (psutil) sums
every core's time; this process's time (its children's once they end) comes from the kernel's account.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, TextIO, TypeVar

from ..errors import BusyMachineError

T = TypeVar("T")

# Cores other programs may use while a measurement runs before it is doubted: half a core already takes
# a quarter of llama.cpp's time on a 2-core machine (its threads wait on the slowest); on a big machine a
# desktop's background (a browser, an indexer) runs to a tenth of its cores without slowing it.
BUSY_CORES = 0.5
BUSY_SHARE = 0.1
QUIET_WAIT_S = 30.0  # how long the wizard waits for the machine to calm down before measuring
QUIET_SAMPLE_S = 1.0  # each look at the machine while waiting


def busy_limit(cores: int) -> float:
    """Other programs' cores that make a measurement doubtful on a machine of `cores` logical cores."""
    return max(BUSY_CORES, BUSY_SHARE * cores)


@dataclass(frozen=True, slots=True)
class Load:
    """What other programs used over `seconds`: `others` cores on average, of the machine's `cores`."""

    others: float
    cores: int
    seconds: float

    @property
    def busy(self) -> bool:
        return self.others >= busy_limit(self.cores)

    def text(self) -> str:
        """"1.3 of 2 cores"."""
        return f"{self.others:.1f} of {self.cores} cores"


def _machine_busy_s() -> float:
    """Every core's busy time since boot, summed: all but idle and waiting on I/O."""
    import psutil

    t = psutil.cpu_times()
    return sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


def _own_s() -> float:
    """This process's CPU time, with that of its children once they end (llama.cpp's test run of a CPU
    kernel variant at the first load, say): their work is the wizard's own."""
    import psutil

    t = psutil.Process().cpu_times()
    return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)


def _cores() -> int:
    import psutil

    return psutil.cpu_count() or 1


class LoadWatch:
    """`with LoadWatch() as watch: ...` then `watch.load`: other programs' use over the block. Without
    psutil (or /proc) it sees nothing and says so by `load` None, never by a made-up idle machine."""

    def __init__(self) -> None:
        self.load: Load | None = None
        self._start: tuple[float, float, float] | None = None

    def __enter__(self) -> LoadWatch:
        try:
            self._start = (time.perf_counter(), _machine_busy_s(), _own_s())
        except (ImportError, OSError):
            self._start = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._start is None:
            return
        try:
            now, machine, own = time.perf_counter(), _machine_busy_s(), _own_s()
        except (ImportError, OSError):
            return
        wall = now - self._start[0]
        if wall <= 0:
            return
        others = max(0.0, (machine - self._start[1]) - (own - self._start[2])) / wall
        self.load = Load(round(others, 2), _cores(), round(wall, 2))


def look(seconds: float = QUIET_SAMPLE_S) -> Load | None:
    """Other programs' use over the next `seconds` (this process idle meanwhile)."""
    with LoadWatch() as watch:
        time.sleep(seconds)
    return watch.load


def wait_until_quiet(out: TextIO, limit_s: float = QUIET_WAIT_S, sample_s: float = QUIET_SAMPLE_S,
                     watch: Callable[[float], Load | None] = look) -> Load | None:
    """Look at the machine until other programs leave it (the last look) or `limit_s` has passed (the last
    look too, busy); says once that it waits, and why."""
    deadline = time.monotonic() + limit_s
    load = watch(sample_s)
    said = False
    while load is not None and load.busy and time.monotonic() < deadline:
        if not said:
            print(f"  other programs use {load.text()}: waiting up to {limit_s:.0f} s for them to finish before "
                  "measuring ...", file=out, flush=True)
            said = True
        load = watch(sample_s)
    return load


def measured_when_quiet(run: Callable[[], T], label: str, out: TextIO, *, allow_busy: bool = False,
                        quiet_wait_s: float = QUIET_WAIT_S, sample_s: float = QUIET_SAMPLE_S,
                        keep_busy: str = "") -> T:
    """`run()` (one measurement) on a machine other programs leave alone: it waits for them first (bounded),
    watches them while it runs, and runs once more when they were busy meanwhile. Busy both times: a
    BusyMachineError, so that nothing measured then is kept. `allow_busy`: measure as the machine is,
    noting the load, for a machine that is never idle. `keep_busy`: how the user asks for that
    where the wizard runs (tune/here.py: Words), said last."""
    load: Load | None = None
    for attempt in range(2):
        if not allow_busy:
            wait_until_quiet(out, quiet_wait_s, sample_s)
        with LoadWatch() as watch:
            result = run()
        load = watch.load
        if load is None or not load.busy:
            return result
        if allow_busy:
            print(f"  note: other programs used {load.text()} while measuring {label}; kept as asked "
                  "(--allow-busy), though the speeds are lower than this machine's own.", file=out)
            return result
        if attempt == 0:
            print(f"  other programs used {load.text()} while measuring {label}: measuring it again once they "
                  "are quiet ...", file=out, flush=True)
    assert load is not None
    raise BusyMachineError(
        f"another program used {load.text()} while measuring {label}, twice; speeds measured beside it would "
        "make every prediction slower than this machine runs, so nothing was saved. Close it and run the wizard "
        f"again{keep_busy}.")
