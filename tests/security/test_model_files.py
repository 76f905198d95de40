"""A file given as a model is untrusted: refusing it must not echo what it holds."""

from pathlib import Path

import pytest

from localchat.errors import ModelLoadError
from localchat.runtime.worker import Worker


def test_a_non_gguf_file_is_refused_without_echoing_its_bytes(tmp_path: Path):
    secret = tmp_path / "notes.gguf"
    secret.write_bytes(b"SECRET-API-KEY=sk-12345\n")
    with pytest.raises(ModelLoadError) as refused:
        Worker(secret)
    message = str(refused.value)
    assert "not a GGUF model file" in message
    assert "SECRET" not in message and "SECR" not in message and "sk-" not in message
