"""The window's hardware wizard: `localchat tune` in a child process, its lines shown as they come.

A child process, not a thread: the wizard loads and measures models with their own llama.cpp
thread pools, and a broken driver or an out-of-memory load must not take the window down.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from ...errors import LocalchatError
from ...tune.profile import Profile


def tune_command(download: bool, placements: bool = True, loaded: str | Path | None = None) -> list[str]:
    """The wizard's command line: the bundle's own program, or this Python with the package. It speaks the
    window's words (--window: its controls, never the command's flags); with nothing to download it measures
    the models here, the `loaded` file among them."""
    base = [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "localchat"]
    # The tick is the yes to a download (--yes): the wizard's child has no terminal to ask at.
    return [*base, "tune", "--window", *(["--yes"] if download else ["--no-download"]),
            *([] if placements else ["--no-placements"]), *(["--include", str(loaded)] if loaded else [])]


class TuneJob:
    """One wizard run: its output lines so far and, once it ends, its exit code."""

    def __init__(self, download: bool = True, placements: bool = True, command: list[str] | None = None,
                 loaded: str | Path | None = None) -> None:
        self.lines: list[str] = []
        self.returncode: int | None = None
        self.cancelled = False
        self.started, self.ended = time.monotonic(), None
        from ...runtime.backends.kernels import child_environ

        env = {**child_environ(), "PYTHONUNBUFFERED": "1"}  # lines arrive as the wizard prints them
        self._process = subprocess.Popen(command or tune_command(download, placements, loaded),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True, env=env, errors="replace")
        self._reader = threading.Thread(target=self._read, name="localchat-tune-log", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append(line.rstrip("\n"))
        self.returncode = self._process.wait()
        self.ended = time.monotonic()

    @property
    def running(self) -> bool:
        return self.returncode is None

    @property
    def elapsed_s(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def wait(self, timeout: float | None = None) -> int | None:
        self._reader.join(timeout)
        return self.returncode

    def stop(self) -> None:
        if self.running:
            self._process.terminate()

    def cancel(self) -> None:
        """Stop the wizard at the user's word: it keeps nothing (a profile is written only at its end)."""
        if self.running:
            self.cancelled = True
            self.lines.append("cancelled")
            self.stop()


def tuned_summary() -> tuple[Profile | None, str]:
    """(the profile in use or None, a Markdown line): what it kept on this machine, or why there is none."""
    from ...tune.profile import launch_profile, profile_path

    try:
        profile = launch_profile()
    except LocalchatError as exc:
        return None, f"The tuned profile cannot be used: {exc}"
    if profile is None:
        stale = profile_path().exists()
        why = "was tuned on other hardware or its model is gone" if stale else "has not been tuned yet"
        return None, (f"This machine {why}: localchat runs the default model with default settings. "
                       "The wizard measures this machine (a few minutes; answers are slower meanwhile) and keeps "
                       "the best model, context, placement and draft it finds.")
    draft = f", draft {profile.draft} ({profile.draft_speedup:.2f}x)" if profile.draft and profile.draft_speedup else ""
    return profile, (f"Tuned {profile.created[:10]}: **{profile.model} {profile.quant}**, {profile.layout}, "
                  f"{profile.n_ctx:,} tokens of context, {profile.decode_tps:.0f} tok/s decode{draft}. "
                  f"Profile: `{Path(profile.path).name}`.")
