"""Attached documents: copied under the app data dir with safe names, checked, then extracted."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

from ...ingest import DEFAULT_MAX_BYTES, Document, DocumentError, DocumentTooLargeError, extract_isolated
from ...ingest.kinds import extensions
from ...paths import PRIVATE_FILE_MODE, data_dir, private_dir
from ...units import size_text

MAX_UPLOAD_BYTES = DEFAULT_MAX_BYTES  # 50 MB, the same limit the extractor enforces
ACCEPTED = extensions()  # of every kind the extractor reads (ingest/kinds.py): the file picker offers these
_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")
_MAX_NAME = 120


def uploads_dir() -> Path:
    """Attached documents, each copied into a folder of its own."""
    return private_dir(data_dir() / "uploads")


def received_dir() -> Path:
    """Where the window's upload route puts what the browser sends, before it is attached."""
    return private_dir(data_dir() / "received")


def safe_name(name: str) -> str:
    """A file name that cannot leave its folder: no separators, no leading dots, no control bytes."""
    base = re.split(r"[\\/]", name)[-1]  # a Windows path sent from the browser uses backslashes
    base = _UNSAFE.sub("_", base).strip(" .")
    if not base:
        return "document"
    stem, dot, ext = base.rpartition(".")
    if dot and len(ext) <= 10:
        return stem[: _MAX_NAME - len(ext) - 1].rstrip(" .") + "." + ext if stem else "document." + ext
    return base[:_MAX_NAME]


def store_upload(source: str | Path, original_name: str | None = None, root: Path | None = None) -> Path:
    """Copy an uploaded file into its own folder under the uploads dir; refuse it when too large."""
    source = Path(source)
    name = safe_name(original_name or source.name)
    size = source.stat().st_size
    if size > MAX_UPLOAD_BYTES:
        raise too_large(name, size)
    # One random folder per upload: two files with the same name never overwrite each other.
    folder = private_dir((root or uploads_dir()) / uuid.uuid4().hex)
    target = folder / name
    assert target.resolve().parent == folder.resolve()
    shutil.copyfile(source, target)
    os.chmod(target, PRIVATE_FILE_MODE)
    return target


def too_large(name: str, size: int) -> DocumentTooLargeError:
    """The error for a document over the limit."""
    return DocumentTooLargeError(f"{name}: is {size_text(size)}, over the {size_text(MAX_UPLOAD_BYTES)} "
                                 "limit; attach a smaller file or only the part you need.")


def named_only(message: str, path: str | Path, name: str) -> str:
    """`message` with the server's path of an upload (and the folder it was received in) given as the file's
    name: what a browser is told names no folder of the server."""
    path = Path(path)
    for shown in dict.fromkeys((str(path.resolve()), str(path))):
        message = message.replace(shown, name)
    for folder in dict.fromkeys((str(path.parent.resolve()), str(path.parent))):
        message = message.replace(folder + os.sep, "").replace(folder, "")
    return message


def discard_received(path: str | Path) -> None:
    """Delete what the browser sent once it was attached (copied) or refused: a refused 50 MB+ upload
    must not stay on disk. Only a file in the received folder is touched."""
    path = Path(path)
    if path.resolve().is_relative_to(received_dir().resolve()):
        path.unlink(missing_ok=True)


def is_stored_upload(path: str | Path, root: Path | None = None) -> bool:
    """Whether `path` lies inside the uploads dir (a document path from the browser is never trusted)."""
    base = (root or uploads_dir()).resolve()
    try:
        return Path(path).resolve().is_relative_to(base)
    except OSError:
        return False


def read_upload(path: str | Path) -> Document:
    """Extract a stored upload (in a child process: a hostile file must not stall the server)."""
    if not is_stored_upload(path):
        raise DocumentError(f"{Path(path).name}: is not an attached document; attach it again.")
    return extract_isolated(path, max_bytes=MAX_UPLOAD_BYTES)
