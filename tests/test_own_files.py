"""localchat's own model files: `localchat import PATH` links the user's file in (hard link, else a symbolic
link, else a copy that says why), and deleting from the models folder removes only the name there: a link goes,
the user's original stays, and nothing outside the folder is deleted."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from localchat.cli import main
from localchat.errors import ModelLoadError
from localchat.models.own_files import link_in, remove_own
from localchat.paths import models_dir


@pytest.fixture()
def original(model_path: Path, tmp_path: Path) -> Path:
    """The user's own GGUF, outside every folder localchat keeps (a second name for SmolLM2's bytes)."""
    mine = tmp_path / "users-model.gguf"
    os.link(model_path, mine)
    return mine


def test_import_links_the_users_file_and_deleting_the_link_leaves_the_original(original: Path, capsys):
    assert main(["import", str(original)]) == 0
    said = capsys.readouterr().out
    target = models_dir() / "imported" / original.name
    assert said.startswith("Linked users-model.gguf into localchat's models folder (a hard link")
    assert str(target) in said
    assert target.stat().st_ino == original.stat().st_ino  # one file, two names: nothing copied
    assert remove_own(target).startswith("Removed users-model.gguf from localchat's models folder; it was a hard link")
    assert not target.exists() and original.read_bytes()[:4] == b"GGUF"


def test_across_filesystems_import_makes_a_symbolic_link_whose_delete_never_reaches_the_original(
        original: Path, monkeypatch):
    def other_disk(*_args):  # a hard link cannot cross filesystems; this machine's tests run on one
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "link", other_disk)
    placed = link_in(original)
    assert placed.how == "linked" and "a symbolic link" in placed.said and "cross-device" in placed.said
    assert placed.path.is_symlink() and placed.path.resolve() == original.resolve()
    said = remove_own(placed.path)
    assert said == f"Removed the link {placed.path.name}; the original file at {original} stays."
    assert original.is_file() and original.read_bytes()[:4] == b"GGUF" and not placed.path.is_symlink()


def test_where_no_link_can_be_made_the_import_copies_and_says_why(original: Path, monkeypatch):
    def refused(*_args, **_kwargs):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "link", refused)
    monkeypatch.setattr(Path, "symlink_to", refused)
    placed = link_in(original)
    assert placed.how == "copied" and "because no link can be made there (operation not permitted)" in placed.said
    assert placed.path.read_bytes() == original.read_bytes() and placed.path.stat().st_ino != original.stat().st_ino
    assert remove_own(placed.path).startswith(f"Deleted {placed.path.name} (")
    assert original.is_file()


def test_import_refuses_what_is_not_a_model_and_delete_refuses_files_outside_the_models_folder(
        original: Path, tmp_path: Path, capsys):
    notes = tmp_path / "notes.gguf"
    notes.write_text("not a model\n" * 40)
    assert main(["import", str(notes)]) == 1
    assert "notes.gguf does not start like a GGUF file" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "missing.gguf")]) == 1
    assert "is not a file; give the path of a .gguf model file" in capsys.readouterr().err
    with pytest.raises(ModelLoadError, match="not in localchat's models folder, so it was not deleted"):
        remove_own(original)
    assert original.is_file()


def test_a_split_model_is_imported_whole_into_a_folder_of_its_own_and_deleted_whole(model_path: Path,
                                                                                    tmp_path: Path):
    from gguf_shapes import split_gguf

    from localchat.models.importers import scan_folder

    pytest.importorskip("gguf")
    (tmp_path / "mine").mkdir()
    parts = split_gguf(model_path, tmp_path / "mine" / "Smol.Q4_1.gguf", 3)
    parts[2].rename(tmp_path / "elsewhere.gguf")
    with pytest.raises(ModelLoadError, match="Smol.Q4_1-00003-of-00003.gguf is not beside it"):
        link_in(parts[0])
    (tmp_path / "elsewhere.gguf").rename(parts[2])
    placed = link_in(parts[0])
    again = link_in(parts[0])  # a second import never overwrites the first
    try:
        assert placed.path == models_dir() / "imported" / "Smol.Q4_1" / parts[0].name
        assert "and its 2 other parts beside it" in placed.said
        assert again.path.parent.name == "Smol.Q4_1-2"
        found = scan_folder(placed.path.parent)
        assert [m.path for m in found] == [placed.path] and found[0].size == sum(p.stat().st_size for p in parts)
        said = remove_own(placed.path)
        assert said.startswith(f"Deleted {parts[0].name} and its 2 other parts from localchat's models folder:")
        assert not placed.path.parent.exists() and all(p.is_file() for p in parts)  # the user's stay
    finally:
        shutil.rmtree(placed.path.parent, ignore_errors=True)
        shutil.rmtree(again.path.parent, ignore_errors=True)
