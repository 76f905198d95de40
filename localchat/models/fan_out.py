"""One call over many items, a few at a time and all within a deadline: the hub's listings and headers are
slow one by one, and a resolver or server stuck past the deadline must not hold up the answer."""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def fan_out(items: Sequence[Item], call: Callable[[Item], Result], *, workers: int, deadline: float,
            name: str) -> list[tuple[Item, Result]]:
    """(item, call(item)) for each item whose call ended within `deadline` seconds, in the items' order, with
    up to `workers` calls at once. A call that raises leaves its item out: a call says its own errors where
    they matter. Daemon threads: one stuck past the deadline must not hold the process open at exit."""
    pending, results, lock = list(enumerate(items)), {}, threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not pending:
                    return
                index, item = pending.pop(0)
            try:
                result = call(item)
            except Exception:  # noqa: BLE001 - this item only; the others still count
                continue
            with lock:
                results[index] = result

    threads = [threading.Thread(target=work, daemon=True, name=name) for _ in range(min(workers, len(items)))]
    for thread in threads:
        thread.start()
    end = time.monotonic() + deadline
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    with lock:
        return [(items[index], results[index]) for index in sorted(results)]
