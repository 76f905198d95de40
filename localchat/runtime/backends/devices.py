"""The GPUs this install can use: llama.cpp's own devices, from the GPU backend modules the wheel carries.

A GPU backend module (CUDA, Vulkan, Metal...) is loaded into this process only after a child process
loaded it, listed its devices and computed on each of them (device_proof.py): a module that crashes,
hangs or computes wrong numbers (a broken driver) is refused with the reason, and the CPU keeps working. ggml itself drops a module that cannot load
without a word (no CUDA runtime, no Vulkan loader), so the child also says why a module gave nothing.
The verdicts are kept per module file and device-visibility settings. The devices' facts (free and
total memory) are read live, in this process, after the modules loaded.

Their order is the index users and plans use (`--devices 0,1`, `main_gpu`): llama.cpp's own device
order with one entry per physical GPU (a GPU that two backends see is used through the better one).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...hardware import HardwareInfo
from . import device_proof
from .cpu_variants import MODULE_SUFFIXES, ggml_library, keep_verdict, lib_dir, read_verdict
from .gpus import LIST_FLAG, LIST_MODULE, merge
from .residence import DeviceMemory, Residence, gpu_bytes

log = logging.getLogger(__name__)

PROOF_TIMEOUT_S = 60.0  # a driver that answers in no minute is as good as none
VERDICTS = "gpu-backends.json"
PROOF = "compute-1"  # what a kept verdict proved: verdicts of an older, weaker proof are proven again
# What decides which devices a module shows and which kernels they run: the settings that hide or
# expose devices or turn kernels off.
VISIBILITY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GGML_VK_VISIBLE_DEVICES",
              "GGML_VK_DISABLE_F16", "GGML_VK_DISABLE_COOPMAT", "GGML_VK_DISABLE_FUSION", "ONEAPI_DEVICE_SELECTOR")
# Faults a proof can be told to show, as a broken driver would (tests; no such GPU here).
FAULTS = ("crash", "hang", "wrong")
_COMPUTING = "computing on "  # the child's word before each device's check: a crash is laid to that device
# ggml_backend_dev_type: what each device is.
KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
# When one GPU is seen by two backends, the first in this list serves it.
PREFERENCE = ("CUDA", "ROCm", "HIP", "MUSA", "Metal", "MTL", "SYCL", "Vulkan", "OpenCL")


@dataclass(slots=True)
class Device:
    """One device llama.cpp can place layers on, as ggml names it."""

    name: str                 # "CUDA0", "Vulkan1": llama.cpp's own name, in logs and buffers
    description: str          # "NVIDIA GeForce RTX 4090", "llvmpipe (LLVM 15.0.6, 256 bits)"
    kind: str                 # gpu | igpu
    backend: str              # the module's registry name: CUDA, Vulkan, Metal...
    memory_free: int
    memory_total: int
    device_id: str = ""       # the PCI bus id where the backend knows it


@dataclass(slots=True)
class ModuleVerdict:
    """What a child saw when it loaded one GPU backend module."""

    module: str
    devices: list[dict] = field(default_factory=list)  # Device fields, as the child listed them
    refused: str = ""         # why this module is not used ("" when it loaded)


# -- the ggml calls, declared on the library libllama uses ---------------------------------------

class _Caps(ctypes.Structure):
    _fields_ = [("async_", ctypes.c_bool), ("host_buffer", ctypes.c_bool),
                ("buffer_from_host_ptr", ctypes.c_bool), ("events", ctypes.c_bool)]


class _Props(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("description", ctypes.c_char_p), ("memory_free", ctypes.c_size_t),
                ("memory_total", ctypes.c_size_t), ("type", ctypes.c_int), ("device_id", ctypes.c_char_p),
                ("caps", _Caps)]


def _ggml() -> ctypes.CDLL:
    lib = ggml_library()
    if not getattr(lib, "_localchat_devices", False):
        signatures = {
            "ggml_backend_dev_count": ([], ctypes.c_size_t),
            "ggml_backend_dev_get": ([ctypes.c_size_t], ctypes.c_void_p),
            "ggml_backend_dev_by_name": ([ctypes.c_char_p], ctypes.c_void_p),
            "ggml_backend_dev_get_props": ([ctypes.c_void_p, ctypes.POINTER(_Props)], None),
            "ggml_backend_dev_memory": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                         ctypes.POINTER(ctypes.c_size_t)], None),
            "ggml_backend_dev_backend_reg": ([ctypes.c_void_p], ctypes.c_void_p),
            "ggml_backend_reg_name": ([ctypes.c_void_p], ctypes.c_char_p),
            "ggml_backend_reg_dev_count": ([ctypes.c_void_p], ctypes.c_size_t),
            "ggml_backend_reg_dev_get": ([ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p),
        }
        for name, (args, result) in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, result
        lib._localchat_devices = True
    return lib


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def _describe(handle: int) -> Device:
    lib = _ggml()
    props = _Props()
    lib.ggml_backend_dev_get_props(handle, ctypes.byref(props))
    reg = lib.ggml_backend_dev_backend_reg(handle)
    return Device(_text(props.name), _text(props.description), KINDS.get(props.type, "other"),
                  _text(lib.ggml_backend_reg_name(reg)) if reg else "", int(props.memory_free),
                  int(props.memory_total), _text(props.device_id).lower())


def handle_of(device: Device) -> int:
    """ggml's handle of a device, for llama.cpp's model parameters."""
    handle = _ggml().ggml_backend_dev_by_name(device.name.encode())
    assert handle, f"{device.name} is no longer registered"
    return handle


# -- which modules load: proven in a child --------------------------------------------------------

def gpu_modules() -> list[Path]:
    """The GPU backend modules the wheel carries (neither the CPU kernels nor ggml's base)."""
    folder = lib_dir()
    if not folder.is_dir():
        return []
    return sorted(m for m in folder.iterdir()
                  if m.suffix in MODULE_SUFFIXES and m.name.startswith(("libggml-", "ggml-"))
                  and "ggml-cpu" not in m.name and not m.name.startswith(("libggml-base", "ggml-base"))
                  and "blas" not in m.name)


def _key(module: Path) -> str:
    stat = module.stat()
    seen = "|".join(f"{k}={os.environ.get(k, '')}" for k in VISIBILITY)
    return hashlib.sha256(f"{PROOF}:{module.name}:{stat.st_size}:{int(stat.st_mtime)}:{seen}".encode()).hexdigest()[:16]


def prove(module: Path, fault: str = "", timeout_s: float = PROOF_TIMEOUT_S) -> ModuleVerdict:
    """Load `module` in a child process, list its devices and compute on each; a crash, a hang, wrong
    numbers or no device is a refusal. `fault`: one of FAULTS, shown by the child (tests)."""
    base = [sys.executable, LIST_FLAG] if getattr(sys, "frozen", False) else [sys.executable, "-m", LIST_MODULE]
    try:
        done = subprocess.run([*base, str(module), *([fault] if fault else [])], capture_output=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        said = _said(exc.stdout or b"")
        where = f" while computing on {said[-1][len(_COMPUTING):]}" if said and said[-1].startswith(_COMPUTING) else ""
        return ModuleVerdict(module.name, refused=f"its driver gave no answer in {timeout_s:.0f} s{where}")
    except OSError as exc:
        return ModuleVerdict(module.name, refused=f"the test process could not start ({exc})")
    said = _said(done.stdout)
    if done.returncode < 0:
        import signal

        try:
            how = signal.Signals(-done.returncode).name
        except ValueError:
            how = f"signal {-done.returncode}"
        if said and said[-1].startswith(_COMPUTING):
            return ModuleVerdict(module.name, refused=f"it crashed ({how}) running a test computation on "
                                                      f"{said[-1][len(_COMPUTING):]}")
        return ModuleVerdict(module.name, refused=f"it crashed while loading ({how})")
    try:
        found = json.loads(said[-1])
        return ModuleVerdict(module.name, list(found["devices"]), str(found.get("refused", "")))
    except (ValueError, IndexError, KeyError, TypeError):
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        return ModuleVerdict(module.name, refused=f"its test run failed (exit {done.returncode}"
                                                  f"{': ' + tail[0] if tail else ''})")


def _said(out: bytes) -> list[str]:
    return out.decode("utf-8", "replace").strip().splitlines()


def verdict(module: Path) -> ModuleVerdict:
    """The module's verdict: kept from an earlier proof with the same file and visibility, else proven now."""
    key = _key(module)
    kept = read_verdict(VERDICTS, key, module.name)
    if kept is not None:
        try:
            return ModuleVerdict(**kept)
        except TypeError:
            pass
    found = prove(module)
    if found.refused:
        log.warning("GPU backend %s is not used: %s", module.name, found.refused)
    if "no answer" not in found.refused:  # a hang may be a busy machine: proven again next time
        keep_verdict(VERDICTS, key, module.name, asdict(found))
    return found


class _Loaded:
    """The GPU modules this process loaded (ggml's registry is one per process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.verdicts: list[ModuleVerdict] | None = None


_LOADED = _Loaded()


def load_gpu_modules() -> list[ModuleVerdict]:
    """Load every GPU module that proved itself into this process, once; the verdicts of all of them."""
    with _LOADED.lock:
        if _LOADED.verdicts is None:
            verdicts = []
            for module in gpu_modules():
                found = verdict(module)
                if not found.refused and not _ggml().ggml_backend_load(str(module).encode()):
                    found = ModuleVerdict(module.name, refused="it did not load in this process")
                verdicts.append(found)
            _LOADED.verdicts = verdicts
        return list(_LOADED.verdicts)


def usable_devices() -> list[Device]:
    """The GPUs llama.cpp can place layers on in this process, live, in their index order (the GPU
    modules are loaded first); one entry per physical GPU."""
    load_gpu_modules()
    lib = _ggml()
    found = [_describe(lib.ggml_backend_dev_get(i)) for i in range(lib.ggml_backend_dev_count())]
    return dedupe([d for d in found if d.kind in ("gpu", "igpu")])


def memory_in_use(placed: dict[str, Residence | None]) -> list[DeviceMemory]:
    """The GPUs the workers' layers went to (their residences), each with its free and total memory read
    now: what the window's status panel and /api/ps show, refreshed at each look."""
    lib, found = _ggml(), []
    for name, held in gpu_bytes(placed).items():
        handle = lib.ggml_backend_dev_by_name(name.encode())
        if handle:
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            lib.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
            found.append(DeviceMemory(name, held, int(free.value), int(total.value)))
    return found


def dedupe(devices: list[Device]) -> list[Device]:
    """One device per physical GPU: where two backends show the same PCI device, the preferred backend's."""
    def rank(device: Device) -> int:
        return next((i for i, p in enumerate(PREFERENCE) if device.backend.startswith(p)), len(PREFERENCE))

    kept: dict[str, Device] = {}
    for device in devices:
        same = device.device_id or f"{device.backend}:{device.name}"
        if same not in kept or rank(device) < rank(kept[same]):
            kept[same] = device
    return [d for d in devices if kept.get(d.device_id or f"{d.backend}:{d.name}") is d]


def install_gap() -> str:
    """Why this install has no GPU to offer, in words with the fix ("" when a module loaded with devices)."""
    verdicts = load_gpu_modules()
    if not verdicts:
        return ("this install has no GPU backend: reinstall with one, `LOCALCHAT_GPU=cuda bash scripts/setup.sh` "
                "(NVIDIA, with the CUDA toolkit) or `LOCALCHAT_GPU=vulkan bash scripts/setup.sh` (any GPU, "
                "with Vulkan's build tools)")
    said = [f"{v.module}: {v.refused or 'no device'}" for v in verdicts if v.refused or not v.devices]
    if len(said) < len(verdicts):
        return ""
    return "its GPU backends show no usable device (" + "; ".join(said) + ")"


def usable_here(info: HardwareInfo) -> HardwareInfo:
    """`gpus.merge` with this process's own devices (a process that runs models loads the backends anyway)."""
    devices = [asdict(d) for d in usable_devices()]
    return merge(info, devices, "" if devices else install_gap())


# -- the child's side ---------------------------------------------------------------------------

def _why_not(module: Path) -> str:
    """Why ggml dropped a module: the system loader's own words (a missing driver library, mostly)."""
    try:
        ctypes.CDLL(str(module))
    except OSError as exc:
        return f"it cannot load ({exc}); install or update the GPU's driver"
    return "it loaded but offers no device on this machine"


def list_in_child(argv: list[str]) -> int:
    """`MODULE [FAULT]`: load one GPU module into this (child) process, compute on each of its devices
    and print its devices, or why it is refused, as one JSON line (`FAULT`: one of FAULTS, shown here).
    No argument: every usable device of this install, and why there are none, as one JSON line."""
    if not argv:
        print(json.dumps({"devices": [asdict(d) for d in usable_devices()], "gap": install_gap()}), flush=True)
        return 0
    module, fault = Path(argv[0]), (argv[1:] or [""])[0]
    lib = _ggml()
    reg = lib.ggml_backend_load(str(module).encode())
    if not reg:
        print(json.dumps({"devices": [], "refused": _why_not(module)}), flush=True)
        return 0
    handles = [lib.ggml_backend_reg_dev_get(reg, i) for i in range(lib.ggml_backend_reg_dev_count(reg))]
    devices = [_describe(h) for h in handles]
    refused = "" if devices else _why_not(module)
    for handle, device in zip(handles, devices):
        print(_COMPUTING + device.name, flush=True)  # the parent lays a crash or a hang here to this device
        if fault == "crash":
            import signal

            os.kill(os.getpid(), signal.SIGSEGV)
        while fault == "hang":
            threading.Event().wait(1.0)
        wrong = device_proof.compute(handle, wrong=fault == "wrong")
        if wrong:
            refused = f"{device.name} ({device.description}): {wrong}"
            break
    print(json.dumps({"devices": [asdict(d) for d in devices], "refused": refused}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(list_in_child(sys.argv[1:]))
