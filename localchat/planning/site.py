"""What a planner layout sees (placements.py declares the layouts, cost.py prices them): the devices
with their budgets, and one model+quant at one context and KV type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..models.catalog import ModelFacts
from .fit import usage


@dataclass(slots=True)
class Device:
    """A place for layers: its budget in bytes, bandwidth in bytes/s and matmul FLOP/s."""

    name: str
    kind: str                  # cpu | gpu
    index: int
    free: int
    budget: int
    bandwidth: float
    flops: float
    unified: bool = False
    stream: float = 0.0        # CPU: what its cores stream while they also compute (see cost.py's CORE_BANDWIDTH)


@dataclass(slots=True)
class Site:
    """What a planner layout sees: one model+quant at one context and KV type, and the devices."""

    model: ModelFacts
    quant: str
    n_ctx: int
    type_kv: str
    cpu: Device
    gpus: list[Device]
    wants: Any                    # the planner's Wants
    fitting: list[Device] = field(default_factory=list)  # GPUs that hold the whole model

    def use(self, device: Device, n_layers: int, head: bool, whole_file: bool = False) -> dict:
        """The fit model's bytes of these layers on `device`, with its budget."""
        return {"device": device.name, **usage(self.model, self.quant, self.n_ctx, self.type_kv, n_layers, head,
                                               whole_file), "budget": device.budget, "free": device.free}

    def embeddings_on_host(self) -> dict:
        """The token embeddings stay in RAM whatever runs on the GPUs (llama.cpp keeps them there)."""
        host = self.use(self.cpu, 0, False)
        weights = self.model.host_bytes(self.quant)
        return {**host, "weights": weights, "total": weights}

    @property
    def per_layer(self) -> int:
        return self.model.layer_bytes(self.quant) + self.model.kv_bytes(self.n_ctx, self.type_kv, 1)
