"""The CPU kernels the wheel carries, what this CPU claims to run, and the verdicts kept of them.

The wheel carries llama.cpp's CPU backend once per ISA level (scripts/install-runtime.sh): fast
ones with llamafile's sgemm in llama_cpp/lib, exact ones without it in llama_cpp/lib/exact for
--deterministic. ggml scores each for this CPU; a proof's verdict (kernels.py) is kept per machine
in the cache dir, so a variant is proven once.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

import llama_cpp

from ... import paths

log = logging.getLogger(__name__)

MODULE_SUFFIXES = (".so", ".dll", ".dylib")
# Part of a verdict's key: verdicts of an earlier proof rule (one that trusted a tiny model's proof) don't count.
PROOF_RULES = b"proofs on models of 32 MiB or more"


@dataclass(slots=True)
class CpuBackend:
    """The CPU kernels in use, and why these."""

    variant: str  # "icelake", or "built-in" when the wheel has no variant modules
    exact: bool  # built without llamafile's sgemm (the deterministic mode's kernels)
    module: str = ""  # file name of the variant module
    reason: str = ""
    refused: list[str] = field(default_factory=list)  # better variants that failed their proof, and how

    def path(self) -> Path:
        return (lib_dir() / "exact" if self.exact else lib_dir()) / self.module


def lib_dir() -> Path:
    return Path(llama_cpp.__file__).parent / "lib"


def variant_modules(exact: bool) -> list[Path]:
    folder = lib_dir() / "exact" if exact else lib_dir()
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if "ggml-cpu-" in p.name and p.suffix in MODULE_SUFFIXES)


def is_exact(module: Path) -> bool:
    """A module of the exact set (built without llamafile's sgemm), by its folder."""
    return module.parent.name == "exact"


def variant_name(module: Path) -> str:
    """libggml-cpu-icelake.so -> icelake; libggml-cpu-armv8.2_1.so -> armv8.2_1."""
    return module.name.split("ggml-cpu-", 1)[1].rsplit(".", 1)[0]


@functools.cache
def ggml_library() -> ctypes.CDLL:
    """libggml as libllama links it. A wheel holds copies, not links, of libggml.so, .so.0 and
    .so.0.x.y: opening another name than libllama's would give a second ggml with its own registry."""
    lib = lib_dir()
    # libggml.so.0 (or libggml.0.dylib): the shortest versioned name is the one libllama links.
    names = sorted((p.name for p in lib.iterdir() if p.name.startswith("libggml.") and p.name.count(".") >= 2),
                   key=len)
    for name in [*names, "libggml.so", "libggml.dylib", "ggml.dll"]:
        if (lib / name).is_file():
            libggml = ctypes.CDLL(str(lib / name))
            break
    else:
        from llama_cpp._ggml import libggml
    libggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
    libggml.ggml_backend_load.restype = ctypes.c_void_p
    libggml.ggml_backend_unload.argtypes = [ctypes.c_void_p]
    libggml.ggml_backend_unload.restype = None
    return libggml


def score(module: Path) -> int:
    """ggml's own verdict of a variant on this CPU: 0 when the CPU lacks an instruction it needs,
    higher for more capable variants. Opening a module runs none of its kernels."""
    try:
        fn = ctypes.CDLL(str(module)).ggml_backend_score
    except (OSError, AttributeError):
        return 0
    fn.restype = ctypes.c_int
    return int(fn())


def ranked(exact: bool) -> list[Path]:
    """The variants this CPU claims to run, best first."""
    scored = [(score(m), m) for m in variant_modules(exact)]
    return [m for s, m in sorted(scored, key=lambda sm: -sm[0]) if s > 0]


# -- verdicts, per machine ---------------------------------------------------------------------

def machine_key(modules: list[Path]) -> str:
    """What a verdict holds for: this CPU (its model and flags) and these module files."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu = "".join(line for line in f if line.startswith(("model name", "flags")))[:8192]
    except OSError:
        pass
    digest = hashlib.sha256(cpu.encode() + PROOF_RULES)
    for m in modules:
        stat = m.stat()
        digest.update(f"{m.name}:{stat.st_size}:{int(stat.st_mtime)}".encode())
    return digest.hexdigest()[:16]


CPU_VERDICTS = "cpu-backend.json"


def read_verdict(file_name: str, key: str, part: str) -> dict | None:
    """A verdict kept in the cache dir's `file_name` under key/part, or None (a file that fails to read
    is no verdict: what it held is proven again)."""
    try:
        entry = json.loads((paths.cache_dir() / file_name).read_text(encoding="utf-8"))[key][part]
        return entry if isinstance(entry, dict) else None
    except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError):
        return None


def keep_verdict(file_name: str, key: str, part: str, verdict: dict) -> None:
    """Keep a verdict (a failure to write it costs a proof at the next start, nothing more)."""
    import tempfile

    file = paths.cache_dir() / file_name
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError, RecursionError):
        data = {}
    if not isinstance(data.get(key), dict):
        data[key] = {}
    data[key][part] = verdict
    try:
        # A name of its own: a window and a server starting at once must not share a half-written file.
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.stem}-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        paths.private_file(Path(tmp))
        os.replace(tmp, file)
    except OSError as exc:
        log.warning("could not keep a verdict in %s (%s); it is proven again next time", file, exc)


def remembered(key: str, exact: bool) -> CpuBackend | None:
    entry = read_verdict(CPU_VERDICTS, key, "exact" if exact else "fast")
    try:
        return CpuBackend(**entry) if entry else None
    except TypeError:
        return None


def remember(key: str, exact: bool, backend: CpuBackend) -> None:
    """Keep the verdict for a mode."""
    keep_verdict(CPU_VERDICTS, key, "exact" if exact else "fast", asdict(backend))
