"""`localchat import` and the window's import create each name exclusively: a second model with the same file
name gets a name of its own and never writes into the first (which is a hard link to the user's own file), the
same file imported twice is a second name and no traceback, and a copy that does not fit leaves nothing."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from localchat.cli import main
from localchat.errors import ModelLoadError
from localchat.models import own_files
from localchat.models.own_files import link_in, move_in
from localchat.paths import models_dir


@pytest.fixture()
def home(tmp_path: Path, monkeypatch) -> Path:
    """A localchat home of the test's own, so the models folder holds only what the test imports."""
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def two_models(model_path: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The user's own SmolLM2 at ~/models/x/model.gguf and another model at ~/models/y/model.gguf."""
    from gguf_shapes import gpt_oss_gguf

    pytest.importorskip("gguf")
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    mine = tmp_path / "x" / "model.gguf"
    os.link(model_path, mine)
    return mine, gpt_oss_gguf(tmp_path / "y" / "model.gguf")


def test_a_second_model_with_the_same_file_name_never_writes_into_the_first(home, two_models, capsys):
    mine, other = two_models
    before = digest(mine)
    assert main(["import", str(mine)]) == 0
    assert main(["import", str(other)]) == 0
    said = capsys.readouterr().out
    imported = models_dir() / "imported"
    assert str(imported / "model-2.gguf") in said
    assert digest(mine) == before  # the user's own file holds their model still
    assert (imported / "model.gguf").stat().st_ino == mine.stat().st_ino
    assert digest(imported / "model-2.gguf") == digest(other)
    assert sorted(p.name for p in imported.iterdir()) == ["model-2.gguf", "model.gguf"]


def test_the_same_file_imported_twice_is_a_second_name_not_a_traceback(home, two_models, capsys):
    mine, _ = two_models
    assert main(["import", str(mine)]) == 0
    assert main(["import", str(mine)]) == 0
    assert "model-2.gguf" in capsys.readouterr().out
    imported = models_dir() / "imported"
    assert (imported / "model-2.gguf").stat().st_ino == mine.stat().st_ino


def refused(*_args, **_kwargs):
    raise OSError(errno.EPERM, os.strerror(errno.EPERM))


@pytest.mark.parametrize("links", ["hard", "symbolic", "none"])
def test_a_name_taken_meanwhile_is_never_written_onto(home, two_models, monkeypatch, links: str):
    """Another import takes the name between the look and the link: each way in (link, symbolic link, copy)
    creates exclusively, so the taken file stays as it was."""
    mine, other = two_models
    taken = models_dir() / "imported" / "model.gguf"
    taken.parent.mkdir(parents=True, exist_ok=True)
    os.link(mine, taken)
    if links != "hard":
        monkeypatch.setattr(os, "link", refused)
    if links == "none":
        monkeypatch.setattr(Path, "symlink_to", refused)
    with pytest.raises(FileExistsError):
        own_files._link(other, taken)
    assert digest(mine) != digest(other) and taken.stat().st_ino == mine.stat().st_ino
    placed = link_in(other)  # the import itself moves on to a free name
    assert placed.path.name == "model-2.gguf" and digest(placed.path) == digest(other)
    assert digest(taken) == digest(mine)


def test_an_upload_moved_in_never_replaces_a_file_with_its_name(home, two_models, tmp_path: Path):
    mine, other = two_models
    taken = models_dir() / "imported" / "model.gguf"
    taken.parent.mkdir(parents=True, exist_ok=True)
    os.link(mine, taken)
    upload = tmp_path / "upload.gguf"
    upload.write_bytes(other.read_bytes())
    with pytest.raises(FileExistsError):
        own_files._move(upload, taken, "model.gguf")
    assert upload.is_file() and digest(taken) == digest(mine)
    placed = move_in(upload, "model.gguf")
    assert placed.path.name == "model-2.gguf" and digest(placed.path) == digest(other) and not upload.exists()
    assert digest(mine) == digest(taken)


def test_a_copy_that_does_not_fit_is_refused_in_one_line_and_leaves_nothing(home, model_path: Path, small_disk,
                                                                           monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(small_disk("2m", "home-on-small-disk")))
    monkeypatch.setattr(os, "link", refused)
    monkeypatch.setattr(Path, "symlink_to", refused)
    with pytest.raises(ModelLoadError) as full:
        link_in(model_path)  # ~100 MB onto a 2 MiB disk
    said = str(full.value)
    assert said.startswith(f"{model_path.name} (") and "does not fit in localchat's models folder" in said
    assert "\n" not in said
    assert list((models_dir() / "imported").iterdir()) == []
