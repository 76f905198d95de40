"""The real GPTQ checkpoint the download and wizard tests use: the embedded SmolLM2 quantized to 4 bits,
made as tests/test_gptq.py makes it (localchat/gptq/derive.py), into the same cached folder."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).parent / "data"
FOLDER = "SmolLM2-135M-Instruct-GPTQ-4bit-g128"


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
