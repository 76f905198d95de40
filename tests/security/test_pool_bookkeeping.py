"""The pool of models loaded by name keeps its books under its lock: a runner a request has chosen but
not yet submitted to is never unloaded under it. Fast: the runners here are stand-ins at the pool's
`open_file` seam (the runner itself is tested on the real model in test_runner_faults.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from localchat.runners.pool import Runners
from conftest import wait_until


class StandIn:
    """What the pool reads of a runner: when its last answer ended, and how it is closed."""

    def __init__(self) -> None:
        self.idle_since: float | None = time.monotonic()
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()

    def close_when_done(self) -> threading.Thread:
        self.closed.set()
        return threading.current_thread()


def test_an_unload_waits_for_the_lease_a_request_holds(tmp_path: Path):
    """Code review: `unload` closed a runner a request had just leased, and its submit then failed."""
    opened: list[StandIn] = []
    pool = Runners(open_file=lambda path: opened.append(StandIn()) or opened[-1], needs=lambda path: 0,
                   keep_alive_s=3600, free=lambda: 1 << 40)
    try:
        with pool.lease("other", tmp_path / "other.gguf") as engine:
            assert pool.unload("other")
            assert not engine.closed.is_set()  # the request that holds it can still submit
            assert pool.engine_of("other") is engine
        wait_until(engine.closed.is_set, 60, "the runner to unload once its lease ended")
        assert pool.engine_of("other") is None
    finally:
        pool.close()
