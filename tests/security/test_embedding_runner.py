"""The embedding model runs in a runner process of its own (localchat/runners/embedding.py): a killed
runner costs nothing but a restart, and a model file that aborts llama.cpp while loading costs only
that load, never the server."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from localchat.api.embeddings import embedding_info
from localchat.errors import ModelLoadError
from localchat.models.derive import random_weights_like
from localchat.models.embedding import DEFAULT_EMBEDDING_MODEL
from localchat.runners.embedding import EmbeddingModels
from localchat.runners.embedding import SupervisedEmbedder
from localchat.runners.supervisor import LoadCrashError
from test_runner import _block_count, crafted


def test_embeddings_come_from_another_process_which_a_kill_only_restarts(embedding_model_path: Path):
    models = EmbeddingModels()
    try:
        assert embedding_info(DEFAULT_EMBEDDING_MODEL, 0).loaded is False
        embedder = models.open(embedding_model_path)
        assert embedding_info(DEFAULT_EMBEDDING_MODEL, 0).loaded is False  # another set of models
        first = embedder.embed(["The keeper lit the lamp at dusk."])[0]
        pid = embedder.pid
        assert pid != os.getpid() and len(first) == embedder.n_embd
        os.kill(pid, signal.SIGKILL)  # as the OOM killer would, between two calls
        again = embedder.embed(["The keeper lit the lamp at dusk."])[0]
        assert embedder.pid != pid and embedder.restarts == 1
        assert max(abs(a - b) for a, b in zip(first, again)) < 1e-5  # the same vector from the new runner
        vectors, n_tokens = embedder.embed_inputs(["lamp", embedder.tokenize("oil")], False)
        assert len(vectors) == 2 and n_tokens == len(embedder.tokenize("lamp")) + len(embedder.tokenize("oil"))
    finally:
        models.close()


def test_the_shared_models_say_which_are_loaded(embedding_model_path: Path):
    from localchat.runners.embedding import shared_models

    shared_models().open(embedding_model_path)
    assert embedding_info(DEFAULT_EMBEDDING_MODEL, 0).loaded is True
    shared_models().close()
    assert embedding_info(DEFAULT_EMBEDDING_MODEL, 0).loaded is False


def test_a_file_that_aborts_llama_cpp_costs_only_its_load(model_path: Path, embedding_model_path: Path,
                                                         tmp_path: Path):
    base = random_weights_like(model_path, tmp_path / "random.gguf")
    broken = crafted(base, tmp_path / "broken.gguf", _block_count)
    with pytest.raises(LoadCrashError, match=r"crashed \(SIGABRT\) while loading broken.gguf") as caught:
        SupervisedEmbedder(broken)
    assert isinstance(caught.value, ModelLoadError)
    good = SupervisedEmbedder(embedding_model_path)  # this process goes on, and so do other models
    try:
        assert len(good.embed(["still here"])[0]) == good.n_embd
    finally:
        good.close()
