"""Bounded reads of an untrusted file's header: a growing prefix of the file, fetched as the parser needs it.

Every length a header claims is checked against what the file (and the header limit) can hold
before it is read, so a corrupt or hostile file costs an error, not memory or time.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from ..errors import ModelLoadError
from ..units import size_text


class GGUFError(ModelLoadError):
    """The bytes are not a well-formed GGUF header (wrong magic, truncated, corrupt, unsupported)."""


class HeaderReader:
    """Sequential reads over a growing prefix of the file; `fetch(start, end)` returns those bytes.
    Every read is checked against the file's size and the header limit before any byte is fetched."""

    def __init__(self, fetch: Callable[[int, int], bytes], file_size: int | None, limit: int, what: str):
        self._fetch, self.file_size, self._limit, self.what = fetch, file_size, limit, what
        self.buf = b""
        self.pos = 0

    def remaining(self) -> int:
        """Bytes the header may still use: up to the end of the file and within the header limit."""
        end = self._limit if self.file_size is None else min(self.file_size, self._limit)
        return max(0, end - self.pos)

    def ensure(self, end: int, context: str) -> None:
        """Make bytes [0, end) available, fetching a geometrically larger prefix when needed."""
        if end <= len(self.buf):
            return
        if self.file_size is not None and end > self.file_size:
            raise GGUFError(f"{self.what} ends at byte {self.file_size} while reading {context}: the file is "
                            "truncated or corrupt. Download it again.")
        if end > self._limit:
            raise GGUFError(f"{self.what}: the header is larger than {size_text(self._limit)} at {context}; "
                            "it is corrupt or not a model this reader supports.")
        target = min(max(end, 2 * len(self.buf), 1 << 18), self._limit)
        if self.file_size is not None:
            target = min(target, self.file_size)
        self.buf += self._fetch(len(self.buf), target)
        if end > len(self.buf):
            raise GGUFError(f"{self.what} ends at byte {len(self.buf)} while reading {context}: the file "
                            "is truncated. Download it again.")

    def take(self, n: int, context: str) -> bytes:
        self.ensure(self.pos + n, context)
        start, self.pos = self.pos, self.pos + n
        return self.buf[start:self.pos]

    def unpack(self, fmt: str, context: str) -> Any:
        size = struct.calcsize(fmt)
        self.ensure(self.pos + size, context)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def string(self, context: str, cap: int | None = None, decode: bool = True) -> str | None:
        length = self.unpack("<Q", context)
        if length > self.remaining() or (cap is not None and length > cap):
            raise GGUFError(f"{self.what}: a string of {length} bytes in {context} cannot fit the file; "
                            "the header is corrupt.")
        if not decode:
            self.ensure(self.pos + length, context)
            self.pos += length
            return None
        return self.take(length, context).decode("utf-8", errors="replace")


@contextmanager
def file_reader(path: Path, limit: int) -> Iterator[HeaderReader]:
    """A reader over a local file, open while the caller parses; an unreadable file is a clear error."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            def fetch(start: int, end: int) -> bytes:
                handle.seek(start)
                return handle.read(end - start)
            yield HeaderReader(fetch, size, limit, path.name)
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path} ({exc.strerror or exc}); check the path and its permissions.") from None
