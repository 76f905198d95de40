"""The one memory-fit model: what a model needs on a device and what a device can give.

The planner decides with it and the launch refuses with it, so a plan that fits never meets a
refusal, and a refused launch was never planned. The KV formula is the catalog facts' own
(`ModelFacts.kv_bytes`: every layer holds n_ctx cells, sliding-window layers too, each KV type its
bytes per element); this module adds the margin, the reserves and the compute scratch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..hardware import GPUInfo
    from ..models.catalog import ModelFacts

# What is kept free on each kind of device beside the planned buffers (weights, KV cache, compute scratch).
# The buffers themselves are counted as llama.cpp allocates them: on the reference machine its log of
# one load of SmolLM2-135M Q4_1 at n_ctx 8192 matches `usage` to the byte for weights and KV and
# within 1% for the compute buffer (docs/architecture.md, "The memory-fit model"), so no share of
# the free memory is held back for estimation error on a discrete GPU.
#
# A CUDA GPU: llama.cpp's own fit (`--fit`, `llama_params_fit`, ggml-org/llama.cpp PR #16653) leaves
# 1024 MiB free per device beside its projection of the same three buffers (the default of
# `fit_params_target` in common/common.h), for what the projection does not hold: the CUDA pool's
# temporary buffers, cuBLAS workspaces, fragmentation. It measures free memory after its CUDA context
# exists; the probe reads NVML's figure before our runner has one, so the context (about 330 MiB on a
# 24 GB card, measured in unslothai/unsloth PR #6718) comes on top.
FIT_TARGET = 1 << 30
CUDA_CONTEXT = 330 << 20
# The host holds the app, the UI and the OS's breathing room, and its free memory moves with every
# other program: a share of it is kept too. A unified GPU's memory is the host's, whose reserve is
# counted once, on the host.
RESERVE = {"gpu": FIT_TARGET + CUDA_CONTEXT, "cpu": 1 << 30, "unified": 0}
MARGIN = {"gpu": 0.0, "cpu": 0.08, "unified": 0.08}  # of the device's free memory
N_UBATCH = 512                 # llama.cpp's default micro-batch: it sizes the compute scratch


def budget(free: int, kind: str) -> int:
    """Bytes a device with `free` bytes may be planned to hold; kind is gpu, cpu or unified."""
    return max(0, int(free * (1 - MARGIN[kind])) - RESERVE[kind])


def gpu_budget(gpu: GPUInfo, host_free: int | None = None) -> int:
    """A GPU's budget. A unified GPU's memory is the host's: given `host_free`, it gets no more than that."""
    if gpu.unified:
        return budget(gpu.memory_free if host_free is None else min(gpu.memory_free, host_free), "unified")
    return budget(gpu.memory_free, "gpu")


def usage(model: ModelFacts, quant: str, n_ctx: int, type_kv: str, n_layers: int, head: bool,
          whole_file: bool = False) -> dict[str, int]:
    """Bytes one device holds for `n_layers` of the model's layers (and the output head when `head`),
    their KV cache at n_ctx and a context's compute scratch; `whole_file`: all of the file's weights."""
    weights = model.files[quant].size if whole_file else \
        n_layers * model.layer_bytes(quant) + (model.output_bytes(quant) if head else 0)
    kv = model.kv_bytes(n_ctx, type_kv, n_layers)
    compute = model.compute_bytes(N_UBATCH) if n_layers or whole_file else 0
    return {"weights": weights, "kv": kv, "compute": compute, "draft": 0, "total": weights + kv + compute}


def fits(usages: list[dict]) -> bool:
    """Every device's planned bytes within its budget."""
    return all(u["total"] <= u["budget"] for u in usages)


def copy_bytes(model: ModelFacts, quant: str, n_ctx: int, type_kv: str = "f16") -> int:
    """Bytes one whole copy of the model needs on one GPU: every layer, the head, KV and scratch."""
    return usage(model, quant, n_ctx, type_kv, model.n_layer, True)["total"]


@dataclass(slots=True)
class ModelSize:
    """What one copy of a model needs on one GPU. Built from the model's facts (`of`, `of_facts`), it
    counts as the planner counts (`copy_bytes`); a size given by hand counts weights + KV per token + compute."""

    weights: int               # the weights of the whole file
    kv_per_token: int          # cache bytes of one token over all layers (sliding-window layers cap theirs)
    compute: int = 0
    facts: ModelFacts | None = None
    quant: str = ""
    type_kv: str = "f16"

    @classmethod
    def of_facts(cls, model: ModelFacts, quant: str, type_kv: str = "f16", weights: int | None = None) -> "ModelSize":
        """The size of `model` at `quant`, as the planner's fit model counts it."""
        one = usage(model, quant, 1, type_kv, model.n_layer, True, whole_file=True)
        return cls(one["weights"] if weights is None else weights, one["kv"], one["compute"], model, quant, type_kv)

    @classmethod
    def of(cls, path: Path, type_kv: str = "f16") -> "ModelSize":
        """The size of a GGUF model (a split one by its first part), from its header (exact tensor and
        per-layer bytes)."""
        from ..models.catalog import facts_from_gguf
        from ..models.gguf_info import read_model

        info = read_model(path)  # a split model: all its parts
        model = facts_from_gguf(info, Path(path).stem, info.file_size or 0)
        return cls.of_facts(model, model.default_quant, type_kv, weights=info.tensor_bytes)

    def bytes_for(self, n_ctx: int) -> int:
        """What one GPU holds for a whole copy at n_ctx: weights, KV cache and compute scratch."""
        if self.facts is not None:
            return copy_bytes(self.facts, self.quant, n_ctx, self.type_kv)
        return self.weights + self.kv_per_token * n_ctx + self.compute
