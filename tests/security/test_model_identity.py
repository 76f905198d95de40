"""A model's identity, for its saved KV states and the PD split's handover, is its weights: a file of
the same size, header and parameter count with other tensor data is another model."""

from __future__ import annotations

import shutil
from pathlib import Path

import gguf
import pytest

from localchat.runtime.kv.weights_digest import weights_digest
from localchat.runtime.workers.worker import Worker, WorkerConfig


def other_weights(source: Path, target: Path) -> Path:
    """A copy of `source` with the first two layers' weights swapped: the same size, header, parameter
    count and description, valid numbers, other weights (as a fine-tune or another checkpoint is)."""
    shutil.copy(source, target)
    reader = gguf.GGUFReader(target, "r+")
    tensors = {t.name: t for t in reader.tensors}
    swapped = 0
    for name, tensor in tensors.items():
        if name.startswith("blk.0."):
            twin = tensors.get("blk.1." + name[len("blk.0."):])
            if twin is not None and twin.data.shape == tensor.data.shape and twin.tensor_type == tensor.tensor_type:
                first = tensor.data.copy()
                tensor.data[...] = twin.data
                twin.data[...] = first
                swapped += 1
    assert swapped
    del reader  # the memory map writes the change back
    return target


@pytest.fixture(scope="module")
def twin(model_path: Path, tmp_path_factory) -> Path:
    return other_weights(model_path, tmp_path_factory.mktemp("twin") / "smollm2-other-weights.gguf")


def test_a_same_sized_file_with_other_weights_has_another_identity(model_path: Path, twin: Path):
    """The issue's fourth finding: the fingerprint hashed the first MiB (SmolLM2's header alone is 1.78 MB),
    the size and the parameter count, so this file restored SmolLM2's saved state and answered from it."""
    assert twin.stat().st_size == model_path.stat().st_size
    assert twin.read_bytes()[: 1 << 20] == model_path.read_bytes()[: 1 << 20]
    config = WorkerConfig(n_ctx=256, n_threads=1, n_seq_max=1)
    ours, theirs = Worker(model_path, config), Worker(twin, config)
    try:
        assert ours.describe() == theirs.describe()
        assert ours.state_identity != theirs.state_identity
        assert ours.fingerprint != theirs.fingerprint  # the PD split's handover check
    finally:
        ours.close()
        theirs.close()


def test_the_digest_reads_a_bounded_sample_of_any_file(tmp_path: Path):
    """16 MiB read at most, whatever the size: a 20 GB file's whole digest would take most of a minute."""
    big = tmp_path / "big.gguf"
    with big.open("wb") as handle:
        handle.truncate(8 << 30)  # sparse
    first = weights_digest(big)
    with big.open("r+b") as handle:
        handle.seek((8 << 30) - 100)  # the last tensor's data
        handle.write(b"x")
    assert weights_digest(big) != first
