"""`localchat plan`: the planner's command, with this machine's tuned corrections where it has them."""

from __future__ import annotations

from ..hardware import HardwareInfo
from ..planning import planner
from .profile import load_profile, profile_is_current


def measured(hardware: HardwareInfo) -> planner.Measured | None:
    """The tuned profile's speed corrections and draft acceptance, when it holds for this machine."""
    tuned = load_profile()
    if not profile_is_current(tuned, hardware):
        return None
    return planner.Measured(dict(tuned.efficiency), tuned.measured_acceptance(),
                            f"speeds corrected by the measurements of `localchat tune` ({tuned.created or 'undated'}).")


def main(argv: list[str] | None = None) -> int:
    """`localchat plan ...` (see `localchat plan --help`)."""
    return planner.main(argv, measured)
