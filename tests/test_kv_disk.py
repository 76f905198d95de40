"""Prompt KV state on disk: saved after a long read, restored instead of read again after a restart,
and every file that fails a check refused."""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import pytest

from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.kv.kv_disk import KVDiskCache
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.workers.worker import WorkerConfig

IDENTITY = "model 0123456789abcdef, KV q8_0/q8_0"


def state(values: bytes) -> ctypes.Array:
    return (ctypes.c_uint8 * len(values)).from_buffer_copy(values)


def saved(cache: KVDiskCache, tokens: list[int], data: bytes) -> None:
    cache.save(tokens, state(data))
    cache.flush()


def test_a_saved_prefix_is_found_by_any_prompt_that_starts_with_it(tmp_path: Path):
    cache = KVDiskCache(tmp_path, IDENTITY, max_bytes=1 << 20, min_tokens=4)
    saved(cache, list(range(100)), b"state of a hundred tokens")
    hit = cache.lookup(list(range(60)) + [999, 1000])
    assert hit is not None and hit.num_tokens == 60  # the shared part only
    assert cache.lookup([5, 6, 7, 8, 9]) is None
    assert cache.lookup(list(range(100))).num_tokens == 99  # the last prompt token is left to compute
    assert bytes(cache.read(hit.entry)) == b"state of a hundred tokens"
    cache.close()
    again = KVDiskCache(tmp_path, IDENTITY, max_bytes=1 << 20, min_tokens=4)  # a restart lists it again
    assert again.lookup(list(range(200))).num_tokens == 100
    again.close()


def test_corrupt_truncated_and_foreign_files_are_discarded_with_a_log_line(tmp_path: Path, caplog):
    cache = KVDiskCache(tmp_path, IDENTITY, max_bytes=1 << 20, min_tokens=4)
    for first in (0, 1000):
        saved(cache, list(range(first, first + 50)), bytes(range(200)))
    flipped, truncated = sorted(cache.folder.glob("*.kv"), key=lambda p: p.stat().st_mtime_ns)
    cache.close()
    raw = bytearray(flipped.read_bytes())
    raw[-10] ^= 0xFF  # one bit of the state itself
    flipped.write_bytes(bytes(raw))
    truncated.write_bytes(truncated.read_bytes()[:-7])
    other = KVDiskCache(tmp_path, "model fedcba9876543210, KV f16/f16", max_bytes=1 << 20, min_tokens=4)
    saved(other, list(range(2000, 2050)), bytes(200))
    other.close()
    (foreign,) = other.folder.glob("*.kv")
    foreign = foreign.rename(cache.folder / foreign.name)  # another model's state, in this model's folder
    caplog.set_level(logging.WARNING, logger="localchat.runtime.kv.kv_disk")
    reopened = KVDiskCache(tmp_path, IDENTITY, max_bytes=1 << 20, min_tokens=4)
    assert not foreign.exists() and "another model" in caplog.text
    assert reopened.lookup(list(range(2000, 2050)) + [7]) is None
    hit = reopened.lookup(list(range(0, 50)) + [7])
    assert hit is not None and reopened.read(hit.entry) is None  # the flipped bit: refused, never loaded
    assert not flipped.exists() and "does not match its digest" in caplog.text
    hit = reopened.lookup(list(range(1000, 1050)) + [7])  # cut short after it was listed
    assert hit is not None and reopened.read(hit.entry) is None
    assert not truncated.exists() and "truncated" in caplog.text
    reopened.close()


def test_the_folder_keeps_to_its_size_bound_dropping_the_least_recently_used(tmp_path: Path):
    cache = KVDiskCache(tmp_path, IDENTITY, max_bytes=3600, min_tokens=4)  # three files of ~1,150 bytes
    for first in (0, 1000, 2000):
        saved(cache, list(range(first, first + 10)), bytes(800))
    cache.read(cache.lookup(list(range(0, 10)) + [1]).entry)  # the oldest, used again
    saved(cache, list(range(3000, 3010)), bytes(800))
    assert cache.lookup(list(range(0, 10)) + [1]) is not None
    assert cache.lookup(list(range(1000, 1010)) + [1]) is None  # least recently used: dropped
    assert sum(p.stat().st_size for p in cache.folder.glob("*.kv")) <= 3600
    cache.close()


# -- on the real runtime ------------------------------------------------------------------------

def document(n: int = 52) -> str:  # just over the 1,024 tokens a prompt needs to be saved
    return "\n".join(f"Entry {i}: the depot in sector {i % 9} keeps {i * 17 % 97} barrels of resin {i}."
                     for i in range(n))


def load(model_path: Path, kv_dir: Path | None, n_ctx: int = 4096) -> Engine:
    config = EngineConfig(worker=WorkerConfig(n_ctx=n_ctx, n_batch=512, n_seq_max=4, n_threads=2,
                                              deterministic=True), kv_disk_dir=kv_dir)
    return Engine.load(model_path, config)


def ask(engine: Engine, question: str):
    messages = [{"role": "user", "content": document() + "\n\n" + question}]
    return engine.submit(Request(messages=messages, sampling=SamplingParams(temperature=0.0, max_tokens=24))).result()


@pytest.fixture(scope="module")
def fresh(model_path: Path):
    """Greedy answers read from scratch, with no saved state anywhere."""
    with load(model_path, None) as engine:
        return {q: ask(engine, q) for q in ("Which sector keeps resin 40?", "How many barrels of resin 7?")}


def test_a_document_read_once_is_restored_after_a_restart_with_the_same_greedy_answer(
        model_path: Path, tmp_path: Path, fresh):
    first_q, second_q = fresh
    with load(model_path, tmp_path) as engine:
        first = ask(engine, first_q)
        engine.kv_disk.flush()
        assert first.stats.prompt_tokens > 1024 and first.stats.cached_tokens == 0
        assert len(list(engine.kv_disk.folder.glob("*.kv"))) == 1
    assert first.token_ids == fresh[first_q].token_ids
    # A restart, and a context of another size: the state belongs to the weights and KV types.
    with load(model_path, tmp_path, n_ctx=3072) as engine:
        again = ask(engine, second_q)  # another question: the document part of the saved prompt is used
    assert again.stats.cached_tokens >= first.stats.prompt_tokens - 16
    assert again.stats.kv_transfer_bytes > 0
    assert again.token_ids == fresh[second_q].token_ids


def test_a_corrupt_state_file_is_never_loaded_and_the_prompt_is_read_instead(
        model_path: Path, tmp_path: Path, fresh):
    first_q, _ = fresh
    with load(model_path, tmp_path) as engine:
        ask(engine, first_q)
        engine.kv_disk.flush()
        (path,) = engine.kv_disk.folder.glob("*.kv")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with load(model_path, tmp_path) as engine:
        result = ask(engine, first_q)
        engine.kv_disk.flush()
    assert result.stats.cached_tokens == 0 and result.token_ids == fresh[first_q].token_ids
    assert path.read_bytes() != bytes(raw)  # refused, and saved anew from this fresh read
