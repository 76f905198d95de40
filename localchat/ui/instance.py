"""One chat window per user: a second start points at the running one, and the window keeps a log file.

The running window records its URL in the data dir. A plain second start (a double-click on the
desktop bundle, say) finds it there, checks that it answers, and opens it instead of loading the
model a second time on a second port.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
import webbrowser
from dataclasses import asdict, dataclass
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from .. import __version__
from ..key_options import key_flag
from ..paths import data_dir, log_dir, private_file
from ..api.app import bind_socket, url_of
from ..api.origins import LOOPBACK_NAMES

log = logging.getLogger(__name__)

INSTANCE_FILE = "instance.json"
LOG_FILE = "localchat.log"
PROBE_TIMEOUT_S = 2.0


@dataclass(slots=True)
class Instance:
    """A running chat window, as it recorded itself."""

    url: str
    pid: int
    started: float
    port: int = 0


def instance_file() -> Path:
    return data_dir() / INSTANCE_FILE


def log_to_file(verbose: bool = False) -> Path:
    """Add a rotating log file in the log dir; the console keeps showing warnings only."""
    path = private_file(log_dir() / LOG_FILE)
    handler = RotatingFileHandler(path, maxBytes=1_000_000, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG if verbose else logging.INFO)
    root = logging.getLogger()
    if not verbose:
        # The file wants localchat's INFO lines; the terminal (or none, in a bundle) does not.
        for console in root.handlers:
            if console.level == logging.NOTSET:
                console.setLevel(logging.WARNING)
        logging.getLogger("localchat").setLevel(logging.INFO)
    root.addHandler(handler)
    log.info("localchat %s started (pid %d%s): %s", __version__, os.getpid(),
             ", bundle" if getattr(sys, "frozen", False) else "", " ".join(redacted(sys.argv[1:])) or "ui")
    return path


def redacted(argv: list[str]) -> list[str]:
    """A command line fit for a log: the values of key options replaced by ***."""
    shown, hide_next = [], False
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if hide_next:
            shown.append("***")
        elif key_flag(flag) and "=" in arg:
            shown.append(flag + "=***")
        else:
            shown.append(arg)
        hide_next = not hide_next and key_flag(arg) is not None
    return shown


def running_instance() -> Instance | None:
    """The recorded window if it still answers; None when there is none (or only a stale record)."""
    try:
        raw = json.loads(instance_file().read_text(encoding="utf-8"))
        found = Instance(url=str(raw["url"]), pid=int(raw["pid"]), started=float(raw["started"]),
                         port=int(raw.get("port", 0)))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # any bytes at all: no record
        return None
    # The record is a file anyone with access to the data dir could write: trust it only when it
    # names a live localchat process of this user, a loopback address on the recorded port, and that
    # very process listens on that port.
    if (found.pid == os.getpid() or not _ours(found) or not _loopback_url(found) or not _listens(found)
            or not _answers(found.url)):
        return None
    return found


def _ours(found: Instance) -> bool:
    import psutil

    try:
        process = psutil.Process(found.pid)
        same_user = os.name != "posix" or process.uids().real == os.getuid()
        # A recycled pid belongs to a process started after the record was written.
        return same_user and process.create_time() <= found.started + 1 and "localchat" in " ".join(process.cmdline())
    except (psutil.Error, OSError):
        return False


def _listens(found: Instance) -> bool:
    """Whether the recorded process itself listens on the recorded port.

    The operating system says which process owns a listening socket; a server's answer could not
    (any program can answer like localchat, and a forged record may name a real window's pid
    beside the port of such a program)."""
    import psutil

    try:
        process = psutil.Process(found.pid)
        # psutil 6 renamed connections() to net_connections().
        sockets = getattr(process, "net_connections", None) or process.connections
        return any(s.status == psutil.CONN_LISTEN and s.laddr and s.laddr.port == found.port
                   for s in sockets(kind="inet"))
    except (psutil.Error, OSError):
        return False


def _loopback_url(found: Instance) -> bool:
    try:
        parts = urlsplit(found.url)
        return (parts.scheme == "http" and (parts.hostname or "") in {n.strip("[]") for n in LOOPBACK_NAMES}
                and parts.port == found.port and not parts.path.strip("/") and not parts.query
                and parts.username is None)
    except ValueError:
        return False


def _answers(url: str) -> bool:
    """True when a localchat server answers at url (a key-protected one answers 401 with its error body)."""
    import httpx

    try:
        response = httpx.get(url + "/v1/models", timeout=PROBE_TIMEOUT_S, trust_env=False)
        body = response.json()
    except (httpx.HTTPError, ValueError):
        return False
    if not isinstance(body, dict):
        return False
    return (response.status_code == 200 and body.get("object") == "list") or (
        response.status_code == 401 and "error" in body)


def reserve_url(host: str, port: int | None, default_port: int) -> tuple[int, str]:
    """The port the window will listen on and its URL, found now so the record can name it.

    The socket is closed again at once and the server binds the same port moments later.
    """
    sock = bind_socket(host, port, default_port)
    try:
        return sock.getsockname()[1], url_of(sock)
    finally:
        sock.close()


@contextlib.contextmanager
def recorded(url: str) -> Iterator[Path]:
    """Record this process as the running window while the block runs."""
    path = instance_file()
    record = Instance(url=url, pid=os.getpid(), started=time.time(), port=urlsplit(url).port or 0)
    partial = private_file(path.with_name(path.name + f".{os.getpid()}"))
    partial.write_text(json.dumps(asdict(record)), encoding="utf-8")
    os.replace(partial, path)  # atomic: a second start never reads half a record
    log.info("chat window at %s/", url)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError, ValueError, AttributeError, RecursionError):
            # Only our own record: a later window may have replaced it meanwhile.
            if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
                path.unlink()


def open_browser(url: str) -> bool:
    """Open url in the default browser; False when there is none (the printed URL is enough)."""
    try:
        return webbrowser.open(url)
    except Exception:
        return False
