"""Stored responses of OpenAI's Responses API (`store`, `previous_response_id`, GET and DELETE
/v1/responses/{id}): each response object beside the conversation it ended, in SQLite in the data dir.

Bounded twice, so no client can fill the disk: the newest MAX_STORED responses, and no more than
MAX_STORED_BYTES of them together; the oldest go first. They hold what was said: the file is private.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ..paths import data_dir, private_file

MAX_STORED = 2000
MAX_STORED_BYTES = 256 * 1024 * 1024

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    response TEXT NOT NULL,     -- the response object, as GET returns it
    conversation TEXT NOT NULL  -- the neutral messages it answered and its answer: what a follow-up goes on from
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created);
"""


class ResponseStore:
    """A small thread-safe store of response objects and their conversations."""

    def __init__(self, path: Path, max_stored: int = MAX_STORED, max_bytes: int = MAX_STORED_BYTES) -> None:
        self.path = private_file(path)
        self.max_stored, self.max_bytes = max_stored, max_bytes
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    def put(self, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        """Keep `response` (by its id) and the conversation it ended; then drop the oldest beyond the bounds."""
        row = (response["id"], time.time(), json.dumps(response, ensure_ascii=False),
               json.dumps(conversation, ensure_ascii=False))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?)", row)
                self._db.execute("DELETE FROM responses WHERE id NOT IN (SELECT id FROM responses ORDER BY "
                                 "created DESC, rowid DESC LIMIT ?)", (self.max_stored,))
                # The newest first, summed: the first row past the byte bound and every older one go.
                self._db.execute(
                    "DELETE FROM responses WHERE rowid IN (SELECT rowid FROM (SELECT rowid, SUM(LENGTH(response) + "
                    "LENGTH(conversation)) OVER (ORDER BY created DESC, rowid DESC) AS total FROM responses) "
                    "WHERE total > ?)", (self.max_bytes,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def get(self, response_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The stored response object and its conversation, or None."""
        with self._lock:
            row = self._db.execute("SELECT response, conversation FROM responses WHERE id = ?",
                                   (response_id,)).fetchone()
        return (json.loads(row[0]), json.loads(row[1])) if row else None

    def delete(self, response_id: str) -> bool:
        """Forget a response; False if there was none by that id."""
        with self._lock:
            return self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


@functools.lru_cache(maxsize=4)
def _store_at(path: Path) -> ResponseStore:
    return ResponseStore(path)


def stored_responses() -> ResponseStore:
    """The store in the data dir (one per dir, so a relocated LOCALCHAT_HOME gets its own)."""
    return _store_at(data_dir() / "responses.sqlite3")
