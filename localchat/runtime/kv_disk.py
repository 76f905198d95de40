"""Prompt KV state kept on disk: a long prefix read once (a document, a long system prompt, an agent's
tool list) is restored instead of read again, across chats, server restarts and model reloads.

One folder per state identity (the model's weights and the KV cell types: a state is only valid in a
context that agrees on both). A file holds the prefix's exact tokens and llama.cpp's serialised
state of that prefix, with the digests that prove both whole. Files are written by a thread of
their own, atomically (a temporary file renamed into place), and the folder is kept under a size
bound by dropping the least recently used. A file that fails its checks is deleted, never loaded.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

MAGIC = b"localchat-kv 1\n"
_LENGTH = struct.Struct("<I")  # the header's length
_MAX_HEADER = 1 << 16
_MAX_TOKENS = 1 << 24


@dataclass(slots=True)
class Entry:
    """One saved prefix: its tokens and where its state lies."""

    path: Path
    tokens: array  # int32 token ids
    size: int  # bytes of the whole file


@dataclass(slots=True)
class Hit:
    """A saved prefix that a prompt starts with: `num_tokens` of the entry's tokens are the prompt's."""

    entry: Entry
    num_tokens: int


def _token_bytes(tokens: list[int] | array) -> bytes:
    return (tokens if isinstance(tokens, array) else array("i", tokens)).tobytes()


def common_prefix(a: array, b: array) -> int:
    """Length of the common prefix of two token arrays (compared as bytes, then token by token)."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # bisect on equal slices: C-speed comparisons, log(n) of them
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class KVDiskCache:
    """Saved prompt states of one state identity, in `folder`, at most `max_bytes` in all."""

    def __init__(self, root: Path, identity: str, max_bytes: int, min_tokens: int = 1024) -> None:
        self.identity = identity
        self.folder = Path(root) / hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        self._lock = threading.Lock()  # the index is read on the engine thread, changed by the writer
        self._entries: dict[str, Entry] = {}
        for path in self.folder.glob("*.kv"):
            entry = self._read_entry(path)
            if entry is not None:
                self._entries[path.stem] = entry
        for stale in self.folder.glob("*.tmp"):  # a write cut off by a crash
            stale.unlink(missing_ok=True)
        self._writes: queue.Queue[tuple[array, ctypes.Array] | None] = queue.Queue()
        self._writer = threading.Thread(target=self._write_loop, name="localchat-kv-disk", daemon=True)
        self._writer.start()
        # Reads have a thread of their own: a restore never waits behind a long write.
        self._reads: queue.Queue[tuple[Entry, Callable[[ctypes.Array | None], None]] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read_loop, name="localchat-kv-restore", daemon=True)
        self._reader.start()

    # -- looking up and reading (engine thread, loader thread) ------------------------------

    def lookup(self, tokens: list[int]) -> Hit | None:
        """The saved prefix sharing the most tokens with `tokens`, at least `min_tokens` of them,
        leaving the last prompt token to compute (its logits start the answer)."""
        wanted = array("i", tokens[:-1])
        best: Hit | None = None
        with self._lock:
            entries = list(self._entries.values())
        for entry in entries:
            n = common_prefix(entry.tokens, wanted)
            if n >= self.min_tokens and (best is None or n > best.num_tokens):
                best = Hit(entry, n)
        return best

    def read(self, entry: Entry) -> ctypes.Array | None:
        """The entry's state, checked whole; None (and the file deleted) when it fails a check."""
        try:
            with entry.path.open("rb") as handle:
                header, tokens = self._read_head(handle)
                if tokens != entry.tokens:
                    raise ValueError("its tokens changed since it was listed")
                if header["state_bytes"] != os.fstat(handle.fileno()).st_size - handle.tell():
                    raise ValueError("its state is truncated or has trailing bytes")
                data = (ctypes.c_uint8 * header["state_bytes"])()
                if handle.readinto(data) != len(data):
                    raise ValueError("its state is truncated")
            if hashlib.sha256(data).hexdigest() != header["state_sha256"]:
                raise ValueError("its state does not match its digest")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._discard(entry, str(exc))
            return None
        os.utime(entry.path)  # recently used: the size bound drops others first
        return data

    def read_later(self, entry: Entry, deliver: Callable[[ctypes.Array | None], None]) -> None:
        """Read the entry on the reader thread; `deliver` gets its state (None when it failed a check)."""
        self._reads.put((entry, deliver))

    def _read_loop(self) -> None:
        while (item := self._reads.get()) is not None:
            entry, deliver = item
            deliver(self.read(entry))

    # -- saving (engine thread queues, writer thread writes) --------------------------------

    def wants(self, num_tokens: int) -> bool:
        """Whether a prefix of this many tokens is worth a file."""
        return num_tokens >= self.min_tokens

    def save(self, tokens: list[int], data: ctypes.Array) -> None:
        """Queue the state of the prefix `tokens` for writing; returns at once."""
        self._writes.put((array("i", tokens), data))

    def flush(self) -> None:
        """Wait until every queued state is written (tests, shutdown)."""
        self._writes.join()

    def close(self) -> None:
        """Finish the writes queued so far, then stop both threads."""
        self._writes.put(None)
        self._reads.put(None)
        self._writer.join()
        self._reader.join()

    def _write_loop(self) -> None:
        while True:
            item = self._writes.get()
            try:
                if item is None:
                    return
                self._write(*item)
            except OSError as exc:  # a full or read-only disk: the prefix is read again next time
                log.warning("could not save a prompt's KV state to %s: %s", self.folder, exc)
            finally:
                self._writes.task_done()

    def _write(self, tokens: array, data: ctypes.Array) -> None:
        raw = _token_bytes(tokens)
        name = hashlib.sha256(raw).hexdigest()[:32]
        path = self.folder / f"{name}.kv"
        with self._lock:
            known = self._entries.get(name)
        if known is not None and known.tokens == tokens and path.exists():
            os.utime(path)
            return
        header = json.dumps({"identity": self.identity, "num_tokens": len(tokens),
                             "tokens_sha256": hashlib.sha256(raw).hexdigest(), "state_bytes": len(data),
                             "state_sha256": hashlib.sha256(data).hexdigest(), "saved": time.time()}).encode()
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as handle:
            handle.write(MAGIC + _LENGTH.pack(len(header)) + header + raw)
            handle.write(memoryview(data))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        with self._lock:
            self._entries[name] = Entry(path, tokens, path.stat().st_size)
        self._bound()

    def _bound(self) -> None:
        """Drop the least recently used files until the folder is within its size bound."""
        with self._lock:
            entries = sorted(self._entries.items(), key=lambda kv: _used(kv[1].path))
            total = sum(e.size for _, e in entries)
            while entries and total > self.max_bytes:
                name, entry = entries.pop(0)
                total -= entry.size
                del self._entries[name]
                entry.path.unlink(missing_ok=True)

    # -- the files' format --------------------------------------------------------------------

    def _read_head(self, handle) -> tuple[dict, array]:
        if handle.read(len(MAGIC)) != MAGIC:
            raise ValueError("it is not a localchat KV file")
        (length,) = _LENGTH.unpack(handle.read(_LENGTH.size) or b"\0\0\0\0")
        if not 0 < length <= _MAX_HEADER:
            raise ValueError("its header length is out of range")
        header = json.loads(handle.read(length))
        if header.get("identity") != self.identity:
            raise ValueError("it was saved by another model or KV type")
        num = header["num_tokens"]
        if not isinstance(num, int) or not 0 < num <= _MAX_TOKENS or not isinstance(header["state_bytes"], int) \
                or header["state_bytes"] <= 0:
            raise ValueError("its header is out of range")
        raw = handle.read(num * 4)
        if len(raw) != num * 4 or hashlib.sha256(raw).hexdigest() != header["tokens_sha256"]:
            raise ValueError("its tokens are truncated or do not match their digest")
        tokens = array("i")
        tokens.frombytes(raw)
        return header, tokens

    def _read_entry(self, path: Path) -> Entry | None:
        try:
            with path.open("rb") as handle:
                _, tokens = self._read_head(handle)
            return Entry(path, tokens, path.stat().st_size)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._discard(Entry(path, array("i"), 0), str(exc))
            return None

    def _discard(self, entry: Entry, why: str) -> None:
        log.warning("discarded the saved KV state %s: %s", entry.path.name, why)
        with self._lock:
            self._entries.pop(entry.path.stem, None)
        entry.path.unlink(missing_ok=True)


def _used(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
