"""The threads model calls run on, apart from asyncio's default executor.

A model call can wait on its runner for as long as the runner's liveness bound and a restart take
(a frozen runner, a model loading by name); on the default executor (min(32, cores + 4) threads: 6 on
two cores) a handful of them held every thread, and a route that only reads the database
(`GET /v1/responses/{id}`) waited behind them. Database reads and other routes keep that executor;
the model's calls wait here.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")

# Each request holds one while its prompt is prepared and submitted (its answer streams without one),
# or while the model it names loads: as many as requests can wait on a runner at once.
MAX_MODEL_CALLS = 64
_executor = ThreadPoolExecutor(max_workers=MAX_MODEL_CALLS, thread_name_prefix="localchat-model-call")


async def off_loop(work: Callable[..., T], *args: Any) -> T:
    """work(*args) on a model-call thread; the event loop stays free meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(_executor, functools.partial(work, *args))
