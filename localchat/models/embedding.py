"""Embedding models: the catalog's `embedding_models` (models.yaml), their local files, and the ones
this process has loaded (documents' retrieval and /v1/embeddings share them), each in a runner process
of its own (runners/embedding.py)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import ConfigError
from .catalog import ModelFile, _model_file, catalog_path
from .download import cached_file

if TYPE_CHECKING:
    from ..runners.embedding import SupervisedEmbedder

log = logging.getLogger(__name__)

DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"
MAX_LOADED = 2  # embedding models kept loaded at once: the catalog's and one other (the served model, say)


@dataclass(slots=True)
class EmbeddingFacts:
    """One catalog embedding model: its GGUF file and what a client asks about it."""

    key: str
    name: str
    license: str
    n_embd: int
    n_ctx_train: int
    pooling: str
    file: ModelFile
    cite: list[str] = field(default_factory=list)


def load_embedding_catalog(path: Path | None = None) -> dict[str, EmbeddingFacts]:
    """The catalog's embedding models by name."""
    path = Path(path) if path is not None else catalog_path()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return {key: _facts(key, raw) for key, raw in (data.get("embedding_models") or {}).items()}
    except (OSError, KeyError, TypeError, ValueError, AttributeError, yaml.YAMLError) as exc:
        raise ConfigError(f"the embedding models of the catalog {path} are unreadable ({exc!r}); "
                          "reinstall localchat.") from None


def _facts(key: str, raw: dict[str, Any]) -> EmbeddingFacts:
    (quant, entry), = raw["files"].items()  # one file each: the catalog's derived GGUF
    return EmbeddingFacts(key=key, name=raw.get("name", key), license=raw.get("license", "unknown"),
                          n_embd=int(raw["n_embd"]), n_ctx_train=int(raw["n_ctx_train"]),
                          pooling=str(raw["pooling"]), file=_model_file(quant, entry),
                          cite=list(raw.get("cite") or []))


def local_embedding_model(name: str = DEFAULT_EMBEDDING_MODEL) -> Path | None:
    """The local file of a catalog embedding model, if it was fetched (`localchat pull NAME`)."""
    facts = load_embedding_catalog().get(name)
    return cached_file(facts.file) if facts is not None else None


class EmbeddingModels:
    """Embedding models loaded on first use, by file, the least recently used closed past MAX_LOADED."""

    def __init__(self) -> None:
        self._loaded: dict[Path, SupervisedEmbedder] = {}
        self._lock = threading.Lock()
        self._said_missing = False

    def open(self, path: Path) -> "SupervisedEmbedder":
        """The loaded embedder of a GGUF file (loaded now, in a runner, if it is not)."""
        from ..runners.embedding import SupervisedEmbedder

        path = path.resolve()
        with self._lock:
            embedder = self._loaded.pop(path, None)
            if embedder is None:
                embedder = SupervisedEmbedder(path)
            self._loaded[path] = embedder  # the newest last
            while len(self._loaded) > MAX_LOADED:
                self._loaded.pop(next(iter(self._loaded))).close()
            return embedder

    def is_loaded(self, path: Path) -> bool:
        with self._lock:
            return path.resolve() in self._loaded

    def default(self) -> "SupervisedEmbedder | None":
        """The catalog's embedding model, or None (said once in the log) while it is not fetched."""
        path = local_embedding_model()
        if path is None:
            if not self._said_missing:
                self._said_missing = True
                log.warning("no embedding model here: documents are searched by their words alone (BM25); "
                            "`localchat pull %s` adds search by meaning.", DEFAULT_EMBEDDING_MODEL)
            return None
        return self.open(path)

    def close(self) -> None:
        with self._lock:
            for embedder in self._loaded.values():
                embedder.close()
            self._loaded.clear()


_shared: EmbeddingModels | None = None
_shared_lock = threading.Lock()


def shared_models() -> EmbeddingModels:
    """The process's one set of loaded embedding models."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = EmbeddingModels()
        return _shared
