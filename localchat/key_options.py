"""The options that carry a key, each with the variable to set instead: a command line is readable by
every user of the machine (ps, /proc/PID/cmdline), a process's environment only by its owner. Below
every other module: the CLI warns with it, the instance record hides keys with it."""

from __future__ import annotations

KEY_FLAGS = {"--api-key": "LOCALCHAT_API_KEY", "--backend-key": "LOCALCHAT_BACKEND_KEY"}
_BEGIN_KEY_FLAGS = ("--backend",)  # options whose names begin a key option's


def key_flag(flag: str) -> str | None:
    """The key option `flag` names, else None; argparse takes any unambiguous prefix (`--api KEY`)."""
    if len(flag) <= 4 or flag in _BEGIN_KEY_FLAGS:
        return None
    return next((name for name in KEY_FLAGS if name.startswith(flag)), None)
