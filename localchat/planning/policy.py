"""The planner's policy: of the options that fit, the one a person would run, and why.

Speed counts up to a target and no further. At or above the speed target (the `speed_target`
setting, SPEED_TARGET by default) quality decides. Below it, each halving of the decode speed must be
bought by about a doubling of the model (SPEED_WORTH quality points per halving; one point of the
quality score is a doubling of the parameters): people do not trade half their speed for one quant
step. Under the floor an option is taken only when nothing reaches the floor.

Why 20 tok/s by default: silent reading runs at ~240 words a minute (~5 tokens/s) and skimming at about
twice that, so a stream at 10+ tok/s stays ahead of its reader; the predictions are rooflines at assumed
efficiencies until `localchat tune` measures them (±30%), so a predicted 20 still streams faster than a
reader skims; and a thinking model writes a few hundred tokens before its answer (300 tokens: 15 s at 20
tok/s, 38 s at 8). The tune wizard sizes prompt chunks for the same 20 tok/s (tune/wizard.py,
LATENCY_TARGET_MS). The target is soft rather than a hard cut because a tiny model reaches it on
every machine: a hard cut would give a CPU-only laptop a 1.7B model at 25 tok/s over a 4B at 12.

A partial offload (some layers run from host RAM) must beat the best option that runs wholly on GPUs by
more than PARTIAL_MARGIN: its speed is the least certain prediction (PCIe, host bandwidth, the CPU's
other work) and it takes the host's memory and cores too. Scores within QUALITY_TIE of the best are a
tie, which the faster option wins (with its draft, where one pays).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SPEED_TARGET = 20.0     # tok/s of decode (without a draft) above which speed no longer counts
SPEED_FLOOR = 8.0       # tok/s under which nothing is taken while something reaches it
SPEED_WORTH = 1.0       # quality points one halving of speed under the target costs
PARTIAL_MARGIN = 0.3    # points a partial offload must win by over a whole-GPU option (a Q4_K_M->Q8_0 step is 0.23)
QUALITY_TIE = 0.1       # points within which quality is a tie (Q5_K_M..Q8_0 of one model)
FASTER_BY = 1.15        # the faster runner-up the plan names decodes at least this much faster
ON_HOST = ("cpu", "partial")   # layouts whose layers (some or all) run from host RAM


@dataclass(frozen=True, slots=True)
class Standing:
    """What the policy weighs of one option."""

    name: str                  # how the reasons name it: "Qwen3-32B Q4_K_M"
    quality: float             # the planner's quality score
    speed: float               # predicted decode tok/s without a draft: what the target and floor count
    decode: float              # with the draft where one pays: what breaks a tie
    layout: str


@dataclass(frozen=True, slots=True)
class Speeds:
    """The speeds the policy holds options to."""

    target: float = SPEED_TARGET
    floor: float = SPEED_FLOOR


@dataclass(slots=True)
class Verdict:
    """The pick (an index into the standings), why, the faster runner-up and each option's worth."""

    chosen: int
    reasons: list[str]
    faster: int | None
    worth: list[float]
    fast_enough: bool          # the pick reaches the floor


def _whole_gpu(s: Standing) -> bool:
    return s.layout not in ON_HOST


def slowness(s: Standing, speeds: Speeds) -> float:
    """Quality points an option's speed costs: none at or above the target."""
    return SPEED_WORTH * max(0.0, math.log2(speeds.target / max(s.speed, 1e-3)))


def worth(s: Standing, speeds: Speeds, whole_gpu_exists: bool) -> float:
    """An option's quality less what its speed and a partial offload cost."""
    partial = PARTIAL_MARGIN if s.layout == "partial" and whole_gpu_exists else 0.0
    return s.quality - slowness(s, speeds) - partial


def choose(standings: list[Standing], speeds: Speeds, split_first: bool = False) -> Verdict:
    """The option a person would run; `split_first` (several chats or long prompts): a PD split wins a tie."""
    assert standings
    whole = any(_whole_gpu(s) for s in standings)
    worths = [worth(s, speeds, whole) for s in standings]
    fast = [i for i, s in enumerate(standings) if s.speed >= speeds.floor]
    pool = fast or list(range(len(standings)))
    best = max(pool, key=lambda i: (worths[i], standings[i].decode))
    tied = [i for i in pool if worths[i] >= worths[best] - QUALITY_TIE]
    chosen = max(tied, key=lambda i: (split_first and standings[i].layout == "pd-split", standings[i].decode,
                                      worths[i]))
    reasons = _reasons(standings, worths, chosen, best, speeds, bool(fast), whole)
    quicker = [i for i in range(len(standings)) if standings[i].decode >= standings[chosen].decode * FASTER_BY]
    faster = max(quicker, key=lambda i: (worths[i], standings[i].decode)) if quicker else None
    return Verdict(chosen, reasons, faster, worths, bool(fast))


def _reasons(standings: list[Standing], worths: list[float], chosen: int, best: int, speeds: Speeds,
             fast: bool, whole: bool) -> list[str]:
    pick = standings[chosen]
    at = f"{pick.speed:.1f} tok/s predicted without a draft"
    if not fast:
        lines = [f"{pick.name}: nothing that fits reaches {speeds.floor:g} tok/s; this is the best trade of "
                 f"quality (score {pick.quality:.2f}) and speed ({at}) of the rest."]
    elif pick.speed >= speeds.target:
        lines = [f"{pick.name}: the best quality (score {pick.quality:.2f}) that reaches the {speeds.target:g} "
                 f"tok/s speed target ({at})."]
    else:
        reaching = [i for i, s in enumerate(standings) if s.speed >= speeds.target]
        lines = [f"{pick.name}: {at}, under the {speeds.target:g} tok/s target, but its quality (score "
                 f"{pick.quality:.2f}) pays for that: each halving of speed under the target has to buy a model "
                 f"about twice the size (one point)"
                 + (f"; the best that reaches the target, {standings[max(reaching, key=lambda i: worths[i])].name}, "
                    f"scores {pick.quality - standings[max(reaching, key=lambda i: worths[i])].quality:.2f} lower."
                    if reaching else "; nothing that fits reaches the target.")]
    if chosen != best:
        lines.append(f"a tie on quality: {standings[best].name} is worth {worths[best] - worths[chosen]:.2f} more "
                     f"(within {QUALITY_TIE:g}), and {pick.name} decodes faster ({pick.decode:.1f} vs "
                     f"{standings[best].decode:.1f} tok/s).")
    if pick.layout == "partial" and whole:
        lines.append(f"a partial offload: it scores more than {PARTIAL_MARGIN:g} above the best option that runs "
                     "wholly on the GPU, the margin a partial offload has to win by.")
    return lines


def why_not(s: Standing, pick: Standing, speeds: Speeds, whole: bool) -> str:
    """Why option `s` lost to `pick`, in a few words."""
    if s.speed < speeds.floor <= pick.speed:
        return f"too slow: {s.speed:.1f} tok/s predicted, under the {speeds.floor:g} tok/s floor"
    gain = s.quality - pick.quality
    if gain > QUALITY_TIE:
        if slowness(s, speeds) > slowness(pick, speeds):
            return (f"{gain:.2f} more quality score, but at {s.speed:.1f} tok/s, under the {speeds.target:g} tok/s "
                    f"target: not worth {pick.speed / max(s.speed, 1e-3):.1f}x less speed")
        if s.layout == "partial" and whole:
            return (f"a partial offload only {gain:.2f} better in quality score than a model wholly on the GPU "
                    f"(it must win by {PARTIAL_MARGIN:g})")
    if gain >= -QUALITY_TIE:
        return f"about the same quality (score {s.quality:.2f} vs {pick.quality:.2f}), slower ({s.decode:.1f} vs {pick.decode:.1f} tok/s)"
    if s.decode > pick.decode:
        return f"faster ({s.decode:.1f} vs {pick.decode:.1f} tok/s) but {-gain:.2f} lower in quality score"
    return f"lower quality (score {s.quality:.2f} vs {pick.quality:.2f}) and no faster"


def trade(s: Standing, pick: Standing) -> str:
    """What the faster runner-up `s` trades against the pick."""
    loss = pick.quality - s.quality
    what = (f"for a quality score {loss:.2f} lower (one point is about twice the parameters)" if loss > 0 else
            "at the same or better quality score")
    return f"{s.decode / pick.decode:.1f}x the pick's speed ({s.decode:.1f} vs {pick.decode:.1f} tok/s) {what}"
