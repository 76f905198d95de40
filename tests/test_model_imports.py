"""models/ imports only downwards: every module imports alone in a fresh interpreter, no import cycle inside
models/, nothing from the layers above it; runtime/ (below models/) imports nothing from models/."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import localchat

PACKAGE = Path(localchat.__file__).resolve().parent
ABOVE_MODELS = ("localchat.tune", "localchat.planning", "localchat.config", "localchat.cli", "localchat.api",
                "localchat.ui", "localchat.assemble", "localchat.selftest", "localchat.bench", "localchat.workloads")


def _module_name(path: Path) -> str:
    return ".".join(("localchat", *path.relative_to(PACKAGE).with_suffix("").parts))


def _imports(path: Path) -> set[str]:
    """Every localchat module `path` imports, at the top or inside a function (a lazy import is an import)."""
    package = _module_name(path).split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            # `from . import x` and `from .pkg import mod` name modules, not only attributes.
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("localchat")}


def _modules(folder: str) -> dict[str, set[str]]:
    return {_module_name(path): _imports(path) for path in sorted((PACKAGE / folder).glob("*.py"))}


def test_models_has_no_import_cycle_and_no_upward_import():
    graph = _modules("models")
    for module, imported in graph.items():
        upward = sorted(name for name in imported if name.startswith(ABOVE_MODELS))
        assert not upward, f"{module} imports {upward} from a layer above models/"
    edges = {module: {name for name in imported if name in graph and name != module}
             for module, imported in graph.items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import cycle in models/: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        for name in sorted(edges[module]):
            visit(name, path + [module])
        done.add(module)

    for module in sorted(edges):
        visit(module, [])


def test_runtime_imports_nothing_from_models():
    for module, imported in _modules("runtime").items():
        assert not [n for n in imported if n.startswith(("localchat.models", *ABOVE_MODELS))], module


def test_each_models_module_imports_alone_in_a_fresh_interpreter():
    modules = list(_modules("models"))
    runs = {m: subprocess.Popen([sys.executable, "-c", f"import {m}"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for m in modules}
    failed = {}
    for module, run in runs.items():
        output, _ = run.communicate()
        if run.returncode != 0:
            failed[module] = output.strip().splitlines()[-1:]
    assert not failed, failed
