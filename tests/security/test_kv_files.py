"""Saved KV state files are untrusted input: no bytes in `kv-states/` stop a model from loading,
kill the restore thread, allocate what the context cannot hold, or reach llama.cpp with positions
that are not the prompt's; the files are private, and all models share one disk budget."""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import stat
import struct
import threading
from array import array
from pathlib import Path

import pytest

from localchat.runtime.kv.kv_disk import MAGIC, KVDiskCache
from localchat.runtime.kv.kv_state import StateLimits

IDENTITY = "model 0123456789abcdef, KV f16/f16"
LIMITS = StateLimits(n_ctx=2048, bytes_per_cell=64)


def layout(positions: list[int], row: int = 8) -> bytes:
    """A sequence state in llama.cpp's layout: its magic and sequence id, one stream, its cells, one
    layer's K and V rows."""
    cells = b"".join(struct.pack("<iIi", pos, 1, 0) for pos in positions)
    rows = b"".join(struct.pack("<iQ", 1, row) + bytes(row * len(positions)) for _ in range(2))
    return struct.pack("<IiII", 0xAF143CD8, 0, 1, len(positions)) + cells + struct.pack("<II", 0, 1) + rows


def as_state(raw: bytes) -> ctypes.Array:
    return (ctypes.c_uint8 * len(raw)).from_buffer_copy(raw)


def crafted(folder: Path, tokens: list[int], header: object, state: bytes = b"", holes: int = 0) -> Path:
    """A file with the right magic and whatever header and state it is given (digests made to match),
    `holes` bytes longer for free (a sparse file claims gigabytes and takes no disk)."""
    raw = array("i", tokens).tobytes()
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path = folder / f"{hashlib.sha256(raw + text).hexdigest()[:32]}.kv"
    path.write_bytes(MAGIC + struct.pack("<I", len(text)) + text + raw + state)
    if holes:
        os.truncate(path, path.stat().st_size + holes)
    return path


def honest_header(tokens: list[int], state: bytes, **changes) -> dict:
    raw = array("i", tokens).tobytes()
    header = {"identity": IDENTITY, "num_tokens": len(tokens), "tokens_sha256": hashlib.sha256(raw).hexdigest(),
              "state_bytes": len(state), "state_sha256": hashlib.sha256(state).hexdigest(), "saved": 0}
    header.update(changes)
    return header


def folder_of(root: Path) -> Path:
    cache = KVDiskCache(root, IDENTITY, 1 << 30, min_tokens=4, limits=LIMITS)
    cache.close()
    return cache.folder


BAD_HEADERS = {
    "a list": [1],
    "a string": "x",
    "null": None,
    "a number": 7,
    "nested past the recursion limit": b"[" * 20000 + b"]" * 20000,
    "the count as a string": {"num_tokens": "8"},
    "the count as a bool": {"num_tokens": True},
    "the size as a float": {"state_bytes": 1.5},
    "the digest as a list": {"state_sha256": [1]},
    "no identity": {"identity": None},
    "not JSON": b"\xff\xfe{",
}


def test_files_of_every_bad_kind_at_start_are_deleted_with_one_log_line_each(tmp_path: Path, caplog):
    """The issue's first finding: a header that is JSON but not an object made the cache raise, and
    with it the model's load; every such file now goes, and the good one stays."""
    folder = folder_of(tmp_path)
    tokens, state = list(range(8)), layout(list(range(8)))
    bad = []
    for name, header in BAD_HEADERS.items():
        if isinstance(header, dict):
            header = honest_header(tokens, state, **header)
        bad.append(crafted(folder, tokens + [len(bad)], header, state))
    (folder / "empty.kv").write_bytes(b"")
    (folder / "short.kv").write_bytes(MAGIC + b"\x05")
    (folder / "noise.kv").write_bytes(os.urandom(4096))
    os.mkfifo(folder / "fifo.kv")  # opened as a file, it would wait forever for a writer
    (folder / "link.kv").symlink_to("/dev/zero")
    good = crafted(folder, tokens, honest_header(tokens, state), state)
    caplog.set_level(logging.WARNING, logger="localchat.runtime.kv.kv_disk")
    cache = KVDiskCache(tmp_path, IDENTITY, 1 << 30, min_tokens=4, limits=LIMITS)
    try:
        assert sorted(p.name for p in folder.iterdir()) == [good.name]
        discarded = [r for r in caplog.records if "discarded the saved KV state" in r.getMessage()]
        assert len(discarded) == len(BAD_HEADERS) + 5
        assert any("nested too deep" in r.getMessage() for r in discarded)
        assert bytes(cache.read(cache.lookup(tokens + [99]).entry)) == state
    finally:
        cache.close()


def test_a_state_claiming_more_than_the_context_holds_is_refused_before_any_allocation(tmp_path: Path):
    """The issue's third finding: a header claiming 100 GB (a sparse file of that size) killed the one
    restore thread with a MemoryError, and every later restore waited forever."""
    folder = folder_of(tmp_path)
    tokens = list(range(16))
    crafted(folder, tokens, honest_header(tokens, b"", state_bytes=100 << 30), holes=100 << 30)
    gigabyte_tokens = list(range(100, 116))  # a claim under the RAM, still far past what 16 cells take
    crafted(folder, gigabyte_tokens, honest_header(gigabyte_tokens, b"", state_bytes=1 << 30), holes=1 << 30)
    good_tokens = list(range(200, 216))
    good_state = layout(list(range(16)))
    crafted(folder, good_tokens, honest_header(good_tokens, good_state), good_state)
    cache = KVDiskCache(tmp_path, IDENTITY, 1 << 40, min_tokens=4, limits=LIMITS)
    try:
        delivered: list[object] = []
        done = threading.Event()
        for wanted in (tokens, gigabyte_tokens, good_tokens):
            hit = cache.lookup(wanted + [1])
            cache.read_later(hit.entry, lambda data: (delivered.append(data), len(delivered) == 3 and done.set()))
        assert done.wait(60), "the restore thread stopped delivering"
        assert delivered[0] is None and delivered[1] is None and bytes(delivered[2]) == good_state
        assert sorted(folder.glob("*.kv")) == [cache.lookup(good_tokens + [1]).entry.path]
    finally:
        cache.close()


@pytest.mark.parametrize("positions", [[0] * 16, list(range(1, 17)), list(range(15)) + [4096], list(range(8))],
                         ids=["all zero", "shifted", "past the context", "fewer cells than tokens"])
def test_a_state_whose_positions_are_not_its_prompts_is_never_loaded(tmp_path: Path, positions: list[int]):
    """The issue's seventh finding: the digests sit in the same file, so a crafted state with all-zero
    positions passed every check and made llama_decode fail for every request in the batch."""
    folder = folder_of(tmp_path)
    tokens = list(range(16))
    state = layout(positions)
    crafted(folder, tokens, honest_header(tokens, state), state)
    cache = KVDiskCache(tmp_path, IDENTITY, 1 << 30, min_tokens=4, limits=LIMITS)
    try:
        assert cache.read(cache.lookup(tokens + [1]).entry) is None
        assert not list(folder.glob("*.kv"))
    finally:
        cache.close()


def test_positions_in_any_cell_order_pass():
    """A prefix shared between slots can sit in cells out of position order: that is no fault."""
    LIMITS.check(layout([3, 1, 0, 2]), 4)


def test_the_restore_thread_outlives_a_deliver_that_raises(tmp_path: Path):
    cache = KVDiskCache(tmp_path, IDENTITY, 1 << 30, min_tokens=4, limits=LIMITS)
    try:
        for first in (0, 100):
            cache.save(list(range(first, first + 8)), as_state(layout(list(range(8)))))
        cache.flush()
        got = threading.Event()

        def boom(_data: object) -> None:
            raise RuntimeError("a bug in the caller")

        cache.read_later(cache.lookup(list(range(8)) + [1]).entry, boom)
        cache.read_later(cache.lookup(list(range(100, 108)) + [1]).entry, lambda data: got.set())
        assert got.wait(60), "the restore thread died with the first deliver"
    finally:
        cache.close()


def test_state_files_are_private_in_private_folders(tmp_path: Path):
    """The README says 0600: the folders were made 0755 and the files 0644 (an old 0755 folder is
    made private too)."""
    old = tmp_path / "kv-states"
    old.mkdir(mode=0o755)
    os.chmod(old, 0o755)
    cache = KVDiskCache(old, IDENTITY, 1 << 30, min_tokens=4, limits=LIMITS)
    try:
        cache.save(list(range(8)), as_state(layout(list(range(8)))))
        cache.flush()
        (path,) = cache.folder.glob("*.kv")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(cache.folder.stat().st_mode) == 0o700
        assert stat.S_IMODE(old.stat().st_mode) == 0o700
    finally:
        cache.close()


def test_one_disk_budget_holds_across_models_and_an_old_models_folder_goes(tmp_path: Path):
    """The budget was per model and KV type: each model's folder could grow to it, and folders of
    models no longer used stayed for good."""
    state = as_state(layout(list(range(8)), row=100))  # ~1.9 KB a file
    old = KVDiskCache(tmp_path, "model aaaaaaaaaaaaaaaa, KV f16/f16", 6000, min_tokens=4)
    for first in (0, 100):
        old.save(list(range(first, first + 8)), state)
    old.flush()
    old.close()
    new = KVDiskCache(tmp_path, IDENTITY, 6000, min_tokens=4, limits=LIMITS)
    try:
        for first in (200, 300, 400):
            new.save(list(range(first, first + 8)), state)
        new.flush()
        everything = list(tmp_path.rglob("*.kv"))
        assert sum(p.stat().st_size for p in everything) <= 6000
        assert all(p.parent == new.folder for p in everything)  # the old model's files went first
        assert not old.folder.exists()  # and its emptied folder with them
    finally:
        new.close()


def test_a_real_state_of_the_small_model_passes_its_checks(model_path: Path):
    """The checks read llama.cpp's own layout: a state exported from a real context passes them, within
    the bound its worker gives."""
    from localchat.runtime.kv.kv_state import limits_of
    from localchat.runtime.workers.worker import BatchRow, Worker, WorkerConfig

    worker = Worker(model_path, WorkerConfig(n_ctx=256, n_threads=1, n_seq_max=2))
    try:
        worker.decode([BatchRow(seq_id=1, tokens=list(range(1, 40)), pos=0, want_logits=True)])
        state = worker.export_seq(1)
        limits = limits_of(worker)
        assert len(state) <= limits.max_bytes(39)
        limits.check(memoryview(state), 39)
        with pytest.raises(ValueError, match="cells"):
            limits.check(memoryview(state), 38)
    finally:
        worker.close()


def test_a_state_another_runners_budget_dropped_meanwhile_is_no_fault(tmp_path: Path, caplog):
    """With one budget across models, another runner's writer may delete a listed file at any time (code
    review: `os.utime` sat outside read()'s `try`, so a delete between the read and it raised): such a file
    leaves the index quietly, with no "discarded" line, and the prompt is read instead."""
    cache = KVDiskCache(tmp_path, IDENTITY, 1 << 30, min_tokens=4, limits=LIMITS)
    try:
        cache.save(list(range(8)), as_state(layout(list(range(8)))))
        cache.flush()
        hit = cache.lookup(list(range(8)) + [1])
        hit.entry.path.unlink()  # as another runner's budget would
        caplog.set_level(logging.WARNING, logger="localchat.runtime.kv.kv_disk")
        assert cache.read(hit.entry) is None
        assert cache.lookup(list(range(8)) + [1]) is None and "discarded" not in caplog.text
    finally:
        cache.close()


def test_a_real_state_with_its_positions_zeroed_is_refused_and_the_prompt_read_again(model_path: Path,
                                                                                        tmp_path: Path):
    """The seventh finding on the real runtime: a saved state whose cells all claim position 0, its digest
    made to match, is deleted at its first restore, and the answer is the one read from scratch."""
    from localchat.runtime.engine import Engine, EngineConfig, Request
    from localchat.runtime.sampling import SamplingParams
    from localchat.runtime.workers.worker import WorkerConfig

    document = "\n".join(f"Entry {i}: the depot in sector {i % 9} keeps {i * 17 % 97} barrels." for i in range(80))
    ask = Request(messages=[{"role": "user", "content": document + "\nWhich sector keeps barrels 40?"}],
                  sampling=SamplingParams(temperature=0, max_tokens=8))
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_threads=1, n_seq_max=2, deterministic=True),
                          kv_disk_dir=tmp_path)
    with Engine.load(model_path, config) as engine:
        fresh = engine.submit(ask).result()
        engine.kv_disk.flush()
        (path,) = engine.kv_disk.folder.glob("*.kv")
    raw = path.read_bytes()
    (length,) = struct.unpack_from("<I", raw, len(MAGIC))
    start = len(MAGIC) + 4
    header = json.loads(raw[start:start + length])
    state_at = start + length + 4 * header["num_tokens"]
    state = bytearray(raw[state_at:])
    (cells,) = struct.unpack_from("<I", state, 12)
    for i in range(cells):
        struct.pack_into("<i", state, 16 + 12 * i, 0)
    header["state_sha256"] = hashlib.sha256(state).hexdigest()
    text = json.dumps(header).encode()
    path.write_bytes(MAGIC + struct.pack("<I", len(text)) + text + raw[start + length:state_at] + bytes(state))
    with Engine.load(model_path, config) as engine:
        again = engine.submit(ask).result()
        engine.kv_disk.flush()
    assert again.text == fresh.text and again.stats.cached_tokens == 0
    assert path.read_bytes()[state_at:] != bytes(state)  # refused, and saved anew from this read
