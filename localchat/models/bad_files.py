"""Model files that crashed the model runner while loading, with why: kept across restarts (the file
stays listed, so the next start would only crash again), forgotten when the file changes."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable

from .. import paths

log = logging.getLogger(__name__)

MAX_MARKS = 200  # the record stays small; the oldest marks go first


def _record() -> Path:
    return paths.data_dir() / "bad-models.json"


def _key(path: Path) -> tuple[str, str]:
    """The file's resolved path, and its size and modification time: a new copy is a new file."""
    real = Path(path).expanduser().resolve()
    stat = real.stat()
    return str(real), f"{stat.st_size}:{stat.st_mtime_ns}"


def _read() -> dict[str, dict[str, str]]:
    try:
        data = json.loads(_record().read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # any bytes at all: no marks, and the app goes on
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, dict)}


def mark(path: Path, reason: str) -> None:
    """Remember that `path` crashed its runner while loading, and why."""
    try:
        name, version = _key(path)
    except OSError:
        return
    marks = _read()
    marks.pop(name, None)
    marks[name] = {"version": version, "reason": reason}
    marks = dict(list(marks.items())[-MAX_MARKS:])
    target = _record()
    temporary = target.with_suffix(".tmp")
    try:
        paths.private_file(temporary).write_text(json.dumps(marks, indent=1), encoding="utf-8")
        os.replace(temporary, target)  # whole or not at all
    except OSError as exc:
        log.warning("could not record the crashed model %s: %s", name, exc)


def reasons() -> Callable[[Path], str | None]:
    """Why a file is marked bad, or None (never marked, or changed since): the record read once, for a
    list of files."""
    marks = _read()

    def reason_for(path: Path) -> str | None:
        try:
            name, version = _key(path)
        except OSError:
            return None
        found = marks.get(name)
        return found.get("reason") if found and found.get("version") == version else None

    return reason_for


def reason_for(path: Path) -> str | None:
    """Why `path` is marked bad, or None: never marked, or changed since."""
    return reasons()(path)
