"""The options several `localchat` commands share (the model's settings, the window's, sampling, keys),
and what their parsed values become. cli.py builds its parser from them and dispatches."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from typing import Callable

from .config import PLACEMENT_HELP, add_flags, flag_values, load_settings
from .key_options import KEY_FLAGS, key_flag


def plan_settings(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], float]:
    """`plan`'s settings flags (--speed-target), and the speed target read from them once parsed: the flag,
    else the environment, else settings.toml, else its default (config.py)."""
    add_flags(parser, "plan")
    return lambda args: load_settings(flag_values(args)).speed_target


def engine_args(parser: argparse.ArgumentParser, command: str) -> None:
    add_flags(parser, command)  # from the settings' declarations (config.py)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # keeps the epilog's one line per placement
    parser.epilog = "placements (--placement):\n" + "\n".join(
        f"  {name:<13}{about}" for name, about in PLACEMENT_HELP.items())


def window_args(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The chat window's own options (`localchat ui`, and `localchat` without a command)."""
    return [
        parser.add_argument("--host", help="address to bind (default 127.0.0.1; any other needs --listen)"),
        parser.add_argument("--port", type=int, help="port (default 7860, or the next free one after it)"),
        parser.add_argument("--listen", action="store_true",
                            help="accept connections from other machines (needs a key, best set as LOCALCHAT_API_KEY: "
                                 "the window asks for it as the password of the user 'localchat', the API as a "
                                 "bearer token)"),
        key_arg(parser, "--api-key", "require this key on the window and the API"),
        parser.add_argument("--no-browser", dest="browser", action="store_false",
                            help="print the window's address instead of opening a browser"),
        parser.add_argument("--cors-origin", dest="cors_origins", action="append", default=[], metavar="ORIGIN",
                            help="let web pages from ORIGIN (e.g. http://localhost:3000) call the API; repeatable"),
    ]


def key_arg(parser: argparse.ArgumentParser, flag: str, about: str) -> argparse.Action:
    """A key option that steers to its environment variable: a command line is readable by every user."""
    env = KEY_FLAGS[flag]
    return parser.add_argument(flag, dest=flag[2:].replace("-", "_"), default=os.environ.get(env), metavar="KEY",
                               help=f"{about}; set {env} instead: this option's value shows in the process list "
                                    "(ps) to every user of this machine")


def warn_about_key_flags(argv: list[str]) -> None:
    """A warning on stderr for each key given on the command line (not for one from the environment)."""
    given = dict.fromkeys(name for arg in argv if (name := key_flag(arg.split("=", 1)[0])))
    for flag in given:
        print(f"localchat: warning: the key given with {flag} can be read by every user of this machine in the "
              f"process list (ps, /proc/PID/cmdline); set {KEY_FLAGS[flag]} in the environment instead.",
              file=sys.stderr, flush=True)


def flag_text(action: argparse.Action) -> str:
    takes_value = action.nargs != 0
    return action.option_strings[0] + (f" {(action.metavar or action.dest).upper()}" if takes_value else "")


def window_epilog(window: list[argparse.Action]) -> str:
    """How to start the window, for the top-level help: the options come from the `ui` parser itself."""
    lines = ["Without a command, localchat opens the chat window, as `localchat ui` does, and takes the",
             "same options (`localchat --no-browser --port 7861`):"]
    for action in window:
        flag = flag_text(action)
        if len(flag) >= 20:  # as argparse does: a long flag gets a line of its own
            lines.append(f"  {flag}")
        lines.append(textwrap.fill(action.help or "", width=100, subsequent_indent=" " * 22,
                                   initial_indent=f"  {flag:<20}" if len(flag) < 20 else " " * 22))
    lines.append("  and the model options (--model, --n-ctx, --placement, ...: `localchat ui --help` lists them).")
    return "\n".join(lines)


# Sampling flags (--top-p sets top_p): one per limited parameter of runtime/sampling.py but the seed,
# which only `chat` takes. Unset ones keep SamplingParams' own defaults, and SamplingParams.validate
# checks them against the limits the API and the window share.
def sampling_flags() -> list[str]:
    from .runtime.sampling import LIMITS

    return [name for name in LIMITS if name != "seed"]


def sampling_args(parser: argparse.ArgumentParser, defaults_for: str = "") -> None:
    """`chat`'s sampling flags; with `defaults_for`, the defaults of what the window or the API is
    not told per request (a request's own values win)."""
    from .runtime.sampling import LIMITS, SamplingParams

    group = parser.add_argument_group(f"sampling defaults for {defaults_for}" if defaults_for else "sampling")
    base = SamplingParams()
    for dest in sampling_flags():
        default = getattr(base, dest)
        about = f"default {default}" if default is not None else "answer length limit in tokens"
        limit = LIMITS[dest]
        group.add_argument("--" + dest.replace("_", "-"), type=limit.kind, dest=dest, help=f"{about}; {limit.words()}")
    if not defaults_for:
        group.add_argument("--system", help="system prompt")
        group.add_argument("--seed", type=LIMITS["seed"].kind, help=LIMITS["seed"].words())
        group.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def file_name(text: str) -> str:
    """A file name given to a flag: an empty one (`--file ""`) is refused, never read as no file."""
    if not text.strip():
        raise argparse.ArgumentTypeError("needs a file name, not an empty string")
    return text


def sampling_from(args: argparse.Namespace):
    """SamplingParams from the sampling flags given; the rest keep their defaults. Checked here, so a
    bad flag fails before the model loads."""
    from .runtime.sampling import SamplingParams

    params = SamplingParams(seed=getattr(args, "seed", None), stop=list(getattr(args, "stop", [])))
    for dest in sampling_flags():
        if getattr(args, dest, None) is not None:
            setattr(params, dest, getattr(args, dest))
    params.validate()
    return params
