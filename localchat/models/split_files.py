"""Models split over several GGUF files, named as llama.cpp's gguf-split names them: `NAME-00001-of-00003.gguf`.

llama.cpp opens the first part and finds the others beside it by these names, so a split model is known by
its first part everywhere (the catalog's `file`, model lists, the path a worker loads); its size is all the
parts' together.
"""

from __future__ import annotations

import re
from pathlib import Path

_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def part_number(name: str) -> tuple[int, int] | None:
    """(this part, how many) for a split file's name (a path's last component or a repo path), else None."""
    found = _PART.search(name)
    return (int(found.group(1)), int(found.group(2))) if found else None


def is_later_part(name: str) -> bool:
    """A second or later part: llama.cpp never opens it by itself, so lists leave it out."""
    found = part_number(name)
    return found is not None and found[0] != 1


def part_names(first: str) -> list[str]:
    """Every part's name of the split model whose first part is `first` (a repo path keeps its folder);
    a name that is not a first part is the whole model on its own."""
    found = part_number(first)
    if found is None or found[0] != 1:
        return [first]
    stem = first[:_PART.search(first).start()]  # type: ignore[union-attr]
    suffix = first[-len(".gguf"):]
    return [f"{stem}-{i:05d}-of-{found[1]:05d}{suffix}" for i in range(1, found[1] + 1)]


def model_stem(name: str) -> str:
    """The model's name without `.gguf` and, for a split model, without its part number."""
    found = _PART.search(name)
    return name[:found.start()] if found else name[:-len(".gguf")] if name.lower().endswith(".gguf") else name


def part_paths(first: Path) -> list[Path]:
    """The files of the model whose first part (or only file) is `first`, where llama.cpp looks for them."""
    return [first.with_name(name) for name in part_names(first.name)]


def model_bytes(first: Path) -> int:
    """The size of a model file, all its parts together (OSError when one is missing)."""
    return sum(path.stat().st_size for path in part_paths(first))
