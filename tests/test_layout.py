"""The folder tree is the architecture (DESIGN.md §3): every module imports, and only downward."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import localchat

PACKAGE = Path(localchat.__file__).parent

# DESIGN.md §3's rows, top first. A module may import from its own row and the rows below it,
# never from a row above. A top-level module is named by itself, a package by its folder.
ROWS: list[set[str]] = [
    {"__main__", "cli"},
    {"assemble", "config", "selftest", "bench", "bench_report", "terminal", "interactive", "model_list", "launch",
     "progress_line", "logging_setup"},
    {"api", "ui"},
    {"tune"},
    {"workloads"},  # the fillers and greedy() that the wizard and the benchmarks share
    {"planning"},
    {"models"},
    {"runtime", "gptq"},  # gptq: a second runtime, for GPTQ weights
    {"ingest", "hardware"},
    {"errors", "paths", "units", "arguments", "__init__"},
]

# Upward imports that remain, each in another area; remove an entry when its import is gone.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def _row(module: str) -> int:
    """The row of `localchat.x.y` (by `x`); a module no row names fails the test: put it on the map."""
    head = module.split(".")[1] if "." in module else "__init__"
    for index, row in enumerate(ROWS):
        if head in row:
            return index
    raise AssertionError(f"{module} is on no row of ROWS; add its folder where DESIGN.md §3 puts it")


def _imports(module: str) -> set[str]:
    """The localchat modules `module` imports anywhere in its text (lazy imports and TYPE_CHECKING too)."""
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    is_package = not path.exists()
    if is_package:
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.startswith("localchat"):
                found.add(target)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("localchat")}
    return found


_IMPORT_ALL = """if True:
    import importlib, sys, traceback
    failed = 0
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except Exception:
            failed += 1
            print(f"--- {name}\\n{traceback.format_exc(limit=-3)}", file=sys.stderr)
    sys.exit(failed)
"""


def test_every_module_imports_in_layer_order_in_a_fresh_interpreter():
    # The bottom row first, so a module that needs one above it (a cycle across rows) fails here.
    # __main__ is left out: importing it runs the command.
    ordered = sorted((m for m in _modules() if m != "localchat.__main__"), key=_row, reverse=True)
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALL, *ordered], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]


def test_modules_import_only_from_their_row_and_below():
    upward = set()
    for module in _modules():
        for target in _imports(module):
            if _row(target) < _row(module) and (module, target) not in KNOWN_UPWARD:
                upward.add((module, target))
    assert not upward, "imports that point up the map (DESIGN.md §3):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in sorted(upward))


def test_the_rule_sees_an_upward_import():
    assert _row("localchat.runtime.engine") > _row("localchat.tune.profile")  # runtime -> tune would fail
    assert "localchat.tune.profile" in _imports("localchat.config")  # a lazy import inside a function
