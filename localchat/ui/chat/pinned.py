"""Documents an earlier turn of a chat read, kept in what the model reads (pinned): the overflow never leaves such
a turn out on its own (a document is never cut silently). When the context shrank under them (a model reloaded
with a shorter one), every new message was refused; the user may leave them out instead, once, for good."""

from __future__ import annotations

from pathlib import Path

from .store import Conversation, Message, Store

UNPINNED = "unpinned"  # a user turn's stats: its documents may be left out with it, as the user chose


def read_as(message: Message, newest: bool) -> str:
    """A message as the model reads it: a user turn with the documents it read in front, whole or the passages
    retrieved for its question. Passages are the newest question's only: an earlier turn is read as it was
    typed, since each follow-up retrieves its own (kept, every earlier turn's passages, up to PASSAGE_SHARE of
    the context each, made each follow-up's prompt longer than the last). A whole document stays: no later
    turn reads it again."""
    if message.role == "user" and not newest and message.stats.get("mode") == "retrieved":
        return message.content
    return message.stats.get("prompt", message.content)


def pinned(message: Message) -> bool:
    """Whether this earlier user turn may not be left out: it carries documents whole, and the user has not let go
    of them (a turn that retrieved passages carries them only while it is the newest: `read_as`)."""
    return message.role == "user" and bool(message.stats.get("documents")) and not message.stats.get(UNPINNED) \
        and message.stats.get("mode") != "retrieved"


def pinned_names(conv: Conversation) -> list[str]:
    """The names of the documents the chat's pinned turns carry, in order, each once."""
    names = [Path(p).name for m in conv.messages if pinned(m) for p in m.stats["documents"]]
    return list(dict.fromkeys(names))


def unpin(store: Store, conv_id: str) -> bool:
    """Let the chat's pinned turns be left out as any early turn is; False if it has none."""
    conv = store.get(conv_id)
    if conv is None:
        return False
    held = [i for i, m in enumerate(conv.messages) if pinned(m)]
    for i in held:
        m = conv.messages[i]
        store.replace(conv_id, i, m.content, m.stats | {UNPINNED: True})
    return bool(held)


def refusal(names: list[str], said: str) -> str:
    """Why a message was refused when an earlier turn's documents leave it no room, and the way out."""
    one = len(names) == 1
    return (f"an earlier turn's {', '.join(names)} {'is' if one else 'are'} kept whole in what the model reads and "
            f"leave{'s' if one else ''} no room for this message {said} Leave out that turn and its "
            f"{'document' if one else 'documents'} from here on (Leave out and send), or start a new chat.")
