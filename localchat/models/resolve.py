"""A model name (catalog key[:QUANT], or an embedding model's), a GGUF path or a model the user already has
-> a local file."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import ModelNotFoundError
from ..gptq import is_gptq_folder
from .catalog import ModelFacts, ModelFile, load_catalog
from .checkpoints import folder_missing
from .download import cached_file, fetch_model_file
from .embedding import load_embedding_catalog
from .importers import find_local_model, import_model


def looks_like_path(name: str) -> bool:
    return name.endswith(".gguf") or "/" in name or "\\" in name or name.startswith(".")


def split_name(name: str) -> tuple[str, str | None]:
    """'smollm2-135m:Q8_0' -> ('smollm2-135m', 'Q8_0')."""
    key, _, quant = name.partition(":")
    return key, (quant or None)


def catalog_draft(name: str, catalog: dict[str, ModelFacts] | None = None) -> Path | None:
    """The local file of the catalog's draft pairing for `name`, if there is one and it is present."""
    if looks_like_path(name):
        return None
    catalog = catalog if catalog is not None else load_catalog()
    entry = catalog.get(split_name(name)[0])
    draft = catalog.get(entry.draft) if entry and entry.draft else None
    return cached_file(draft.file_for(None)) if draft else None


def resolve_model(
    name: str,
    catalog: dict[str, ModelFacts] | None = None,
    fetch: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """A model name (catalog key[:QUANT]), a GGUF path or a GPTQ checkpoint folder -> a local file (a
    checkpoint: its folder), fetching it when needed."""
    if not name.strip():
        raise ModelNotFoundError("the model name is empty: give a catalog name (`localchat models` lists them) or "
                                 "a path to a .gguf file.")
    path = Path(name).expanduser()
    if path.is_file():
        return path.resolve()
    if looks_like_path(name):
        if path.is_dir() and is_gptq_folder(path):  # a GPTQ checkpoint folder is the torch worker's as it is
            lacking = folder_missing(path)
            if lacking:
                raise ModelNotFoundError(f"the GPTQ checkpoint in {path} lacks {', '.join(lacking)}; copy or "
                                         "download the whole checkpoint folder.")
            return path.resolve()
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
    embedding = load_embedding_catalog().get(key) if entry is None else None
    if embedding is not None:
        model_file = embedding.file
        return cached_file(model_file) or _fetch(name, model_file, fetch, progress)
    if entry is None:
        # Not a catalog name: maybe a model the user already has in LM Studio, Ollama or the hub cache.
        local = find_local_model(name)
        if local is not None:
            return local.path
        raise ModelNotFoundError(
            f"unknown model '{name}'. Use a catalog name ({', '.join(sorted(catalog))}) or a path to a .gguf file."
        )
    model_file = entry.file_for(quant)
    return cached_file(model_file) or _fetch(name, model_file, fetch, progress)


def _fetch(name: str, model_file: ModelFile, fetch: bool, progress: Callable[[int, int], None] | None) -> Path:
    if not fetch:
        raise ModelNotFoundError(f"{name} is not downloaded yet; run `localchat pull {name}`.")
    return fetch_model_file(model_file, progress=progress)


def servable_files(catalog: dict[str, ModelFacts] | None = None) -> dict[str, Path]:
    """The GGUF files here a client may ask for by name, under every name it may use: a downloaded catalog
    file as KEY:QUANT (and KEY for the default quant), a model found on this machine by its listed name
    and its file's stem. Names only: a server never opens a path a client sends."""
    from .importers import local_models

    catalog = catalog if catalog is not None else load_catalog()
    names: dict[str, Path] = {}
    for key, entry in catalog.items():
        for quant, model_file in entry.files.items():
            local = None if model_file.is_checkpoint else cached_file(model_file)
            if local is not None:
                if quant == entry.default_quant:  # the bare key first: the name a listing shows
                    names[key] = local
                names[f"{key}:{quant}"] = local
    for model in local_models():
        names.setdefault(model.name, model.path)
        names.setdefault(model.path.stem, model.path)
    return names
