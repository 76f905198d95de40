"""`localchat plan`: the planner's command, with this machine's tuned corrections where it has them."""

from __future__ import annotations

import argparse
from typing import Callable

from ..hardware import HardwareInfo
from ..planning import plan_command
from .profile import load_profile, profile_is_current


def measured(hardware: HardwareInfo) -> plan_command.Measured | None:
    """The tuned profile's speed corrections and draft acceptance, when it holds for this machine."""
    tuned = load_profile()
    if not profile_is_current(tuned, hardware):
        return None
    return plan_command.Measured(dict(tuned.efficiency), tuned.measured_acceptance(),
                                 f"speeds corrected by the measurements of `localchat tune` ({tuned.created or 'undated'}).")


def main(argv: list[str] | None = None,
         settings: Callable[[argparse.ArgumentParser], Callable[[argparse.Namespace], float]] | None = None) -> int:
    """`localchat plan ...` (see `localchat plan --help`); `settings`: the settings' flags and the speed target
    read from them (the command line passes config's, see plan_command.main)."""
    from ..runtime.backends.gpus import usable

    return plan_command.main(argv, measured, settings, usable)
