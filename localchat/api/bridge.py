"""An engine stream, read from async code: a thread blocks on it so the event loop never does."""

from __future__ import annotations

import asyncio
import threading
from typing import AsyncIterator

from starlette.requests import Request as HTTPRequest

from ..runtime.events import Done, Event, Failed, Stream


class StreamBridge:
    """Async iteration over one engine Stream. Abandoning it cancels the request."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.ended = False
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._queue = queue

        def pump() -> None:
            # Refers to the loop and queue only: a bridge nobody holds any more must be collectable,
            # so that __del__ can cancel its request.
            for event in stream:
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, event)
                except RuntimeError:  # the loop is closed: the server stopped; drain and leave
                    pass

        threading.Thread(target=pump, name=f"localchat-stream-{stream.id}", daemon=True).start()

    async def events(self) -> AsyncIterator[Event]:
        """The stream's events up to Done or Failed; leaving early (or being cancelled) cancels it."""
        try:
            while not self.ended:
                event = await self._queue.get()
                if isinstance(event, (Done, Failed)):
                    self.ended = True
                yield event
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Stop the request, unless it already ended. Safe from any thread, any number of times."""
        if not self.ended:
            self.ended = True
            self.stream.cancel()

    def __del__(self) -> None:
        # A streaming response whose client left before its body was ever iterated never runs
        # the generator's finally; this catches that case.
        self.cancel()


async def wait_for_disconnect(request: HTTPRequest) -> None:
    """Return when the HTTP client goes away (the request body must already have been read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
