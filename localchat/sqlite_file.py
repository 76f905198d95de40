"""A SQLite file localchat keeps (the conversations, the stored responses): private, in WAL mode, with its
schema, and read once on opening. Read back, so untrusted: a file SQLite says is corrupt or no database is
set aside for a person (paths.set_aside), said once, and a new one started, rather than the app not
opening at all. Any other failure (a full disk, an I/O error, a closed connection) is no verdict on the
file: it is never set aside for one, the stored data stays where it is, and the store opens it again later."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import StoreError
from .paths import private_file, set_aside

log = logging.getLogger(__name__)

# SQLite's primary result codes that mean the file itself is unreadable (an extended code keeps its primary
# in the low byte: SQLITE_CORRUPT_INDEX is 779).
SQLITE_CORRUPT, SQLITE_FULL, SQLITE_NOTADB = 11, 13, 26


def corrupt(exc: BaseException) -> bool:
    """Whether SQLite said the file is corrupt or not a database: the only reasons to set a store aside."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in (SQLITE_CORRUPT,
                                                                                            SQLITE_NOTADB)


def not_kept(exc: sqlite3.Error, what: str) -> StoreError:
    """The one-line error for a store that could not be written or read for a reason other than a corrupt
    file: the disk full, most often; what is stored is untouched."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF == SQLITE_FULL:
        return StoreError(f"{what} could not be saved: the disk is full. Free some space; what was stored "
                          "before is kept.")
    return StoreError(f"{what} could not be read or saved ({exc}); what was stored before is kept. Try again.")


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
    """Set the corrupt file aside, say so once (`what` it held, what is `lost`), and open a new one."""
    aside = set_aside(path)
    log.warning("%s in %s could not be read (%s); the file was moved aside to %s and a new one started%s",
                what, path, error, aside.name, lost)
    return open_db(path, schema, table)


def open_or_start_anew(path: Path, schema: str, table: str, what: str, lost: str = "") -> sqlite3.Connection:
    """open_db, or start_anew when SQLite says the file is corrupt; any other failure is raised as it is."""
    try:
        return open_db(path, schema, table)
    except sqlite3.DatabaseError as exc:
        if not corrupt(exc):
            raise
        return start_anew(path, schema, table, exc, what, lost)


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT around the block; on any failure a ROLLBACK only where a transaction is
    still open (SQLite rolls back on its own after a full disk), and never one that hides the first error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the error that ended the transaction is the one to tell
        raise
