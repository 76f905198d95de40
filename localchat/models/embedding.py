"""Embedding models: the catalog's `embedding_models` (models.yaml), their local files and the
default one. The loaded ones live in runners/embedding.py, each in a runner process of its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .catalog import ModelFile, _model_file, catalog_section
from .download import cached_file

DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"


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
    section = catalog_section("embedding_models", path)
    try:
        return {key: _facts(key, raw) for key, raw in section.items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"the embedding models of the catalog are unreadable ({exc!r}); "
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
