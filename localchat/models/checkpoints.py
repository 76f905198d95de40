"""GPTQ checkpoint folders from the model hub: which of a repo's files make the checkpoint, fetched one by
one through hub.py (the same progress, resume and checksums as a GGUF file), and found again when whole.

A checkpoint is a folder, not a file: config.json, the safetensors weights (one file or shards named by
an index) and the tokenizer. Every file of one revision lands in the hub cache's snapshot folder of that
commit, so that folder is the checkpoint the torch worker loads. Pickled weights (*.bin, *.pt) are
never fetched: loading them can run code.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ..errors import DownloadError
from ..gptq import REQUIRED_FILES, is_gptq_folder
from ..paths import models_dir
from .catalog import ModelFile
from .hub import Progress, cached_hub_file, download_hub_files, hub_endpoint
from .hub_errors import explain_hub_error

log = logging.getLogger(__name__)

INDEX = "model.safetensors.index.json"
# Small files beside them that tokenizers and generation settings read; fetched when the repo has them.
OPTIONAL = ("generation_config.json", "quantize_config.json", "special_tokens_map.json", "added_tokens.json",
            "vocab.json", "merges.txt", INDEX)


def checkpoint_files(listing: dict[str, int]) -> dict[str, int]:
    """The files of a repo listing ({name: bytes}) that make the checkpoint: top-level config, tokenizer
    and safetensors files."""
    return {name: size for name, size in listing.items()
            if "/" not in name and (name in REQUIRED_FILES or name in OPTIONAL or name.endswith(".safetensors"))}


def missing_parts(names: set[str], index: dict[str, Any] | None = None) -> list[str]:
    """What a checkpoint with these file names lacks (with its shard index, the shards it names)."""
    missing = [name for name in REQUIRED_FILES if name not in names]
    shards = set((index or {}).get("weight_map", {}).values())
    missing += sorted(shards - names)
    if not any(name.endswith(".safetensors") for name in names):
        missing.append("*.safetensors (the weights)")
    return missing


def folder_missing(folder: Path) -> list[str]:
    """What the checkpoint folder lacks to load; [] when it is whole."""
    names = {p.name for p in folder.iterdir() if p.is_file()} if folder.is_dir() else set()
    index = None
    if INDEX in names:
        try:
            index = json.loads((folder / INDEX).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return [f"{INDEX} (unreadable)"]
    return missing_parts(names, index)


def _whole(folder: Path) -> bool:
    return is_gptq_folder(folder) and not folder_missing(folder)


def cached_checkpoint(model_file: ModelFile) -> Path | None:
    """The local copy of a catalog checkpoint when it is whole: a folder of its name in the models dir,
    else the hub cache's snapshot of its repo (no network)."""
    local = models_dir() / model_file.file
    if _whole(local):
        return local
    hub = model_file.hub
    if not hub:
        return None
    try:
        config = cached_hub_file(hub["repo"], "config.json", hub.get("revision", "main"))
    except ImportError:
        return None
    return config.parent if config is not None and _whole(config.parent) else None


def repo_listing(repo: str, revision: str = "main") -> dict[str, int]:
    """Every file of a hub repo and its size, from one listing request."""
    from huggingface_hub import HfApi

    endpoint = hub_endpoint()
    try:
        info = HfApi(endpoint=endpoint).model_info(repo, revision=revision, files_metadata=True)
    except Exception as exc:
        raise explain_hub_error(exc, endpoint, repo, "(the repo listing)", revision) from None
    return {s.rfilename: int(s.size or 0) for s in info.siblings or []}


def fetch_checkpoint(model_file: ModelFile, progress: Progress | None = None) -> Path:
    """Every file of a catalog checkpoint into the hub cache, verified; returns the checkpoint folder."""
    hub = model_file.hub
    if not hub:
        raise DownloadError(f"{model_file.file} names no hub repo to fetch it from; check models.yaml.")
    repo, revision = hub["repo"], hub.get("revision", "main")
    files = checkpoint_files(repo_listing(repo, revision))
    lacking = missing_parts(set(files))
    if lacking:
        raise DownloadError(f"{repo} is not a checkpoint the GPTQ worker can load: it has no {', '.join(lacking)}. "
                            "Pick a GPTQ repo with safetensors weights, or use a GGUF quant of the model.")
    # Small files first: a repo that is not what it claims fails before the big weights are fetched.
    ordered = dict(sorted(files.items(), key=lambda item: (item[1], item[0])))
    folder = download_hub_files(repo, ordered, revision=revision, progress=progress)[0].parent
    if INDEX in files:  # the shards the index names, all of them
        lacking = folder_missing(folder)
        if lacking:
            raise DownloadError(f"{repo}'s shard index names files the repo does not list ({', '.join(lacking)}); "
                                "the repo is incomplete: pick another GPTQ repo or a GGUF quant.")
    log.info("fetched %s (%d files, %d bytes) into %s", repo, len(files), sum(files.values()), folder)
    return folder
