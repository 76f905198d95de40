"""A prompt's KV state asks the disk for its bytes before it is written: one that does not fit (with the margin
the chats keep) is not written at all and said in one log line, and a write that fails part way (a disk filled
meanwhile) leaves no .tmp behind."""

from __future__ import annotations

import ctypes
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from localchat.paths import DISK_MARGIN
from localchat.runtime.kv.kv_disk import KVDiskCache

IDENTITY = "model 0123456789abcdef, KV f16/f16"


def test_a_state_that_does_not_fit_is_not_written_and_said_once(small_disk, caplog):
    disk = small_disk("2m")
    cache = KVDiskCache(disk, IDENTITY, max_bytes=1 << 30, min_tokens=4)
    caplog.set_level(logging.WARNING, logger="localchat.runtime.kv.kv_disk")
    state = (ctypes.c_uint8 * (3 << 20))()  # 3 MiB onto a 2 MiB disk
    cache.save(list(range(16)), state)
    cache.flush()
    cache.close()
    assert [p.name for p in cache.folder.iterdir()] == []  # no .tmp, no .kv
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "was not saved" in said[0] and "kept free" in said[0], said


def test_a_write_cut_off_part_way_leaves_no_tmp_file(tmp_path: Path):
    """The disk says there is room, then the write fails after its first megabyte: a file size limit
    (RLIMIT_FSIZE, EFBIG) stands in for a disk another writer filled meanwhile. In a child process, so the
    limit binds no other file of the test run."""
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert free > DISK_MARGIN + (8 << 20), "the test needs some room on the disk of its temporary folder"
    script = textwrap.dedent(f"""
        import ctypes, logging, resource, signal, sys
        from localchat.runtime.kv.kv_disk import KVDiskCache
        logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        cache = KVDiskCache({str(tmp_path)!r}, {IDENTITY!r}, max_bytes=1 << 30, min_tokens=4)
        cache.save(list(range(16)), (ctypes.c_uint8 * (4 << 20))())
        cache.close()
        print("files:", sorted(p.name for p in cache.folder.iterdir()))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert "files: []" in done.stdout, done.stdout
    assert "could not save a prompt's KV state" in done.stdout
