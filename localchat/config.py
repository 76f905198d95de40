"""Settings, each declared once below: its name (the settings.toml key; LOCALCHAT_<NAME> in the
environment), type, default, allowed values, help, and the subcommands whose flag sets it. The CLI's
flags, the validation, the environment and the README's table all come from these declarations, so a
new setting is one field here (then `python -m localchat.config --readme-table README.md`).

Precedence: defaults < the tuned profile < settings.toml < LOCALCHAT_* environment < CLI flags. The
tuned profile (profile.json, written by `localchat tune`) counts only while it holds for this
machine: same hardware fingerprint, its model file still there. Unknown keys are errors.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from .errors import ConfigError
from .key_options import KEY_FLAGS
from .paths import config_dir
from .planning.placements import PLACEMENT_HELP, PLACEMENTS  # where the model runs: one vocabulary
from .planning.policy import SPEED_TARGET
from .runtime.overflow import POLICIES
from .runtime.worker_types import TORCH_DEVICES

if TYPE_CHECKING:
    from .hardware import HardwareInfo

DEFAULT_MODEL = "smollm2-135m"
ENGINE_COMMANDS = ("chat", "serve", "ui")  # the subcommands that load a model
TOP = "localchat"  # the top-level parser, for flags that go before the command
ENV_PREFIX = "LOCALCHAT_"
# Variables of the same prefix that are not settings: where files live, the installer's build cache,
# the CPU variants and GPU backends it builds (scripts/install-runtime.sh), the test suite's home, the keys
# (kept out of settings files on purpose), the CPU variant the runtime loads (runtime/backends/kernels.py)
# and the GPU layers of `localchat bench`.
NOT_SETTINGS = ("HOME", "BUILD_CACHE", "CPU_VARIANTS", "GPU", "TEST_HOME",
                *(env[len(ENV_PREFIX):] for env in KEY_FLAGS.values()), "CPU_VARIANT", "BENCH_GPU_LAYERS")


@dataclass(frozen=True, slots=True)
class Declared:
    """What a Settings field says about itself beyond its name, type and default."""

    help: str
    flag_help: str = ""  # where the flag's words differ from the setting's (--no-spec)
    commands: tuple[str, ...] = ()  # subcommands whose flag sets it; () : settings.toml and env only
    flag: str = ""  # default: --name-with-dashes; "--no-x" turns a bool off
    low: int | None = None
    high: int | None = None
    zero: str = ""  # what 0 means, where it means something
    choices: tuple[str, ...] = ()
    check: Callable[[Any], bool] | None = None  # for a shape low/high/choices cannot say...
    shape: str = ""  # ... and the words for it
    model_bound: bool = False  # tuned for one model: the profile's value does not carry to another

    def allowed(self) -> str:
        if self.choices:
            return " | ".join(self.choices)
        if self.shape:
            return self.shape
        if self.low is not None and self.high is not None:
            return f"0 ({self.zero}) to {self.high}" if self.low == 0 and self.zero else \
                f"between {self.low} and {self.high}"
        if self.low is not None:
            return f"0 ({self.zero}) or more" if self.low == 0 and self.zero else f"at least {self.low}"
        return ""

    def holds(self, value: Any) -> bool:
        return ((self.low is None or value >= self.low) and (self.high is None or value <= self.high)
                and (not self.choices or value in self.choices) and (self.check is None or self.check(value)))


def setting(default: Any, help: str, **declared: Any) -> Any:
    """A Settings field and its declaration."""
    return field(default=default, metadata={"declared": Declared(help, **declared)})


def _gpu_indices(text: str) -> bool:
    return all(d.strip().isdigit() for d in text.split(",")) if text else True


@dataclass(slots=True)
class Settings:
    """Every knob of the runtime, with llama.cpp's names for llama.cpp's knobs."""

    model: str = setting(DEFAULT_MODEL, "catalog name (see `localchat models`) or a .gguf path",
                         commands=(*ENGINE_COMMANDS, "selftest"), model_bound=True)
    n_ctx: int = setting(8192, "context window in tokens", commands=ENGINE_COMMANDS, low=64, model_bound=True)
    # ggml runs at most 512 threads (GGML_MAX_N_THREADS); more crashed the runner at every restart.
    n_threads: int = setting(0, "CPU threads (default: physical cores)", commands=ENGINE_COMMANDS,
                             flag="--threads", low=0, high=512, zero="physical cores")
    # A batch's buffers are sized by it before a token is read: 10^9 asked for tens of GB.
    n_batch: int = setting(512, "tokens llama.cpp reads per prompt batch", low=1, high=65536)
    n_seq_max: int = setting(8, "conversations decoded side by side", low=1, high=256)
    n_gpu_layers: int = setting(0, "layers offloaded to the GPU (-1: all)", model_bound=True)
    # 0 chooses it from measured step costs, so a streaming chat stays fluid beside a long document.
    step_budget: int = setting(0, "prompt tokens per step beside streaming chats (default: adaptive)",
                               commands=ENGINE_COMMANDS, low=0, zero="adaptive", model_bound=True)
    kv_disk_mb: int = setting(4096, "disk space for the KV state of long prompts read once (documents, long "
                                    "system prompts), restored instead of read again; MiB",
                              commands=ENGINE_COMMANDS, low=0, zero="off")
    deterministic: bool = setting(False, "identical greedy output however prompts are chunked or reused "
                                         "(slower prefill)", commands=ENGINE_COMMANDS)
    draft: str = setting("", "draft model for speculative decoding (catalog name or .gguf path)",
                         commands=ENGINE_COMMANDS, model_bound=True)  # default: the catalog's pairing if local
    lookup: bool = setting(False, "speculate with prompt lookup (n-grams of the prompt), even if a draft "
                                  "model is paired", commands=ENGINE_COMMANDS)
    speculation: bool = setting(True, "speculative decoding where measured costs say it pays",
                                flag_help="plain decoding, no speculation", commands=ENGINE_COMMANDS, flag="--no-spec")
    placement: str = setting("auto", "where the model runs (see `--placement` above)",
                             flag_help="where the model runs (default auto; each placement is explained below)",
                             commands=ENGINE_COMMANDS, choices=PLACEMENTS, model_bound=True)
    torch_device: str = setting("auto", "where a GPTQ checkpoint runs on torch: auto takes CUDA where torch "
                                        "sees a GPU, else the CPU", commands=ENGINE_COMMANDS, choices=TORCH_DEVICES)
    devices: str = setting("", "GPU indices for the placement, like 0,1 (default: all)", commands=ENGINE_COMMANDS,
                           check=_gpu_indices, shape="GPU indices separated by commas, like 0,1", model_bound=True)
    system_prompt: str = setting("", "the system prompt a new chat in the window starts with (each chat can "
                                     "change its own), and the one the API gives a chat request that has none",
                                 commands=("serve", "ui"))
    thinking_budget: int = setting(0, "tokens a thinking model may think before it answers, then its thinking is "
                                      "closed (the window's chats start with it and each can change its own; "
                                      "an API request's own budget comes first); 0: no limit",
                                   commands=("serve", "ui"), low=0)
    keep_alive: int = setting(15, "minutes a model that an API request loaded by name (not the one the server "
                                  "started with) stays loaded after its last answer; 0 unloads it after each "
                                  "answer", commands=("serve", "ui"), low=0)
    context_overflow: str = setting("rolling", "what a chat in the window does when it outgrows the context: "
                                               "rolling leaves out its oldest turns, truncate-middle keeps the "
                                               "first turn and leaves out the ones after it, refuse says so "
                                               "(each chat can change its own; the API refuses unless asked)",
                                    commands=("ui",), choices=POLICIES)
    mcp_call_timeout: int = setting(60, "seconds one MCP tool call may take before it ends with an error",
                                    commands=("serve", "ui"), low=1, high=3600)
    mcp_result_chars: int = setting(20000, "characters of an MCP tool's result the model reads (the rest is cut, "
                                           "with a note saying so)", commands=("serve", "ui"), low=100,
                                    high=1_000_000)
    mcp_steps: int = setting(8, "model turns in one answer that may call tools, before the answer must end",
                             commands=("serve", "ui"), low=1, high=100)
    speed_target: int = setting(int(SPEED_TARGET), "decode tokens/s the planner aims for: above it quality "
                                                   "decides, below it a slower model must be a much better one",
                                commands=("plan",), low=1)
    verbose: bool = setting(False, "show llama.cpp's log and debug messages", commands=(TOP,))

    def __post_init__(self) -> None:
        # Every path that makes settings checks them, a copy with one value changed included
        # (dataclasses.replace: the window's context reload).
        validate(self)


DECLARED: dict[str, Declared] = {f.name: f.metadata["declared"] for f in fields(Settings)}
_KINDS = {"bool": bool, "int": int, "str": str}
KINDS: dict[str, type] = {f.name: _KINDS[f.type] if isinstance(f.type, str) else f.type for f in fields(Settings)}
# Profile values measured for the tuned model: they do not carry over to a model chosen above the profile.
MODEL_BOUND = tuple(name for name, d in DECLARED.items() if d.model_bound)


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def flag_of(name: str) -> str:
    return DECLARED[name].flag or "--" + name.replace("_", "-")


def add_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """The flags of the settings `command` takes, in declaration order; unset ones stay None."""
    for name, declared in DECLARED.items():
        if command not in declared.commands:
            continue
        flag, kind = flag_of(name), KINDS[name]
        if kind is bool:
            action = "store_false" if flag.startswith("--no-") else "store_true"
            parser.add_argument(flag, dest=name, action=action, default=None,
                                help=declared.flag_help or declared.help)
        else:
            parser.add_argument(flag, dest=name, type=kind, default=None, help=declared.flag_help or declared.help,
                                choices=declared.choices or None)


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags (None: not given), for load_settings."""
    return {name: getattr(args, name, None) for name in DECLARED}


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
    for key, raw in changes.items():
        if key not in KINDS:
            raise ConfigError(f"{origin}: unknown setting '{key}'. Known settings: {', '.join(sorted(KINDS))}.")
        values[key] = _coerce(key, KINDS[key], raw, origin)


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
    from_env = {
        key[len(ENV_PREFIX):].lower(): value
        for key, value in env.items()
        if key.startswith(ENV_PREFIX) and key[len(ENV_PREFIX):] not in NOT_SETTINGS
    }
    _apply(values, from_env, "environment")
    _apply(values, {k: v for k, v in (overrides or {}).items() if v is not None}, "command line")
    values = {**_tuned(values.get("model"), hardware), **values}
    return Settings(**values)


def validate(settings: Settings) -> None:
    """Reject values llama.cpp would choke on, with a message that says the allowed range."""
    for name, declared in DECLARED.items():
        if not declared.holds(getattr(settings, name)):
            raise ConfigError(f"setting '{name}' = {getattr(settings, name)} is out of range; "
                              f"use {declared.allowed()}.")


# -- the README's settings table --------------------------------------------------------------------

TABLE_START = "<!-- settings table: made by `python -m localchat.config --readme-table README.md` -->"
TABLE_END = "<!-- end of the settings table -->"


def readme_table() -> str:
    """The Markdown table of every setting, as the README shows it."""
    rows = ["| setting | environment | flag | default | allowed | what it does |", "|---|---|---|---|---|---|"]
    for f in fields(Settings):
        declared = DECLARED[f.name]
        flag = f"`{flag_of(f.name)}`" if declared.commands else ""
        if flag and declared.commands != (TOP,):
            flag += f" ({', '.join(declared.commands)})"
        default = str(f.default).lower() if KINDS[f.name] is bool else (f"`{f.default}`" if f.default != "" else "")
        cells = [f"`{f.name}`", f"`{env_name(f.name)}`", flag, default, declared.allowed(), declared.help]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def with_table(readme: str) -> str:
    """The README's text with its settings table remade."""
    start, end = readme.index(TABLE_START) + len(TABLE_START), readme.index(TABLE_END)
    return f"{readme[:start]}\n{readme_table()}\n{readme[end:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localchat.config")
    parser.add_argument("--readme-table", nargs="?", const="-", metavar="README",
                        help="print the settings table, or remake it inside the README file named")
    args = parser.parse_args(argv)
    if args.readme_table is None:
        parser.print_help()
    elif args.readme_table == "-":
        print(readme_table())
    else:
        path = Path(args.readme_table)
        path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
