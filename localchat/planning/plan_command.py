"""`localchat plan`: the planner's command and its readable plan (planner.py decides; this prints)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..arguments import Parser
from ..errors import ConfigError
from ..hardware import DESCRIPTION_HELP, HardwareInfo
from ..models.catalog import load_catalog as load_facts
from ..units import size_text
from .gptq_options import best_per_model
from .placements import placement_of
from .planner import Plan, Wants, plan
from .policy import SPEED_FLOOR


def format_plan(result: Plan) -> str:
    """A readable plan."""
    what = "GPTQ checkpoint folder " if result.format == "gptq" else ""
    lines = [f"model      {result.name} {result.quant}  ({what}{result.file}, {size_text(result.size)})",
             f"layout     {result.layout} (--placement {placement_of(result.layout).name})  "
             f"n_gpu_layers={result.n_gpu_layers}  n_ctx={result.n_ctx}  type_k/type_v={result.type_k}",
             f"draft      {result.draft + ' ' + (result.draft_quant or '') + ' on ' + (result.draft_device or '') if result.draft else 'none'}",
             f"speed      decode {result.predicted_decode_tps} tok/s, prefill {result.predicted_prefill_tps} tok/s (predicted)"]
    lines += [f"memory     {u.device}: {size_text(u.total)} of {size_text(u.free)} free (weights "
              f"{size_text(u.weights)}, KV {size_text(u.kv)}, compute {size_text(u.compute)}"
              + (f", draft {size_text(u.draft)})" if u.draft else ")") for u in result.devices]
    lines += ["why"] + [f"  - {r}" for r in result.reasons]
    if result.faster:
        f = result.faster
        lines.append(f"faster     {f.model} {f.quant} ({f.layout}, {f.predicted_decode_tps} tok/s): {f.why_not}")
    lines += ["alternatives"] + [f"  - {a.model} {a.quant} ({a.layout}, {a.predicted_decode_tps} tok/s): {a.why_not}"
                                 for a in result.alternatives]
    if result.gptq:  # one prior for every checkpoint: said once
        lines += [f"gptq       priced on the torch worker: {result.gptq[0].speed_prior}"]
        lines += [f"  - {g.model} {g.quant}: {g.text()}" for g in best_per_model(result.gptq)]
    lines += [f"warning    {w}" for w in result.warnings]
    return "\n".join(lines)


@dataclass(slots=True)
class Measured:
    """What `localchat tune` measured on this machine, for the planner: speed corrections and the
    draft acceptance by target key, and a note saying where they come from."""

    efficiency: dict[str, float]
    acceptance: dict[str, float]
    note: str


def main(argv: list[str] | None = None, measured: Callable[[HardwareInfo], Measured | None] | None = None,
         settings: Callable[[argparse.ArgumentParser], Callable[[argparse.Namespace], float]] | None = None,
         usable: Callable[[HardwareInfo], HardwareInfo] | None = None) -> int:
    """`localchat plan [--json] [--hardware FILE.json] [--context N] [--model FAMILY]`; `measured` gives
    this machine's tuned corrections when it has some (the command passes the tuned profile's); `settings`
    adds the settings' flags (`--speed-target`) to the parser and reads the speed target from the parsed
    flags and the settings (the command passes config's; without it the planner's default holds); `usable`
    keeps this machine's GPUs to those this install can use (the command passes the runtime's check)."""
    parser = Parser(prog="localchat plan", description="Plan the best model for a machine.",
                    epilog=DESCRIPTION_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--hardware", type=Path,
                        help="plan for the machine this JSON file describes (format below; this machine's: "
                             "`localchat probe --json > FILE`)")
    parser.add_argument("--context", type=int, help="context length in tokens (default: the longest that fits)")
    parser.add_argument("--model", help="limit to a model family (qwen3, qwen2.5, llama3, gemma3, smollm2) or key")
    parser.add_argument("--catalog", type=Path, help="catalog file (default: the built-in models.yaml)")
    parser.add_argument("--min-speed", type=float, default=SPEED_FLOOR,
                        help=f"decode tokens/s floor: slower only when nothing reaches it (default {SPEED_FLOOR:g})")
    parser.add_argument("--concurrency", type=int, default=1, help="chats served at once (PD split needs > 1)")
    parser.add_argument("--offline", action="store_true",
                        help="plan with the catalog's file sizes; do not ask the model hub for current ones")
    speed_target = settings(parser) if settings else None
    args = parser.parse_args(argv)
    wants = Wants(n_ctx=args.context, family=args.model, min_decode_tps=args.min_speed, concurrency=args.concurrency)
    if speed_target is not None:
        wants.speed_target = float(speed_target(args))
    notes: list[str] = []
    if args.hardware:
        try:
            hardware = HardwareInfo.from_description(args.hardware.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read {args.hardware} ({exc.strerror}); write one with `localchat probe --json`.") from None
        except ConfigError as exc:
            raise ConfigError(f"{args.hardware}: {exc}") from None
    else:
        from ..hardware.probe import probe

        hardware = probe()
        if usable is not None:
            hardware = usable(hardware)
            notes += [f"not planned for: {line}" for line in hardware.not_usable]
        tuned = measured(hardware) if measured else None
        if tuned is not None:
            # This machine was measured: its corrections and draft acceptance beat the defaults.
            wants.efficiency, wants.measured_acceptance = dict(tuned.efficiency), dict(tuned.acceptance)
            notes.append(tuned.note)
    from ..models.sizes import refresh_sizes

    sized = refresh_sizes(load_facts(args.catalog), network=not args.offline)
    result = plan(hardware, sized.facts, wants)
    result.reasons += sized.reasons + notes
    result.warnings += sized.warnings
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_plan(result))
    return 0
