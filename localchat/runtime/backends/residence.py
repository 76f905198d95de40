"""Where a loaded model's layers and buffers went, read from what llama.cpp said while loading it.

llama.cpp's API has no call for a layer's device; its log names the device of every layer (a debug
line), and the size of every buffer it allocated by buffer name (weights, KV cache, compute). A
buffer named after a device ("Vulkan0", "CUDA1") lives in that device's memory; "CPU", "CPU_Mapped"
and the pinned "*_Host" buffers live in RAM. This is the check that a plan for a GPU ran on one: its
claim, "31/31 layers on Vulkan0", is llama.cpp's own assignment, never the plan's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ...errors import LocalchatError
from ...units import size_text

_LAYER = re.compile(r"layer +(\d+) assigned to device (\S+?),")
_BUFFER = re.compile(r"(\S+) +(model|KV|compute|output|RS) buffer size = +([\d.]+) MiB")
HOST = "CPU"


@dataclass(slots=True)
class Residence:
    """Layers per device (llama.cpp's count: the output head is one more layer) and bytes per buffer home."""

    layers: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)   # device name -> bytes of weights, KV and compute

    @property
    def n_layers(self) -> int:
        return sum(self.layers.values())

    def gpu_layers(self) -> dict[str, int]:
        """Layers per device other than the CPU."""
        return {d: n for d, n in self.layers.items() if d != HOST}

    def on_gpu(self) -> int:
        return sum(self.gpu_layers().values())

    def text(self) -> str:
        """"31/31 layers on Vulkan0 (1.2 GB)"; "16/31 layers on Vulkan0 (610 MB), 15 on Vulkan1 (590 MB)"."""
        gpus = self.gpu_layers()
        if not self.layers:
            return "where the layers went is not known"
        if not gpus:
            return f"all {self.n_layers} layers on the CPU"
        cpu = self.layers.get(HOST, 0)
        rest = f", {cpu} on the CPU" if cpu else ""
        if len(gpus) == 1:
            (device, n), = gpus.items()
            return f"{n}/{self.n_layers} layers on {device} ({size_text(self.bytes.get(device))}){rest}"
        shares = ", ".join(f"{n} on {d} ({size_text(self.bytes.get(d))})" for d, n in gpus.items())
        return f"{self.on_gpu()}/{self.n_layers} layers: {shares}{rest}"

    def to_dict(self) -> dict:
        return {"layers": dict(self.layers), "bytes": dict(self.bytes), "text": self.text()}


def read(lines: list[str]) -> Residence:
    """The residence of one model and context from the log lines of its load (the last load's, if several)."""
    found = Residence()
    for line in lines:
        layer = _LAYER.search(line)
        if layer:
            if layer.group(1) == "0":  # a new load (a retry with fewer layers) starts over
                found = Residence()
            device = layer.group(2)
            found.layers[device] = found.layers.get(device, 0) + 1
            continue
        buffer = _BUFFER.search(line)
        if buffer:
            home = buffer.group(1)
            home = HOST if home.startswith("CPU") or home.endswith("_Host") else home
            found.bytes[home] = found.bytes.get(home, 0) + int(float(buffer.group(3)) * (1 << 20))
    return found


def describe_all(placed: dict[str, Residence | None]) -> str:
    """Each worker's residence by role, in words: one worker's alone, several as "prefill: ...; model: ..."."""
    known = {role: r for role, r in placed.items() if r is not None}
    if not known:
        return "where the layers went is not known"
    if len(known) == 1:
        return next(iter(known.values())).text()
    return "; ".join(f"{role}: {r.text()}" for role, r in known.items())


def device_bytes(placed: dict[str, Residence | None]) -> int:
    """Bytes all the workers hold in GPU memory (weights, KV and compute buffers)."""
    return sum(gpu_bytes(placed).values())


@dataclass(slots=True)
class DeviceMemory:
    """One GPU a loaded model uses, read live: what the model's buffers hold there, and the device's
    free and total memory as its driver reports them now (ggml_backend_dev_memory)."""

    device: str     # "Vulkan0", "CUDA1"
    held: int       # bytes of this model's weights, KV cache and compute buffers there (from the load's log)
    free: int
    total: int

    @property
    def free_known(self) -> bool:
        """Whether the driver counts what is allocated: one that reports all of a device free while the
        model's buffers sit on it has no free figure (Mesa's llvmpipe before its memory-budget support)."""
        return not (self.held > 0 and self.free >= self.total)

    def text(self) -> str:
        """"CUDA0: 9.4 GB free of 24.0 GB (this model: 13.1 GB)"."""
        if self.free_known:
            return f"{self.device}: {size_text(self.free)} free of {size_text(self.total)} (this model: {size_text(self.held)})"
        return (f"{self.device}: {size_text(self.total)} in all, free not reported by its driver "
                f"(this model: {size_text(self.held)})")

    def to_dict(self) -> dict:
        return {"device": self.device, "held": self.held, "free": self.free if self.free_known else None,
                "total": self.total}


def gpu_bytes(placed: dict[str, Residence | None]) -> dict[str, int]:
    """Bytes all the workers hold on each GPU, by device name, in the order the workers placed them."""
    found: dict[str, int] = {}
    for r in placed.values():
        for device, n in (r.bytes.items() if r is not None else ()):
            if device != HOST:
                found[device] = found.get(device, 0) + n
    return found


def live_memory(engine: Any) -> list[DeviceMemory]:
    """`engine.devices()` (an Engine's or a runner's), or none where it cannot answer now: a runner shut
    down or restarting leaves the status without the row rather than waiting on it."""
    try:
        return engine.devices() if hasattr(engine, "devices") else []
    except LocalchatError:
        return []


def memory_text(memory: list[DeviceMemory]) -> str:
    """The devices' memory in one line ("" on the CPU)."""
    return "; ".join(m.text() for m in memory)
