"""The tuned profile: what the wizard chose and measured, saved in the config dir for later launches."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..hardware import HardwareInfo
from ..paths import config_dir

PROFILE_VERSION = 1
PROFILE_FILE = "profile.json"


@dataclass(slots=True)
class Profile:
    """The model, quant and knobs the wizard kept, its measured speeds and the planner corrections."""

    fingerprint: str
    hardware: str
    model: str
    quant: str
    path: str
    placement: str
    n_ctx: int
    n_threads: int
    n_gpu_layers: int = 0
    step_budget: int = 0
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
    chart: str | None = None
    created: str = ""
    version: int = PROFILE_VERSION

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Profile":
        """Build from `to_dict` output; keys from a newer version are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


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
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"the tuned profile {path} is unreadable ({exc}); "
                          "delete it or run `localchat tune`.") from None


def profile_is_current(profile: Profile | None, hardware: HardwareInfo) -> bool:
    """True when the profile was tuned on this hardware by this version of the wizard."""
    return (profile is not None and profile.version == PROFILE_VERSION
            and profile.fingerprint == fingerprint(hardware) and Path(profile.path).is_file())
