"""`localchat tune`: probe -> plan -> fetch -> measure -> keep the best -> save the profile and a chart."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, TextIO

from ..arguments import Parser
from ..errors import BusyMachineError, LocalchatError, ModelNotFoundError
from ..hardware import HardwareInfo
from ..hardware.probe import probe
from ..models.catalog import ModelFacts, load_catalog
from ..models.resolve import catalog_draft
from ..models.sizes import apply_to_entries, refresh_sizes
from ..planning.cost import DECODE_FILL
from ..planning.placements import layout_for, placement_of
from ..planning.planner import Wants, plan
from ..planning.policy import SPEED_FLOOR, Speeds, Standing, choose
from ..runtime.workers.worker import WorkerConfig
from ..units import size_text
from .calibrate import corrections, predict
from .candidates import Ask, Candidate, candidates_of, gather, print_candidates
from .chart import ChartRow, save_chart
from .draft import Speculation, measure_draft
from .formats import RACE_TOKENS, FormatRun, race
from .here import CLI, DOWNLOADS_FAILED, NO_NETWORK, WINDOW, Words, here_candidates
from .load import QUIET_WAIT_S, measured_when_quiet
from .measure import Measurement, measure
from .placements import tune_placement
from .profile import Profile, hardware_text, profile_path, save_profile

# A prompt chunk beside streaming chats may stretch one step to this: 20 tokens/s still reads smoothly.
LATENCY_TARGET_MS = 50.0
DRAFT_TOKENS = 64  # tokens per chat when measuring a draft: enough passes for a stable acceptance
PLACEMENT_DOC_TOKENS = 1500  # the long read of the placement workload: several prefill chunks
SUSPICIOUS = 0.25   # a measured decode speed below this share of the prediction: likely a busy machine


def _keep_best(measured: list[Candidate], wants: Wants) -> Candidate:
    """The planner's policy (planning/policy.py) on measured numbers."""
    standings = [Standing(c.label, c.quality, c.measurement.decode_tps, c.measurement.decode_tps, c.layout)
                 for c in measured]
    return measured[choose(standings, Speeds(wants.speed_target, wants.min_decode_tps)).chosen]


def _step_budget(m: Measurement) -> int:
    """The largest measured prompt chunk whose step stays within the inter-token latency target."""
    target = max(LATENCY_TARGET_MS, 2 * m.step_ms.get(1, 0.0))
    fitting = [size for size, ms in m.chunk_ms.items() if ms <= target]
    return max(fitting, default=0)


def _measure_draft(best: Candidate, entries: dict[str, ModelFacts], hardware: HardwareInfo,
                   facts: dict[str, ModelFacts], efficiency: dict[str, float], n_tokens: int,
                   out: TextIO) -> Speculation | None:
    """The kept model with its catalog draft, when that file is here: greedy acceptance and speedup,
    and what the planner predicts with that acceptance. A failure is noted, never raised."""
    draft_path = catalog_draft(best.key, entries)
    if draft_path is None or best.path is None or best.measurement is None:
        return None
    key, m = entries[best.key].draft or "", best.measurement
    print(f"measuring draft {key} with {best.label} ...", file=out, flush=True)
    try:
        found = measure_draft(best.path, draft_path, n_ctx=m.n_ctx, n_threads=m.n_threads,
                              n_gpu_layers=best.n_gpu_layers, n_tokens=n_tokens)
    except LocalchatError as exc:
        print(f"  draft {key}: not measured ({exc})", file=out)
        return None
    # The draft chats run at a short context (a prompt and n_tokens): predict at that fill too.
    predicted = predict(hardware, facts, best.key, best.quant, best.n_ctx, efficiency, best.layout,
                        fill=n_tokens, acceptance={best.key: found.acceptance})
    return key, found, predicted.draft_speedup if predicted else 0.0


def _print_table(measured: list[Candidate], best: Candidate, spec: Speculation | None, out: TextIO) -> None:
    print(f"\n  {'model':<26} {'decode pred/meas':>18} {'prefill pred/meas':>19} {'memory pred/actual':>20}", file=out)
    for c in measured:
        p, m = c.predicted, c.measurement
        mark = "*" if c is best else " "
        decode = f"{p.decode_tps:.0f}/{m.decode_tps:.0f} tok/s" if p else f"?/{m.decode_tps:.0f} tok/s"
        prefill = f"{p.prefill_tps:.0f}/{m.prefill_tps:.0f} tok/s" if p else f"?/{m.prefill_tps:.0f} tok/s"
        memory = f"{size_text(p.memory if p else None)}/{size_text(m.memory.total)}"
        print(f"{mark} {c.label:<26} {decode:>18} {prefill:>19} {memory:>20}", file=out)
    if spec:
        key, d, predicted = spec
        print(f"  {'+ draft ' + key:<26} acceptance {d.acceptance:.0%} ({d.tokens_per_pass:.2f} tokens per target "
              f"pass at k={d.k:g}); decode {d.plain_tps:.0f} -> {d.draft_tps:.0f} tok/s with it: {d.speedup:.2f}x "
              f"measured, {predicted:.2f}x predicted" + ("" if d.identical else "; OUTPUT DIFFERED"), file=out)


def machine_line(hardware: HardwareInfo) -> str:
    """The wizard's first line: the machine it tunes, its memory in the units `localchat probe` shows."""
    return (f"hardware: {hardware_text(hardware)}, {size_text(hardware.ram_total)} RAM"
            + "".join(f"; {g.name} {size_text(g.memory_total)}" for g in hardware.gpus))


def _machine_and_catalog(probe_fn: Callable[[], HardwareInfo], catalog: Path | None, network: bool,
                         out: TextIO) -> tuple[HardwareInfo, dict[str, ModelFacts], dict[str, ModelFacts], bool]:
    """The machine, the catalog's entries, their facts with current file sizes (asking the hub with
    `network`) and whether the hub was asked and did not answer; prints the machine's line and what the
    sizes' refresh noted."""
    hardware = probe_fn()
    entries = load_catalog(catalog)
    sized = refresh_sizes(entries, network=network)
    apply_to_entries(entries, sized)
    print(machine_line(hardware), file=out)
    for note in sized.reasons + sized.warnings:
        print(f"  {note}", file=out)
    return hardware, entries, sized.facts, network and sized.unreachable


def _candidates(hardware: HardwareInfo, facts: dict[str, ModelFacts], entries: dict[str, ModelFacts], wants: Wants,
                download: bool, max_measured: int, out: TextIO,
                ask: Ask | None = None) -> tuple[list[Candidate], list[Candidate]]:
    """The plan's candidates (the top 3 printed) and those whose file is here or was fetched (perhaps none)."""
    considered = candidates_of(plan(hardware, facts, wants), hardware, facts, wants)
    print("plan (top 3, predicted):", file=out)
    print_candidates(considered[:3], out)
    return considered, gather(considered, hardware, facts, entries, wants, download, max_measured, out, ask)


def _nothing_ready(considered: list[Candidate], words: Words) -> str:
    """Why no candidate is ready: DOWNLOADS_FAILED when downloads were tried and none came (the files here are
    measured instead); anything else is a ModelNotFoundError that says what to do."""
    if any(c.status.startswith("cannot download") for c in considered):
        return DOWNLOADS_FAILED
    tried = "; ".join(f"{c.label}: {c.status}" for c in considered)
    raise ModelNotFoundError(f"no candidate model file is here or could be fetched ({tried}). {words.nothing_here}")


def _measure_each(ready: list[Candidate], hardware: HardwareInfo, fill: int, out: TextIO, allow_busy: bool,
                  quiet_wait_s: float, words: Words) -> list[Candidate]:
    """Measure each candidate on the real runtime, with other programs quiet (load.py: measured again once,
    else a BusyMachineError); one that fails to load is noted in its status and skipped. Returns those
    measured; none is a ModelNotFoundError."""
    measured = []
    for c in ready:
        print(f"measuring {c.label} (n_ctx {c.n_ctx}, {hardware.physical_cores} threads) ...", file=out, flush=True)

        def run(c: Candidate = c) -> Measurement:
            return measure(c.path, n_ctx=c.n_ctx, n_threads=hardware.physical_cores, n_gpu_layers=c.n_gpu_layers,
                           fill=fill)

        try:
            c.measurement = measured_when_quiet(run, c.label, out, allow_busy=allow_busy, quiet_wait_s=quiet_wait_s,
                                                keep_busy=words.keep_busy)
        except BusyMachineError:
            raise
        except LocalchatError as exc:
            c.status = f"failed to load: {exc}"
            continue
        c.status = "measured"
        measured.append(c)
        if c.predicted and c.measurement.decode_tps < SUSPICIOUS * c.predicted.decode_tps:
            print(f"  warning: {c.measurement.decode_tps:.1f} tok/s is under {SUSPICIOUS:.0%} of the predicted "
                  f"{c.predicted.decode_tps:.1f}; if the machine was busy, tune again when it is idle.", file=out)
    if not measured:
        raise ModelNotFoundError("no candidate model could be loaded: "
                                 + "; ".join(f"{c.label}: {c.status}" for c in ready))
    return measured


def _calibrate(best: Candidate, hardware: HardwareInfo, facts: dict[str, ModelFacts], entries: dict[str, ModelFacts],
               wants: Wants, download: bool, race_tokens: tuple[int, int],
               out: TextIO, ask: Ask | None) -> tuple[dict[str, float], list[FormatRun], str]:
    """The planner corrections the kept model's measurement makes, and the side-by-side run of its GGUF
    file and GPTQ checkpoint (its verdict printed): (corrections, the runs, the verdict)."""
    m = best.measurement
    efficiency = corrections(hardware, facts, best.key, best.quant, best.n_ctx, best.layout,
                             m.decode_tps, m.prefill_tps, base=wants.efficiency, fill=m.decode_fill)
    runs, format_reason, torch_rate = race(hardware, facts, entries, best.key, best.quant, best.path, m.n_ctx,
                                           m.n_threads, best.n_gpu_layers, wants, out, race_tokens,
                                           download=download, ask=ask)
    print(f"format: {format_reason}", file=out)
    efficiency |= torch_rate  # the torch kernels' measured share, where the planner offers GPTQ
    return efficiency, runs, format_reason


def _placement(best: Candidate, hardware: HardwareInfo, facts: dict[str, ModelFacts], checkpoint: FormatRun | None,
               spec: Speculation | None, doc_tokens: int, out: TextIO) -> tuple[str, list[dict], str]:
    """The layout the profile keeps, each placement measured (with `doc_tokens`; 0 measures none), and why."""
    if checkpoint:  # the torch worker runs on one device: there is no placement to choose
        return ("gpu" if any(not g.unified for g in hardware.gpus) else "cpu", [],
                "not measured: the GPTQ checkpoint runs on the torch worker, on one device")
    if not doc_tokens:
        return best.layout, [], "not measured (asked not to): the planner's is kept"
    m, planned = best.measurement, placement_of(best.layout).name
    base = WorkerConfig(n_ctx=m.n_ctx, n_threads=m.n_threads, n_gpu_layers=best.n_gpu_layers)
    kept, placements, reason = tune_placement(
        best.path, hardware, base, planned, Path(spec[1].draft_path) if spec else None, doc_tokens, out)
    if kept == planned:
        return best.layout, placements, reason
    # The planner's layout did not win: the profile keeps the layout the winner runs.
    return layout_for(kept, best.n_gpu_layers, facts[best.key].n_layer), placements, reason


def _draw_chart(measured: list[Candidate], chart: Path, hardware: HardwareInfo) -> tuple[str | None, str]:
    """Each measured candidate's predicted and measured numbers drawn into `chart`: (its path, "") or,
    when it cannot be drawn, (None, why)."""
    rows = [ChartRow(c.label, c.predicted.decode_tps if c.predicted else 0, c.measurement.decode_tps,
                     c.predicted.prefill_tps if c.predicted else 0, c.measurement.prefill_tps,
                     c.predicted.memory / 1e6 if c.predicted else 0, c.measurement.memory.total / 1e6)
            for c in measured]
    try:
        save_chart(rows, chart, f"localchat tune: predicted vs measured ({hardware_text(hardware)})")
    except (ImportError, OSError) as exc:
        return None, f"no chart ({exc})"
    return str(chart), ""


def _print_kept(profile: Profile, path: Path, no_chart: str, out: TextIO) -> None:
    """The wizard's last lines: what was kept, the planner corrections, where the profile and chart are."""
    print(f"\nkept {profile.model} {profile.quant}: {profile.decode_tps:.1f} tok/s decode, {profile.prefill_tps:.0f} "
          f"tok/s prefill, {size_text(profile.memory['total'])}; step budget {profile.step_budget or 'adaptive'}",
          file=out)
    print("planner corrections: " + ", ".join(f"{k} {v:g}" for k, v in profile.efficiency.items()), file=out)
    print(f"profile: {path}\nchart:   {profile.chart or no_chart}", file=out)


def usable_machine() -> HardwareInfo:
    """This machine with the GPUs this install can use (the wizard measures on them)."""
    from ..runtime.backends.gpus import usable

    return usable(probe())


def run_wizard(probe_fn: Callable[[], HardwareInfo] = usable_machine, catalog: Path | None = None, download: bool = True,
               out: TextIO = sys.stdout, *, wants: Wants | None = None, fill: int = DECODE_FILL,
               max_measured: int = 2, refresh: bool | None = None, draft_tokens: int = DRAFT_TOKENS,
               placement_doc_tokens: int = PLACEMENT_DOC_TOKENS, race_tokens: tuple[int, int] = RACE_TOKENS,
               allow_busy: bool = False, quiet_wait_s: float = QUIET_WAIT_S, ask: Ask | None = None,
               include: list[Path] | None = None, words: Words = CLI) -> Profile:
    """Tune this machine end to end and save the profile; returns it. `refresh`: ask the hub for current
    file sizes (default: when downloading is allowed). `placement_doc_tokens` 0 skips measuring placements.
    `race_tokens`: the prompt and answer of the side-by-side run of the kept model's GGUF and GPTQ files.
    Candidates are measured with other programs quiet (waiting up to `quiet_wait_s` for them); measured
    beside them twice is a BusyMachineError and nothing is saved, unless `allow_busy`. `ask`: the question
    before each download (the terminal's yes or no); None downloads without one. With downloads off, or no
    network, the model files already here are measured (tune/here.py), the files in `include` among them;
    `words`: the command line's or the window's (tune/here.py)."""
    # Predict decode at the fill the measurements use, so predicted and measured compare.
    wants = replace(wants or Wants(), decode_fill=fill)
    hardware, entries, facts, unreachable = _machine_and_catalog(probe_fn, catalog,
                                                                 download if refresh is None else refresh, out)
    why = words.downloads_off if not download else NO_NETWORK if unreachable else ""
    if not why:
        considered, ready = _candidates(hardware, facts, entries, wants, download, max_measured, out, ask)
        why = "" if ready else _nothing_ready(considered, words)  # downloads that failed: measure what is here
    if why:
        download = False  # nothing is fetched below: no format race download either
        ready = here_candidates(hardware, facts, entries, wants, include or [], max_measured, why, words, out)
        considered = list(ready)
    measured = _measure_each(ready, hardware, fill, out, allow_busy, quiet_wait_s, words)
    best = _keep_best(measured, wants)
    best.status = "kept"
    efficiency, runs, format_reason = _calibrate(best, hardware, facts, entries, wants, download, race_tokens, out,
                                                 ask)
    checkpoint = next((r for r in runs if r.format == "gptq" and r.status == "kept"), None)
    spec = _measure_draft(best, entries, hardware, facts, efficiency, draft_tokens, out) if not checkpoint else None
    _print_table(measured, best, spec, out)
    layout, placements, placement_reason = _placement(best, hardware, facts, checkpoint, spec,
                                                      placement_doc_tokens, out)
    print(f"placement: {placement_reason}", file=out)
    path = profile_path()
    chart, no_chart = _draw_chart(measured, path.with_name("profile.png"), hardware)
    profile = Profile.measured(hardware, best, layout=layout, step_budget=_step_budget(best.measurement),
                               efficiency=efficiency, considered=considered, runs=runs, format_reason=format_reason,
                               checkpoint=checkpoint, spec=spec, placements=placements,
                               placement_reason=placement_reason, chart=chart)
    save_profile(profile, path)
    _print_kept(profile, path, no_chart, out)
    return profile


def _ask_at_terminal(question: str) -> bool:
    """`question` [y/N] on stderr, the answer read from the terminal: only y or yes agrees."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def main(argv: list[str] | None = None) -> int:
    """`localchat tune [--json] [--no-download]`."""
    parser = Parser(prog="localchat tune", description="Measure this machine and keep the fastest good model.")
    parser.add_argument("--json", action="store_true", help="print the saved profile as JSON (progress on stderr)")
    parser.add_argument("--no-download", dest="download", action="store_false",
                        help="only consider model files already here (and keep the catalog's file sizes "
                             "instead of asking the model hub)")
    parser.add_argument("--catalog", type=Path, help="catalog file (default: the built-in models.yaml)")
    parser.add_argument("--min-speed", type=float, default=SPEED_FLOOR,
                        help=f"decode tokens/s floor: slower only when nothing reaches it (default {SPEED_FLOOR:g})")
    parser.add_argument("--no-placements", dest="placements", action="store_false",
                        help="keep the planner's placement instead of measuring each one this machine can run "
                             "(one device, layer split, PD split, draft on a second GPU) with chats beside a long read")
    parser.add_argument("--allow-busy", action="store_true",
                        help="keep speeds measured while other programs use the CPU (by default the wizard waits "
                             "for them, measures again, and saves nothing when they stay busy)")
    parser.add_argument("--include", type=Path, action="append", default=[], metavar="PATH",
                        help="with downloads off or no network, measure this model file too, among the models "
                             "already here (repeatable)")
    parser.add_argument("--window", action="store_true", help=argparse.SUPPRESS)  # the window's words, not flags
    parser.add_argument("--yes", action="store_true",
                        help="download a better model without asking first (at a terminal the wizard asks before "
                             "each download; elsewhere it never waits for an answer)")
    args = parser.parse_args(argv)
    out = sys.stderr if args.json else sys.stdout
    # At a terminal, each download is asked for; piped or in the window's child (no terminal) nobody could
    # answer, and --yes or the window's tick already said yes.
    ask = _ask_at_terminal if args.download and not args.yes and sys.stdin.isatty() else None
    profile = run_wizard(catalog=args.catalog, download=args.download, out=out,
                         wants=Wants(min_decode_tps=args.min_speed),
                         placement_doc_tokens=PLACEMENT_DOC_TOKENS if args.placements else 0,
                         allow_busy=args.allow_busy, ask=ask, include=args.include,
                         words=WINDOW if args.window else CLI)
    if args.json:
        print(json.dumps(profile.to_dict(), indent=2))
    return 0
