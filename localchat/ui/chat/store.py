"""Conversations kept in SQLite in the user data dir: they survive restarts and killed processes.

Every change is one transaction in WAL mode, so a crash leaves either the whole message or none.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...paths import data_dir
from ...errors import StoreError
from ...sqlite_file import not_kept, open_or_start_anew, transaction

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    stats TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    PRIMARY KEY (conversation_id, position)
);
"""


@dataclass(slots=True)
class Message:
    role: str
    content: str
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Conversation:
    id: str
    title: str
    system_prompt: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    updated: float = 0.0

    def chat_messages(self) -> list[dict[str, str]]:
        """The conversation as chat messages for the engine, system prompt first."""
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return head + [{"role": m.role, "content": m.content} for m in self.messages]


class Store:
    """A small thread-safe conversation store."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / "conversations.sqlite3"
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        with self._lock:
            try:
                self._conn()
            except StoreError as exc:  # a full disk at start: the chats open on a later use, not never
                log.warning("%s", exc)

    def _conn(self) -> sqlite3.Connection:
        """The open database (under the lock), opened now where a start failed; a StoreError if it cannot be."""
        if self._db is None:
            try:
                self._db = open_or_start_anew(self.path, SCHEMA, "conversations", "the conversations")
            except sqlite3.Error as exc:
                raise not_kept(exc, "the chats") from None
        return self._db

    def _write(self, statements: list[tuple[str, tuple]]) -> None:
        with self._lock:
            db = self._conn()
            try:
                with transaction(db):
                    for sql, args in statements:
                        db.execute(sql, args)
            except sqlite3.Error as exc:  # nothing of this change is kept, and all before it is
                raise not_kept(exc, "the chat") from None

    def create(self, title: str = "New chat", system_prompt: str = "", settings: dict[str, Any] | None = None) -> str:
        """A new empty conversation; returns its id."""
        conv_id, now = uuid.uuid4().hex, time.time()
        self._write([("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?)",
                      (conv_id, title, system_prompt, json.dumps(settings or {}), now, now))])
        return conv_id

    def list(self) -> list[Conversation]:
        """Every conversation, most recently changed first (without messages)."""
        return self.search("")

    def search(self, query: str) -> list[Conversation]:
        """Conversations whose title or any message holds `query` (case-insensitive), newest first."""
        pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        with self._lock:
            rows = self._conn().execute(
                "SELECT id, title, system_prompt, settings, updated FROM conversations c WHERE title LIKE ?1 "
                "ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND "
                "m.content LIKE ?1 ESCAPE '\\') ORDER BY updated DESC", (pattern,)).fetchall()
        return [Conversation(r[0], r[1], r[2], _object(r[3]), updated=r[4]) for r in rows]

    def get(self, conv_id: str) -> Conversation | None:
        with self._lock:
            row = self._conn().execute("SELECT id, title, system_prompt, settings, updated FROM conversations WHERE id = ?",
                                   (conv_id,)).fetchone()
            if row is None:
                return None
            messages = self._conn().execute(
                "SELECT role, content, stats FROM messages WHERE conversation_id = ? ORDER BY position",
                (conv_id,)).fetchall()
        return Conversation(row[0], row[1], row[2], _object(row[3]),
                            [Message(m[0], m[1], _object(m[2])) for m in messages], updated=row[4])

    def append(self, conv_id: str, role: str, content: str, stats: dict[str, Any] | None = None) -> None:
        """Add a message at the end of a conversation."""
        now = time.time()
        self._write([
            ("INSERT INTO messages SELECT ?, COALESCE(MAX(position) + 1, 0), ?, ?, ?, ? FROM messages "
             "WHERE conversation_id = ?", (conv_id, role, content, json.dumps(stats or {}), now, conv_id)),
            ("UPDATE conversations SET updated = ? WHERE id = ?", (now, conv_id)),
        ])

    def replace(self, conv_id: str, position: int, content: str, stats: dict[str, Any]) -> None:
        """Rewrite one message in place (the answer shown among a reply's versions)."""
        self._write([("UPDATE messages SET content = ?, stats = ? WHERE conversation_id = ? AND position = ?",
                      (content, json.dumps(stats), conv_id, position))])

    def splice(self, conv_id: str, keep: int, messages: list[Message]) -> None:
        """Keep the first `keep` messages and put `messages` after them, in one transaction (a branch switch)."""
        now = time.time()
        self._write([("DELETE FROM messages WHERE conversation_id = ? AND position >= ?", (conv_id, keep)),
                     *(("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?)",
                        (conv_id, keep + i, m.role, m.content, json.dumps(m.stats), now)) for i, m in enumerate(messages)),
                     ("UPDATE conversations SET updated = ? WHERE id = ?", (now, conv_id))])

    def truncate(self, conv_id: str, keep: int) -> None:
        """Keep only the first `keep` messages (regenerate and edit drop what follows)."""
        self._write([("DELETE FROM messages WHERE conversation_id = ? AND position >= ?", (conv_id, keep)),
                     ("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conv_id))])

    def update(self, conv_id: str, title: str | None = None, system_prompt: str | None = None,
               settings: dict[str, Any] | None = None) -> None:
        """Rename a conversation or change its system prompt or sampling settings."""
        changes = {"title": title, "system_prompt": system_prompt,
                   "settings": json.dumps(settings) if settings is not None else None}
        for column, value in changes.items():
            if value is not None:
                self._write([(f"UPDATE conversations SET {column} = ? WHERE id = ?", (value, conv_id))])

    def delete(self, conv_id: str) -> None:
        self._write([("DELETE FROM conversations WHERE id = ?", (conv_id,))])

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def _object(text: str) -> dict[str, Any]:
    """A stored JSON object read back; one that is not (a file another program changed) is read as empty,
    so its chat still opens."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        log.warning("a stored chat's settings or a message's details could not be read; they are left out")
        return {}
    return value
