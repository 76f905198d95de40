"""The real GPTQ checkpoint the download and wizard tests use: the embedded SmolLM2 quantized to 4 bits,
made as tests/test_gptq.py makes it (localchat/gptq/derive.py), into the same cached folder; and a fake
hub serving it under the catalog's repo of qwen2.5-0.5b:gptq-int4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hub_server import FakeHub, serve_to_hub_client

DATA = Path(__file__).parent / "data"
FOLDER = "SmolLM2-135M-Instruct-GPTQ-4bit-g128"
REPO = "Qwen/Qwen2.5-0.5B-Instruct-GPTQ-Int4"  # the catalog's repo for qwen2.5-0.5b:gptq-int4
WEIGHTS = "model.safetensors"


def smollm2_gptq4(model_path: Path) -> Path:
    """The 4-bit group-128 GPTQ checkpoint of the embedded SmolLM2 (made once, then reused)."""
    from localchat.gptq import derive
    from localchat.gptq.tokenizer import CheckpointTokenizer
    from localchat.models.derive import requantize
    from localchat.paths import models_dir

    target = models_dir() / FOLDER
    if (target / "config.json").is_file():
        return target
    dense = derive.hf_from_gguf(requantize(model_path, "F16"), models_dir() / "SmolLM2-135M-Instruct-hf")
    tok = CheckpointTokenizer(dense, json.loads((dense / "config.json").read_text()))
    ids = tok.encode((DATA / "gptq-calibration.txt").read_text(), False, False)
    return derive.quantize_folder(dense, target, [ids[i:i + 256] for i in range(0, len(ids), 256)],
                                  bits=4, group=128, sym=True)


@pytest.fixture(scope="module")
def checkpoint(model_path: Path) -> dict[str, bytes]:
    """The files of a real GPTQ checkpoint (SmolLM2-135M at 4 bits), by name."""
    pytest.importorskip("torch", reason="the gptq extra is not installed (the checkpoint is made with it)")
    folder = smollm2_gptq4(model_path)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint: dict[str, bytes]):
    """A fake hub serving the checkpoint under the catalog's repo name (beside a README and pickled weights,
    which are no part of what is fetched), HF_ENDPOINT pointing at it and a private hub cache."""
    fake = FakeHub()
    for name, data in checkpoint.items():
        fake.add(REPO, name, data)
    fake.add(REPO, "README.md", b"# a model card\n")
    fake.add(REPO, "pytorch_model.bin", b"pickled weights: loading them can run code")
    fake.add("org/no-tokenizer-GPTQ", "config.json", checkpoint["config.json"])
    fake.add("org/no-tokenizer-GPTQ", WEIGHTS, checkpoint[WEIGHTS])
    yield from serve_to_hub_client(fake, tmp_path, monkeypatch)
