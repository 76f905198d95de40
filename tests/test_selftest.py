"""`localchat selftest` from the source tree, and the record that points a second start at the running window."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localchat.ui import instance


def test_selftest_passes_and_reports_every_check(model_path: Path):
    done = subprocess.run([sys.executable, "-m", "localchat", "selftest", "--model", str(model_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for check in ("model", "load", "generate", "serve", "GET /v1/models", "GET /", "shutdown"):
        assert any(line.split()[:1] == ["OK"] and f" {check} " in line for line in done.stdout.splitlines()), check
    assert "cold start (launch to first token):" in done.stdout
    assert done.stdout.rstrip().endswith("selftest passed")


def test_selftest_fails_cleanly_without_a_model(tmp_path: Path):
    done = subprocess.run([sys.executable, "-m", "localchat", "selftest", "--model", str(tmp_path / "none.gguf")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "FAIL model" in done.stdout and "skipped: no model" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_stale_record_is_ignored_and_our_own_is_removed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    port, url = instance.reserve_url("127.0.0.1", None, 17990)  # nothing listens there afterwards
    assert url.endswith(f":{port}")
    instance.instance_file().write_text(json.dumps({"url": url, "pid": os.getpid() + 1, "started": 0}))
    assert instance.running_instance() is None
    with instance.recorded(url) as path:
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not path.exists()
