"""Placements measured on the real hardware: a mixed workload per candidate, and the rule that keeps one.

The workload is what PD split is for: chats stream while a long document is read. Each candidate
runs it on the real model; a split is kept only where it measurably wins over one device.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from ..errors import LocalchatError, PlacementError
from ..hardware import HardwareInfo
from ..planning.fit import ModelSize
from ..planning.placements import RUNNABLE, Arrangement, arrange
from ..runtime.engine import Engine, EngineConfig
from ..runtime.workers.worker import WorkerConfig
from ..workloads import MixedResult, mixed_workload

# A split must cut the streaming chats' worst latency beside a long read by this much...
MIN_BUSY_GAIN = 0.25
# ...without making a chat alone slower than this fraction of one device's speed.
MIN_IDLE_SPEED = 0.9


def measure_placement(path: Path, layout: Arrangement, doc_tokens: int, draft: Path | None = None) -> MixedResult:
    """Load the model as `layout` says and run the mixed workload on it."""
    roomy = layout.with_context(doc_tokens + 2048)  # the document and the chats must fit beside each other
    config = EngineConfig.placed(roomy, draft_path=draft if layout.draft is not None else None)
    with Engine.load(path, config) as engine:
        return mixed_workload(engine, layout.placement, doc_tokens)


def keep_placement(results: list[MixedResult], base_name: str = "single") -> tuple[MixedResult, str]:
    """The baseline's result (one device, or the planner's layout) unless a split cuts busy p99 enough
    without slowing a chat alone."""
    base = next((r for r in results if r.placement == base_name), results[0])
    best, why = base, f"{base.placement}: no other placement measured better"
    for r in results:
        if r is base:
            continue
        gain = 1 - r.busy_p99 / base.busy_p99
        idle_speed = base.idle_p50 / r.idle_p50
        if gain >= MIN_BUSY_GAIN and idle_speed >= MIN_IDLE_SPEED and r.busy_p99 < best.busy_p99:
            best, why = r, (f"{r.placement}: chats beside a long read {gain:.0%} smoother (p99 {r.busy_p99:.0f} vs "
                            f"{base.busy_p99:.0f} ms), alone {idle_speed:.0%} of one device's speed")
        elif best is base:
            why = (f"{base.placement}: {r.placement} changed busy p99 by {-gain:+.0%} and ran a chat alone at "
                   f"{idle_speed:.0%} of its speed (needs -{MIN_BUSY_GAIN:.0%} and {MIN_IDLE_SPEED:.0%})")
    return best, why


def tune_placement(path: Path, hardware: HardwareInfo, base: WorkerConfig, planned: str, draft: Path | None,
                   doc_tokens: int, out: TextIO) -> tuple[str, list[dict], str]:
    """Measure every placement this machine can run for the kept model and keep the winner.
    Returns (the placement setting kept, each one's numbers, why). One that fails is noted and skipped."""
    size = ModelSize.of(path)
    draft_size = ModelSize.of(draft) if draft else None
    results, rows = [], []
    for name in RUNNABLE:
        try:
            layout = arrange(name, hardware, base, size, draft_size=draft_size)
        except PlacementError as exc:
            rows.append({"placement": name, "status": f"not possible: {exc}"})
            continue
        print(f"measuring placement {name} ({layout.description}) ...", file=out, flush=True)
        try:
            result = measure_placement(path, layout, doc_tokens, draft)
        except LocalchatError as exc:
            rows.append({"placement": name, "status": f"failed: {exc}"})
            continue
        results.append(result)
        rows.append({**result.summary(), "status": "measured", "description": layout.description})
        print(f"  idle ITL p50 {result.idle_p50:.1f} ms; beside a {result.doc_tokens}-token read p50 "
              f"{result.busy_p50:.1f} ms, p99 {result.busy_p99:.1f} ms", file=out)
    if not results:
        return planned, rows, "no placement could be measured; the planner's choice stands"
    kept, why = keep_placement(results, planned)
    for row in rows:
        if row["placement"] == kept.placement:
            row["status"] = "kept"
    return kept.placement, rows, why
