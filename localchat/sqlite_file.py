"""A SQLite file localchat keeps (the conversations, the stored responses): private, in WAL mode, with its
schema, and read once on opening. Read back, so untrusted: a file SQLite cannot read is set aside for a
person (paths.set_aside), said once, and a new one started, rather than the app not opening at all."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from .paths import private_file, set_aside

log = logging.getLogger(__name__)


def open_db(path: Path, schema: str, table: str) -> sqlite3.Connection:
    """The database at `path` (made private), its schema applied and `table` read: sqlite3.DatabaseError
    when the file is not one SQLite can use. Autocommit: the stores begin their own transactions."""
    db = sqlite3.connect(private_file(path), check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")  # its -wal and -shm files take the database file's mode
        db.execute("PRAGMA foreign_keys=ON")
        db.executescript(schema)
        db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
    except BaseException:
        db.close()
        raise
    return db


def start_anew(path: Path, schema: str, table: str, error: Exception, what: str, lost: str = "") -> sqlite3.Connection:
    """Set the unreadable file aside, say so once (`what` it held, what is `lost`), and open a new one."""
    aside = set_aside(path)
    log.warning("%s in %s could not be read (%s); the file was moved aside to %s and a new one started%s",
                what, path, error, aside.name, lost)
    return open_db(path, schema, table)


def open_or_start_anew(path: Path, schema: str, table: str, what: str, lost: str = "") -> sqlite3.Connection:
    """open_db, or start_anew when the file cannot be read."""
    try:
        return open_db(path, schema, table)
    except sqlite3.DatabaseError as exc:
        return start_anew(path, schema, table, exc, what, lost)
