"""Shared fixtures: the real SmolLM2 file, fetched through localchat's own pull path once per run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every localchat directory of the test run lives in one place, away from the user's own.
_HOME = Path(os.environ.get("LOCALCHAT_TEST_HOME", "/tmp/localchat-test-home"))
os.environ["LOCALCHAT_HOME"] = str(_HOME)


@pytest.fixture(scope="session")
def model_path() -> Path:
    from localchat.models.resolve import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="module", autouse=True)
def close_embedding_models():
    """Embedding models a module's servers or chats loaded are closed with the module: a model left
    loaded would keep the process on its CPU kernels, and the deterministic tests need others."""
    yield
    from localchat.runners.embedding import shared_models

    shared_models().close()


@pytest.fixture(scope="session")
def embedding_model_path() -> Path:
    """all-MiniLM-L6-v2, made once per test home by llama.cpp's converter through `localchat pull`'s path."""
    from localchat.models.embedding import DEFAULT_EMBEDDING_MODEL
    from localchat.models.resolve import resolve_model

    return resolve_model(DEFAULT_EMBEDDING_MODEL)


@pytest.fixture(scope="session")
def q8_model_path(model_path: Path) -> Path:
    """A Q8_0 sibling made from the Q4_1 file with llama.cpp's own quantizer."""
    from localchat.models.derive import requantize

    return requantize(model_path, "Q8_0")


@pytest.fixture(scope="module")
def browser():
    """One headless system Chromium per browser test module (tests/browser_kit.py)."""
    from browser_kit import launched

    yield from launched()
