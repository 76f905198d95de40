"""The Hessians GPTQ needs: each linear's input activations over calibration text, layer by layer,
each layer fed by the already quantized layers before it (so later layers correct earlier errors)."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .kernels import DenseLinear
from .kv_cache import SeqCache
from .loader import ROLES, build_decoder, dense_linear
from .model import ModelConfig, Row


# Linears that read the same input share one Hessian (and one GPTQ pass over their stacked rows).
SHARED_INPUTS = (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("self_attn.o_proj",),
                 ("mlp.gate_proj", "mlp.up_proj"), ("mlp.down_proj",))


class Recorder:
    """A linear that also sums X^T X of the inputs it sees."""

    def __init__(self, linear: Callable[[torch.Tensor], torch.Tensor], columns: int) -> None:
        self.linear = linear
        self.sum = torch.zeros(columns, columns)
        self.count = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.sum.addmm_(x.T, x)
        self.count += x.shape[0]
        return self.linear(x)


@torch.no_grad()
def hessians(config: dict[str, Any], dense: dict[str, torch.Tensor], calibration: list[list[int]],
             quantize_layer: Callable[[int, dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> None:
    """For each layer: record H = X^T X / n per input (keyed by the first linear of SHARED_INPUTS that
    reads it), call quantize_layer(index, {name: H}) for the dequantized weights {name: W} of every
    linear, and run the layer again with them to feed the next."""
    model = ModelConfig.from_hf(config)
    decoder = build_decoder(model, dense, dense_linear(dense))
    rows = [Row(SeqCache(model.n_layer, model.n_head_kv, model.head_dim), 0, len(c)) for c in calibration]
    positions = torch.cat([torch.arange(len(c)) for c in calibration])
    cos, sin = decoder.rope_tables(positions)
    x = decoder.embed[torch.tensor([t for c in calibration for t in c])].float()
    for index, layer in enumerate(decoder.layers):
        recorders = {}
        for role, name in ROLES.items():
            if any(name == names[0] for names in SHARED_INPUTS):
                recorders[name] = Recorder(getattr(layer, role), getattr(layer, role).weight.shape[1])
                setattr(layer, role, recorders[name])
        decoder.block(index, x, rows, cos, sin)
        weights = quantize_layer(index, {name: r.sum / r.count for name, r in recorders.items()})
        for role, name in ROLES.items():
            setattr(layer, role, DenseLinear(weights[name], dense.get(f"model.layers.{index}.{name}.bias")))
        x = decoder.block(index, x, rows, cos, sin)
