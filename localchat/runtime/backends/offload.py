"""A worker's GPU layers as llama.cpp's model parameters: the devices named explicitly, never llama.cpp's
own pick (which takes every GPU in its order, or silently none), and fewer layers after an out-of-memory."""

from __future__ import annotations

import ctypes
import re

import llama_cpp

from ...errors import ModelLoadError
from ..worker_types import WorkerConfig
from .devices import Device, handle_of, install_gap, usable_devices

# What llama.cpp and its backends log when a device has no room for a buffer.
_OUT_OF_MEMORY = re.compile(r"out of (device )?memory|OutOfDeviceMemory|failed to allocate|cudaMalloc failed"
                            r"|unable to allocate", re.IGNORECASE)


def devices_for(config: WorkerConfig) -> tuple[list[Device], str]:
    """The GPUs a worker's config puts layers on, in order, and why there are none when it wanted some
    (the worker then runs on the CPU and says so). A GPU index this process cannot use is an error."""
    if config.n_gpu_layers == 0:
        return [], ""
    usable = usable_devices()
    if not usable:
        return [], install_gap() or "llama.cpp shows no GPU on this machine"
    if config.split_mode == "layer":
        wanted = list(config.gpus) or list(range(len(usable)))
    else:
        wanted = [config.main_gpu]
    for index in wanted:
        if not 0 <= index < len(usable):
            names = ", ".join(f"{i}: {d.name} ({d.description})" for i, d in enumerate(usable))
            raise ModelLoadError(f"GPU {index} is not one this install can use; usable here: {names}. "
                                 "`localchat probe` lists them.")
    return [usable[i] for i in wanted], ""


def apply(mparams: llama_cpp.llama_model_params, config: WorkerConfig, chosen: list[Device],
          n_gpu_layers: int, keep: list) -> None:
    """Set the devices, layer count, split and main device; `keep` holds the arrays llama.cpp points at
    for as long as the model lives."""
    handles = [handle_of(d) for d in chosen]
    devices = (ctypes.c_void_p * (len(handles) + 1))(*handles, None)  # NULL-terminated; empty: the CPU only
    keep.append(devices)
    mparams.devices = ctypes.addressof(devices)
    mparams.n_gpu_layers = n_gpu_layers if chosen else 0
    mparams.main_gpu = 0  # an index into the list just given
    mparams.split_mode = llama_cpp.LLAMA_SPLIT_MODE_LAYER if len(chosen) > 1 else llama_cpp.LLAMA_SPLIT_MODE_NONE
    if len(chosen) > 1 and config.tensor_split:
        slots = llama_cpp.llama_max_devices()
        split = (ctypes.c_float * slots)(*config.tensor_split[:slots])
        keep.append(split)
        mparams.tensor_split = split


def fewer_layers(lines: list[str], n_gpu_layers: int) -> int | None:
    """The layer count to try after a load that failed for device memory (half of what it placed), or
    None when the failure was something else, or nothing is left to take off the GPU."""
    if not any(_OUT_OF_MEMORY.search(line) for line in lines):
        return None
    placed = sum(1 for line in lines if "assigned to device" in line)  # every layer, the output head too
    current = placed if n_gpu_layers < 0 or n_gpu_layers > placed else n_gpu_layers
    return current // 2 if current > 1 else None
