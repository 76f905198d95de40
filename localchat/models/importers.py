"""GGUF files the user already has: a path, LM Studio's models folder, Ollama's blob store, the hub cache.

Nothing is copied: a model found here is used where it lies (these files are often many GB).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ModelLoadError, ModelNotFoundError
from ..paths import models_dir
from ..runtime.gguf_types import GGUF_MAGIC
from .hub import hub_cache_dir
from .split_files import is_later_part, model_bytes

log = logging.getLogger(__name__)

OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_REGISTRY = "registry.ollama.ai"


@dataclass(slots=True)
class LocalModel:
    """A GGUF model on this machine and where it was found."""

    name: str
    path: Path
    size: int
    source: str  # "path", "lmstudio", "ollama" or "hub"


@dataclass(slots=True)
class LocalRoots:
    """The folders searched for models; the defaults follow each tool's own conventions."""

    lmstudio: list[Path] = field(default_factory=list)
    ollama: list[Path] = field(default_factory=list)
    hub: list[Path] = field(default_factory=list)

    @classmethod
    def default(cls) -> LocalRoots:
        """LM Studio's current and older folders, Ollama's (OLLAMA_MODELS wins), the hub cache."""
        home = Path.home()
        ollama = [Path(os.environ["OLLAMA_MODELS"]).expanduser()] if os.environ.get("OLLAMA_MODELS") else [
            home / ".ollama" / "models",
            Path("/usr/share/ollama/.ollama/models"),  # the Linux service install runs as its own user
        ]
        return cls(lmstudio=[home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"],
                   ollama=ollama, hub=[hub_cache_dir()])


def is_gguf(path: Path) -> bool:
    """Whether the file starts with the GGUF magic."""
    try:
        with path.open("rb") as handle:
            return handle.read(4) == GGUF_MAGIC
    except OSError:
        return False


def scan_folder(folder: Path, source: str = "path") -> list[LocalModel]:
    """Every loadable GGUF under `folder`, named by its path relative to it."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.suffix.lower() != ".gguf" or not path.is_file():
            continue
        if path.name.lower().startswith("mmproj"):
            continue  # a vision projector, not a language model
        if is_later_part(path.name):
            continue  # llama.cpp opens a split model through its first part
        if not is_gguf(path):
            log.info("skipping %s: not a GGUF file", path)
            continue
        try:
            size = model_bytes(path)
        except OSError:
            log.info("skipping %s: a part of the split model is missing", path)
            continue
        name = path.relative_to(folder).with_suffix("").as_posix()
        found.append(LocalModel(name=name, path=path, size=size, source=source))
    return found


def scan_lmstudio(roots: list[Path]) -> list[LocalModel]:
    """LM Studio keeps plain GGUF files as <publisher>/<repo>/<file>.gguf."""
    return [model for root in roots if root.is_dir() for model in scan_folder(root, "lmstudio")]


def scan_ollama(roots: list[Path]) -> list[LocalModel]:
    """Ollama keeps manifests/<registry>/<namespace>/<model>/<tag>; the model layer names a GGUF blob."""
    found = []
    for root in roots:
        manifests = root / "manifests"
        if not manifests.is_dir():
            continue
        for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
            blob = _ollama_blob(root, manifest)
            if blob is None or not is_gguf(blob):
                continue
            found.append(LocalModel(name=_ollama_name(manifest.relative_to(manifests).parts), path=blob,
                                    size=blob.stat().st_size, source="ollama"))
    return found


def _ollama_blob(root: Path, manifest: Path) -> Path | None:
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
        digest = next(layer["digest"] for layer in layers if layer.get("mediaType") == OLLAMA_MODEL_LAYER)
    except (OSError, ValueError, AttributeError, KeyError, StopIteration, TypeError):
        log.info("skipping Ollama manifest %s: no model layer", manifest)
        return None
    # Blobs are named sha256-<hex>; very old installs used a colon, which Windows cannot store.
    for name in (digest.replace(":", "-"), digest):
        if (root / "blobs" / name).is_file():
            return root / "blobs" / name
    return None


def _ollama_name(parts: tuple[str, ...]) -> str:
    """The name Ollama itself shows: 'llama3.2:latest', 'user/model:tag', 'host/ns/model:tag'."""
    *path, tag = parts
    if len(path) == 3 and path[0] == OLLAMA_REGISTRY:
        path = path[2:] if path[1] == "library" else path[1:]
    return "/".join(path) + ":" + tag


def scan_hub_cache(roots: list[Path]) -> list[LocalModel]:
    """GGUF files other tools downloaded into the hub cache, named <repo>/<file>."""
    found = []
    for root in roots:
        for repo_dir in sorted(root.glob("models--*")):
            repo = repo_dir.name[len("models--"):].replace("--", "/")
            for snapshot in sorted((repo_dir / "snapshots").glob("*")):
                for model in scan_folder(snapshot, "hub"):
                    model.name = f"{repo}/{model.name}"
                    found.append(model)
    return found


def list_local_models(roots: LocalRoots | None = None) -> list[LocalModel]:
    """Every GGUF model found in LM Studio's and Ollama's folders and in the hub cache, each file once."""
    roots = roots or LocalRoots.default()
    seen: set[Path] = set()
    models = []
    for model in scan_lmstudio(roots.lmstudio) + scan_ollama(roots.ollama) + scan_hub_cache(roots.hub):
        real = model.path.resolve()
        if real not in seen:
            seen.add(real)
            models.append(model)
    return models


def local_models(roots: LocalRoots | None = None) -> list[LocalModel]:
    """The GGUF models on this machine: localchat's own folder first, then what the importers find."""
    seen: set[Path] = set()
    found = []
    for model in scan_folder(models_dir(), "localchat") + list_local_models(roots):
        real = model.path.resolve()
        if real not in seen:
            seen.add(real)
            found.append(model)
    return found


def find_local_model(name: str, roots: LocalRoots | None = None) -> LocalModel | None:
    """The local model called `name` (its listed name, file name or, for Ollama, name without ':latest')."""
    wanted = name.lower().removesuffix(".gguf")
    candidates = list_local_models(roots)
    for model in candidates:
        names = {model.name.lower()}
        if model.source == "ollama":
            names.add(model.name.lower().removesuffix(":latest"))
        else:
            names.add(model.path.stem.lower())
        if wanted in names:
            return model
    return None


def import_model(path_or_name: str | Path, roots: LocalRoots | None = None) -> LocalModel:
    """A GGUF the user has, given as a file, a folder holding one GGUF, or a name from list_local_models()."""
    path = Path(path_or_name).expanduser()
    if path.is_file():
        if not is_gguf(path):
            raise ModelLoadError(
                f"{path} is not a GGUF file. localchat runs GGUF models: convert it with llama.cpp's "
                "convert_hf_to_gguf.py, or download a GGUF version of the model."
            )
        return LocalModel(name=path.stem, path=path.resolve(), size=path.stat().st_size, source="path")
    if path.is_dir():
        models = scan_folder(path)
        if len(models) == 1:
            return models[0]
        if not models:
            raise ModelNotFoundError(f"no GGUF model in {path}; point to a .gguf file or a folder holding one.")
        raise ModelNotFoundError(
            f"{path} holds {len(models)} GGUF models; pass one of them: "
            + ", ".join(str(m.path) for m in models[:10])
        )
    found = find_local_model(str(path_or_name), roots)
    if found is not None:
        return found
    known = [m.name for m in list_local_models(roots)]
    listing = f"Models found on this machine: {', '.join(known[:20])}." if known else (
        "No models were found in LM Studio's or Ollama's folders or in the hub cache.")
    raise ModelNotFoundError(f"no file or local model called '{path_or_name}'. {listing}")
