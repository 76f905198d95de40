"""Where localchat keeps its files: platformdirs locations, all relocatable by LOCALCHAT_HOME.

Conversations, documents, logs and settings are the user's own: on POSIX every folder here is
0700 and every file localchat writes 0600, whatever the umask says.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "localchat"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# Left free by every writer (downloads, imports, uploads, saved KV states): a completely full disk breaks the
# system and the chats' own store, not just the one write.
DISK_MARGIN = 256 * 2**20


def private_dir(path: Path) -> Path:
    """`path` as a folder only its owner can enter, made when missing."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    if os.name == "posix" and path.stat().st_uid == os.getuid():
        os.chmod(path, PRIVATE_DIR_MODE)  # mkdir's mode is cut by the umask; an old folder keeps its own
    return path


def set_aside(path: Path) -> Path:
    """Move a file localchat could not read (and a SQLite file's -wal and -shm beside it) to
    `<name>.corrupt-<time>` in the same folder, for a person to look at; returns the new path. Two set
    aside in one second get names of their own (`-2`, `-3`, ...): one never replaces another."""
    import time

    stamp = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    aside, number = stamp, 2
    while any(os.path.lexists(f"{aside}{suffix}") for suffix in ("", "-wal", "-shm")):
        aside, number = stamp.with_name(f"{stamp.name}-{number}"), number + 1
    for suffix in ("", "-wal", "-shm"):
        part = Path(f"{path}{suffix}")
        if part.exists():
            os.replace(part, Path(f"{aside}{suffix}"))
    return aside


def room_left(folder: Path) -> int:
    """The bytes a writer may still put on the disk holding `folder` (an existing one), DISK_MARGIN kept free."""
    import shutil

    return shutil.disk_usage(folder).free - DISK_MARGIN


def private_file(path: Path) -> Path:
    """Create `path` (empty) if missing and make it readable by its owner only; returns it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
    os.close(fd)
    if os.name == "posix":
        os.chmod(path, PRIVATE_FILE_MODE)
    return path


def write_private_json(path: Path, data: object) -> None:
    """Write `data` as JSON to `path`, owner-only and whole or not at all (a crash keeps the old file)."""
    import json
    import tempfile

    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=2, ensure_ascii=False)
            file.write("\n")
        os.chmod(partial, PRIVATE_FILE_MODE)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def _home() -> Path | None:
    home = os.environ.get("LOCALCHAT_HOME")
    return Path(home).expanduser() if home else None


def _dir(kind: str) -> Path:
    home = _home()
    if home is not None:
        path = home / kind
    else:
        path = Path(getattr(platformdirs, f"user_{kind}_dir")(APP_NAME, appauthor=False))
    return private_dir(path)


def config_dir() -> Path:
    """Settings and the tuned hardware profile."""
    return _dir("config")


def cache_dir() -> Path:
    """Downloaded model files and other re-creatable data."""
    return _dir("cache")


def data_dir() -> Path:
    """Conversations, uploads: the user's own data."""
    return _dir("data")


def kv_states_dir() -> Path:
    """Prompt KV states saved after a long read (they hold what the documents said: private)."""
    return private_dir(data_dir() / "kv-states")


def log_dir() -> Path:
    """Log files."""
    return _dir("log")


def models_dir() -> Path:
    """Model files fetched by localchat itself (not the shared hub cache)."""
    return private_dir(cache_dir() / "models")
