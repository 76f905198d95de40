"""Prompt KV state kept on disk: a long prefix read once (a document, a long system prompt, an agent's
tool list) is restored instead of read again, across chats, server restarts and model reloads.

One folder per state identity (the model's weights and the KV cell types: a state is only valid in a
context that agrees on both). A file holds the prefix's exact tokens and llama.cpp's serialised
state of that prefix, with the digests that prove both whole. Files are written by a thread of
their own, atomically (a temporary file renamed into place), only their owner may read them (0600
in 0700 folders), and all folders together are kept under one size bound by dropping the least
recently used files, whichever model saved them (an empty folder of a model no longer used goes too).

A file read back is untrusted input (its digests sit beside what they prove): its header's shape
and every field's type are checked, its size is bounded by what the context can hold before any
buffer is allocated, and its cells' positions by the prompt it claims (kv_state.py). A file that
fails a check, whatever its bytes, is deleted with one log line, never loaded, and the reader thread
goes on: a restore that fails any way delivers "not restored" and the prompt is read instead.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import queue
import stat
import struct
import threading
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ...paths import DISK_MARGIN, room_left
from ...units import size_text
from .kv_state import StateLimits, limits_of

log = logging.getLogger(__name__)

MAGIC = b"localchat-kv 1\n"
_LENGTH = struct.Struct("<I")  # the header's length
_MAX_HEADER = 1 << 16
_MAX_TOKENS = 1 << 24
_FILE_MODE = 0o600  # a state holds what the documents said
_DIR_MODE = 0o700
# The header's fields and their types: anything else in a file is a file that fails its checks.
_FIELDS = {"identity": str, "num_tokens": int, "tokens_sha256": str, "state_bytes": int, "state_sha256": str}


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
    """Saved prompt states of one state identity, in a folder of `root`; all of `root`'s folders
    together at most `max_bytes`. `limits` bound what a file may claim (None: only the file's size)."""

    def __init__(self, root: Path, identity: str, max_bytes: int, min_tokens: int = 1024,
                 limits: StateLimits | None = None) -> None:
        self.identity = identity
        self.root = Path(root)
        self.folder = self.root / hashlib.sha256(identity.encode()).hexdigest()[:16]
        _private_folder(self.root)
        _private_folder(self.folder)
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        self.limits = limits
        self._lock = threading.Lock()  # the index is read on the engine thread, changed by the writer
        self._entries: dict[str, Entry] = {}
        for path in self.folder.glob("*.kv"):
            entry = self._read_entry(path)
            if entry is not None:
                self._entries[path.stem] = entry
        for stale in self.folder.glob("*.tmp"):  # a write cut off by a crash
            _remove(stale)
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
            with _open_regular(entry.path) as handle:
                header, tokens = self._read_head(handle)
                if tokens != entry.tokens:
                    raise ValueError("its tokens changed since it was listed")
                size = header["state_bytes"]
                if self.limits is not None and size > self.limits.max_bytes(len(tokens)):
                    raise ValueError(f"its state claims {size} bytes, more than {len(tokens)} tokens take here")
                if size != os.fstat(handle.fileno()).st_size - handle.tell():
                    raise ValueError("its state is truncated or has trailing bytes")
                data = (ctypes.c_uint8 * size)()
                if handle.readinto(data) != len(data):
                    raise ValueError("its state is truncated")
            if hashlib.sha256(data).hexdigest() != header["state_sha256"]:
                raise ValueError("its state does not match its digest")
            if self.limits is not None:
                self.limits.check(memoryview(data), len(tokens))
            os.utime(entry.path)  # recently used: the size bound drops others first
        except FileNotFoundError:  # the size bound (this model's or another's) dropped it meanwhile
            with self._lock:
                self._entries.pop(entry.path.stem, None)
            return None
        except Exception as exc:  # any bytes at all: the file goes, the prompt is read instead
            self._discard(entry, _reason(exc))
            return None
        return data

    def read_later(self, entry: Entry, deliver: Callable[[ctypes.Array | None], None]) -> None:
        """Read the entry on the reader thread; `deliver` gets its state (None when it failed a check)."""
        self._reads.put((entry, deliver))

    def _read_loop(self) -> None:
        # The one reader thread must outlive any file: a prompt waiting on it would wait forever.
        while (item := self._reads.get()) is not None:
            entry, deliver = item
            try:
                data = self.read(entry)
            except Exception:  # read() already catches the file's faults: this is a bug of ours
                log.exception("reading the saved KV state %s failed", entry.path.name)
                data = None
            try:
                deliver(data)
            except Exception:
                log.exception("delivering the saved KV state %s failed", entry.path.name)

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
            except Exception:  # a bug of ours: that state is not saved, the writer goes on
                log.exception("could not save a prompt's KV state to %s", self.folder)
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
        _private_folder(self.folder)  # trimmed away when it was empty, or made by an older version
        head = MAGIC + _LENGTH.pack(len(header)) + header + raw
        room = room_left(self.folder)
        if len(head) + len(data) > room:  # asked first: a state never fills the disk the chats are kept on
            log.warning("a prompt's KV state (%s) was not saved to %s: the disk has %s left beside the %s kept "
                        "free", size_text(len(head) + len(data)), self.folder, size_text(max(room, 0)),
                        size_text(DISK_MARGIN))
            return
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), _FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as handle:
                if os.name == "posix":
                    os.fchmod(handle.fileno(), _FILE_MODE)  # a leftover .tmp keeps its own mode otherwise
                handle.write(head)
                handle.write(memoryview(data))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:  # a disk filled meanwhile, say: no part of the state stays
            _remove(tmp)
            raise
        with self._lock:
            self._entries[name] = Entry(path, tokens, path.stat().st_size)
        self._bound()

    def _bound(self) -> None:
        """Drop the least recently used files of every model's folder until all of them are within the
        size bound; a folder left empty goes too (a model no longer used)."""
        files = []
        for folder in _folders(self.root):
            for path in folder.glob("*.kv"):
                try:
                    info = path.lstat()
                except OSError:
                    continue  # deleted meanwhile (by another runner's writer, say)
                files.append((info.st_mtime, info.st_size, path))
        files.sort()
        total = sum(size for _, size, _ in files)
        for _, size, path in files:
            if total <= self.max_bytes:
                break
            total -= size
            if path.parent == self.folder:
                with self._lock:
                    self._entries.pop(path.stem, None)
            _remove(path)
        for folder in _folders(self.root):
            if folder != self.folder:
                try:
                    folder.rmdir()  # only when empty: another runner may be writing into it
                except OSError:
                    pass

    # -- the files' format --------------------------------------------------------------------

    def _read_head(self, handle) -> tuple[dict[str, Any], array]:
        if handle.read(len(MAGIC)) != MAGIC:
            raise ValueError("it is not a localchat KV file")
        (length,) = _LENGTH.unpack(handle.read(_LENGTH.size).ljust(_LENGTH.size, b"\0"))
        if not 0 < length <= _MAX_HEADER:
            raise ValueError("its header length is out of range")
        header = json.loads(handle.read(length))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
        for key, kind in _FIELDS.items():
            if type(header.get(key)) is not kind:  # `type is`: a bool is no count
                raise ValueError(f"its header's {key!r} is missing or not of type {kind.__name__}")
        if header["identity"] != self.identity:
            raise ValueError("it was saved by another model or KV type")
        num = header["num_tokens"]
        most = min(_MAX_TOKENS, self.limits.n_ctx if self.limits is not None else _MAX_TOKENS)
        if not 0 < num <= most or header["state_bytes"] <= 0:
            raise ValueError("its header is out of range")
        raw = handle.read(num * 4)
        if len(raw) != num * 4 or hashlib.sha256(raw).hexdigest() != header["tokens_sha256"]:
            raise ValueError("its tokens are truncated or do not match their digest")
        tokens = array("i")
        tokens.frombytes(raw)
        return header, tokens

    def _read_entry(self, path: Path) -> Entry | None:
        try:
            with _open_regular(path) as handle:
                _, tokens = self._read_head(handle)
                size = os.fstat(handle.fileno()).st_size
            return Entry(path, tokens, size)
        except Exception as exc:  # any bytes at all: the file goes, the model loads
            self._discard(Entry(path, array("i"), 0), _reason(exc))
            return None

    def _discard(self, entry: Entry, why: str) -> None:
        log.warning("discarded the saved KV state %s: %s", entry.path.name, why)
        with self._lock:
            self._entries.pop(entry.path.stem, None)
        _remove(entry.path)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "its header is nested too deep"
    if isinstance(exc, UnicodeDecodeError):
        return "its header is not JSON text"
    if isinstance(exc, (ValueError, OSError)):
        return str(exc)
    return f"it could not be read ({type(exc).__name__}: {exc})"


def _open_regular(path: Path):
    """`path` opened for reading if it is a regular file: never a link followed, a FIFO waited on
    (O_NONBLOCK) or a device read."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("it is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _remove(path: Path) -> None:
    """Delete a state file; one that cannot be (a folder by that name, a read-only disk) is said and left."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not delete %s (%s); delete it by hand", path, exc)


def _private_folder(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=_DIR_MODE)
    if os.name == "posix":
        try:
            if path.stat().st_uid == os.getuid():
                os.chmod(path, _DIR_MODE)  # mkdir's mode is cut by the umask; an old folder keeps its own
        except OSError:
            pass


def _folders(root: Path) -> list[Path]:
    try:
        return [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def saved_states(worker: Any, folder: Path | None, budget: int) -> KVDiskCache | None:
    """The saved prompt states of this worker's model, or None: none kept (no folder), a worker whose state
    cannot be saved (llama.cpp's can: they have a `state_identity`), or a folder that cannot be used (said
    once; the model loads all the same)."""
    identity = getattr(worker, "state_identity", None)
    if folder is None or not identity:
        return None
    try:
        return KVDiskCache(folder, identity, budget, limits=limits_of(worker))
    except OSError as exc:
        log.warning("long prompts' KV state is not kept on disk: %s (%s); fix or remove that folder", folder, exc)
        return None
