"""A GGUF model imported through the window's file picker: checked, then moved into localchat's models folder
(the upload is already the one copy the browser's bytes make: models/own_files.py moves it, never copies it
again where a rename can do)."""

from __future__ import annotations

from pathlib import Path

from ...errors import ModelLoadError
from ...models.own_files import Placed, check_gguf, move_in
from ..documents.uploads import named_only, received_dir, safe_name



def import_gguf(upload: str | Path, original_name: str | None = None) -> Placed:
    """Move an uploaded GGUF into localchat's models folder, once its header reads as a model."""
    source = Path(upload)
    if not source.resolve().is_relative_to(received_dir().resolve()):
        raise ModelLoadError(f"{source.name}: only a file uploaded through the window can be imported.")
    try:
        name = safe_name(original_name or source.name)
        try:
            check_gguf(source, name)
        except ModelLoadError as exc:  # what a browser is told names no folder of the server
            raise ModelLoadError(named_only(str(exc), source, name)) from None
        return move_in(source, name)
    finally:
        source.unlink(missing_ok=True)  # moved into place, or refused: a model-sized upload must not linger
