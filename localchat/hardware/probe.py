"""`probe()`: CPU, RAM, GPUs and measured bandwidth, collected in a child process that may not hang us."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from ..arguments import Parser
from ..units import rate_text, size_text
from . import GPUInfo, HardwareInfo
from .bandwidth import measure_gpu_bandwidth, measure_host_bandwidth

_MARK = "LOCALCHAT_PROBE_RESULT "
# ISA features llama.cpp has kernels for; names as Linux spells them, ARM ones normalized.
_FLAGS = {"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
          "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "neon", "dotprod", "i8mm", "sve", "sve2", "bf16"}
_ARM_NAMES = {"asimd": "neon", "asimddp": "dotprod"}
# Apple silicon unified-memory bandwidth (bytes/s) from Apple's published specs; the largest
# configuration where a chip came in two (M3 Max, M4 Max).
_APPLE_BANDWIDTH = {"M1": 68e9, "M1 Pro": 200e9, "M1 Max": 400e9, "M1 Ultra": 800e9, "M2": 100e9,
                    "M2 Pro": 200e9, "M2 Max": 400e9, "M2 Ultra": 800e9, "M3": 100e9, "M3 Pro": 150e9,
                    "M3 Max": 400e9, "M3 Ultra": 819e9, "M4": 120e9, "M4 Pro": 273e9, "M4 Max": 546e9}
_DATACENTER = ("A100", "H100", "H200", "H800", "A800", "B100", "B200", "GH200", "GB200")
# Where Linux lists devices (sys/, dev/); tests point it at a made-up tree with or without a card.
DEVICE_ROOT = Path("/")
_NVIDIA_PCI_VENDOR = "0x10de"
_DRIVER_FIX = ("install or repair the NVIDIA driver (`nvidia-smi` should list the GPU), then run "
               "`localchat probe` again; until then localchat plans for the CPU only.")


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu(info: HardwareInfo) -> None:
    import psutil

    info.os, info.machine = platform.system(), platform.machine().lower()
    info.physical_cores = psutil.cpu_count(logical=False) or 1
    info.logical_cores = psutil.cpu_count(logical=True) or info.physical_cores
    try:
        freq = psutil.cpu_freq()
        info.cpu_max_mhz = float(freq.max or freq.current) if freq else None
    except Exception:  # some VMs and containers have no frequency files
        info.cpu_max_mhz = None
    memory = psutil.virtual_memory()
    info.ram_total, info.ram_available = int(memory.total), int(memory.available)
    flags: set[str] = set()
    if info.os == "Linux" and Path("/proc/cpuinfo").exists():
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key == "model name" and info.cpu_model == "unknown":
                info.cpu_model = value.strip()
            elif key in ("flags", "features"):
                flags |= {_ARM_NAMES.get(f, f) for f in value.split()}
    elif info.os == "Darwin":
        info.cpu_model = _run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "Apple"
        for name, sysctl in [("avx2", "hw.optional.avx2_0"), ("avx512f", "hw.optional.avx512f"),
                             ("dotprod", "hw.optional.arm.FEAT_DotProd"), ("i8mm", "hw.optional.arm.FEAT_I8MM"),
                             ("bf16", "hw.optional.arm.FEAT_BF16")]:
            if _run(["sysctl", "-n", sysctl]) == "1":
                flags.add(name)
    if info.machine in ("arm64", "aarch64"):
        flags.add("neon")  # mandatory on 64-bit ARM
    if info.cpu_model == "unknown":
        info.cpu_model = platform.processor() or "unknown"
    if not flags and info.machine in ("x86_64", "amd64"):
        info.warnings.append("could not read the CPU's instruction set flags; assuming a baseline x86-64 CPU.")
    info.cpu_flags = sorted(flags & _FLAGS)


def _apple_gpu(info: HardwareInfo) -> None:
    chip = info.cpu_model.replace("Apple", "").strip()
    # Metal lets one process wire about 2/3 of RAM on small machines and 3/4 on larger ones.
    share = 2 / 3 if info.ram_total <= 36 << 30 else 3 / 4
    limit = int(info.ram_total * share)
    info.unified_memory = True
    info.gpus.append(GPUInfo(index=0, name=f"{info.cpu_model} GPU", vendor="apple", memory_total=limit,
                             memory_free=min(limit, info.ram_available), spec_bandwidth=_APPLE_BANDWIDTH.get(chip),
                             unified=True))


def nvidia_cards(root: Path | None = None) -> list[str] | None:
    """NVIDIA cards the OS sees without any driver (PCI display controllers, /dev/nvidia* nodes);
    None where the OS offers no such view (only Linux does)."""
    root = DEVICE_ROOT if root is None else root
    pci = root / "sys" / "bus" / "pci" / "devices"
    if not pci.is_dir():
        return None
    found = []
    for device in sorted(pci.iterdir()):
        try:
            vendor = (device / "vendor").read_text().strip().lower()
            pci_class = (device / "class").read_text().strip().lower()
        except OSError:
            continue
        # Class 0x03 is a display controller (VGA or 3D); NVIDIA's audio and bridge functions are not GPUs.
        if vendor == _NVIDIA_PCI_VENDOR and pci_class.startswith("0x03"):
            found.append(f"PCI {device.name}")
    found += [f"/dev/{node.name}" for node in sorted((root / "dev").glob("nvidia[0-9]*"))]
    return found


def _nvidia_gpus(info: HardwareInfo) -> None:
    # Most laptops and every Mac have no NVIDIA GPU: NVML failing there is normal, not worth a word.
    # A warning is for a card the OS sees that the driver cannot use.
    try:
        import pynvml
    except ImportError:
        cards = nvidia_cards()
        if cards:
            info.warnings.append(f"an NVIDIA GPU is present ({', '.join(cards)}) but the nvidia-ml-py package "
                                 "that reads it is missing; `pip install nvidia-ml-py`, then run "
                                 "`localchat probe` again.")
        return
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver, or a driver that does not answer: CPU only
        cards = nvidia_cards()
        if cards:
            info.warnings.append(f"an NVIDIA GPU is present ({', '.join(cards)}) but its driver is not usable "
                                 f"({exc}); {_DRIVER_FIX}")
        elif cards is None and not isinstance(exc, getattr(pynvml, "NVMLError_LibraryNotFound", ())):
            # No device list to look at (Windows, Intel Macs): a driver library that is there but
            # fails says a GPU was meant to be used; no library at all says there is none.
            info.warnings.append(f"the NVIDIA driver is installed but not usable ({exc}); {_DRIVER_FIX}")
        return
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        for index, handle in enumerate(handles):
            info.gpus.append(_nvidia_gpu(pynvml, index, handle, info.warnings))
        for i in range(len(handles)):
            for j in range(i + 1, len(handles)):
                status = _ask(pynvml.nvmlDeviceGetP2PStatus, handles[i], handles[j],
                              pynvml.NVML_P2P_CAPS_INDEX_READ)
                if status == pynvml.NVML_P2P_STATUS_OK:
                    info.peer_access.append([i, j])
    finally:
        _ask(pynvml.nvmlShutdown)


def _ask(call: Any, *args: Any) -> Any:
    """One NVML query; older drivers lack some, and a missing answer is just None."""
    try:
        return call(*args)
    except Exception:
        return None


def _nvidia_gpu(nvml: Any, index: int, handle: Any, warnings: list[str]) -> GPUInfo:
    name = _ask(nvml.nvmlDeviceGetName, handle) or f"GPU {index}"
    name = name.decode() if isinstance(name, bytes) else str(name)
    gpu = GPUInfo(index=index, name=name)
    memory = _ask(nvml.nvmlDeviceGetMemoryInfo, handle)
    if memory is not None:
        gpu.memory_total, gpu.memory_free = int(memory.total), int(memory.free)
    else:
        warnings.append(f"{name}: the driver did not report its memory; it will not be used.")
    gpu.bus_width_bits = _ask(nvml.nvmlDeviceGetMemoryBusWidth, handle)
    gpu.memory_clock_mhz = _ask(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM)
    if gpu.bus_width_bits and gpu.memory_clock_mhz:
        # NVML's memory clock is half the transfer rate (GDDR6/6X and HBM alike): x2 for bytes/s.
        gpu.spec_bandwidth = gpu.bus_width_bits / 8 * gpu.memory_clock_mhz * 1e6 * 2
    capability = _ask(nvml.nvmlDeviceGetCudaComputeCapability, handle)
    if capability:
        gpu.compute_capability = f"{capability[0]}.{capability[1]}"
    pci = _ask(lambda h: nvml.nvmlDeviceGetPciInfo(h), handle)  # older bindings lack it
    bus_id = getattr(pci, "busId", b"") or b""
    gpu.pci_bus_id = (bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)).lower()
    gpu.pcie_gen = _ask(nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
    gpu.pcie_width = _ask(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
    cores = _ask(nvml.nvmlDeviceGetNumGpuCores, handle)
    sm_clock = _ask(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM)
    if cores and sm_clock:
        gpu.fp32_tflops = cores * 2 * sm_clock * 1e6 / 1e12
        tensor_cores = capability is not None and capability[0] >= 7
        # Tensor cores: consumer parts run FP16 matmul with FP32 accumulate at ~2x FP32,
        # data-center parts far more; the lower multiples keep predictions conservative.
        boost = 1 if not tensor_cores else 8 if any(d in name for d in _DATACENTER) else 2
        gpu.fp16_tflops = gpu.fp32_tflops * boost
    return gpu


def collect(measure: bool = True) -> HardwareInfo:
    """Probe in this process. May hang on a broken driver: call `probe()` instead."""
    info = HardwareInfo()
    _cpu(info)
    if info.os == "Darwin" and info.machine == "arm64":
        _apple_gpu(info)
    else:
        _nvidia_gpus(info)
    if measure:
        info.ram_bandwidth = measure_host_bandwidth()
        if info.ram_bandwidth is None:
            info.warnings.append("numpy is not installed: host bandwidth not measured, estimated instead.")
        for gpu in info.gpus:
            if gpu.vendor == "nvidia":
                try:
                    gpu.measured_bandwidth = measure_gpu_bandwidth(gpu.index)
                except Exception as exc:  # torch present but CUDA broken: keep the spec figure
                    info.warnings.append(f"{gpu.name}: bandwidth not measured ({exc}).")
    return info


def _child_command(measure: bool) -> list[str]:
    flags = ["--child"] + ([] if measure else ["--no-measure"])
    if getattr(sys, "frozen", False):  # a bundled app: its executable is the `localchat` command
        return [sys.executable, "probe", *flags]
    code = "import sys; from localchat.hardware.probe import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", code, *flags]


def probe(measure: bool = True, timeout: float = 60.0) -> HardwareInfo:
    """Probe the machine in a child process with a timeout; never raises, degrades to CPU-only."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    problem = ""
    try:
        done = subprocess.run(_child_command(measure), capture_output=True, text=True, timeout=timeout, env=env)
        for line in done.stdout.splitlines():
            if line.startswith(_MARK):
                return HardwareInfo.from_json(line[len(_MARK):])
        problem = f"the hardware probe failed (exit {done.returncode}: {done.stderr.strip()[-300:]})"
    except subprocess.TimeoutExpired:
        problem = f"the hardware probe did not finish in {timeout:.0f} s (a GPU driver may be stuck)"
    except Exception as exc:  # the probe must never take the app down
        problem = f"the hardware probe could not run ({exc})"
    info = HardwareInfo()
    try:
        _cpu(info)
    except Exception as exc:
        info.warnings.append(f"CPU and RAM could not be read ({exc}).")
    info.warnings.append(problem + "; planning for the CPU only.")
    return info


def _size(n: float | None) -> str:
    return size_text(n or None)  # 0: not read


def format_table(info: HardwareInfo, extra_rows: list[tuple[str, str]] = ()) -> str:
    """A readable summary of a HardwareInfo (and rows the caller adds, such as the CPU kernels)."""
    rows = [("OS", f"{info.os} ({info.machine})"),
            ("CPU", f"{info.cpu_model}, {info.physical_cores} cores / {info.logical_cores} threads"
                    + (f", {info.cpu_max_mhz / 1000:.1f} GHz" if info.cpu_max_mhz else "")),
            ("ISA", " ".join(info.cpu_flags) or "-"),
            ("RAM", f"{_size(info.ram_total)} total, {_size(info.ram_available)} available, "
                    f"{rate_text(info.ram_bandwidth)} measured")]
    for gpu in info.gpus:
        details = [f"{_size(gpu.memory_total)} ({_size(gpu.memory_free)} free)",
                   f"{rate_text(gpu.spec_bandwidth)} spec", f"{rate_text(gpu.measured_bandwidth)} measured"]
        if gpu.compute_capability:
            details.append(f"compute {gpu.compute_capability}")
        if gpu.pcie_gen:
            details.append(f"PCIe {gpu.pcie_gen} x{gpu.pcie_width or '?'}")
        if gpu.bandwidth_source:
            details.append(f"bandwidth from {gpu.bandwidth_source}")
        usable = f" (usable as {gpu.device})" if gpu.device else ""
        rows.append((f"GPU {gpu.index}", f"{gpu.name}{usable}: " + ", ".join(details)))
    if len(info.gpus) > 1:
        rows.append(("P2P", ", ".join(f"{a}<->{b}" for a, b in info.peer_access) or "none"))
    rows += [("not usable", line) for line in info.not_usable]
    if info.gpus_checked and not info.gpus:
        rows.append(("GPU", f"none usable: {info.gpu_gap}"))
    rows += list(extra_rows)
    rows += [("warning", w) for w in info.warnings]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def main(argv: list[str] | None = None, extra_rows: Callable[[], list[tuple[str, str]]] | None = None,
         usable: Callable[[HardwareInfo], HardwareInfo] | None = None) -> int:
    """`localchat probe [--json] [--no-measure]`; `extra_rows` adds lines to the table; `usable` turns the
    drivers' GPUs into those this install can use (the runtime's check)."""
    parser = Parser(prog="localchat probe", description="Show what this machine has.")
    parser.add_argument("--json", action="store_true", help="print JSON (input for `localchat plan --hardware`)")
    parser.add_argument("--no-measure", action="store_true", help="skip the bandwidth measurements")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(_MARK + json.dumps(collect(measure=not args.no_measure).to_dict()), flush=True)
        return 0
    info = probe(measure=not args.no_measure)
    if usable is not None:
        info = usable(info)
    print(info.to_json() if args.json else format_table(info, extra_rows() if extra_rows else []))
    return 0
