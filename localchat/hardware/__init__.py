"""What the machine has: HardwareInfo (from `probe()`, or a JSON file that describes a machine)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError


@dataclass(slots=True)
class GPUInfo:
    """One accelerator. Bytes and bytes/s throughout; None where the driver did not say."""

    index: int
    name: str
    vendor: str = "nvidia"                 # nvidia | amd | intel | apple | software (a CPU posing as a GPU)
    memory_total: int = 0
    memory_free: int = 0
    bus_width_bits: int | None = None
    memory_clock_mhz: int | None = None    # max memory clock as NVML reports it (double data rate)
    spec_bandwidth: float | None = None
    measured_bandwidth: float | None = None
    compute_capability: str | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    fp32_tflops: float | None = None
    fp16_tflops: float | None = None       # matrix throughput llama.cpp's prompt kernels can reach
    unified: bool = False                  # shares the host's RAM (Apple silicon, integrated GPUs)
    device: str = ""                       # llama.cpp's name for it ("CUDA0", "Vulkan1"): usable by this install
    pci_bus_id: str = ""                   # "0000:01:00.0" where the driver says
    bandwidth_source: str = ""             # where `bandwidth` comes from, in words, when not the driver

    @property
    def bandwidth(self) -> float | None:
        """Measured bandwidth when there is one, else the spec figure."""
        return self.measured_bandwidth or self.spec_bandwidth


@dataclass(slots=True)
class HardwareInfo:
    """The machine as the planner sees it."""

    os: str = "unknown"
    machine: str = "unknown"               # x86_64 | arm64 | ...
    cpu_model: str = "unknown"
    physical_cores: int = 1
    logical_cores: int = 1
    cpu_max_mhz: float | None = None
    cpu_flags: list[str] = field(default_factory=list)
    ram_total: int = 0
    ram_available: int = 0
    ram_bandwidth: float | None = None     # measured host copy bandwidth
    gpus: list[GPUInfo] = field(default_factory=list)
    peer_access: list[list[int]] = field(default_factory=list)  # GPU index pairs with P2P reads
    unified_memory: bool = False
    warnings: list[str] = field(default_factory=list)
    # Set once the GPUs were checked against what llama.cpp can use here (runtime/backends/gpus.py): `gpus`
    # then holds the usable ones only, indexed as `--devices` names them.
    gpus_checked: bool = False
    not_usable: list[str] = field(default_factory=list)  # GPUs seen but not usable: which, why, the fix
    gpu_gap: str = ""                      # why no GPU is usable, with the fix ("" when one is)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """JSON text that `from_json` reads back to an equal object."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HardwareInfo":
        """Build from plain data; missing keys take defaults, unknown keys are errors."""
        if not isinstance(data, dict):
            raise ConfigError("a hardware description must be a JSON object; see `localchat probe --json`.")
        gpus = [_build(GPUInfo, g, f"gpus[{i}]") for i, g in enumerate(data.get("gpus") or [])]
        info = _build(cls, {**data, "gpus": []}, "hardware")
        info.gpus = gpus
        return info

    @classmethod
    def from_json(cls, text: str) -> "HardwareInfo":
        """Parse `to_json` output; missing keys take defaults (see `from_description` for planning)."""
        return cls.from_dict(_load_json(text))

    @classmethod
    def from_description(cls, text: str) -> "HardwareInfo":
        """Parse a machine description to plan for: every fact the planner needs must be given."""
        data = _load_json(text)
        if isinstance(data, dict):
            missing = [k for k in DESCRIPTION_REQUIRED if data.get(k) is None]  # null says "unknown" too
            for i, gpu in enumerate(data.get("gpus") or []):
                if isinstance(gpu, dict):
                    missing += [f"gpus[{i}].{k}" for k in GPU_REQUIRED if gpu.get(k) is None]
                    if gpu.get("spec_bandwidth") is None and gpu.get("measured_bandwidth") is None:
                        missing.append(f"gpus[{i}].spec_bandwidth")
            if missing:
                raise ConfigError(f"the hardware description lacks {', '.join(missing)}; a described machine "
                                  f"needs at least {DESCRIPTION_EXAMPLE} (bytes and bytes/s; `localchat plan "
                                  "--help` lists every field, `localchat probe --json` prints this machine's).")
        return cls.from_dict(data)


# What the planner cannot guess: without them a plan would be made for a machine with no memory,
# one core, or a GPU it must skip. The rest (ram_bandwidth, cpu_flags, ...) has safe defaults.
DESCRIPTION_REQUIRED = ("ram_total", "ram_available", "physical_cores")
GPU_REQUIRED = ("index", "name", "memory_total", "memory_free")
DESCRIPTION_EXAMPLE = ('{"ram_total": 17179869184, "ram_available": 12884901888, "physical_cores": 8, '
                       '"gpus": [{"index": 0, "name": "RTX 4070", "memory_total": 12884901888, '
                       '"memory_free": 12348030976, "spec_bandwidth": 504e9}]}')
DESCRIPTION_HELP = f"""\
The machine description (--hardware FILE) is JSON, as `localchat probe --json` prints it.
Required: ram_total, ram_available (bytes), physical_cores; for each GPU in "gpus": index, name,
memory_total, memory_free (bytes) and spec_bandwidth or measured_bandwidth (bytes/s).
Optional: ram_bandwidth (bytes/s; 20 GB/s assumed), cpu_flags (like ["avx2", "fma"]),
cpu_max_mhz, logical_cores, unified_memory, peer_access ([[0, 1]]: GPU pairs with P2P reads),
and per GPU fp16_tflops, fp32_tflops, compute_capability, pcie_gen, pcie_width, unified.
Example (a 16 GB, 8-core machine with one 12 GB GPU):
  {DESCRIPTION_EXAMPLE}"""


def _load_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the hardware description is not valid JSON ({exc}); "
                          "write it like `localchat probe --json` prints.") from None


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where} in the hardware description must be an object.")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} in {where} of the hardware description; "
                          f"known keys: {', '.join(sorted(names))}.")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ConfigError(f"{where} of the hardware description is incomplete ({exc}).") from None


__all__ = ["DESCRIPTION_HELP", "GPUInfo", "HardwareInfo"]
