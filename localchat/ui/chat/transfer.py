"""Chats out and in: a chat as Markdown (to read) or JSON (to keep, with its branches, answer versions
and settings), every chat at once, and a JSON export read back as new chats.

An imported file is untrusted: data, never instructions. It is checked shape by shape and bounded in
size; each message keeps only what the window shows of it, every field type-checked (imported.py),
so no chat can break the window; what the engine reads (a turn's prompt) is rebuilt from what is shown,
and what names a local file (the stored paths of attached documents) is dropped, so an import can
neither speak for the user nor make a later question read a file of this machine.
"""

from __future__ import annotations

import html
import json
import secrets
import time
from pathlib import Path
from typing import Any

from ...errors import RequestError
from ..documents.uploads import MAX_UPLOAD_BYTES
from .imported import reply_stats, user_stats
from .tool_cards import steps_markdown
from .session import checked_settings
from .store import Conversation, Store

FORMAT = "localchat-chats"
VERSION = 1
MAX_CHATS = 10_000
MAX_NESTING = 64  # of JSON objects and lists in a message's stats: branches within branches


def to_markdown(conv: Conversation) -> str:
    """The chat as shown: its title, system prompt, and each turn with what the reply read (a thinking
    model's thinking before its answer, closed, as the window shows it)."""
    lines = [f"# {conv.title}", ""]
    if conv.system_prompt:
        lines += [f"*System prompt:* {conv.system_prompt}", ""]
    for m in conv.messages:
        writer = f"localchat ({m.stats['model']})" if isinstance(m.stats.get("model"), str) else "localchat"
        lines += [f"## {'You' if m.role == 'user' else writer}", ""]
        if m.role == "assistant" and isinstance(m.stats.get("thinking"), str) and m.stats["thinking"].strip():
            lines += [thinking_markdown(m.stats["thinking"], m.stats.get("thought_s")), ""]
        lines += steps_markdown(m.stats) if m.role == "assistant" else []  # the turns that called tools
        lines += [m.content, ""]
        if m.role == "assistant" and m.stats.get("included"):
            lines += [f"*Included: {m.stats['included']}*", ""]
    return "\n".join(lines)


def thinking_markdown(thought: str, seconds: Any) -> str:
    """The thinking as a block that Markdown readers show closed (GitHub's, most editors'): "Thought for N s",
    the thinking inside as text (escaped: it is the model's, not markup)."""
    summary = f"Thought for {seconds:.0f} s" if isinstance(seconds, (int, float)) else "Thought"
    return f"<details><summary>{summary}</summary>\n\n<pre>{html.escape(thought.strip())}</pre>\n\n</details>"


def to_json(convs: list[Conversation]) -> str:
    """Chats with everything kept of them: messages with their stats (branches, versions), settings."""
    return json.dumps({"format": FORMAT, "version": VERSION, "exported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "chats": [_chat_dict(c) for c in convs]}, ensure_ascii=False, indent=1)


def import_json(store: Store, data: bytes) -> list[str]:
    """Add the chats of an export as new chats; returns their ids. RequestError says what is wrong."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise RequestError(f"the file is over the {MAX_UPLOAD_BYTES / 1e6:.0f} MB an import may take.")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise RequestError(f"the file is not a localchat export (not JSON: {exc}).") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise RequestError("the file is not a localchat export: export chats from localchat's window first.")
    if doc.get("version") != VERSION:
        raise RequestError(f"the export is of version {doc.get('version')!r}; this localchat reads version {VERSION}.")
    chats = doc.get("chats")
    if not isinstance(chats, list) or len(chats) > MAX_CHATS:
        raise RequestError(f"the export's chats must be a list of at most {MAX_CHATS:,}.")
    checked = [_checked_chat(c, n) for n, c in enumerate(chats, 1)]  # all checked before any is added
    ids = []
    for title, system, settings, messages in checked:
        conv_id = store.create(title, system, settings)
        for role, content, stats in messages:
            store.append(conv_id, role, content, stats)
        ids.append(conv_id)
    return ids


def _chat_dict(conv: Conversation) -> dict[str, Any]:
    return {"title": conv.title, "system_prompt": conv.system_prompt, "settings": conv.settings,
            "messages": [{"role": m.role, "content": m.content, "stats": m.stats} for m in conv.messages]}


def _checked_chat(chat: Any, n: int) -> tuple[str, str, dict[str, Any], list[tuple[str, str, dict[str, Any]]]]:
    where = f"chat {n} of the export"
    if not isinstance(chat, dict):
        raise RequestError(f"{where} is not an object.")
    title, system = chat.get("title", "Imported chat"), chat.get("system_prompt", "")
    settings, messages = chat.get("settings", {}), chat.get("messages")
    if not isinstance(title, str) or not isinstance(system, str) or not isinstance(settings, dict):
        raise RequestError(f"{where}: title and system_prompt must be text, settings an object.")
    if not isinstance(messages, list):
        raise RequestError(f"{where} has no list of messages.")
    kept = []
    for i, m in enumerate(messages, 1):
        message = _message(m, 0)
        if message is None:
            raise RequestError(f"{where}: message {i} needs a role (user or assistant), text content and "
                               "an object of stats.")
        kept.append(message)
    shown = checked_settings(settings)
    if settings.get("renamed") is True:  # a title the user chose stays when the first message is edited
        shown["renamed"] = True
    return title.strip() or "Imported chat", system, shown, kept


def _message(m: Any, depth: int) -> tuple[str, str, dict[str, Any]] | None:
    """(role, content, the stats the window reads) of a message, or None if it is not one."""
    if depth > MAX_NESTING:
        raise RequestError(f"the export nests branches deeper than {MAX_NESTING} levels.")
    if (not isinstance(m, dict) or m.get("role") not in ("user", "assistant")
            or not isinstance(m.get("content"), str) or not isinstance(m.get("stats", {}), dict)):
        return None
    stats, inner = m.get("stats", {}), lambda nested: _message(nested, depth + 1)
    if m["role"] == "assistant":
        return "assistant", m["content"], reply_stats(stats, inner)
    return "user", m["content"], user_stats(m["content"], stats, inner)


def export_file(folder: Path, name: str, text: str) -> Path:
    """`text` as a file the window offers for download (`folder`: one the window's server may serve)."""
    out = folder / "exports" / secrets.token_hex(8)
    out.mkdir(parents=True)
    path = out / name
    path.write_text(text, encoding="utf-8")
    return path


def file_name(title: str, suffix: str) -> str:
    """A chat's title as a file name anyone's system takes."""
    stem = "".join(c if c.isalnum() or c in " -_" else "_" for c in title).strip()[:60] or "chat"
    return stem + suffix
