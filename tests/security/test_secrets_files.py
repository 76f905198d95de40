"""Secrets and files: no key in the log, private file modes, and an instance record checked before it is trusted."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from localchat.ui import instance

KEY = "sk-local-93fa1c7e"


@pytest.fixture()
def home(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """A fresh LOCALCHAT_HOME under the usual umask (022: files 0644 unless localchat says otherwise)."""
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path / "home"))
    old_umask = os.umask(0o022)
    root = logging.getLogger()
    handlers = list(root.handlers)
    try:
        yield tmp_path / "home"
    finally:
        os.umask(old_umask)
        for handler in root.handlers[len(handlers):]:
            handler.close()
            root.removeHandler(handler)


def test_the_api_key_never_reaches_the_log(home: Path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["localchat", "ui", "--api-key", KEY, "--backend-key=" + KEY + "x", "--port", "0",
                                      "--api", KEY + "y"])  # argparse also takes a prefix
    path = instance.log_to_file()
    for handler in logging.getLogger().handlers:
        handler.flush()
    text = path.read_text()
    assert "started" in text and "--port 0" in text
    assert KEY not in text and "--api-key ***" in text and "--backend-key=***" in text


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_data_log_and_instance_files_are_private(home: Path, tmp_path: Path):
    from localchat.paths import cache_dir, config_dir, data_dir, log_dir
    from localchat.ui.chat.store import Store
    from localchat.ui.documents.uploads import store_upload

    store = Store()
    store.append(store.create("t"), "user", "private words")
    log_file = instance.log_to_file()
    note = tmp_path / "note.txt"
    note.write_text("mine\n")
    upload = store_upload(note)
    with instance.recorded("http://127.0.0.1:7999") as record:
        files = [store.path, Path(str(store.path) + "-wal"), log_file, record, upload]
        for path in files:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, oct(path.stat().st_mode))
    store.close()
    for folder in (data_dir(), log_dir(), config_dir(), cache_dir(), upload.parent, upload.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, (folder, oct(folder.stat().st_mode))


class _LooksLikeLocalchat(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = json.dumps({"object": "list", "data": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def impostor() -> Iterator[int]:
    """The port of a loopback server that answers like a localchat window would."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LooksLikeLocalchat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def record(pid: int, url: str, port: int) -> None:
    instance.instance_file().write_text(json.dumps({"url": url, "pid": pid, "started": time.time(), "port": port}))


def test_a_forged_instance_record_is_not_trusted(home: Path, impostor: int):
    # Some process of this user that is not localchat, and a URL that answers like localchat.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        record(other.pid, f"http://127.0.0.1:{impostor}", impostor)
        assert instance.running_instance() is None  # the pid is not a localchat process
    finally:
        other.kill()
        other.wait()
    record(os.getpid() + 10**6, f"http://127.0.0.1:{impostor}", impostor)  # no such process
    assert instance.running_instance() is None


# A process whose command line reads as the window's, serving like it on a port of its own (printed first).
WINDOW = """
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": []}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture()
def window() -> Iterator[tuple[int, int]]:
    """(pid, port) of a live process that looks like a localchat window and listens on its port."""
    child = subprocess.Popen([sys.executable, "-c", WINDOW, "localchat", "ui"], stdout=subprocess.PIPE, text=True)
    try:
        yield child.pid, int(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_an_instance_record_must_name_loopback_on_its_port(home: Path, window: tuple[int, int]):
    pid, port = window
    record(pid, f"http://127.0.0.1:{port}", port)
    assert instance.running_instance() is not None  # a well-formed record of a live window
    record(pid, f"http://127.0.0.1:{port}", port + 1)
    assert instance.running_instance() is None  # not the recorded port
    record(pid, f"http://localhost.evil.example:{port}", port)
    assert instance.running_instance() is None  # not loopback


def test_a_record_naming_a_live_window_and_another_port_is_not_trusted(home: Path, window: tuple[int, int],
                                                                       impostor: int):
    # The pid is a live window of this user and the port answers like one, but that process does not
    # listen there: a second start must not be sent to whatever does.
    pid, _ = window
    record(pid, f"http://127.0.0.1:{impostor}", impostor)
    assert instance.running_instance() is None


def test_a_key_on_the_command_line_is_warned_about(monkeypatch, capsys):
    from localchat.cli import main

    monkeypatch.delenv("LOCALCHAT_API_KEY", raising=False)
    # A --host without --listen is refused before any model loads; the warning comes first.
    for key_args in (["--api-key", KEY], ["--api=" + KEY]):
        assert main(["serve", "--host", "192.0.2.1", *key_args]) == 1
        err = capsys.readouterr().err
        assert "warning" in err and "process list" in err and "LOCALCHAT_API_KEY" in err, err
        assert KEY not in err
    monkeypatch.setenv("LOCALCHAT_API_KEY", KEY)  # the way the help and the README say
    assert main(["serve", "--host", "192.0.2.1"]) == 1
    assert "warning" not in capsys.readouterr().err


def test_the_help_and_the_readme_steer_to_the_environment(capsys):
    from localchat.cli import main

    for command in ("serve", "ui"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "--api-key KEY" in out and "set LOCALCHAT_API_KEY instead" in out, command
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "LOCALCHAT_API_KEY=" in readme and "/proc/PID/cmdline" in readme
