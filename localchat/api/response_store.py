"""Stored responses of OpenAI's Responses API (`store`, `previous_response_id`, GET and DELETE
/v1/responses/{id}): each response object beside the conversation it ended, in SQLite in the data dir.

Bounded twice, so no client can fill the disk: the newest MAX_STORED responses, and no more than
MAX_STORED_BYTES of them together; the oldest go first. They hold what was said: the file is private.

The file is read back, so it is untrusted input: one SQLite says is corrupt (a crash mid-write, another
program's bytes) is moved aside beside it, a new one started, and that said once in the log; a row whose
JSON does not parse is dropped. A full disk or an I/O error is no corrupt file: nothing is set aside, the
request gets a StoreError (a 507 that says so), and the file is opened again on the next use.
"""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..errors import StoreError
from ..paths import data_dir
from ..sqlite_file import corrupt, not_kept, open_or_start_anew, start_anew, transaction

log = logging.getLogger(__name__)
T = TypeVar("T")

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

LOST = ": responses stored before are gone from the API"  # said when an unreadable file is set aside


class ResponseStore:
    """A small thread-safe store of response objects and their conversations."""

    def __init__(self, path: Path, max_stored: int = MAX_STORED, max_bytes: int = MAX_STORED_BYTES) -> None:
        self.path = path
        self.max_stored, self.max_bytes = max_stored, max_bytes
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        try:
            self._open()
        except StoreError as exc:  # a full disk at start: the store opens on a later use
            log.warning("%s", exc)

    def put(self, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        """Keep `response` (by its id) and the conversation it ended; then drop the oldest beyond the bounds."""
        row = (response["id"], time.time(), json.dumps(response, ensure_ascii=False),
               json.dumps(conversation, ensure_ascii=False))

        def put() -> None:
            with transaction(self._db):
                self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?)", row)
                self._db.execute("DELETE FROM responses WHERE id NOT IN (SELECT id FROM responses ORDER BY "
                                 "created DESC, rowid DESC LIMIT ?)", (self.max_stored,))
                # The newest first, summed: the first row past the byte bound and every older one go.
                self._db.execute(
                    "DELETE FROM responses WHERE rowid IN (SELECT rowid FROM (SELECT rowid, SUM(LENGTH(response) + "
                    "LENGTH(conversation)) OVER (ORDER BY created DESC, rowid DESC) AS total FROM responses) "
                    "WHERE total > ?)", (self.max_bytes,))
        self._run(put)

    def get(self, response_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The stored response object and its conversation, or None (a row that does not parse is dropped)."""
        row = self._run(lambda: self._db.execute("SELECT response, conversation FROM responses WHERE id = ?",
                                                 (response_id,)).fetchone())
        if not row:
            return None
        try:
            response, conversation = json.loads(row[0]), json.loads(row[1])
            if isinstance(response, dict) and isinstance(conversation, list):
                return response, conversation
        except (TypeError, ValueError, RecursionError):
            pass
        log.warning("the stored response %s could not be read; it was dropped", response_id)
        self.delete(response_id)
        return None

    def delete(self, response_id: str) -> bool:
        """Forget a response; False if there was none by that id."""
        return self._run(lambda: self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0)

    def __len__(self) -> int:
        return self._run(lambda: self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    # -- the file ---------------------------------------------------------------------------------

    def _run(self, work: Callable[[], T]) -> T:
        """work() under the lock, the file opened first where it is not (a start that failed); a file SQLite
        finds corrupt on the way is set aside, and work() runs once more on a new one. Any other failure
        (a full disk) is a StoreError, and the file stays as it is."""
        with self._lock:
            self._open()
            try:
                return work()
            except sqlite3.DatabaseError as exc:
                if not corrupt(exc):
                    raise not_kept(exc, "the stored response") from None
                self._set_aside(exc)
                try:
                    return work()
                except sqlite3.Error as again:
                    raise not_kept(again, "the stored response") from None

    def _open(self) -> None:
        if self._db is None:
            try:
                self._db = open_or_start_anew(self.path, SCHEMA, "responses", "the stored responses", LOST)
            except sqlite3.Error as exc:
                raise not_kept(exc, "the stored responses") from None

    def _set_aside(self, exc: Exception) -> None:
        """Move the corrupt file (and its journal) aside, say so once, and start a new one; a new one that
        cannot be started (a full disk) leaves the store to open again on its next use."""
        if self._db is not None:
            self._db.close()
            self._db = None
        try:
            self._db = start_anew(self.path, SCHEMA, "responses", exc, "the stored responses", LOST)
        except sqlite3.Error as failed:
            raise not_kept(failed, "the stored responses") from None


@functools.lru_cache(maxsize=4)
def _store_at(path: Path) -> ResponseStore:
    return ResponseStore(path)


def stored_responses() -> ResponseStore:
    """The store in the data dir (one per dir, so a relocated LOCALCHAT_HOME gets its own)."""
    return _store_at(data_dir() / "responses.sqlite3")
