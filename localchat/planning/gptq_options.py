"""GPTQ checkpoints in the plan: priced by the one memory model (fit.py: weights from the checkpoint's
size, KV and compute scratch as for GGUF) and the one cost model (cost.py's step time) with the torch
kernels' efficiency; offered only where they can win: on an NVIDIA GPU, with the gptq extra installed.

On the CPU a GPTQ checkpoint is not offered: llama.cpp's CPU kernels decode the GGUF file of the same
model faster than torch runs the checkpoint (docs/benchmarks.md, GPTQ). A checkpoint that is here is
still measured against the GGUF file by `localchat tune` (tune/formats.py), which keeps what it measures.
"""

from __future__ import annotations

import dataclasses

from .. import gptq
from ..models.catalog import ModelFacts
from .cost import ENGINE_STEP_OVERHEAD, LAYER_OVERHEAD, Option, step_time
from .fit import N_UBATCH, fits, usage
from .site import Device

# The torch worker runs eagerly: about ten kernel launches per layer and step and no CUDA graphs, where
# llama.cpp's graph pays LAYER_OVERHEAD["gpu"].
TORCH_LAYER_OVERHEAD = 150e-6
# The share of llama.cpp's roofline speed (bandwidth and FLOPs) torch's int4 kernels reach on the same
# GPU: assumed until `localchat tune` measures a checkpoint on one (it records `torch_gptq` then).
TORCH_GPTQ_EFFICIENCY = 0.5
CPU_REASON = ("on the CPU llama.cpp's kernels decode the model's GGUF file faster than torch runs the "
              "checkpoint (docs/benchmarks.md, GPTQ)")


def nvidia_gpus(devices: list[Device]) -> list[Device]:
    """The CUDA devices among the planner's (the torch worker's GPTQ kernels are CUDA's)."""
    return [d for d in devices if d.kind == "gpu" and not d.unified]


def unavailable(devices: list[Device], extra: bool | None) -> str | None:
    """Why no GPTQ checkpoint is offered on these devices, or None when they are. `extra`: whether the
    gptq extra is installed (None: look now)."""
    if not nvidia_gpus(devices):
        return f"not offered without an NVIDIA GPU: {CPU_REASON}"
    if not (gptq.extra_installed() if extra is None else extra):
        return f"{gptq.NEEDS_EXTRA}: {gptq.INSTALL_HINT}"
    return None


def not_offered(models: list[ModelFacts], why: str | None) -> list[str]:
    """The plan's reason naming the checkpoints it left out and why ([] when none were)."""
    names = [f"{m.key}:{q}" for m in models for q in m.formats("gptq")]
    if not why or not names:
        return []
    return [f"GPTQ checkpoints ({', '.join(names[:3])}" + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            + f"): {why}."]


def gptq_options(model: ModelFacts, quant: str, n_ctx: int, devices: list[Device], eff: dict[str, float],
                 fill: int) -> list[Option]:
    """The checkpoint whole on the fastest NVIDIA GPU that holds it (torch keeps every weight there,
    embeddings too), with its predicted speeds; [] when none holds it."""
    checkpoint = model.files[quant]
    L = model.n_layer
    for gpu in sorted(nvidia_gpus(devices), key=lambda g: -g.bandwidth):
        use = {"device": gpu.name, **usage(model, quant, n_ctx, "f16", L, True, whole_file=True),
               "budget": gpu.budget, "free": gpu.free}
        if not fits([use]):
            continue
        rate = eff.get("torch_gptq", TORCH_GPTQ_EFFICIENCY)
        torch_gpu = dataclasses.replace(gpu, bandwidth=gpu.bandwidth * rate, flops=gpu.flops * rate)
        eager = L * (TORCH_LAYER_OVERHEAD - LAYER_OVERHEAD["gpu"])
        t1 = step_time(model, quant, [(torch_gpu, L, True)], 1, "f16", eff, fill) + eager + ENGINE_STEP_OVERHEAD
        prefill = N_UBATCH / (step_time(model, quant, [(torch_gpu, L, True)], N_UBATCH, "f16", eff, fill // 2) + eager)
        why = (f"layout gpu: the GPTQ {checkpoint.bits}-bit checkpoint runs whole on {gpu.name} on the torch worker "
               f"(the gptq extra), at {rate:g} of llama.cpp's roofline speed "
               + ("(measured by `localchat tune`)." if "torch_gptq" in eff else "(assumed)."))
        return [Option(model.key, quant, n_ctx, "f16", "gpu", L + 1, max(gpu.index, 0), [], [use], 1 / t1, prefill,
                       1 / t1, reasons=[why, "no draft: a draft model runs on llama.cpp, this checkpoint on torch."])]
    return []
