"""Taking a message out of a chat: a user turn with its answer (the chat after it stays), or the version of the
last answer on show (its other versions stay). What the model reads follows: the turns an overflow left out are
kept by their place among the turns, so the places after a removed turn move up by one."""

from __future__ import annotations

from .core import title_of
from .store import Message, Store
from .versions import shown_version


def turn_place(messages: list[Message], index: int) -> int:
    """The place of the turn starting at message `index` among the chat's turns (runtime/overflow.py: turns_of;
    an imported chat that opens with an answer has that as a turn of its own)."""
    return sum(m.role == "user" for m in messages[:index]) + (messages[0].role != "user")


def remove_turn(store: Store, conv_id: str, index: int) -> bool:
    """Remove user turn `index` and its answer; False if there is no such turn."""
    conv = store.get(conv_id)
    if conv is None or not 0 <= index < len(conv.messages) or conv.messages[index].role != "user":
        return False
    end = next((i for i in range(index + 1, len(conv.messages)) if conv.messages[i].role == "user"),
               len(conv.messages))
    place = turn_place(conv.messages, index)
    rest = []
    for m in conv.messages[end:]:
        gone = m.stats.get("left_out")
        if m.role == "user" and isinstance(gone, list):  # an answer's "left_out" is only the count it showed
            m.stats["left_out"] = [g - (g > place) for g in gone if g != place]
        rest.append(m)
    store.splice(conv_id, index, rest)
    if index == 0 and rest and not conv.settings.get("renamed"):  # a first turn names the chat
        store.update(conv_id, title=title_of(rest[0].content))
    return True


def remove_version(store: Store, conv_id: str, index: int) -> bool:
    """Remove the version shown of the last answer (message `index`), the one before it shown in its place (the
    next when it was the first) with what followed it when it was left; False unless that answer has another
    version to show."""
    conv = store.get(conv_id)
    if conv is None or index != len(conv.messages) - 1 or conv.messages[index].role != "assistant":
        return False
    stats = conv.messages[index].stats
    kept, shown = list(stats.get("versions") or []), int(stats.get("version", 0))
    if len(kept) < 2 or not 0 <= shown < len(kept):
        return False
    del kept[shown]
    store.splice(conv_id, index, shown_version(kept, max(shown - 1, 0)))
    return True
