"""Every engine setting that sizes something has an upper bound: 100,000 threads crashed the runner on every
restart (SIGSEGV) and an n_batch of 10^9 asked for tens of GB before the OOM killer came. Out of bounds is one
line at start, from whichever layer gave the value, never a runner that crashes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from localchat.config import load_settings, settings_file
from localchat.errors import ConfigError


@pytest.mark.parametrize("name, value, allowed", [
    ("n_threads", 100_000, "use 0 (physical cores) to 512"),
    ("n_threads", 513, "use 0 (physical cores) to 512"),
    ("n_batch", 10**9, "use between 1 and 65536"),
])
def test_a_value_past_the_bound_is_refused_from_every_layer(tmp_path: Path, monkeypatch, name, value, allowed):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match=re.escape(f"'{name}' = {value} is out of range; {allowed}.")):
        load_settings({name: value}, environ={})
    with pytest.raises(ConfigError, match="out of range"):
        load_settings(environ={f"LOCALCHAT_{name.upper()}": str(value)})
    settings_file().write_text(f"{name} = {value}\n")
    with pytest.raises(ConfigError, match="out of range"):
        load_settings(environ={})
    settings_file().unlink()
    assert load_settings({name: 512}, environ={}).__getattribute__(name) == 512


def test_the_command_line_says_it_in_one_line_and_loads_nothing(tmp_path: Path):
    env = {"LOCALCHAT_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "localchat", "chat", "--threads", "100000", "hi"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 1, done.stderr[-400:]
    lines = done.stderr.strip().splitlines()
    assert lines == ["localchat: setting 'n_threads' = 100000 is out of range; use 0 (physical cores) to 512."]
