"""How a placement maps the engine's workers onto devices, and why an impossible one is refused.

Pure: it reads a HardwareInfo and the model's GGUF facts, and returns worker configurations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ..errors import PlacementError
from ..hardware import GPUInfo, HardwareInfo
from .worker import WorkerConfig, default_threads

MARGIN = 0.08  # of a GPU's free memory kept free: compute buffers and the CUDA context live there too
ALL_LAYERS = -1


@dataclass(slots=True)
class ModelSize:
    """What one copy of a model needs: its weights and its KV cache per token."""

    weights: int
    kv_per_token: int

    @classmethod
    def of(cls, path: Path) -> "ModelSize":
        """Read the sizes from a GGUF header (an F16 cache: 2 bytes per K and V element)."""
        from ..models.gguf_info import read_gguf

        info = read_gguf(path)
        head_dim = info.head_dim or (info.n_embd // info.n_head if info.n_head else 0)
        return cls(info.tensor_bytes, 2 * 2 * info.n_layer * info.n_head_kv * head_dim)

    def bytes_for(self, n_ctx: int) -> int:
        return self.weights + self.kv_per_token * n_ctx


@dataclass(slots=True)
class Arrangement:
    """The engine's workers for one placement, and a sentence saying what runs where."""

    placement: str
    worker: WorkerConfig
    prefill: WorkerConfig | None = None
    draft: WorkerConfig | None = None
    description: str = ""


def _gpus(hardware: HardwareInfo, devices: str) -> list[GPUInfo]:
    found = {g.index: g for g in hardware.gpus}
    if not devices:
        return sorted(found.values(), key=lambda g: g.index)
    chosen = []
    for part in devices.split(","):
        index = int(part)
        if index not in found:
            have = ", ".join(str(i) for i in sorted(found)) or "none"
            raise PlacementError(f"--devices names GPU {index}, but this machine's GPUs are: {have}.")
        chosen.append(found[index])
    return chosen


def _need_two(placement: str, gpus: list[GPUInfo], what: str) -> None:
    if len(gpus) < 2:
        have = {0: "no GPU", 1: "one GPU"}[len(gpus)]
        raise PlacementError(f"--placement {placement} needs two GPUs ({what}); {have} is available. "
                             "Use --placement single" + (" or pd-split (it runs on two CPU workers)." if not gpus else "."))


def _check_fits(placement: str, gpu: GPUInfo, need: int, what: str) -> None:
    room = int(gpu.memory_free * (1 - MARGIN))
    if need > room:
        raise PlacementError(
            f"--placement {placement}: {what} needs {need / 2**30:.1f} GiB on GPU {gpu.index} ({gpu.name}), which has "
            f"{room / 2**30:.1f} GiB to spare. Choose a smaller model or context, or --placement single.")


def arrange(placement: str, hardware: HardwareInfo, base: WorkerConfig, size: ModelSize | None = None,
            devices: str = "", draft_size: ModelSize | None = None) -> Arrangement:
    """The worker configurations for `placement` on `hardware`; PlacementError when it cannot run."""
    gpus = _gpus(hardware, devices)
    need = size.bytes_for(base.n_ctx) if size else 0
    if placement in ("auto", "single"):
        worker = dataclasses.replace(base, main_gpu=gpus[0].index) if gpus and devices else base
        layers = "all" if base.n_gpu_layers < 0 else str(base.n_gpu_layers)
        where = f"{layers} layers on GPU {worker.main_gpu}" if base.n_gpu_layers else "on the CPU"
        return Arrangement("single", worker, description=f"one worker, {where}")
    if placement == "pd-split":
        if not gpus:  # two CPU workers stand in for two devices: each gets half the cores
            threads = max(1, (base.n_threads or default_threads()) // 2)
            half = dataclasses.replace(base, n_threads=threads, n_gpu_layers=0)
            return Arrangement("pd-split", half, prefill=half,
                               description=f"prefill and decode workers on the CPU, {threads} thread(s) each")
        _need_two(placement, gpus, "one prefills, the other decodes")
        prefill_gpu, decode_gpu = gpus[0], gpus[1]
        for gpu, role in ((prefill_gpu, "the prefill copy"), (decode_gpu, "the decode copy")):
            _check_fits(placement, gpu, need, f"{role} of the model and its KV cache")
        on = {"n_gpu_layers": ALL_LAYERS, "split_mode": "none"}
        return Arrangement("pd-split", dataclasses.replace(base, main_gpu=decode_gpu.index, **on),
                           prefill=dataclasses.replace(base, main_gpu=prefill_gpu.index, **on),
                           description=f"prefill on GPU {prefill_gpu.index}, decode on GPU {decode_gpu.index}")
    if placement == "layer-split":
        _need_two(placement, gpus, "the layers are spread over them")
        total_free = sum(g.memory_free for g in gpus)
        if need > total_free * (1 - MARGIN):
            raise PlacementError(f"--placement layer-split: the model and its KV cache need {need / 2**30:.1f} GiB; "
                                 f"the GPUs have {total_free * (1 - MARGIN) / 2**30:.1f} GiB to spare together.")
        split = tuple(g.memory_free / total_free for g in gpus)
        worker = dataclasses.replace(base, n_gpu_layers=ALL_LAYERS, split_mode="layer", main_gpu=gpus[0].index,
                                     tensor_split=split)
        shares = ", ".join(f"GPU {g.index} {s:.0%}" for g, s in zip(gpus, split))
        return Arrangement("layer-split", worker, description=f"layers split by free memory: {shares}")
    if placement == "draft-gpu":
        _need_two(placement, gpus, "the model on one, its draft model on the other")
        if draft_size is None:
            raise PlacementError("--placement draft-gpu needs a draft model: pass --draft, or pick a model "
                                 "whose catalog entry has a draft pairing.")
        _check_fits(placement, gpus[0], need, "the model and its KV cache")
        _check_fits(placement, gpus[1], draft_size.bytes_for(base.n_ctx), "the draft model and its KV cache")
        on = {"n_gpu_layers": ALL_LAYERS, "split_mode": "none"}
        return Arrangement("draft-gpu", dataclasses.replace(base, main_gpu=gpus[0].index, **on),
                           draft=dataclasses.replace(base, main_gpu=gpus[1].index, **on),
                           description=f"model on GPU {gpus[0].index}, draft on GPU {gpus[1].index}")
    raise PlacementError(f"unknown placement {placement!r}; use auto, single, layer-split, pd-split or draft-gpu.")
