"""The planner's prediction for one model file, and efficiency corrections from what was measured."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hardware import HardwareInfo
from ..models.catalog import ModelFacts
from ..planning.cost import DECODE_FILL, DEFAULT_EFFICIENCY, devices_of
from ..planning.planner import Wants, options_at

# Which efficiency factors set the decode and the prefill speed of a layout.
_DECODE_KEYS = {"cpu": ("bandwidth", "cpu_decode_compute", "cpu_attention")}
_PREFILL_KEYS = {"cpu": ("cpu_prefill_compute",)}
_GPU_DECODE_KEYS = ("bandwidth",)
_GPU_PREFILL_KEYS = ("gpu_compute", "cpu_prefill_compute")
# Past these the measurement is more likely broken than the roofline: keep corrections sane.
EFFICIENCY_RANGE = (0.01, 4.0)


@dataclass(slots=True)
class Prediction:
    """What the planner expects of a model+quant at a context, without a draft."""

    layout: str
    decode_tps: float
    prefill_tps: float
    weights: int
    kv: int
    compute: int
    n_gpu_layers: int = 0
    devices: list[str] = field(default_factory=list)   # where it runs: cpu, cuda:0, ...
    draft_speedup: float = 0.0   # the catalog draft's predicted speedup here (0: no draft to place)

    @property
    def memory(self) -> int:
        """Weights + KV + compute, bytes, over all devices."""
        return self.weights + self.kv + self.compute


def predict(hardware: HardwareInfo, catalog: dict[str, ModelFacts], key: str, quant: str, n_ctx: int,
            efficiency: dict[str, float] | None = None, layout: str | None = None,
            fill: int = DECODE_FILL, acceptance: dict[str, float] | None = None) -> Prediction | None:
    """The planner's numbers for one model+quant at n_ctx (f16 KV), decode at `fill` cached tokens
    (a draft at the measured `acceptance` by target key, where given), or None when it cannot be placed."""
    wants = Wants(n_ctx=n_ctx, efficiency=dict(efficiency or {}), decode_fill=fill,
                  measured_acceptance=dict(acceptance or {}))
    devices, _ = devices_of(hardware, {**DEFAULT_EFFICIENCY, **wants.efficiency})
    options = options_at(catalog[key], quant, n_ctx, "f16", devices, catalog, wants)
    # A layout named after its draft ("draft-on-second-gpu") falls back to the layout underneath it.
    matching = [o for o in options if layout in (None, o.layout)] or options
    if not matching:
        return None
    option = matching[0]
    use = option.usage
    return Prediction(option.layout, option.plain_decode_tps, option.prefill_tps,
                      sum(u["weights"] for u in use), sum(u["kv"] for u in use), sum(u["compute"] for u in use),
                      option.n_gpu_layers, [u["device"] for u in use], option.draft_speedup)


def corrections(hardware: HardwareInfo, catalog: dict[str, ModelFacts], key: str, quant: str, n_ctx: int,
                layout: str, decode_tps: float, prefill_tps: float,
                base: dict[str, float] | None = None, fill: int = DECODE_FILL) -> dict[str, float]:
    """Efficiency factors under which the planner predicts the measured speeds for this file."""
    eff = {**DEFAULT_EFFICIENCY, **(base or {})}
    cpu = layout == "cpu"
    decode_keys = _DECODE_KEYS["cpu"] if cpu else _GPU_DECODE_KEYS
    prefill_keys = _PREFILL_KEYS["cpu"] if cpu else _GPU_PREFILL_KEYS
    low, high = EFFICIENCY_RANGE
    # Speed is not linear in one factor (max of two bounds plus per-layer overhead): a few
    # multiplicative rounds converge to within a percent.
    for _ in range(8):
        now = predict(hardware, catalog, key, quant, n_ctx, eff, layout, fill)
        if now is None or now.decode_tps <= 0 or now.prefill_tps <= 0:
            break
        ratios = [(decode_keys, decode_tps / now.decode_tps if decode_tps > 0 else 1.0),
                  (prefill_keys, prefill_tps / now.prefill_tps if prefill_tps > 0 else 1.0)]
        if all(abs(r - 1) < 0.01 for _, r in ratios):
            break
        for keys, ratio in ratios:
            for name in keys:
                eff[name] = min(high, max(low, eff[name] * ratio))
    return {k: round(v, 4) for k, v in eff.items()}
