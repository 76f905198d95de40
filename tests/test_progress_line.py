"""The progress line of a slow start, on a real terminal (a pty): shown on stderr, gone before the answer."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from localchat.progress_line import CLEAR

STATUS = b"localchat: reading the prompt"
SAFETY_NET_S = 900  # only a hung process ends the wait early; a slow machine just takes longer


def long_prompt(topic: str, lines: int = 100) -> str:
    """About 1.8k tokens: seconds of prefill on any CPU, so the line has its second to appear. Each
    test reads its own `topic`: a prompt read before would be restored from the disk's KV cache at once."""
    filler = [f"Line {i}: the {topic} for pier {i % 9} was revised in spring." for i in range(lines)]
    return "\n".join(filler) + "\nWhich pier is named in the first line?"


def run_on_terminal(*args: str, stdout_to_pipe: bool) -> tuple[bytes, bytes]:
    """Run `localchat ARGS` with stderr (and stdout, unless piped as in `| cat`) on a pty; return
    (what the terminal showed, what stdout's pipe got) once the process has ended."""
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 250, 0, 0))  # wide: the line is never cut
    proc = subprocess.Popen([sys.executable, "-m", "localchat", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if stdout_to_pipe else side, stderr=side)
    os.close(side)
    shown, deadline = b"", time.monotonic() + SAFETY_NET_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 5)
            if not ready:
                continue
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: every holder of the terminal's other end has exited
                break
            if not chunk:
                break
            shown += chunk
        piped = proc.stdout.read() if proc.stdout else b""
        assert proc.wait(timeout=60) == 0, shown.decode(errors="replace")
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
    return shown, piped


def test_a_slow_prompt_shows_a_progress_line_that_is_cleared_before_the_answer(model_path: Path):
    shown, _ = run_on_terminal("chat", "--temperature", "0", "--max-tokens", "8",
                               long_prompt("ferry timetable"), stdout_to_pipe=False)
    assert STATUS in shown and b" tokens (" in shown, shown  # how far the read is, and the seconds
    last = shown.rindex(STATUS)
    clear = shown.index(CLEAR.encode(), last)
    answer = shown[clear + len(CLEAR):].decode(errors="replace")
    assert answer.strip() and "localchat:" not in answer, answer  # the answer follows the cleared line


def test_piped_json_stays_clean_while_the_terminal_shows_the_line(model_path: Path):
    shown, piped = run_on_terminal("chat", "--json", "--temperature", "0", "--max-tokens", "8",
                                   long_prompt("harbour toll list"), stdout_to_pipe=True)
    answer = json.loads(piped)  # `| cat` or a JSON reader gets nothing but the object
    assert answer["prompt_tokens"] > 1500
    assert STATUS in shown, shown
    clear = shown.rindex(CLEAR.encode())
    assert clear > shown.rindex(STATUS) and shown[clear + len(CLEAR):].strip() == b""  # the terminal is left clean
