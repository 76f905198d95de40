"""Finding GGUF files the user already has: a path, LM Studio's folders, Ollama's store, the hub cache."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest

from localchat.errors import ModelLoadError, ModelNotFoundError
from localchat.models.importers import LocalRoots, import_model, is_gguf, list_local_models
from localchat.models.resolve import resolve_model


def tiny_gguf(path: Path, name: str = "tiny") -> Path:
    """A small but real GGUF file, written by the gguf package."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_name(name)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def ollama_model(root: Path, manifest: tuple[str, ...], digest: str, blob: Path | None) -> None:
    """An Ollama manifest with a model layer (plus the template and params layers Ollama adds)."""
    if blob is not None:
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        blob.replace(root / "blobs" / f"sha256-{digest}")
    layers = [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64, "size": 10},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 1},
        {"mediaType": "application/vnd.ollama.image.params", "digest": "sha256:" + "2" * 64, "size": 10},
    ]
    path = root.joinpath("manifests", *manifest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 2, "layers": layers,
                                "mediaType": "application/vnd.docker.distribution.manifest.v2+json"}))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder with LM Studio (both locations), Ollama and hub-cache models, and some look-alikes."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hf-cache"))
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)

    lms = home / ".lmstudio" / "models"
    tiny_gguf(lms / "bartowski" / "Qwen2.5-0.5B-Instruct-GGUF" / "Qwen2.5-0.5B-Instruct-Q4_K_M.gguf")
    tiny_gguf(lms / "bartowski" / "Qwen2.5-0.5B-Instruct-GGUF" / "mmproj-model-f16.gguf")  # a projector
    (lms / "junk" / "fake.gguf").parent.mkdir(parents=True)
    (lms / "junk" / "fake.gguf").write_bytes(b"<html>not a model</html>")  # a failed browser download
    big = lms / "unsloth" / "Big-GGUF"
    for shard in (1, 2):
        tiny_gguf(big / f"Big-Q8_0-0000{shard}-of-00002.gguf")
    tiny_gguf(home / ".cache" / "lm-studio" / "models" / "TheBloke" / "Old-GGUF" / "old.Q4_0.gguf")

    ollama = home / ".ollama" / "models"
    ollama_model(ollama, ("registry.ollama.ai", "library", "llama3.2", "latest"), "a" * 64,
                 tiny_gguf(tmp_path / "blob-a"))
    ollama_model(ollama, ("registry.ollama.ai", "someone", "coder", "7b"), "b" * 64, tiny_gguf(tmp_path / "blob-b"))
    ollama_model(ollama, ("hf.co", "org", "repo-GGUF", "Q4_K_M"), "c" * 64, tiny_gguf(tmp_path / "blob-c"))
    ollama_model(ollama, ("registry.ollama.ai", "library", "gone", "latest"), "d" * 64, None)  # blob deleted

    snapshot = home / "hf-cache" / "models--org--Shared-GGUF" / "snapshots" / "abc"
    tiny_gguf(snapshot / "shared.Q8_0.gguf")
    return home


def test_every_local_model_is_listed_once_with_its_source(home: Path):
    found = {m.name: m for m in list_local_models()}
    assert set(found) == {
        "bartowski/Qwen2.5-0.5B-Instruct-GGUF/Qwen2.5-0.5B-Instruct-Q4_K_M",
        "unsloth/Big-GGUF/Big-Q8_0-00001-of-00002",
        "TheBloke/Old-GGUF/old.Q4_0",
        "llama3.2:latest", "someone/coder:7b", "hf.co/org/repo-GGUF:Q4_K_M",
        "org/Shared-GGUF/shared.Q8_0",
    }
    assert found["llama3.2:latest"].source == "ollama"
    assert found["llama3.2:latest"].path == home / ".ollama" / "models" / "blobs" / ("sha256-" + "a" * 64)
    assert found["TheBloke/Old-GGUF/old.Q4_0"].source == "lmstudio"
    assert found["org/Shared-GGUF/shared.Q8_0"].source == "hub"
    shards = sorted((home / ".lmstudio/models/unsloth/Big-GGUF").glob("*.gguf"))
    assert found["unsloth/Big-GGUF/Big-Q8_0-00001-of-00002"].size == sum(p.stat().st_size for p in shards)
    assert all(is_gguf(m.path) for m in found.values())


def test_explicit_roots_replace_the_defaults(home: Path, tmp_path: Path):
    roots = LocalRoots(ollama=[home / ".ollama" / "models"])
    assert {m.source for m in list_local_models(roots)} == {"ollama"}
    assert list_local_models(LocalRoots(lmstudio=[tmp_path / "nowhere"])) == []


def test_ollama_models_dir_setting_is_honoured(home: Path, monkeypatch: pytest.MonkeyPatch):
    moved = home / "elsewhere"
    (home / ".ollama" / "models").rename(moved)
    monkeypatch.setenv("OLLAMA_MODELS", str(moved))
    assert "llama3.2:latest" in {m.name for m in list_local_models()}


def test_import_by_name_file_and_folder(home: Path):
    assert import_model("llama3.2").path.name == "sha256-" + "a" * 64
    assert import_model("someone/coder:7b").source == "ollama"
    assert import_model("Qwen2.5-0.5B-Instruct-Q4_K_M.gguf").source == "lmstudio"
    old = home / ".cache" / "lm-studio" / "models" / "TheBloke" / "Old-GGUF"
    assert import_model(old / "old.Q4_0.gguf").source == "path"
    assert import_model(old).path == old / "old.Q4_0.gguf"  # a folder holding one model
    # The same names work wherever a model is asked for.
    assert resolve_model("llama3.2:latest") == import_model("llama3.2").path
    assert resolve_model("bartowski/Qwen2.5-0.5B-Instruct-GGUF/Qwen2.5-0.5B-Instruct-Q4_K_M").suffix == ".gguf"


def test_import_refuses_what_it_cannot_use(home: Path):
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        import_model(home / ".lmstudio" / "models" / "junk" / "fake.gguf")
    with pytest.raises(ModelNotFoundError, match="holds 2 GGUF models"):
        import_model(home / ".lmstudio" / "models")
    with pytest.raises(ModelNotFoundError, match=r"no file or local model called 'mistral'.*llama3\.2:latest"):
        import_model("mistral")
    with pytest.raises(ModelNotFoundError, match="gone"):
        import_model("gone")  # its manifest names a blob that is no longer there
