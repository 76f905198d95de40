"""The conversation as the chat window shows it: each message's text made inert, a user turn's notes (its
documents, its controls), an answer's details and numbers (render.py) and its controls (versions.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from . import render, versions
from .store import Conversation, Message

log = logging.getLogger(__name__)


def conversation(conv: Conversation | None) -> list[dict[str, str]]:
    """Every message as shown. A turn whose stored numbers cannot be shown (a chat imported or stored by another
    version) is shown as its text alone: no chat breaks the page."""
    if conv is None:
        return []
    out = []
    for index, m in enumerate(conv.messages):
        try:
            content = message(index, m, last=index == len(conv.messages) - 1)
        except Exception:  # noqa: BLE001 - any stats at all: the page must open
            log.warning("turn %d of a chat could not be displayed; showing its text alone", index + 1)
            content = f"*(cannot display this turn's details)*\n\n{render.inert(m.content)}"
        out.append({"role": "user" if m.role == "user" else "assistant", "content": content})
    return out


def message(index: int, m: Message, last: bool) -> str:
    """Message `index` as shown; `last`: the chat's last message (only its versions are deleted one by one: an
    earlier version's Delete would take the chat after it along)."""
    if m.role == "user":
        return render.inert(m.content) + turn_note(index, m)
    marker = versions.version_marker(index, m.stats)
    delete = versions.delete_button(f"version:{index}", "delete this answer version") if marker and last else ""
    controls = versions.tools(marker, delete)
    try:
        return render.reply_markdown(m.content, m.stats, m.stats.get("included", ""), render.reply_note(m.stats),
                                     m.stats.get("passages")) + error_note(m.stats) \
            + (f"\n\n{controls}" if controls else "")
    except (KeyError, TypeError, ValueError):  # an imported chat's numbers may be partial or odd
        log.warning("a reply's stored numbers could not be shown; showing its text alone")
        return render.inert(m.content)


def turn_note(index: int, message: Message) -> str:
    """What the window adds under a user turn: its documents, its branches (‹ 1/2 ›) and its Delete (a turn not
    stored yet, `index` -1, has neither)."""
    docs = message.stats.get("documents")
    names = ", ".join(render.plain(Path(p).name) for p in docs) if docs else ""
    controls = versions.tools(versions.branch_marker(index, message.stats),
                              versions.delete_button(f"turn:{index}", "delete this message and its answer"))
    lines = [f"*Attached: {names}*" if names else "", controls if index >= 0 else ""]
    return "".join(f"\n\n{line}" for line in lines if line)


def error_note(stats: dict[str, Any]) -> str:
    """The error an answer ended with, under its text (kept in its stats, not in what the model reads)."""
    error = stats.get("error")
    return f"\n\n*error: {render.plain(error)}*" if isinstance(error, str) and error else ""
