"""localchat's dependencies but the llama.cpp runtime, as a requirements file, for scripts/setup.sh to install
while the runtime compiles. Standard library only: it runs before anything is installed.

    python scripts/requirements.py "[dev,gptq,derive]"    # the extras as setup.sh names them, or ""
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

RUNTIME = "llama-cpp-python"  # built by scripts/install-runtime.sh, never taken from the index
# torch pinned to the version the tests run (an unpinned one takes the newest, a multi-GB CUDA build where
# the index serves that); a GPU user installs the CUDA build instead.
TORCH = "torch==2.13.0"


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    """The project's dependencies and those of `extras`, the runtime left out, torch pinned where named."""
    try:
        import tomllib
    except ImportError:  # Python 3.10 (no tomli yet): pip takes them after the compile; the torch pin still
        return [TORCH] if extras else []  # comes first, each of setup.sh's extras needs torch
    project = tomllib.loads(pyproject)["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    wanted = [w for w in wanted if _name(w) != RUNTIME]
    if any(_name(w) == "torch" for w in wanted):
        wanted.insert(0, TORCH)
    return list(dict.fromkeys(wanted))


def _name(requirement: str) -> str:
    """A requirement's project name, normalised as pip compares them (llama_cpp_python is llama-cpp-python)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~;@\[]", requirement, maxsplit=1)[0]).lower()


def main() -> int:
    named = sys.argv[1].strip("[]") if len(sys.argv) > 1 else ""
    extras = [e for e in named.split(",") if e]
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    print("\n".join(requirements(pyproject, extras)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
