"""The machine's GPUs as plans see them: the devices llama.cpp can use here, with the driver's facts.

The hardware probe (hardware/probe.py) reports what drivers show (NVML's NVIDIA cards, Apple's GPU);
this install may use none of them (no GPU backend built, a driver the backend cannot load) or more
(AMD and Intel cards through Vulkan). `merge` makes the list plans use: one GPUInfo per usable llama.cpp
device, in llama.cpp's order (the index `--devices` takes), carrying the driver's facts where the
device is one the driver reported (matched by PCI bus id, else by name), and a line for each GPU seen
but not usable: why, and the command that fixes it. `usable` lists the devices in a child process,
for processes that never load llama.cpp (the server, `localchat probe` and `plan`). Nothing here
imports llama.cpp.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
from typing import Any

from ...hardware import GPUInfo, HardwareInfo

log = logging.getLogger(__name__)

# How a child lists the devices: runtime/backends/devices.py, or a desktop bundle's own program (packaging/entry.py).
LIST_MODULE = "localchat.runtime.backends.devices"
LIST_FLAG = "--localchat-list-devices"
LIST_TIMEOUT_S = 120.0  # the child may prove each GPU module in a grandchild first
# Memory bandwidth (bytes/s) by device name, from the makers' published specs, for GPUs no driver
# library of ours reads (AMD and Intel through Vulkan). Longest names first: "7900 XTX" before "7900 XT".
SPEC_BANDWIDTH = {
    "RX 7900 XTX": 960e9, "RX 7900 XT": 800e9, "RX 7900 GRE": 576e9, "RX 7800 XT": 624e9, "RX 7700 XT": 432e9,
    "RX 7600 XT": 288e9, "RX 7600": 288e9, "RX 6950 XT": 576e9, "RX 6900 XT": 512e9, "RX 6800 XT": 512e9,
    "RX 6800": 512e9, "RX 6750 XT": 432e9, "RX 6700 XT": 384e9, "RX 6650 XT": 280e9, "RX 6600 XT": 256e9,
    "RX 6600": 224e9, "RX 9070 XT": 640e9, "RX 9070": 640e9, "Radeon VII": 1024e9, "MI300X": 5300e9,
    "MI250": 3200e9, "MI210": 1600e9, "Arc A770": 560e9, "Arc A750": 512e9, "Arc A580": 512e9,
    "Arc A380": 186e9, "Arc B580": 456e9, "Arc B570": 380e9,
}
_VENDORS = (("nvidia", ("NVIDIA", "GeForce", "RTX", "Quadro", "Tesla")), ("amd", ("AMD", "Radeon", "Instinct")),
            ("intel", ("Intel", "Arc")), ("apple", ("Apple",)), ("software", ("llvmpipe", "lavapipe", "SwiftShader")))


def _vendor(description: str) -> str:
    return next((v for v, marks in _VENDORS if any(m.lower() in description.lower() for m in marks)), "other")


def _same_bus(a: str, b: str) -> bool:
    """PCI bus ids as NVML ("00000000:01:00.0") and ggml ("0000:01:00.0") write them."""
    return bool(a and b) and a.lower().split(":", 1)[-1] == b.lower().split(":", 1)[-1]


def _driver_gpu(device: dict, seen: list[GPUInfo]) -> GPUInfo | None:
    """The GPU the driver reported that this device is, if any."""
    for gpu in seen:
        if _same_bus(gpu.pci_bus_id, device.get("device_id", "")):
            return gpu
    described = device.get("description", "").lower()
    for gpu in seen:
        if gpu.vendor == "apple" and device.get("backend", "").startswith(("Metal", "MTL")):
            return gpu
        if gpu.name and (gpu.name.lower() in described or described in gpu.name.lower()):
            return gpu
    return None


def _from_device(index: int, device: dict, driver: GPUInfo | None, info: HardwareInfo) -> GPUInfo:
    gpu = dataclasses.replace(driver, index=index) if driver else \
        GPUInfo(index=index, name=device.get("description") or device["name"], vendor=_vendor(device.get("description", "")))
    gpu.device = device["name"]
    gpu.memory_total, gpu.memory_free = int(device.get("memory_total", 0)), int(device.get("memory_free", 0))
    if gpu.vendor == "apple" and driver:  # Metal's own limit on what one process may wire
        gpu.memory_total, gpu.memory_free = driver.memory_total, driver.memory_free
    if gpu.bandwidth is None:
        spec = next((bw for name, bw in sorted(SPEC_BANDWIDTH.items(), key=lambda kv: -len(kv[0]))
                     if name.lower() in gpu.name.lower()), None)
        if spec:
            gpu.spec_bandwidth, gpu.bandwidth_source = spec, "the maker's spec for this model"
        elif device.get("kind") == "igpu" or gpu.vendor == "software":
            # An integrated GPU reads the host's RAM; a software one (llvmpipe) is the CPU itself.
            gpu.unified = True
            gpu.measured_bandwidth = info.ram_bandwidth
            gpu.bandwidth_source = "the host's RAM (it shares it)"
    return gpu


def merge(info: HardwareInfo, devices: list[dict], gap: str = "") -> HardwareInfo:
    """`info` with its GPUs replaced by llama.cpp's usable `devices` (their facts merged), the GPUs the
    drivers showed but this install cannot use named in `not_usable`, and `gpu_gap` set when none is usable."""
    seen = list(info.gpus)
    gpus = []
    for index, device in enumerate(devices):
        driver = _driver_gpu(device, seen)
        if driver is not None:
            seen.remove(driver)
        gpus.append(_from_device(index, device, driver, info))
    fix = gap or "this install's GPU backends do not reach it"
    not_usable = [f"{g.name}: seen by its driver, not usable by this install ({fix})" for g in seen]
    why = "" if gpus else (gap or "llama.cpp shows no GPU on this machine")
    return dataclasses.replace(info, gpus=gpus, gpus_checked=True, not_usable=not_usable, gpu_gap=why,
                               unified_memory=info.unified_memory or any(g.unified for g in gpus))


def listed(timeout: float = LIST_TIMEOUT_S) -> tuple[list[dict], str]:
    """(usable devices, why none) from a child process that loads this install's GPU backends."""
    base = [sys.executable, LIST_FLAG] if getattr(sys, "frozen", False) else [sys.executable, "-m", LIST_MODULE]
    try:
        done = subprocess.run(base, capture_output=True, timeout=timeout)
        found: Any = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
        return [d for d in found["devices"] if isinstance(d, dict) and "name" in d], str(found.get("gap", ""))
    except subprocess.TimeoutExpired:
        return [], f"listing the GPUs took over {timeout:.0f} s (a GPU driver may be stuck)"
    except (OSError, ValueError, IndexError, KeyError, TypeError) as exc:
        return [], f"the GPUs could not be listed ({exc})"


def usable(info: HardwareInfo) -> HardwareInfo:
    """`merge` with the devices listed in a child process (for processes that keep llama.cpp out)."""
    devices, gap = listed()
    return merge(info, devices, gap)
