"""The event loop every MCP connection lives on: one daemon thread, so the window's worker threads and the
API's own event loop reach the same connections (an MCP session's tasks must stay on the loop that made it)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """A started asyncio loop on its own thread; coroutines are handed to it and their results come back."""

    def __init__(self, name: str = "localchat-mcp") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` there and wait for it here (a thread that is not that loop's)."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError from None

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` there and await it from another event loop; cancelling the await cancels it there."""
        future = self.submit(coro)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise
