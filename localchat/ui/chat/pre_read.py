"""Reading attached documents before the question: the moment a document is attached, the prompt the
question will have (system prompt, earlier turns, the document block) is read into the KV cache, so
Enter costs only the question's own tokens. One pre-read per browser tab; a newer attach, a detach,
a chat switch or Send ends the one in flight (what it read so far stays resident for reuse)."""

from __future__ import annotations

import dataclasses
import threading
from typing import Iterator

from ...errors import LocalchatError
from ...ingest import build_prompt
from ...runtime.engine import Request
from ...runtime.events import PrefillProgress, Stream
from ...runtime.sampling import SamplingParams
from .core import ChatCore
from .store import Conversation

# What the user turn will hold in front of the question: the question itself is not known yet.
_NO_QUESTION = ""


class PreReader:
    """Starts, follows and ends the pre-reads of every tab (`key`: the tab's session)."""

    def __init__(self, core: ChatCore) -> None:
        self.core = core
        self._reading: dict[str, Stream] = {}
        self._lock = threading.Lock()

    def messages(self, conv_id: str | None, docs: list[str], system: str, max_tokens: int) -> list[dict] | None:
        """The chat as its next question will send it, up to that question; None when the documents do not
        fit whole (then the passages depend on the question, and nothing can be read before it)."""
        core = self.core
        conv = core.store.get(conv_id) if conv_id else None
        # Send saves the panel's system prompt into the chat before it asks: the same here.
        conv = dataclasses.replace(conv or Conversation("", ""), system_prompt=system)
        selection = core.fit(core.documents(docs), _NO_QUESTION, conv, max_tokens)
        if selection.mode != "whole":
            return None
        return core.engine_messages(conv) + [{"role": "user", "content": build_prompt(_NO_QUESTION, selection)}]

    def start(self, key: str, conv_id: str | None, docs: list[str], system: str, max_tokens: int) -> Stream | None:
        """End the tab's pre-read in flight; begin one for `docs` (None when there is nothing to read)."""
        self.stop(key)
        if not docs:
            return None
        try:
            messages = self.messages(conv_id, docs, system, max_tokens)
            if messages is None:
                return None
            # One greedy token: the prompt's KV then stays resident as the slot's prefix.
            stream = self.core.runtime.engine.submit(Request(
                messages=messages, sampling=SamplingParams(temperature=0.0, max_tokens=1), speculate=False))
        except LocalchatError:
            return None  # too long, say: the question will say so itself when it is sent
        with self._lock:
            self._reading[key] = stream
        return stream

    def stop(self, key: str) -> None:
        """End the tab's pre-read, if one is in flight."""
        with self._lock:
            stream = self._reading.pop(key, None)
        if stream is not None and not stream.finished:
            stream.cancel()

    def follow(self, key: str, stream: Stream) -> Iterator[str]:
        """The status line while `stream` reads: "reading the document… n/N", then "" when it ends."""
        for event in stream:  # it ends after Done or Failed
            if isinstance(event, PrefillProgress) and event.done < event.total:
                yield f"reading the document… {event.done:,}/{event.total:,} tokens"
        with self._lock:
            if self._reading.get(key) is stream:
                del self._reading[key]
        yield ""
