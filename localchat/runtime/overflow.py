"""A chat that outgrows its context: which turns to leave out so the rest and the answer fit.

Policies: `rolling` leaves out the oldest turns; `truncate-middle` keeps the first turn too and leaves
out the ones after it; `refuse` leaves out nothing and says the chat is too long. A turn is a user
message and what answered it (the assistant's reply, tool calls and their results), so the roles
still alternate as chat templates demand. The leading system messages, the newest turn and any
pinned turn (one that carries attached documents) are never left out: a document is never cut
silently, and when they alone do not fit, that is said.

Turns are left out from the front, so the prompt's start changes only when more must go; then a
quarter of the room is cleared at once, so the next turns reuse the prompt read before instead of
reading the whole chat again each turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import ContextOverflowError

POLICIES = ("rolling", "truncate-middle", "refuse")
SLACK = 0.25  # the share of the room cleared when more turns must go


@dataclass(frozen=True, slots=True)
class Fitted:
    messages: list[dict[str, Any]]
    gone: tuple[int, ...]  # the turns left out (indices into turns_of's turns)
    tokens: int  # the prompt's tokens as kept

    @property
    def left_out(self) -> int:
        return len(self.gone)

    def note(self) -> str:
        return left_out_note(self.left_out)


def left_out_note(left_out: int) -> str:
    """What a reply says of the turns left out for it ("" when none were)."""
    if not left_out:
        return ""
    return f"{'1 early turn' if left_out == 1 else f'{left_out} early turns'} left out to fit the context"


def turns_of(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """The leading system messages, and the rest split into turns (each from a user message on)."""
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    turns: list[list[dict[str, Any]]] = []
    for message in messages[head:]:
        if message.get("role") == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return list(messages[:head]), turns


def without(messages: Sequence[dict[str, Any]], gone: Sequence[int]) -> list[dict[str, Any]]:
    """The messages with the turns `gone` (indices into turns_of's turns) left out."""
    head, turns = turns_of(messages)
    left = set(gone)
    return head + [m for i, turn in enumerate(turns) if i not in left for m in turn]


def fit(messages: Sequence[dict[str, Any]], count: Callable[[list[dict[str, Any]]], int], room: int, policy: str,
        pinned: Callable[[int], bool] = lambda turn: False, at_least: int = 0) -> Fitted:
    """The messages with as few turns left out as makes `count(messages) <= room` (never fewer than
    `at_least`, the number left out for the turn before). `pinned(i)`: turn i may not go. Raises
    ContextOverflowError when the policy is refuse and something would have to go, or when what may not
    go is too long alone."""
    if policy not in POLICIES:
        raise ValueError(f"context overflow policy {policy!r} is not one of {', '.join(POLICIES)}")
    head, turns = turns_of(messages)
    first = 1 if policy == "truncate-middle" else 0
    # The turns that may go, oldest first: never the first (truncate-middle), the newest or a pinned one.
    droppable = [i for i in range(first, len(turns) - 1) if not pinned(i)]

    def kept(k: int) -> list[dict[str, Any]]:
        return without(messages, droppable[:k])

    counted: dict[int, int] = {}

    def size(k: int) -> int:
        """The prompt's tokens with the first k droppable turns left out; each k rendered and counted once."""
        if k not in counted:
            counted[k] = count(kept(k))
        return counted[k]

    def fewest(limit: int, low: int) -> int | None:
        """The fewest turns left out (at least `low`) that fit in `limit`; counts O(log turns) prompts."""
        high = len(droppable)
        if size(high) > limit:
            return None
        while low < high:
            middle = (low + high) // 2
            if size(middle) <= limit:
                high = middle
            else:
                low = middle + 1
        return low

    at_least = min(at_least, len(droppable))
    tokens = size(at_least)
    if tokens <= room:
        return Fitted(kept(at_least), tuple(droppable[:at_least]), tokens)
    if policy == "refuse":
        raise ContextOverflowError(f"the chat is {tokens:,} tokens, more than the {room:,} the context leaves once "
                                   "the answer's tokens are set aside; shorten it, start a new chat, or let early "
                                   "turns be left out (the rolling or truncate-middle context overflow setting).")
    needed = fewest(room, at_least)
    if needed is None:
        raise ContextOverflowError(
            f"even with every earlier turn left out, the system prompt, the documents and the newest message take "
            f"{size(len(droppable)):,} tokens, more than the {room:,} the context leaves for them; shorten "
            "the message, attach less, or lower the answer's token limit.")
    roomy = fewest(int(room * (1 - SLACK)), needed)
    k = needed if roomy is None else roomy
    return Fitted(kept(k), tuple(droppable[:k]), size(k))
