"""Which llama.cpp CPU kernels this process runs.

The best variant the CPU claims to run (cpu_variants.py) is first proven in a child process on the
model about to be loaded (ggml's AMX kernels have crashed on virtualised CPUs), falling back to the
next best; the verdict is kept per machine. A wheel without variants (an older build, an
architecture without them) carries its CPU backend built in: nothing to choose then.
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

from .. import paths
from .cpu_variants import (MODULE_SUFFIXES, CpuBackend, lib_dir, ggml_library, machine_key, ranked, remember,
                           remembered, variant_modules, variant_name)

log = logging.getLogger(__name__)

PROVE_TIMEOUT_S = 300.0  # a child that hangs proves nothing; a big model on a slow disk loads for long
PROOF_MAX_BYTES = 4 << 30  # a bigger model is proven on a small one from the models folder
PROOF_MIN_BYTES = 32 << 20  # below this a model's verdict says nothing of other models


# -- proving a variant in a child process ------------------------------------------------------

MODEL_FAILED = 86  # the child's exit code when the model itself would not load (not abort()'s 3 on Windows)
PROVE_FLAG = "--localchat-prove-cpu"  # how a desktop bundle's own program is asked to prove (entry.py)


def prove_in_child(argv: list[str]) -> int:
    """The child's side: load the variant and the model, run a prompt batch and single decode steps."""
    import signal

    from ..errors import LocalchatError

    module, model, crash = Path(argv[0]), argv[1], argv[2:] == ["crash"]
    mark_proving(module, exact=module.parent.name == "exact")
    if crash:  # the fault a broken kernel causes, for tests of the fallback (no such CPU here)
        os.kill(os.getpid(), signal.SIGILL)
    from .worker import BatchRow, Worker, WorkerConfig

    try:
        worker = Worker(model, WorkerConfig(n_ctx=256, n_batch=64, n_seq_max=1, n_threads=2,
                                            deterministic=module.parent.name == "exact"))
    except LocalchatError:
        return MODEL_FAILED
    token = worker.bos_token if worker.bos_token >= 0 else 1
    worker.decode([BatchRow(0, [token] * 64, 0, want_logits=True)])
    for pos in range(64, 67):
        worker.decode([BatchRow(0, [token], pos, want_logits=True)])
    worker.close()
    return 0


def prove(module: Path, model: Path, crash: bool = False) -> str | None:
    """None when the variant ran the model in a child process, "inconclusive" when that says nothing
    of the kernels (the model would not load, or took too long); else what went wrong."""
    import subprocess

    base = [sys.executable, PROVE_FLAG] if getattr(sys, "frozen", False) \
        else [sys.executable, "-m", "localchat.runtime.backends"]
    try:
        done = subprocess.run([*base, str(module), str(model), *(["crash"] if crash else [])],
                              capture_output=True, timeout=PROVE_TIMEOUT_S)
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


def choose(exact: bool, model: Path, simulate_crash: frozenset[str] = frozenset()) -> CpuBackend:
    """The best variant that this CPU runs, proven once per machine; remembered in the cache dir."""
    from ..errors import ModelLoadError

    candidates = ranked(exact)
    if not candidates:
        if exact and ranked(False):
            raise ModelLoadError("this install lacks the deterministic mode's CPU kernels (llama_cpp/lib/exact); "
                                 "reinstall localchat (`bash scripts/setup.sh`), or run without --deterministic.")
        return CpuBackend("built-in", exact=exact, reason="this llama.cpp build has its CPU backend built in")
    forced = os.environ.get("LOCALCHAT_CPU_VARIANT")
    if forced:
        named = [m for m in candidates if variant_name(m) == forced]
        if not named:
            raise ModelLoadError(f"LOCALCHAT_CPU_VARIANT={forced} names no CPU variant this CPU supports; "
                                 f"choose one of {', '.join(variant_name(m) for m in candidates)}, or unset it.")
        return CpuBackend(forced, exact, named[0].name, "chosen by LOCALCHAT_CPU_VARIANT")
    key = machine_key(variant_modules(exact))
    kept = remembered(key, exact) if not simulate_crash else None
    if kept is not None and (candidates[0].parent / kept.module).is_file():
        return kept
    refused: list[str] = []
    proof_model, telling = _proof_model(model)
    for module in candidates:
        problem = prove(module, proof_model, crash=variant_name(module) in simulate_crash)
        if problem == "inconclusive":  # the file would not load or took too long: no verdict on the kernels
            return CpuBackend(variant_name(module), exact, module.name, "not yet proven", refused)
        if problem is None:
            best = variant_name(candidates[0])
            reason = (f"the best of {len(candidates)} variants this CPU supports" if not refused
                      else f"{best} {refused[0].split(': ', 1)[1]} on this machine; the next best that runs")
            if not telling:
                reason += " (proven on a tiny model only; proven again with a bigger one)"
            backend = CpuBackend(variant_name(module), exact, module.name, reason, refused)
            if telling and not simulate_crash:
                remember(key, backend)
            return backend
        log.warning("CPU kernels %s %s in a test run; trying the next best", variant_name(module), problem)
        refused.append(f"{variant_name(module)}: {problem}")
    raise ModelLoadError("no CPU variant of llama.cpp ran here (" + "; ".join(refused) + "); reinstall "
                         "localchat (`bash scripts/setup.sh`) and report this with `localchat probe`.")


_lock = threading.Lock()  # choosing, switching and counting models happen as one
_active: CpuBackend | None = None
_active_reg: int | None = None
_models = 0  # models loaded in this process: the kernels may change only while there are none


def _load_module(module: Path) -> int:
    # Before llama_backend_init: with nothing registered it would load whatever ggml finds beside
    # the executable or in the current folder, and llama.cpp takes the first CPU device registered.
    reg = ggml_library().ggml_backend_load(str(module).encode())
    if not reg:
        raise RuntimeError(f"llama.cpp could not load its CPU kernels from {module}")
    llama_cpp.llama_backend_init()
    return reg


def _load_other_backends(exact: bool) -> None:
    """GPU backends built as modules (CUDA, Vulkan, ...): ggml keeps those the machine can't use out.
    The deterministic mode leaves BLAS out: it takes the prompt's matrix products off our kernels."""
    lib = ggml_library()
    for module in sorted(lib_dir().iterdir()):
        name = module.name
        if (module.suffix in MODULE_SUFFIXES and name.startswith(("libggml-", "ggml-")) and "ggml-cpu" not in name
                and not name.startswith(("libggml-base", "ggml-base")) and not (exact and "blas" in name)):
            lib.ggml_backend_load(str(module).encode())


def active() -> CpuBackend | None:
    return _active


def describe(exact: bool = False) -> str:
    """The CPU kernels a model would run on, in words, without loading or proving anything."""
    backend = _active if _active is not None and _active.exact == exact else None
    candidates = ranked(exact)
    if backend is None and candidates:
        backend = remembered(machine_key(variant_modules(exact)), exact)
    if backend is not None:
        return f"{backend.variant} ({backend.reason})"
    if not candidates:
        return "built in (this llama.cpp build has no CPU variants to choose from)"
    return (f"{variant_name(candidates[0])} (the best of {len(candidates)} variants this CPU supports; "
            "proven in a test run at the first model load)")


def acquire(exact: bool, model: Path) -> CpuBackend:
    """Before loading a model: make this process run the CPU kernels of its mode (chosen on first
    use) and count the model in; `release()` when it is freed.

    A process switches kernels only while no model is loaded: llama.cpp binds a model to the CPU
    backend registered when it was loaded. Until then a default-mode model runs on the exact kernels
    already in use (slower, still correct); a deterministic one beside fast kernels is refused.
    """
    global _models
    with _lock:
        backend = _activate(exact, model)
        _models += 1
        return backend


def release() -> None:
    global _models
    with _lock:
        _models -= 1


def activate(exact: bool, model: Path) -> CpuBackend:
    """The kernels for code that loads models itself (the bindings' `Llama` in benchmarks)."""
    with _lock:
        return _activate(exact, model)


def _activate(exact: bool, model: Path) -> CpuBackend:
    global _active, _active_reg
    if _active is not None and (_active.exact == exact or _active.variant == "built-in"):
        return _active
    if _active is not None and _models:
        if _active.exact:  # exact kernels serve the default mode too, only slower
            return _active
        from ..errors import EngineError

        raise EngineError("this process already runs models with the default mode's fast kernels; a "
                          "deterministic model needs a process of its own (close the loaded models first).")
    backend = choose(exact, model)
    if _active_reg is not None:
        ggml_library().ggml_backend_unload(_active_reg)
        _active_reg = None
    elif backend.variant != "built-in":
        _load_other_backends(exact)
    if backend.variant != "built-in":
        _active_reg = _load_module((lib_dir() / "exact" if exact else lib_dir()) / backend.module)
    elif _active is None:  # a single CPU module (a GPU build without variants), or nothing to load
        lib = ggml_library()
        lib.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
        lib.ggml_backend_load_all_from_path(str(lib_dir()).encode())
        llama_cpp.llama_backend_init()
    _active = backend
    log.info("CPU kernels: %s (%s)", backend.variant, backend.reason)
    return backend


def mark_proving(module: Path, exact: bool) -> None:
    """In a proving child: load just this variant and use it."""
    global _active, _active_reg
    _active_reg = _load_module(module)
    _active = CpuBackend(variant_name(module), exact, module.name, "being proven")


if __name__ == "__main__":
    # Through the package's own module object, which the worker's import shares (not __main__).
    from localchat.runtime.backends import prove_in_child as run

    sys.exit(run(sys.argv[1:]))
