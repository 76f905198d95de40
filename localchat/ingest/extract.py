"""Turn a user's file into a Document: read within a size limit, its kind detected (kinds.py), its reader run."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .document import Document, DocumentError, DocumentTooLargeError, EmptyDocumentError
from .kinds import detect_kind
from ..units import size_text

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 50 * 10**6  # 50 MB


def extract(path: str | os.PathLike[str], *, name: str | None = None,
            max_bytes: int = DEFAULT_MAX_BYTES) -> Document:
    """Read a document of any kind in kinds.py into a Document; raise DocumentError."""
    path = Path(path)
    name = name or path.name
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise DocumentError(f"{name}: file not found; check the path and attach it again.") from None
    except OSError as exc:
        raise DocumentError(f"{name}: cannot be opened ({exc.strerror}); check its permissions.") from None
    if not path.is_file():
        raise DocumentError(f"{name}: is not a regular file; attach a document file.")
    if size <= max_bytes:
        # Read at most one byte past the limit: the file may grow after stat().
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
        size = len(data)
    if size > max_bytes:
        raise DocumentTooLargeError(
            f"{name}: is {size_text(size)}, over the {size_text(max_bytes)} limit; split it into smaller "
            "files or attach only the part you need.")
    if size == 0:
        raise EmptyDocumentError(f"{name}: the file is empty; attach the file again or pick another.")
    kind = detect_kind(name, data)
    sections, warnings = kind.read(name, data, max_bytes)
    doc = Document(name=name, kind=kind.name, sections=[s for s in sections if s.text.strip()], warnings=warnings)
    if not doc.sections:
        raise EmptyDocumentError(f"{name}: has no text to read; {kind.when_empty}.")
    for warning in doc.warnings:
        log.warning("%s", warning)
    return doc


