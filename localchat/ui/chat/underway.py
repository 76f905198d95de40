"""What a chat shows after its stored messages while it answers: the answer streaming, then the messages sent
meanwhile, each waiting its turn as a user bubble with a Cancel (the page script sends "cancel:N").

A message is taken from here when its chat's turn comes, oldest first: whichever Send handler gets the turn
sends the oldest message still waiting, so messages go in the order they were typed, and a cancelled one,
taken out before then, is never sent."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Callable

from . import render
from .session import Sampling

WAITING_NOTE = "waiting — sent when the answer ends"


@dataclass(frozen=True, slots=True)
class Waiting:
    """A message sent while its chat answered, with everything it was sent with."""
    number: int  # the Cancel link's: unique within the window
    text: str
    documents: list[str]
    system: str
    sampling: Sampling


def cancel_link(number: int) -> str:
    return f"[Cancel](#lc-cancel-{number})"


class Underway:
    """Per chat: the answer being streamed (as the chat shows it) and the messages waiting; any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[str, dict[str, str]] = {}  # conversation id -> the streaming answer's message
        self._waiting: dict[str, list[Waiting]] = {}  # conversation id -> its waiting messages, oldest first
        self._numbers = itertools.count(1)

    def queue(self, conv_id: str, text: str, documents: list[str], system: str, sampling: Sampling) -> Waiting:
        with self._lock:
            message = Waiting(next(self._numbers), text, list(documents), system, sampling)
            self._waiting.setdefault(conv_id, []).append(message)
            return message

    def next_message(self, conv_id: str) -> Waiting | None:
        """The oldest message still waiting, taken out to be sent (None: each was sent or cancelled)."""
        with self._lock:
            waiting = self._waiting.get(conv_id)
            return waiting.pop(0) if waiting else None

    def cancel(self, conv_id: str, number: int) -> Waiting | None:
        """Take message `number` back before it is sent (None: it was sent already, or is not this chat's)."""
        with self._lock:
            waiting = self._waiting.get(conv_id, [])
            found = next((m for m in waiting if m.number == number), None)
            if found is not None:
                waiting.remove(found)
            return found

    def forget(self, conv_id: str) -> None:
        """A deleted chat's waiting messages go with it."""
        with self._lock:
            self._waiting.pop(conv_id, None)

    def show_answer(self, conv_id: str, content: str) -> None:
        with self._lock:
            self._answers[conv_id] = {"role": "assistant", "content": content}

    def answering(self, conv_id: str) -> bool:
        """Whether chat `conv_id` has an answer streaming."""
        with self._lock:
            return conv_id in self._answers

    def end_answer(self, conv_id: str) -> None:
        with self._lock:
            self._answers.pop(conv_id, None)

    def waiting(self, conv_id: str | None) -> list[Waiting]:
        with self._lock:
            return list(self._waiting.get(conv_id or "", []))

    def tail(self, conv_id: str | None, note: Callable[[Waiting], str]) -> list[dict[str, str]]:
        """What follows the stored messages: the answer streaming, then each waiting message with its Cancel;
        `note` gives what a message's bubble says under it of its own (its attached documents)."""
        with self._lock:
            answer = self._answers.get(conv_id or "")
        bubbles = [{"role": "user", "content": f"{render.inert(m.text)}{note(m)}\n\n*{WAITING_NOTE}* · "
                                               f"{cancel_link(m.number)}"} for m in self.waiting(conv_id)]
        return ([answer] if answer else []) + bubbles
