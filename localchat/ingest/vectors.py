"""Chunk vectors kept in SQLite beside the chats: a document's chunks are embedded once, not per question.

A vector is found by the document's content hash, the embedding model's identity and the chunk's
own text hash: the chunking follows the room left in the context, so the same document may be cut
differently from one turn to the next, and only the chunks not seen before are embedded then.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..paths import data_dir, private_file
from .extract import Document

SCHEMA = """
CREATE TABLE IF NOT EXISTS chunk_vectors (
    document TEXT NOT NULL,  -- sha256 of the document's text
    model TEXT NOT NULL,     -- the embedding model's identity
    chunk TEXT NOT NULL,     -- sha256 of the chunk's text
    vector BLOB NOT NULL,    -- float32, little-endian
    PRIMARY KEY (document, model, chunk)
);
"""
_LOOKUP_BATCH = 500  # placeholders per SELECT, well under SQLite's limit


class Embedder(Protocol):
    """Turns texts into vectors; `identity` names the model, so stored vectors are never another's."""

    identity: str

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


class VectorStore:
    """A small thread-safe store of chunk vectors."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = private_file(path or data_dir() / "vectors.sqlite3")
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        self.num_embedded = 0  # chunks embedded through this store (the rest were found stored)

    def vectors(self, embedder: Embedder, document: Document, texts: Sequence[str]) -> list[np.ndarray]:
        """The vectors of chunks `texts` of `document`: the stored ones, the others embedded and stored now."""
        doc, model = content_hash(document.text), embedder.identity
        keys = [content_hash(t) for t in texts]
        found = self._lookup(doc, model, sorted(set(keys)))
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            by_key = {k: t for k, t in zip(keys, texts)}
            fresh = [np.asarray(v, dtype="<f4") for v in embedder.embed([by_key[k] for k in missing])]
            with self._lock:
                self._db.executemany("INSERT OR REPLACE INTO chunk_vectors VALUES (?, ?, ?, ?)",
                                     [(doc, model, k, v.tobytes()) for k, v in zip(missing, fresh)])
            found |= dict(zip(missing, fresh))
            self.num_embedded += len(missing)
        return [found[k] for k in keys]

    def _lookup(self, doc: str, model: str, keys: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), _LOOKUP_BATCH):
                part = keys[start:start + _LOOKUP_BATCH]
                rows = self._db.execute(
                    f"SELECT chunk, vector FROM chunk_vectors WHERE document = ? AND model = ? AND chunk IN "
                    f"({', '.join('?' * len(part))})", (doc, model, *part)).fetchall()
                found |= {chunk: np.frombuffer(blob, dtype="<f4") for chunk, blob in rows
                          if isinstance(blob, bytes) and blob and len(blob) % 4 == 0}
        # A damaged row (another length than most) is embedded again rather than trusted.
        sizes = [len(v) for v in found.values()]
        common = max(set(sizes), key=sizes.count, default=0)
        return {k: v for k, v in found.items() if len(v) == common}

    def close(self) -> None:
        with self._lock:
            self._db.close()
