"""The folder tree is the architecture (docs/architecture.md): every module imports, only downward, and
no import closes a cycle."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import localchat

PACKAGE = Path(localchat.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def _rows(text: str) -> list[set[str]]:
    """The layer table of docs/architecture.md, top row first: the backticked modules of each row."""
    match = re.search(r"<!-- layers:.*?-->\n(.*?)<!-- end of layers -->", text, re.S)
    assert match, f"{ARCHITECTURE} has no layer table between <!-- layers: ... --> and <!-- end of layers -->"
    rows = []
    for line in match.group(1).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].isdigit():
            continue  # the header and the separator
        assert int(cells[0]) == len(rows) + 1, f"the layer table's rows are numbered 1, 2, ...: {line}"
        rows.append(set(re.findall(r"`([^`]+)`", cells[1])))
    return rows


# The rows, top first. A module may import from its own row and the rows below it, never from a row
# above. A top-level module is named by itself, a package by its folder.
ROWS: list[set[str]] = _rows(ARCHITECTURE.read_text(encoding="utf-8"))

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


MODULES = set(_modules())


def _head(module: str) -> str:
    """The row name of `localchat.x.y`: `x` ("__init__" for localchat itself)."""
    return module.split(".")[1] if "." in module else "__init__"


def _row(module: str) -> int:
    """The row of `localchat.x.y` (by `x`); a module no row names fails the test: put it on the map."""
    for index, row in enumerate(ROWS):
        if _head(module) in row:
            return index
    raise AssertionError(f"{module} is on no row of the layer table; add its folder where docs/architecture.md "
                         "puts it")


def _path(module: str) -> tuple[Path, bool]:
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if path.exists():
        return path, False
    return PACKAGE.parent / module.replace(".", "/") / "__init__.py", True


def _imports_of(module: str) -> list[tuple[str, bool]]:
    """(what, under TYPE_CHECKING) for every import in `module`'s text, lazy ones included. `what` is the
    absolute name: a localchat module (a `from x import y` of a submodule y names y), or another package."""
    path, is_package = _path(module)
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[str, bool]] = []

    def visit(nodes: list[ast.stmt] | list[ast.AST], typing_only: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.body, True)
                visit(node.orelse, typing_only)
                continue
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.append((sub if sub in MODULES else target, typing_only))
            elif isinstance(node, ast.Import):
                found.extend((alias.name, typing_only) for alias in node.names)
            visit(list(ast.iter_child_nodes(node)), typing_only)

    visit(ast.parse(path.read_text(encoding="utf-8")).body, False)
    return found


def _imports(module: str) -> set[str]:
    """The localchat modules `module` imports anywhere in its text (lazy imports and TYPE_CHECKING too)."""
    return {name for name, _ in _imports_of(module) if name == "localchat" or name.startswith("localchat.")}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph, as a path that ends where it starts; None when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (found := walk(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := walk(node)):
            return found
    return None


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
    assert not upward, "imports that point up the map (docs/architecture.md):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in sorted(upward))


def test_the_rule_sees_an_upward_import():
    assert _row("localchat.runtime.engine") > _row("localchat.tune.profile")  # runtime -> tune would fail
    assert "localchat.tune.profile" in _imports("localchat.config")  # a lazy import inside a function


def test_the_layer_table_is_the_one_in_the_architecture_document():
    assert len(ROWS) >= 8 and {"cli", "runtime", "planning", "errors"} <= set().union(*ROWS)
    named = [name for row in ROWS for name in row]
    assert len(named) == len(set(named)), "a module is on two rows of the layer table"
    tops = {_head(m) for m in MODULES}
    assert not set(named) - tops, f"the layer table names modules that do not exist: {set(named) - tops}"


def test_no_import_cycles_between_packages():
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        graph.setdefault(_head(module), set()).update(
            _head(t) for t in _imports(module) if _head(t) != _head(module))
    cycle = _cycle(graph)
    assert cycle is None, "packages that import each other: " + " -> ".join(cycle)


def test_no_import_cycles_between_modules():
    # Every import counts: at module level, inside functions (a lazy import placed to dodge a cycle is
    # that cycle) and under TYPE_CHECKING (one module still knows the other). A package's __init__ is
    # its own node; the implicit import of a package before its submodules is not an edge.
    graph = {module: {t for t in _imports(module) if t in MODULES and t != module} for module in MODULES}
    cycle = _cycle(graph)
    assert cycle is None, "modules that import each other: " + " -> ".join(cycle)


def test_the_cycle_finder_sees_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def _loads(module: str) -> set[str]:
    """The packages other than localchat that `module` imports, directly or through localchat modules it
    imports, at any depth (lazy imports included; TYPE_CHECKING ones run nothing and are left out)."""
    seen, todo, outside = set(), [module], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for name, typing_only in _imports_of(current):
            if typing_only:
                continue
            if name in MODULES:
                todo.append(name)
            elif not name.startswith("localchat"):
                outside.add(name.split(".")[0])
    return outside


def test_planning_loads_no_llama_cpp():
    loading = {m: _loads(m) for m in MODULES if _head(m) == "planning"}
    assert loading, "no planning modules found"
    assert not [m for m, found in loading.items() if "llama_cpp" in found], (
        "planning/ modules that load llama.cpp (through the localchat modules they import): "
        + ", ".join(sorted(m for m, found in loading.items() if "llama_cpp" in found)))
    assert "llama_cpp" in _loads("localchat.runtime.workers.worker")  # the check sees what a worker loads


def test_device_code_lives_in_runtime_backends():
    """Only runtime/backends/ loads ggml's backend modules or asks ggml about devices (docs/architecture.md,
    "Devices"): one place knows which GPUs this process can use."""
    outside = [m for m in MODULES if not m.startswith("localchat.runtime.backends")
               and re.search(r"ggml_backend_(load|dev_|reg_)", _path(m)[0].read_text(encoding="utf-8"))]
    assert not outside, f"device code outside runtime/backends/: {', '.join(sorted(outside))}"


# -- the parts inside runtime/ and ui/ ---------------------------------------------------------------

def _part(module: str) -> str | None:
    """`runtime.kv` for a module in runtime/kv/, `runtime` for one at runtime/'s top (the engine's core);
    likewise for ui/; None outside runtime/ and ui/."""
    parts = module.split(".")
    if len(parts) < 3 or parts[1] not in ("runtime", "ui"):
        return None
    if (PACKAGE / parts[1] / parts[2]).is_dir():
        return f"{parts[1]}.{parts[2]}"
    return parts[1]


SUB_PACKAGES = sorted({p for m in MODULES if (p := _part(m)) and "." in p})

# What the engine's core (runtime/'s top modules) may import from each part: the part's face. The rest of a
# part is its own business (a schema's keyword rules, the merging of allOf, the sandbox a template renders in).
FACES = {
    "runtime.workers": {"worker", "target", "disagg"},
    "runtime.speculation": {"speculative", "draft_model", "prompt_lookup"},
    "runtime.constraints": {"grammar", "resample"},
    "runtime.kv": {"kv_slots", "kv_disk"},
    "runtime.templates": {"chat_template"},
    "runtime.backends": {"threads", "devices", "residence"},
}


def test_runtime_and_ui_are_in_parts_that_say_what_they_hold():
    assert {"runtime.workers", "runtime.speculation", "runtime.constraints", "runtime.kv", "runtime.backends",
            "runtime.templates", "ui.chat", "ui.components"} <= set(SUB_PACKAGES)
    for part in SUB_PACKAGES:
        init = PACKAGE / part.replace(".", "/") / "__init__.py"
        body = ast.parse(init.read_text(encoding="utf-8")).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), (
            f"{init.relative_to(PACKAGE.parent)} holds one docstring saying what the part holds, and nothing else")
    assert set(FACES) == {p for p in SUB_PACKAGES if p.startswith("runtime.")}, "every runtime part has its face"


def test_the_engine_core_uses_each_part_through_its_face():
    reached = sorted((m, t) for m in MODULES if _part(m) == "runtime" for t in _imports(m)
                     if (p := _part(t)) in FACES and t.rsplit(".", 1)[1] not in FACES[p])
    assert not reached, "the engine's core reaches into a part past its face (FACES):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in reached)


def test_no_cycles_between_the_parts():
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        if (part := _part(module)) in SUB_PACKAGES:
            graph.setdefault(part, set()).update(
                p for t in _imports(module) if (p := _part(t)) in SUB_PACKAGES and p != part)
    cycle = _cycle(graph)
    assert cycle is None, "parts of runtime/ or ui/ that import each other: " + " -> ".join(cycle)


def test_gradio_is_imported_only_by_the_windows_components():
    """The window's logic (ui/chat, ui/documents, ui/models, ui/wizard) has no Gradio in it, directly or
    through what it imports; the Gradio app is ui/components/ and ui/web.py."""
    components = ("localchat.ui.components", "localchat.ui.web")
    logic = [m for m in MODULES if m.startswith("localchat.ui.") and not m.startswith(components)]
    assert "localchat.ui.chat.core" in logic
    loading = sorted(m for m in logic if "gradio" in _loads(m))
    assert not loading, f"window logic that loads Gradio: {', '.join(loading)}"
    assert "gradio" in _loads("localchat.ui.components.layout")  # the check sees an import of Gradio


def test_the_catalog_file_is_parsed_in_one_place():
    readers = sorted(m for m in MODULES if "yaml" in {n.split(".")[0] for n, _ in _imports_of(m)})
    assert readers == ["localchat.models.catalog"], f"modules that parse YAML: {readers}"


def _lines(module: str) -> int:
    return len(_path(module)[0].read_text(encoding="utf-8").splitlines())


def test_modules_stay_small():
    long = sorted((n, m) for m in MODULES if (n := _lines(m)) > 400)
    assert not long, "modules over 400 lines (split them where their parts are): " + ", ".join(
        f"{m} ({n})" for n, m in long)


def test_cli_only_parses_and_dispatches():
    assert _lines("localchat.cli") <= 250, "cli.py parses and dispatches; shared options go in command_flags.py"
