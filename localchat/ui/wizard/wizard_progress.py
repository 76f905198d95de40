"""The wizard's progress view: its steps, which is under way and what it found so far, read from the lines
`localchat tune` prints (tuning.py collects them), written as HTML for the wide panel above the chat.

The steps follow the wizard's order (tune/wizard.py: run_wizard) and a run never goes back one: a line
that could belong to an earlier step (a download while comparing formats) stays with the current one."""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from ...tune.here import ALREADY_HERE
from ...units import duration_text

STEPS = ("Read this machine", "Plan the candidates", "Measure the candidates", "Compare file formats",
         "Measure a draft model", "Measure placements", "Keep the best")
RECENT = 8  # the lines of the step under way shown under the steps; the whole log is one click away


def step_of(line: str) -> int | None:
    """The step a top-level line of the wizard starts or belongs to; None for an indented or other line."""
    if line.startswith("hardware:"):
        return 0
    if line.startswith("plan ("):
        return 1
    if line.startswith("measuring draft"):
        return 4
    if line.startswith(("measuring placement", "placement:")):
        return 5
    if line.startswith("format:") or line.endswith("side by side ..."):
        return 3
    if line.startswith(("measuring ", "fetching ")) or ALREADY_HERE in line:  # why it measures what is here
        return 2
    if line.startswith(("kept ", "planner corrections:", "profile:", "chart:")):
        return 6
    return None


@dataclass(slots=True)
class Progress:
    """The steps as far as the lines go: the step under way and each step's lines."""

    current: int = 0
    lines: list[list[str]] = field(default_factory=lambda: [[] for _ in STEPS])

    @classmethod
    def of(cls, log: list[str]) -> "Progress":
        progress = cls()
        for line in log:
            if not line.strip():
                continue
            step = step_of(line)
            if step is not None:
                progress.current = max(progress.current, step)
            progress.lines[progress.current].append(line.strip())
        return progress


def progress_html(log: list[str], state: str, elapsed_s: float) -> str:
    """The view of one run. `state`: "running", "kept", "cancelled" or "failed"."""
    progress = Progress.of(log)
    last = next((line for line in reversed(log) if line.strip() and line.strip() != "cancelled"), "")
    kept = next((line for line in reversed(log) if line.startswith("kept ")), "")
    headline = {
        "running": f"Step {progress.current + 1} of {len(STEPS)}: {STEPS[progress.current]}",
        "kept": kept[0].upper() + kept[1:] if kept else "Finished",
        "cancelled": "Cancelled: nothing was kept, the settings are as they were",
        "failed": f"Stopped before it kept a model: {last}" if last else "Stopped before it kept a model",
    }[state]
    steps = "".join(_step(i, progress, state) for i in range(len(STEPS)))
    recent = progress.lines[progress.current][-RECENT:] if state == "running" else []
    detail = (f'<pre class="lc-tune-recent">{escape(chr(10).join(recent))}</pre>' if recent else "")
    return (f'<div class="lc-tune-progress" data-state="{state}" data-step="{progress.current + 1}">'
            f'<div class="lc-tune-head"><b>Hardware wizard</b> · {escape(headline)}'
            f' <span class="lc-tune-time">{duration_text(elapsed_s)}</span></div>'
            f'<ol class="lc-tune-steps">{steps}</ol>{detail}'
            f'<details class="lc-tune-log"><summary>The whole log ({len(log)} lines)</summary>'
            f'<pre>{escape(chr(10).join(log))}</pre></details></div>')


def _step(index: int, progress: Progress, state: str) -> str:
    """One step: done (✓), skipped (it printed nothing), under way (…), ended there (✗) or still to come."""
    if index < progress.current or (index == progress.current and state == "kept"):
        mark, kind = ("✓", "done") if progress.lines[index] else ("–", "skipped")
    elif index == progress.current:
        mark, kind = {"running": ("…", "now"), "cancelled": ("✗", "ended"), "failed": ("✗", "ended")}[state]
    else:
        mark, kind = ("○", "later") if state == "running" else ("–", "skipped")
    return f'<li class="lc-tune-{kind}" title="{kind}"><span>{mark}</span> {escape(STEPS[index])}</li>'
