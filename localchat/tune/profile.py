"""The tuned profile: what the wizard chose and measured, saved in the config dir for later launches."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ConfigError
from ..hardware import HardwareInfo
from ..paths import config_dir
from ..planning.cost import MIN_DRAFT_SPEEDUP as DRAFT_PAYS  # below it a draft is not worth its memory
from ..planning.cost import gpu_indices
from ..planning.placements import Arrangement, placement_of

if TYPE_CHECKING:
    from .candidates import Candidate
    from .draft import Speculation
    from .formats import FormatRun
    from .measure import Measurement

log = logging.getLogger(__name__)

PROFILE_VERSION = 1
PROFILE_FILE = "profile.json"
QUICK_PROBE_TIMEOUT = 5.0


# Field types checked when a profile is read: a hand-edited value fails here, not deep in a launch.
_SIMPLE: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "float": (int, float)}


@dataclass(slots=True)
class Profile:
    """The model, quant and knobs the wizard kept, its measured speeds and the planner corrections."""

    fingerprint: str
    hardware: str
    model: str
    quant: str
    path: str
    # The planner's layout it runs as (placements.py: "cpu", "partial", "pd-split"...), which names
    # its placement (the `placement` setting it supplies). Profiles written before this field had its
    # name call it "placement" (from_dict reads them); there it may also be a placement's own name.
    layout: str
    n_ctx: int
    n_threads: int
    n_gpu_layers: int = 0
    step_budget: int = 0
    devices: str = ""                  # GPU indices of a multi-GPU placement ("0,1"); empty: one device
    prefill_tps: float = 0.0
    decode_tps: float = 0.0
    predicted_prefill_tps: float = 0.0
    predicted_decode_tps: float = 0.0
    memory: dict[str, int] = field(default_factory=dict)             # measured, bytes
    predicted_memory: dict[str, int] = field(default_factory=dict)   # planner, bytes
    step_ms: dict[str, float] = field(default_factory=dict)          # decode step by batch width
    chunk_ms: dict[str, float] = field(default_factory=dict)         # prompt chunk step by size
    efficiency: dict[str, float] = field(default_factory=dict)       # for Wants(efficiency=...)
    candidates: list[dict[str, Any]] = field(default_factory=list)   # every candidate and what happened
    # The catalog's draft pairing for the kept model, when its file was here: measured greedy.
    draft: str = ""                    # catalog key of the draft
    draft_path: str = ""
    draft_acceptance: float = 0.0      # per drafted token, as the planner's model counts it
    draft_tokens_per_pass: float = 0.0
    plain_decode_tps: float = 0.0      # plain decoding, in the same run as the draft's numbers
    draft_decode_tps: float = 0.0      # with the draft, the runtime's adaptive speculation
    draft_speedup: float = 0.0         # draft_decode_tps / plain_decode_tps
    predicted_draft_speedup: float = 0.0   # the planner's, with the measured acceptance
    placements: list[dict[str, Any]] = field(default_factory=list)  # each placement measured, or why not
    placement_reason: str = ""
    # The kept model's GGUF file and GPTQ checkpoint measured side by side (formats.py), and the verdict.
    formats: list[dict[str, Any]] = field(default_factory=list)
    format_reason: str = ""
    chart: str | None = None
    created: str = ""
    version: int = PROFILE_VERSION

    @classmethod
    def measured(cls, hardware: HardwareInfo, kept: Candidate, *, layout: str, step_budget: int,
                 efficiency: dict[str, float], considered: list[Candidate], runs: list[FormatRun], format_reason: str,
                 checkpoint: FormatRun | None, spec: Speculation | None, placements: list[dict[str, Any]],
                 placement_reason: str, chart: str | None) -> "Profile":
        """What the wizard kept on `hardware`: the measured candidate `kept`, run as `layout`, or the GPTQ
        `checkpoint` of it that won the side-by-side `runs`; with the catalog draft's numbers when `spec`."""
        m, p = kept.measurement, kept.predicted
        numbers = _checkpoint_numbers(checkpoint) if checkpoint else _gguf_numbers(kept, m, step_budget)
        return cls(
            fingerprint=fingerprint(hardware), hardware=hardware_text(hardware), model=kept.key, layout=layout,
            n_ctx=m.n_ctx, n_threads=m.n_threads, n_gpu_layers=kept.n_gpu_layers,
            devices=gpu_indices(p.devices) if p and layout == kept.layout and placement_of(layout).names_gpus else "",
            placements=placements, placement_reason=placement_reason, efficiency=efficiency,
            candidates=[c.summary() for c in considered], formats=[r.to_dict() for r in runs],
            format_reason=format_reason, chart=chart, created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **numbers, **_draft_numbers(spec))

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Profile":
        """Build from `to_dict` output; keys from a newer version are ignored."""
        if not isinstance(data, dict):
            raise TypeError("the profile must be a JSON object")
        if "layout" not in data and "placement" in data:  # a profile from before the field was renamed
            data = {**data, "layout": data["placement"]}
        kinds = {f.name: f.type for f in dataclasses.fields(cls)}
        for name, value in data.items():
            wanted = _SIMPLE.get(kinds.get(name, ""))
            if wanted and not (isinstance(value, wanted) and not isinstance(value, bool)):
                raise TypeError(f"'{name}' is {value!r}, not {kinds[name]}")
        return cls(**{k: v for k, v in data.items() if k in kinds})

    def step_costs(self, arrangement: Arrangement) -> dict[int, float] | None:
        """The measured decode step ms by width, where `arrangement` runs the worker they were measured on
        (one worker, this profile's threads and GPU layers); None elsewhere."""
        worker = arrangement.worker
        same = (arrangement.placement == "single" and arrangement.prefill is None and arrangement.draft is None
                and (worker.n_threads, worker.n_gpu_layers) == (self.n_threads, self.n_gpu_layers))
        return {int(width): ms for width, ms in self.step_ms.items()} if same and self.step_ms else None

    def measured_acceptance(self) -> dict[str, float]:
        """For Wants(measured_acceptance=...): the kept model's measured draft acceptance, if any."""
        return {self.model: self.draft_acceptance} if self.draft and self.draft_acceptance > 0 else {}


def _gguf_numbers(kept: Candidate, m: Measurement, step_budget: int) -> dict[str, Any]:
    """The kept GGUF file, measured (`m`) and predicted, by Profile field."""
    p = kept.predicted
    return {"quant": kept.quant, "path": str(kept.path), "step_budget": step_budget,
            "prefill_tps": m.prefill_tps, "decode_tps": m.decode_tps,
            "predicted_prefill_tps": round(p.prefill_tps, 1) if p else 0.0,
            "predicted_decode_tps": round(p.decode_tps, 1) if p else 0.0,
            "memory": {"weights": m.memory.weights, "kv": m.memory.kv,
                       "compute": m.memory.compute + m.memory.output, "total": m.memory.total},
            "predicted_memory": ({"weights": p.weights, "kv": p.kv, "compute": p.compute, "total": p.memory}
                                 if p else {}),
            "step_ms": {str(k): v for k, v in m.step_ms.items()},
            "chunk_ms": {str(k): v for k, v in m.chunk_ms.items()}}


def _checkpoint_numbers(run: FormatRun) -> dict[str, Any]:
    """What runs is the checkpoint: its path and the numbers of its side-by-side run, by Profile field
    (no step costs: they were measured on the GGUF file's worker)."""
    return {"quant": run.quant, "path": run.path, "step_budget": 0,
            "prefill_tps": run.prefill_tps, "decode_tps": run.decode_tps,
            "predicted_prefill_tps": 0.0, "predicted_decode_tps": run.predicted_decode_tps,
            "memory": {"weights": run.weights, "total": run.weights}, "predicted_memory": {},
            "step_ms": {}, "chunk_ms": {}}


def _draft_numbers(spec: Speculation | None) -> dict[str, Any]:
    """The catalog draft measured with the kept model, by Profile field; none when it was not measured."""
    if not spec:
        return {}
    key, d, predicted = spec
    return {"draft": key, "draft_path": d.draft_path, "draft_acceptance": d.acceptance,
            "draft_tokens_per_pass": d.tokens_per_pass, "plain_decode_tps": d.plain_tps,
            "draft_decode_tps": d.draft_tps, "draft_speedup": round(d.speedup, 3),
            "predicted_draft_speedup": round(predicted, 3)}


def hardware_text(hardware: HardwareInfo) -> str:
    """The machine as the profile names it: its CPU and cores."""
    return f"{hardware.cpu_model}, {hardware.physical_cores} cores"


def fingerprint(hardware: HardwareInfo) -> str:
    """A short hash of the facts that change what is fastest (not free memory or noisy bandwidth)."""
    gpus = [(g.name, g.vendor, round(g.memory_total / 2**30)) for g in hardware.gpus]
    facts = [hardware.os, hardware.machine, hardware.cpu_model, hardware.physical_cores, hardware.logical_cores,
             sorted(hardware.cpu_flags), round(hardware.ram_total / 2**30), gpus, hardware.unified_memory]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def profile_path() -> Path:
    """Where the profile lives: the platformdirs config dir (LOCALCHAT_HOME relocates it)."""
    return config_dir() / PROFILE_FILE


def save_profile(profile: Profile, path: Path | None = None) -> Path:
    """Write the profile atomically: a crash mid-write leaves the previous one in place."""
    path = path or profile_path()
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(profile.to_dict(), indent=2), encoding="utf-8")
    os.replace(partial, path)
    return path


def load_profile(path: Path | None = None) -> Profile | None:
    """The saved profile, or None when there is none yet."""
    path = path or profile_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Profile.from_dict(data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, RecursionError) as exc:
        raise ConfigError(f"the tuned profile {path} is unreadable ({exc}); "
                          "delete it or run `localchat tune`.") from None


def why_not_current(profile: Profile, hardware: HardwareInfo) -> str | None:
    """Why the profile does not hold for this machine, or None when it does."""
    if profile.version != PROFILE_VERSION:
        return f"it was written by another version of localchat (profile version {profile.version})"
    if profile.fingerprint != fingerprint(hardware):
        return f"it was tuned on other hardware ({profile.hardware})"
    if not Path(profile.path).exists():  # a file, or a GPTQ checkpoint's folder
        return f"its model file {profile.path} is gone"
    return None


def profile_is_current(profile: Profile | None, hardware: HardwareInfo) -> bool:
    """True when the profile was tuned on this hardware by this version of the wizard."""
    return profile is not None and why_not_current(profile, hardware) is None


def current_profile(hardware: HardwareInfo) -> Profile | None:
    """The saved profile when it was tuned on this hardware; None means: run the wizard."""
    profile = load_profile()
    return profile if profile_is_current(profile, hardware) else None


def profile_settings(profile: Profile) -> dict[str, Any]:
    """The settings a current profile supplies, by Settings field name."""
    try:
        placement = placement_of(profile.layout).name  # "partial" runs as single
    except KeyError:
        raise ConfigError(f"the tuned profile {profile_path()} runs an unknown placement '{profile.layout}' (no "
                          "placement has that layout); run `localchat tune` again.") from None
    # The exact file that was measured, by path: a catalog name could resolve to another quant later.
    found: dict[str, Any] = {"model": profile.path, "n_ctx": profile.n_ctx, "n_threads": profile.n_threads,
                             "n_gpu_layers": profile.n_gpu_layers, "step_budget": profile.step_budget,
                             "placement": placement}
    if profile.devices:
        found["devices"] = profile.devices
    if profile.draft_path and profile.draft_speedup >= DRAFT_PAYS:
        # By path too: with the model given as a path the runtime cannot find the catalog's pairing itself.
        found["draft"] = profile.draft_path
    return found


def quick_hardware() -> HardwareInfo | None:
    """The facts the fingerprint uses, probed in-process without measuring bandwidth (milliseconds);
    None when a GPU driver does not answer in time (the thread is a daemon: it cannot hold us)."""
    from ..hardware.probe import collect

    found: list[HardwareInfo] = []
    thread = threading.Thread(target=lambda: found.append(collect(measure=False)), daemon=True,
                              name="localchat-quick-probe")
    thread.start()
    thread.join(QUICK_PROBE_TIMEOUT)
    return found[0] if found else None


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:  # settings load more than once per process (CLI, UI reloads)
        _warned.add(message)
        log.warning(message)


def launch_profile(hardware: Callable[[], HardwareInfo | None] | None = None) -> Profile | None:
    """The saved profile when it holds for this machine, for settings at launch. None without one, or
    when it does not hold (then one warning says to re-tune). A corrupt profile is a ConfigError."""
    path = profile_path()
    if not path.exists():
        return None  # no profile: no probe either, so a plain launch costs nothing
    profile = load_profile(path)
    if profile is None:
        return None
    profile_settings(profile)  # unusable values are an error even in a stale profile: say so now
    info = (hardware or quick_hardware)()
    why = "this machine's hardware could not be read in time" if info is None else why_not_current(profile, info)
    if why:
        _warn_once(f"the tuned profile {path} is not used: {why}. Run `localchat tune` again to measure this "
                   "machine.")
        return None
    return profile


def tuned_for(profile: Profile | None, path: str | Path) -> Profile | None:
    """The (current) profile when it was tuned on this very model file, else None."""
    if profile is None or Path(profile.path).resolve() != Path(path).resolve():
        return None
    return profile


def names_of(profile: Profile) -> set[str]:
    """The model names that mean the tuned file: its path, its catalog key, key:quant."""
    return {profile.path, profile.model, f"{profile.model}:{profile.quant}"}
