"""Which llama.cpp CPU kernels this process runs.

The best variant the CPU claims to run (cpu_variants.py) is first proven in a child process on the
model about to be loaded (ggml's AMX kernels have crashed on virtualised CPUs), falling back to the
next best, and in the default mode to the exact kernels last; the verdict is kept per machine. A
wheel without variants (an older build, an architecture without them) carries its CPU backend built
in: nothing to choose then.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import sys
import threading
from pathlib import Path

import llama_cpp

from ... import paths
from ...errors import EngineError, ModelLoadError
from .devices import load_gpu_modules
from .cpu_variants import (MODULE_SUFFIXES, CpuBackend, lib_dir, ggml_library, is_exact, machine_key, ranked,
                           remember, remembered, variant_name)

log = logging.getLogger(__name__)

# ggml multiplies 8 rows or more by a K-quant or i-quant matrix in tiles, which round otherwise than one
# row at a time: a verify step of 8+ rows, or a long prompt chunk, could flip a near tie that the same
# tokens one by one would not. The exact kernels run without them: ggml's own switch, which it reads once
# per CPU module at that module's first product, is set before a module loads.
TILED_SWITCH = "GGML_CPU_TILED_MM"
USER_TILED = os.environ.get(TILED_SWITCH)  # the user's own setting: the fast kernels and child processes keep it
PROVE_TIMEOUT_S = 300.0  # a child that hangs proves nothing; a big model on a slow disk loads for long
PROOF_MAX_BYTES = 4 << 30  # a bigger model is proven on a small one from the models folder
PROOF_MIN_BYTES = 32 << 20  # below this a model's verdict says nothing of other models


# -- proving a variant in a child process ------------------------------------------------------

MODEL_FAILED = 86  # the child's exit code when the model itself would not load (not abort()'s 3 on Windows)
PROVE_FLAG = "--localchat-prove-cpu"  # how a desktop bundle's own program is asked to prove (entry.py)
PROVE_MODULE = "localchat.runtime.workers.cpu_proof"  # the child's side of a proof


def prove(module: Path, model: Path, crash: bool = False) -> str | None:
    """None when the variant ran the model in a child process, "inconclusive" when that says nothing
    of the kernels (the model would not load, or took too long); else what went wrong."""
    import subprocess

    base = [sys.executable, PROVE_FLAG] if getattr(sys, "frozen", False) \
        else [sys.executable, "-m", PROVE_MODULE]
    try:
        done = subprocess.run([*base, str(module), str(model), *(["crash"] if crash else [])],
                              capture_output=True, timeout=PROVE_TIMEOUT_S, env=child_environ())
    except subprocess.TimeoutExpired:
        log.warning("a test run of the CPU kernels gave no answer in %.0f s", PROVE_TIMEOUT_S)
        return "inconclusive"
    if done.returncode == 0:
        return None
    if done.returncode == MODEL_FAILED:
        return "inconclusive"
    if done.returncode < 0:
        return f"crashed ({_signal_name(-done.returncode)})"
    tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
    return f"failed (exit code {done.returncode}{': ' + tail[0] if tail else ''})"


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _proof_model(model: Path) -> tuple[Path, bool]:
    """What a proof runs, and whether its verdict holds for other models: the model at hand, or the
    smallest model file in the models folder that can say something. A big model pages in every
    weight; a tiny one (a random-weight test file) or one of float weights (a .F16 file: the
    embedding model, a derived quant level) may take none of the fast paths, as ggml's AMX kernels
    run only on quantized matrices of some size."""
    try:
        size = model.stat().st_size
        if _telling(model):
            return model, True
        fit = min((p for p in paths.models_dir().glob("*.gguf") if _telling(p)),
                  key=lambda p: p.stat().st_size, default=None)
    except OSError:
        return model, False
    return (fit, True) if fit else (model, size > PROOF_MAX_BYTES and not _FLOAT_WEIGHTS.search(model.name))


_FLOAT_WEIGHTS = re.compile(r"[.-](F16|BF16|F32)\.gguf$", re.IGNORECASE)  # how float-weight files are named


def _telling(path: Path) -> bool:
    return PROOF_MIN_BYTES <= path.stat().st_size <= PROOF_MAX_BYTES and not _FLOAT_WEIGHTS.search(path.name)


def candidates(exact: bool) -> list[Path]:
    """The variant modules a mode may run, best first: the deterministic mode the exact ones; the
    default mode the fast ones, then the exact ones (without llamafile's sgemm: slower prompt reading,
    still correct), so a native install of one fast variant still runs where that one fails its proof."""
    return ranked(True) if exact else ranked(False) + ranked(True)


def _variants(modules: list[Path]) -> int:
    """How many variants the modules are (the default mode's list holds a variant's exact build too)."""
    return len({variant_name(m) for m in modules})


def choose(exact: bool, model: Path, simulate_crash: frozenset[Path] = frozenset()) -> CpuBackend:
    """The best variant that this CPU runs for the mode, proven once per machine; remembered in the
    cache dir. `simulate_crash`: modules whose proof dies as a kernel the CPU lacks kills it (tests)."""
    ordered = candidates(exact)
    if exact and not ordered and ranked(False):
        raise ModelLoadError("this install lacks the deterministic mode's CPU kernels (llama_cpp/lib/exact); "
                             "reinstall localchat (`bash scripts/setup.sh`), or run without --deterministic.")
    if not ordered:
        return CpuBackend("built-in", exact=exact, reason="this llama.cpp build has its CPU backend built in")
    forced = os.environ.get("LOCALCHAT_CPU_VARIANT")
    if forced:
        named = [m for m in ordered if variant_name(m) == forced]
        if not named:
            raise ModelLoadError(f"LOCALCHAT_CPU_VARIANT={forced} names no CPU variant this CPU supports; "
                                 f"choose one of {', '.join(variant_name(m) for m in ordered)}, or unset it.")
        return CpuBackend(forced, is_exact(named[0]), named[0].name, "chosen by LOCALCHAT_CPU_VARIANT")
    key = machine_key(ordered)
    kept = remembered(key, exact) if not simulate_crash else None
    if kept is not None and kept.path().is_file():
        return kept
    refused: list[str] = []
    proof_model, telling = _proof_model(model)
    for module in ordered:
        problem = prove(module, proof_model, crash=module in simulate_crash)
        if problem == "inconclusive":  # the file would not load or took too long: no verdict on the kernels
            return CpuBackend(variant_name(module), is_exact(module), module.name, "not yet proven", refused)
        if problem is None:
            best = variant_name(ordered[0])
            reason = (f"the best of {_variants(ordered)} variants this CPU supports" if not refused
                      else f"{best} {refused[0].split(': ', 1)[1]} on this machine; the next best that runs")
            if is_exact(module) and not exact:
                reason += " (the deterministic mode's kernels: prompts read slower)"
            if not telling:
                reason += " (proven on a tiny model only; proven again with a bigger one)"
            backend = CpuBackend(variant_name(module), is_exact(module), module.name, reason, refused)
            if telling and not simulate_crash:
                remember(key, exact, backend)
            return backend
        log.warning("CPU kernels %s %s in a test run; trying the next best", variant_name(module), problem)
        refused.append(f"{variant_name(module)}: {problem}")
    raise ModelLoadError("no CPU variant of llama.cpp ran here (" + "; ".join(refused) + "); reinstall "
                         "localchat (`bash scripts/setup.sh`) and report this with `localchat probe`.")


def _load_module(module: Path) -> int:
    # Before llama_backend_init: with nothing registered it would load whatever ggml finds beside
    # the executable or in the current folder, and llama.cpp takes the first CPU device registered.
    reg = ggml_library().ggml_backend_load(str(module).encode())
    if not reg:
        raise ModelLoadError(f"llama.cpp could not load its CPU kernels from {module}; reinstall localchat "
                             "(`bash scripts/setup.sh`), or choose another variant with LOCALCHAT_CPU_VARIANT "
                             "(`localchat probe` lists them).")
    llama_cpp.llama_backend_init()
    return reg


def _load_other_backends(exact: bool) -> None:
    """The GPU backends (devices.py proves each in a child first) and BLAS; the deterministic mode leaves
    BLAS out: it takes the prompt's matrix products off our kernels."""
    load_gpu_modules()
    if exact:
        return
    lib = ggml_library()
    for module in sorted(lib_dir().iterdir()):
        if module.suffix in MODULE_SUFFIXES and "ggml-blas" in module.name:
            lib.ggml_backend_load(str(module).encode())


class Kernels:
    """The CPU kernels this process runs and the models loaded on them: ggml's backend registry is one
    per process, so there is one of these (`KERNELS`), and the functions below are its methods."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # choosing, switching and counting models happen as one
        self.backend: CpuBackend | None = None
        self.mode_exact: bool | None = None  # the mode it was chosen for (exact kernels may serve the default)
        self._registration: int | None = None
        self._models = 0  # models loaded in this process: the kernels may change only while there are none

    def acquire(self, exact: bool, model: Path) -> CpuBackend:
        """Before loading a model: make this process run the CPU kernels of its mode (chosen on first
        use) and count the model in; `release()` when it is freed.

        A process switches kernels only while no model is loaded: llama.cpp binds a model to the CPU
        backend registered when it was loaded. Until then a default-mode model runs on the exact kernels
        already in use (slower, still correct); a deterministic one beside fast kernels is refused.
        """
        with self._lock:
            backend = self._activate(exact, model)
            self._models += 1
            return backend

    def release(self) -> None:
        with self._lock:
            self._models -= 1

    def activate(self, exact: bool, model: Path) -> CpuBackend:
        """The kernels for code that loads models itself (the bindings' `Llama` in benchmarks)."""
        with self._lock:
            return self._activate(exact, model)

    def _activate(self, exact: bool, model: Path) -> CpuBackend:
        active = self.backend
        if active is not None and (self.mode_exact == exact or active.variant == "built-in"):
            return active
        if active is not None and self._models:
            if active.exact:  # exact kernels serve the default mode too, only slower
                return active
            raise EngineError("this process already runs models with the default mode's fast kernels; a "
                              "deterministic model needs a process of its own (close the loaded models first).")
        backend = choose(exact, model)
        _tiled_products(on=not (exact or backend.exact))
        if self._registration is not None:
            ggml_library().ggml_backend_unload(self._registration)
            self._registration = None
        elif backend.variant != "built-in":
            _load_other_backends(exact)
        if backend.variant != "built-in":
            self._registration = _load_module(backend.path())
        elif active is None:  # a single CPU module (a GPU build without variants), or nothing to load
            lib = ggml_library()
            lib.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
            lib.ggml_backend_load_all_from_path(str(lib_dir()).encode())
            llama_cpp.llama_backend_init()
        self.backend, self.mode_exact = backend, exact
        log.info("CPU kernels: %s (%s)", backend.variant, backend.reason)
        return backend

    def mark_proving(self, module: Path, exact: bool) -> None:
        """In a proving child (cpu_proof.py): load just this variant and use it."""
        _tiled_products(on=not exact)
        self._registration = _load_module(module)
        self.backend, self.mode_exact = CpuBackend(variant_name(module), exact, module.name, "being proven"), exact


def _tiled_products(on: bool) -> None:
    """ggml's tiled products for the CPU module about to load: off for the exact kernels, else as the user set them."""
    if not on:
        os.environ[TILED_SWITCH] = "0"
    elif USER_TILED is None:
        os.environ.pop(TILED_SWITCH, None)
    else:
        os.environ[TILED_SWITCH] = USER_TILED


def child_environ() -> dict[str, str]:
    """This process's environment for a child that chooses its own kernels (a proof, the wizard, llama-bench):
    ggml's tiled switch as the user set it, not as the exact kernels here need it."""
    env = {k: v for k, v in os.environ.items() if k != TILED_SWITCH}
    if USER_TILED is not None:
        env[TILED_SWITCH] = USER_TILED
    return env


KERNELS = Kernels()
acquire, release, activate, mark_proving = KERNELS.acquire, KERNELS.release, KERNELS.activate, KERNELS.mark_proving


def active() -> CpuBackend | None:
    """The kernels this process runs, once a model (or a proof) chose them."""
    return KERNELS.backend


def describe(exact: bool = False) -> str:
    """The CPU kernels a model would run on, in words, without loading or proving anything."""
    backend = KERNELS.backend if KERNELS.backend is not None and KERNELS.mode_exact == exact else None
    ordered = candidates(exact)
    if backend is None and ordered:
        backend = remembered(machine_key(ordered), exact)
    if backend is not None:
        return f"{backend.variant} ({backend.reason})"
    if not ordered:
        return "built in (this llama.cpp build has no CPU variants to choose from)"
    return (f"{variant_name(ordered[0])} (the best of {_variants(ordered)} variants this CPU supports; "
            "proven in a test run at the first model load)")
