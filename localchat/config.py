"""Settings: defaults < the tuned profile < settings.toml < LOCALCHAT_* environment < CLI flags.

The tuned profile (profile.json, written by `localchat tune`) counts only while it holds for this
machine: same hardware fingerprint, its model file still there. Unknown keys are errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from .errors import ConfigError
from .paths import config_dir
from .planning.placements import PLACEMENT_HELP, PLACEMENTS  # where the model runs: one vocabulary

if TYPE_CHECKING:
    from .hardware import HardwareInfo

DEFAULT_MODEL = "smollm2-135m"
# Profile values measured for the tuned model: they do not carry over to a model chosen above the profile.
MODEL_BOUND = ("model", "n_ctx", "n_gpu_layers", "step_budget", "placement", "devices", "draft")


@dataclass(slots=True)
class Settings:
    """Every knob of the runtime, with llama.cpp's names for llama.cpp's knobs."""

    model: str = DEFAULT_MODEL
    n_ctx: int = 8192
    n_threads: int = 0  # 0: physical cores
    n_batch: int = 512
    n_seq_max: int = 8
    n_gpu_layers: int = 0
    # Prompt tokens one engine step may prefill while other sequences are decoding; 0 chooses it
    # from measured step costs so a streaming chat stays fluid beside a long document.
    step_budget: int = 0
    deterministic: bool = False  # the same greedy tokens however prompts are chunked or reused
    speculation: bool = True  # draft tokens where measured costs say it pays
    draft: str = ""  # a draft model (catalog name or path); default: the catalog's pairing if local
    lookup: bool = False  # use prompt lookup even where a draft model is available
    # Where the model runs: auto (the tuned profile, else the planner) | single | layer-split |
    # pd-split (prefill and decode on two devices; two CPU workers on a machine without GPUs) | draft-gpu
    placement: str = "auto"
    devices: str = ""  # GPU indices for the placement, comma-separated ("0,1"); empty: all found
    verbose: bool = False


def settings_file() -> Path:
    return config_dir() / "settings.toml"


def _coerce(name: str, kind: Any, raw: Any, origin: str) -> Any:
    try:
        if kind in (bool, "bool"):
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind in (int, "int"):
            if isinstance(raw, bool):
                raise ValueError(raw)
            return int(raw)
        return str(raw)
    except ValueError:
        raise ConfigError(f"{origin}: '{name}' has the bad value {raw!r}; expected {kind if isinstance(kind, str) else kind.__name__}.") from None


def _apply(values: dict[str, Any], changes: Mapping[str, Any], origin: str) -> None:
    known = {f.name: f.type for f in fields(Settings)}
    for key, raw in changes.items():
        if key not in known:
            raise ConfigError(f"{origin}: unknown setting '{key}'. Known settings: {', '.join(sorted(known))}.")
        values[key] = _coerce(key, known[key], raw, origin)


def _tuned(model: Any, hardware: Callable[[], HardwareInfo | None] | None) -> dict[str, Any]:
    """The profile's layer: {} without a current profile; only hardware-bound values when a later layer
    picks another model (a context or GPU layer count tuned for one model can break another)."""
    from .tune.profile import launch_profile, names_of, profile_path, profile_settings

    profile = launch_profile(hardware)
    if profile is None:
        return {}
    values: dict[str, Any] = {}
    _apply(values, profile_settings(profile), f"the tuned profile {profile_path()} (run `localchat tune` to remake it)")
    if model is not None and not _same_model(str(model), names_of(profile)):
        values = {k: v for k, v in values.items() if k not in MODEL_BOUND}
    return values


def _same_model(model: str, names: set[str]) -> bool:
    if model in names:
        return True
    paths = {Path(n).expanduser().resolve() for n in names if n.lower().endswith(".gguf")}
    return model.lower().endswith(".gguf") and Path(model).expanduser().resolve() in paths


def load_settings(overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None, *,
                  hardware: Callable[[], HardwareInfo | None] | None = None) -> Settings:
    """Merge the tuned profile, the settings file, LOCALCHAT_* variables and explicit overrides over the
    defaults. `hardware` replaces the quick in-process probe that checks the profile (tests)."""
    values: dict[str, Any] = {}
    path = settings_file()
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} is not valid TOML ({exc}); fix or delete it.") from None
        _apply(values, data, str(path))
    env = os.environ if environ is None else environ
    # Variables of the same prefix that are not settings: where files live, the build cache of the
    # installer, the test suite's home, and the API key (kept out of settings files on purpose).
    not_settings = {"LOCALCHAT_HOME", "LOCALCHAT_BUILD_CACHE", "LOCALCHAT_TEST_HOME", "LOCALCHAT_API_KEY"}
    from_env = {
        key[len("LOCALCHAT_"):].lower(): value
        for key, value in env.items()
        if key.startswith("LOCALCHAT_") and key not in not_settings
    }
    _apply(values, from_env, "environment")
    _apply(values, {k: v for k, v in (overrides or {}).items() if v is not None}, "command line")
    values = {**_tuned(values.get("model"), hardware), **values}
    settings = Settings(**values)
    validate(settings)
    return settings


def validate(settings: Settings) -> None:
    """Reject values llama.cpp would choke on, with a message that says the allowed range."""
    checks = [
        ("n_ctx", settings.n_ctx >= 64, "at least 64"),
        ("n_threads", settings.n_threads >= 0, "0 (auto) or more"),
        ("n_batch", settings.n_batch >= 1, "at least 1"),
        ("n_seq_max", 1 <= settings.n_seq_max <= 256, "between 1 and 256"),
        ("step_budget", settings.step_budget >= 0, "0 (auto) or more"),
        ("placement", settings.placement in PLACEMENTS, " | ".join(PLACEMENTS)),
        ("devices", all(d.strip().isdigit() for d in settings.devices.split(",")) if settings.devices else True,
         "GPU indices separated by commas, like 0,1"),
    ]
    for name, ok, allowed in checks:
        if not ok:
            raise ConfigError(f"setting '{name}' = {getattr(settings, name)} is out of range; use {allowed}.")
