"""GPTQ checkpoints in the plan: priced by the one memory model (fit.py: weights from the checkpoint's
size, KV and compute scratch as for GGUF) and the one cost model (cost.py's step time) with the torch
kernels' efficiency; offered only where they can win: on an NVIDIA GPU, with the gptq extra installed.

On the CPU a GPTQ checkpoint is not offered: llama.cpp's CPU kernels decode the GGUF file of the same
model faster than torch runs the checkpoint (docs/benchmarks.md, GPTQ). A checkpoint that is here is
still measured against the GGUF file by `localchat tune` (tune/formats.py), which keeps what it measures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import gptq
from ..models.catalog import ModelFacts
from ..units import size_text
from .cost import ENGINE_STEP_OVERHEAD, LAYER_OVERHEAD, Option, step_time
from .fit import N_UBATCH, fits, usage
from .site import Device

# The torch worker runs eagerly: about ten kernel launches per layer and step and no CUDA graphs, where
# llama.cpp's graph pays LAYER_OVERHEAD["gpu"].
TORCH_LAYER_OVERHEAD = 150e-6
# The share of llama.cpp's roofline speed (bandwidth and FLOPs) torch's int4 kernels reach on the same
# GPU: assumed until `localchat tune` measures a checkpoint on one (it records `torch_gptq` then).
TORCH_GPTQ_EFFICIENCY = 0.5
# Where that prior comes from, for the plan. No GPU has run the torch worker here yet. torch's int4
# kernel (tinygemm) decodes Llama-7B at ~830 GB/s on an A100 (~0.4 of its bandwidth) with torch.compile
# and CUDA graphs (gpt-fast's published runs), where llama.cpp's CUDA kernels reach ~0.6-0.8; the worker
# runs eagerly (TORCH_LAYER_OVERHEAD per layer comes on top).
PRIOR_SOURCE = ("assumed: no GPU run measured yet; torch's int4 kernel reaches ~0.4 of an A100's bandwidth "
                "with torch.compile (gpt-fast), llama.cpp's ~0.7")
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


@dataclass(slots=True)
class GptqEntry:
    """One GPTQ checkpoint as the plan priced it: its predicted speed, the prior behind it, and its verdict."""

    model: str
    quant: str
    n_ctx: int
    predicted_decode_tps: float     # 0 where it fits no GPU
    quality: float
    speed_prior: str                # the torch kernels' share of the roofline and where it comes from
    verdict: str                    # chosen, or why not

    def text(self) -> str:
        """One line of the readable plan."""
        if not self.predicted_decode_tps:
            return self.verdict
        return f"{self.predicted_decode_tps} tok/s predicted, score {self.quality:.2f}: {self.verdict}"


def speed_prior(eff: dict[str, float]) -> str:
    """The torch kernels' share of llama.cpp's roofline the plan uses, and where it comes from."""
    if "torch_gptq" in eff:
        return f"torch at {eff['torch_gptq']:g} of llama.cpp's roofline, measured by `localchat tune`"
    return f"torch at {TORCH_GPTQ_EFFICIENCY:g} of llama.cpp's roofline, {PRIOR_SOURCE}"


def gptq_entries(models: list[ModelFacts], judged: list[tuple[Option, str]], eff: dict[str, float]) -> list[GptqEntry]:
    """Every GPTQ checkpoint of `models` on an NVIDIA GPU: those priced (`judged`: each option with the
    planner's verdict on it) and those that fit no GPU here."""
    prior = speed_prior(eff)
    found = [GptqEntry(o.model, o.quant, o.n_ctx, round(o.decode_tps, 1), round(o.quality, 2), prior, verdict)
             for o, verdict in judged]
    placed = {(o.model, o.quant) for o, _ in judged}
    for model in models:
        for quant, checkpoint in model.formats("gptq").items():
            if (model.key, quant) not in placed:
                found.append(GptqEntry(model.key, quant, 0, 0.0, 0.0, prior,
                                       f"not chosen: it fits no NVIDIA GPU here with its KV cache (the checkpoint "
                                       f"alone is {size_text(checkpoint.size)}; torch keeps every weight on the GPU)"))
    return found


def best_per_model(entries: list[GptqEntry]) -> list[GptqEntry]:
    """For the readable plan: each model's chosen or fastest checkpoint (the JSON keeps them all)."""
    best: dict[str, GptqEntry] = {}
    for entry in entries:
        held = best.get(entry.model)
        if held is None or (entry.verdict == "chosen", entry.predicted_decode_tps) > \
                (held.verdict == "chosen", held.predicted_decode_tps):
            best[entry.model] = entry
    return list(best.values())
