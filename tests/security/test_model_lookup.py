"""A request that names a model costs a lookup in an index, never a walk of the model folders on the
event loop; the catalog is parsed once per change of the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from localchat.api.local import LocalService
from localchat.errors import ConfigError, ModelNotFoundError
from localchat.models import catalog as catalog_module
from localchat.models.embedding import load_embedding_catalog
from localchat.models.resolve import servable_files
from localchat.paths import models_dir
from localchat.runners.pool import Runners
from conftest import MODEL, best_of, wait_until

NUM_FILES = 400


def a_gguf(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + bytes(60))  # what the folder walk checks: the magic
    return path


@pytest.fixture()
def crowded_home(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    for i in range(NUM_FILES):
        a_gguf(models_dir() / f"family-{i % 20}" / f"model-{i}.gguf")
    return tmp_path


def test_an_unknown_model_name_costs_no_folder_walk(engine, crowded_home: Path):
    """The issue's sixth finding: each unknown name walked the model folders on the event loop (~80 ms
    with 9 files); four clients sending them took /api/version from 1 ms to most of a second."""
    runners = Runners(open_file=lambda path: None, needs=lambda path: 0, keep_alive_s=60)
    try:
        service = LocalService(engine, MODEL, runners=runners)
        walk = best_of(3, servable_files)

        def unknown() -> None:
            with pytest.raises(ModelNotFoundError):
                service.model("no-such-model")

        lookup = best_of(3, unknown)
        print(f"a walk of {NUM_FILES} files: {walk * 1000:.1f} ms; an unknown name's lookup: {lookup * 1000:.2f} ms")
        assert lookup < walk / 10
        # A file added is found by a later walk, off the caller's thread.
        a_gguf(models_dir() / "late-arrival.gguf")
        wait_until(lambda: "late-arrival" in {m.name for m in service.models()}, 60, "the new file to be listed")
    finally:
        runners.close()


def test_the_catalog_is_parsed_once_per_change(tmp_path: Path):
    """Code review: models.yaml was parsed again on every Ollama chat, model listing and embeddings call,
    on the event loop."""
    copy = tmp_path / "models.yaml"
    copy.write_bytes(catalog_module.catalog_path().read_bytes())
    parse = best_of(3, lambda: yaml.safe_load(copy.read_text(encoding="utf-8")))
    catalog_module.load_catalog(copy)
    cached = best_of(3, lambda: (catalog_module.load_catalog(copy), load_embedding_catalog(copy)))
    assert cached < parse / 5
    copy.write_text("models: [not, a, mapping]\n", encoding="utf-8")  # a change is read again
    with pytest.raises(ConfigError):
        catalog_module.load_catalog(copy)


def a_small_gguf(path: Path, n: int) -> None:
    """A real GGUF file, header and one small tensor, as a listing reads it."""
    import gguf
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(256 + n)
    writer.add_embedding_length(8)
    writer.add_head_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_listing_of_many_models_reads_each_header_once(engine, tmp_path: Path, monkeypatch):
    """The issue's sixth finding: past 16 models, /v1/models and /api/tags read every GGUF header again on
    each listing, on the event loop."""
    from localchat.api.protocols import ollama_models

    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    for i in range(40):
        a_small_gguf(models_dir() / f"listed-{i}.gguf", i)
    runners = Runners(open_file=lambda path: None, needs=lambda path: 0, keep_alive_s=60)
    try:
        service = LocalService(engine, MODEL, runners=runners)
        models = service.models()
        assert len(models) > 40
        ollama_models._header.cache_clear()
        for _ in range(2):
            [ollama_models.listed(m) for m in models]
        assert ollama_models._header.cache_info().misses <= len(models)  # the second listing read none
    finally:
        runners.close()
