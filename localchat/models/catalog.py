"""The model catalog (models.yaml) and the resolution of a model name or path to a local file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from ..errors import ConfigError, ModelNotFoundError

CATALOG_FILE = Path(__file__).resolve().parent.parent / "models.yaml"


@dataclass(slots=True)
class ModelFile:
    """One quant level of a model: its file name, size, checksum and where to fetch it."""

    quant: str
    file: str
    size: int
    sha256: str | None = None  # hub-only entries may leave it out: the hub's LFS sha256 is checked then
    sources: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class ModelEntry:
    """A catalog model with its quant files."""

    key: str
    name: str
    family: str
    license: str
    default_quant: str
    architecture: dict[str, Any]
    files: dict[str, ModelFile]
    draft: str | None = None  # the catalog key of a smaller model with the same tokenizer

    def file_for(self, quant: str | None) -> ModelFile:
        """The file of a quant level (the default one when None), or a clear error."""
        quant = quant or self.default_quant
        for known, model_file in self.files.items():
            if known.lower() == quant.lower():
                return model_file
        raise ModelNotFoundError(
            f"{self.key} has no quant '{quant}'. Available: {', '.join(self.files)}."
        )


def catalog_path() -> Path:
    """models.yaml inside the package (a source checkout links it from the repository root)."""
    return CATALOG_FILE


def load_catalog(path: Path | None = None) -> dict[str, ModelEntry]:
    """Parse models.yaml into entries keyed by model name."""
    path = path or catalog_path()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        entries = {}
        for key, raw in data["models"].items():
            files = {
                quant: ModelFile(quant=quant, file=f["file"], size=int(f["size"]), sha256=f.get("sha256"),
                                 sources=list(f.get("sources", [])))
                for quant, f in raw["files"].items()
            }
            entries[key] = ModelEntry(
                key=key, name=raw["name"], family=raw["family"], license=raw["license"],
                default_quant=raw["default_quant"], architecture=dict(raw.get("architecture", {})),
                files=files, draft=raw.get("draft"),
            )
        return entries
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"the model catalog {path} is unreadable ({exc!r}); reinstall localchat.") from None


def looks_like_path(name: str) -> bool:
    return name.endswith(".gguf") or "/" in name or "\\" in name or name.startswith(".")


def split_name(name: str) -> tuple[str, str | None]:
    """'smollm2-135m:Q8_0' -> ('smollm2-135m', 'Q8_0')."""
    key, _, quant = name.partition(":")
    return key, (quant or None)


def catalog_draft(name: str, catalog: dict[str, ModelEntry] | None = None) -> Path | None:
    """The local file of the catalog's draft pairing for `name`, if there is one and it is present."""
    if looks_like_path(name):
        return None
    from .download import cached_file

    catalog = catalog if catalog is not None else load_catalog()
    entry = catalog.get(split_name(name)[0])
    draft = catalog.get(entry.draft) if entry and entry.draft else None
    return cached_file(draft.file_for(None)) if draft else None


def resolve_model(
    name: str,
    catalog: dict[str, ModelEntry] | None = None,
    fetch: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """A model name (catalog key[:QUANT]) or a GGUF path -> a local file, fetching it when needed."""
    path = Path(name).expanduser()
    if path.is_file():
        return path.resolve()
    if looks_like_path(name):
        from .importers import find_local_model, import_model

        if path.is_dir():
            return import_model(path).path
        # 'publisher/repo/file' (LM Studio) or 'user/model:tag' (Ollama) names look like paths too.
        local = find_local_model(name)
        if local is not None:
            return local.path
        raise ModelNotFoundError(f"no model file at {path}; check the path, or run `localchat models` to see the catalog.")
    catalog = catalog if catalog is not None else load_catalog()
    key, quant = split_name(name)
    entry = catalog.get(key)
    if entry is None:
        from .importers import find_local_model

        # Not a catalog name: maybe a model the user already has in LM Studio, Ollama or the hub cache.
        local = find_local_model(name)
        if local is not None:
            return local.path
        raise ModelNotFoundError(
            f"unknown model '{name}'. Use a catalog name ({', '.join(sorted(catalog))}) or a path to a .gguf file."
        )
    from .download import cached_file, fetch_model_file

    model_file = entry.file_for(quant)
    local = cached_file(model_file)
    if local is not None:
        return local
    if not fetch:
        raise ModelNotFoundError(f"{name} is not downloaded yet; run `localchat pull {name}`.")
    return fetch_model_file(model_file, progress=progress)
