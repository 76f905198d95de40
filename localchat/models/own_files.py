"""localchat's own model files: a GGUF brought into its models folder (linked, moved or copied, and saying
which), and a file taken out of it again.

A file the user already has is linked, never duplicated: a hard link when the models folder is on the
same filesystem (one file, two names), else a symbolic link. Only when neither can be made is it copied,
and the message says why. Deleting works on the name in the models folder alone: a link goes, the file it
points at (the user's own) stays, and nothing outside the folder is ever deleted.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import LocalchatError, ModelLoadError
from ..paths import DISK_MARGIN, PRIVATE_FILE_MODE, models_dir, room_left
from ..units import size_text
from .gguf_info import read_gguf
from .importers import is_gguf
from .split_files import model_stem, part_paths

IMPORTED = "imported"  # the subfolder of the models folder that holds imported files


@dataclass(frozen=True, slots=True)
class Placed:
    """A file put into the models folder, and how: "linked", "moved" or "copied", with the why in `said`."""

    path: Path
    how: str
    said: str


def check_gguf(path: Path, name: str) -> None:
    """A ModelLoadError that says what is wrong unless `path` (shown as `name`) reads as a GGUF language model."""
    if not name.lower().endswith(".gguf"):
        raise ModelLoadError(f"{name} is not a .gguf file; localchat imports GGUF models.")
    if not is_gguf(path):
        raise ModelLoadError(f"{name} does not start like a GGUF file; it may be damaged or another format.")
    try:
        info = read_gguf(path)
    except (LocalchatError, OSError, ValueError) as exc:
        reason = str(exc).replace(str(path), name)  # the file's own name, not where it waits
        raise ModelLoadError(f"{name} is not a readable GGUF model ({reason}).") from None
    if not info.n_layer:
        raise ModelLoadError(f"{name} holds no model layers; it is not a language model.")


def import_target(name: str) -> Path:
    """A free path for `name` (a file's, or the folder's of a split model) in the imported folder: a model
    already here is never overwritten. Free when asked: the caller creates it exclusively (`_claimed`)."""
    folder = models_dir() / IMPORTED
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    stem, suffix = (name[:-len(".gguf")], name[-len(".gguf"):]) if name.lower().endswith(".gguf") else (name, "")
    number = 2
    while target.exists() or target.is_symlink():
        target = folder / f"{stem}-{number}{suffix}"
        number += 1
    return target


def _claimed(name: str, make: Callable[[Path], Placed]) -> Placed:
    """`make` run on the first free path for `name`; a path taken between the look and the make (another
    import at the same moment) is a taken name: the next one is tried, and nothing is written onto it."""
    for _ in range(100):
        try:
            return make(import_target(name))
        except FileExistsError:
            continue
    raise ModelLoadError(f"No free name for {name} in localchat's models folder; delete an import, then try again.")


def link_in(source: Path) -> Placed:
    """The user's GGUF at `source` in localchat's models folder without a second copy of its bytes. A split
    model (its first part given) comes whole, into a folder of its own: llama.cpp finds the later parts
    beside the first by their names, which a renamed first part would lose."""
    source = source.expanduser().resolve()
    if not source.is_file():
        raise ModelLoadError(f"{source} is not a file; give the path of a .gguf model file.")
    check_gguf(source, source.name)
    if source.is_relative_to(models_dir().resolve()):
        raise ModelLoadError(f"{source.name} is already in localchat's models folder ({source.parent}).")
    parts = part_paths(source)
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise ModelLoadError(f"{source.name} is the first of {len(parts)} parts, and {', '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} not beside it in {source.parent}; put every "
                             "part in one folder, then import the first.")
    if len(parts) == 1:
        return _claimed(source.name, lambda target: _link(source, target))
    folder = _claimed(model_stem(source.name), _new_folder).path  # every part's name in it is free
    placed = [_link(part, folder / part.name) for part in parts]
    how = "copied" if any(p.how == "copied" for p in placed) else "linked"
    return Placed(folder / source.name, how,
                  f"{placed[0].said} (and its {len(parts) - 1} other parts beside it, each the same way)")


def _new_folder(path: Path) -> Placed:
    path.mkdir()  # FileExistsError when taken: `_claimed` moves on
    return Placed(path, "folder", "")


def _link(source: Path, target: Path) -> Placed:
    """`source` at the new name `target`: a hard link, else a symbolic link, else a copy. Every one of
    them creates `target` exclusively: a taken name raises FileExistsError, never a fallback that writes."""
    try:
        os.link(source, target)
        return Placed(target, "linked", f"linked {source.name} into localchat's models folder (a hard link: one "
                                        "file with two names, no bytes copied)")
    except FileExistsError:
        raise
    except OSError as hard:
        try:
            target.symlink_to(source)
            return Placed(target, "linked", f"linked {source.name} into localchat's models folder (a symbolic "
                                            f"link: a hard link is not possible here, {_why(hard)}); "
                                            "moving or deleting the original breaks the link")
        except FileExistsError:
            raise
        except OSError as soft:
            _copy_new(source, target)
            return Placed(target, "copied", f"copied {source.name} ({size_text(source.stat().st_size)}) into "
                                            "localchat's models folder because no link can be made there "
                                            f"({_why(soft)})")


def _copy_new(source: Path, target: Path) -> None:
    """`source`'s bytes in a file created at `target` (FileExistsError when taken), private; a copy that
    fails part way (a full disk) is removed, not left as a damaged model."""
    size = source.stat().st_size
    if size > room_left(target.parent):
        raise _no_room(target.name, size, shutil.disk_usage(target.parent).free)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as given:
            shutil.copyfileobj(given, out, 1 << 20)
    except BaseException as exc:
        target.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:  # filled meanwhile by another writer
            raise _no_room(target.name, size, shutil.disk_usage(target.parent).free) from None
        raise


def _no_room(name: str, size: int, free: int) -> ModelLoadError:
    return ModelLoadError(f"{name} ({size_text(size)}) does not fit in localchat's models folder: "
                          f"{size_text(free)} is free there and {size_text(DISK_MARGIN)} stays free for the chats; "
                          "free some space, then import again.")


def move_in(source: Path, name: str) -> Placed:
    """An uploaded file (already a copy of the user's, made by the upload) moved into the models folder: a
    new name for it on the same filesystem (a link, then the upload's name removed: a rename would replace
    a file that took the name meanwhile); else copied, then the upload deleted, and said so."""
    return _claimed(name, lambda target: _move(source, target, name))


def _move(source: Path, target: Path, name: str) -> Placed:
    try:
        os.link(source, target)
        how, said = "moved", f"moved {name} into the models folder"
    except FileExistsError:
        raise
    except OSError as exc:  # another filesystem, or one without links
        _copy_new(source, target)
        how, said = "copied", (f"copied {name} into the models folder because it cannot be moved there "
                               f"({_why(exc)}); the uploaded file was deleted")
    source.unlink()
    os.chmod(target, PRIVATE_FILE_MODE)
    return Placed(target, how, said)


def _why(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def in_models_folder(path: Path) -> bool:
    """Whether the name `path` lies in localchat's models folder (the folder holding it, links resolved: a
    link inside the folder is the folder's, the file it points at is not)."""
    try:
        return path.parent.resolve().is_relative_to(models_dir().resolve())
    except OSError:
        return False


def remove_own(path: Path) -> str:
    """Delete `path` from localchat's models folder and say what went: the file, or only its link (the
    original it pointed at stays). A split model goes whole: its later parts with its first. A path outside
    the folder is refused: localchat deletes only its own."""
    if not in_models_folder(path):
        raise ModelLoadError(f"{path.name} is not in localchat's models folder, so it was not deleted; localchat "
                             "deletes only the files it keeps itself.")
    parts = [p for p in part_paths(path) if p == path or p.is_symlink() or p.exists()]
    said = [_remove_one(part) for part in parts]
    if len(parts) == 1:
        return said[0]
    if path.parent.parent == models_dir() / IMPORTED and not any(path.parent.iterdir()):
        path.parent.rmdir()  # the split model's own folder, made by its import
    return f"Deleted {path.name} and its {len(parts) - 1} other parts from localchat's models folder: " + \
        " ".join(said)


def _remove_one(path: Path) -> str:
    if path.is_symlink():
        original = os.readlink(path)
        path.unlink()
        return f"Removed the link {path.name}; the original file at {original} stays."
    info = path.stat()
    path.unlink()
    if info.st_nlink > 1:
        return (f"Removed {path.name} from localchat's models folder; it was a hard link, so the same file stays "
                "under its other name.")
    return f"Deleted {path.name} ({size_text(info.st_size)}) from localchat's models folder."
