"""What scripts/setup.sh installs while llama.cpp compiles (scripts/requirements.py): every dependency
of the project and of the extras named, never the runtime itself (pip would build it from source, a
second time and without our flags), and torch pinned to the tests' version wherever an extra needs it."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; on 3.10 the script installs after the compile

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("requirements_script", ROOT / "scripts" / "requirements.py")
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)

PYPROJECT = (ROOT / "pyproject.toml").read_text()
PROJECT = tomllib.loads(PYPROJECT)["project"]


name = script._name


def test_every_dependency_but_the_runtime():
    listed = script.requirements(PYPROJECT, [])
    assert "llama-cpp-python" in {name(d) for d in PROJECT["dependencies"]}
    assert set(listed) == {d for d in PROJECT["dependencies"] if name(d) != "llama-cpp-python"}
    assert not any(name(r).startswith("torch") for r in listed)  # torch is an extra, never a base dependency


@pytest.mark.parametrize("extras", [["dev", "gptq", "derive"], ["gptq"], ["derive"]])
def test_the_extras_dependencies_with_torch_pinned_first(extras):
    listed = script.requirements(PYPROJECT, extras)
    for extra in extras:
        assert set(PROJECT["optional-dependencies"][extra]) <= set(listed)
    assert listed[0] == "torch==2.13.0"  # beside "torch>=2.4" pip takes the pinned version, never the newest
    assert "llama-cpp-python" not in {name(r) for r in listed}


def test_setup_names_the_extras_as_the_script_reads_them():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    for extras in re.findall(r'extras="\[([a-z,]+)\]"', setup):
        assert set(extras.split(",")) <= set(PROJECT["optional-dependencies"])
    assert "requirements.py" in setup and "install-runtime.sh --build-only" in setup


def test_the_command_prints_one_requirement_a_line():
    import subprocess

    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "requirements.py"), "[gptq]"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == script.requirements(PYPROJECT, ["gptq"])


def test_without_tomllib_the_torch_pin_still_comes_first(monkeypatch):
    """Python 3.10 has no tomllib: the dependencies then wait for the compile, but an extra's unpinned torch
    must still never reach pip first (it would take a multi-GB CUDA build)."""
    monkeypatch.setitem(sys.modules, "tomllib", None)
    assert script.requirements(PYPROJECT, ["dev", "gptq", "derive"]) == ["torch==2.13.0"]
    assert script.requirements(PYPROJECT, []) == []


@pytest.mark.parametrize("spelling", ["llama_cpp_python==0.3.36", "Llama.Cpp-Python>=0.3", "llama-cpp-python @ file:///x.whl"])
def test_the_runtime_is_left_out_however_it_is_spelled(spelling):
    respelled = PYPROJECT.replace('"llama-cpp-python==0.3.36"', f'"{spelling}"')
    assert spelling in respelled
    assert script.requirements(respelled, []) == [d for d in PROJECT["dependencies"] if name(d) != "llama-cpp-python"]
