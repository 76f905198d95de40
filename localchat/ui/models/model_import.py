"""A GGUF model imported through the window's file picker: checked, then moved into localchat's models folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...errors import LocalchatError, ModelLoadError
from ...models.gguf_info import read_gguf
from ...models.importers import is_gguf
from ...paths import PRIVATE_FILE_MODE, models_dir
from ..documents.uploads import named_only, received_dir, safe_name

IMPORTED = "imported"  # the subfolder of the models folder that holds imported files


def import_gguf(upload: str | Path, original_name: str | None = None) -> Path:
    """Move an uploaded GGUF into localchat's models folder, once its header reads as a model."""
    source = Path(upload)
    if not source.resolve().is_relative_to(received_dir().resolve()):
        raise ModelLoadError(f"{source.name}: only a file uploaded through the window can be imported.")
    try:
        return _import(source, original_name)
    finally:
        source.unlink(missing_ok=True)  # moved into place, or refused: a model-sized upload must not linger


def _import(source: Path, original_name: str | None) -> Path:
    name = safe_name(original_name or source.name)
    if not name.lower().endswith(".gguf"):
        raise ModelLoadError(f"{name} is not a .gguf file; localchat imports GGUF models.")
    if not is_gguf(source):
        raise ModelLoadError(f"{name} does not start like a GGUF file; it may be damaged or another format.")
    try:
        info = read_gguf(source)
    except (LocalchatError, OSError, ValueError) as exc:
        raise ModelLoadError(f"{name} is not a readable GGUF model ({named_only(str(exc), source, name)}).") from None
    if not info.n_layer:
        raise ModelLoadError(f"{name} holds no model layers; it is not a language model.")
    folder = models_dir() / IMPORTED
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    stem, number = target.stem, 2
    while target.exists():  # never overwrite a model already here
        target = folder / f"{stem}-{number}.gguf"
        number += 1
    shutil.move(str(source), target)
    os.chmod(target, PRIVATE_FILE_MODE)
    return target
