"""GPTQ checkpoints: their format, loader, torch model and kernels, quantizer (the optional `gptq` extra:
torch, safetensors, tokenizers). The torch worker that runs them is runtime/workers/torch_worker.py.

This module imports neither torch nor the other extras, so the engine can ask is_gptq_folder()
of any path and a listing can say what is missing without paying for the import.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from ..errors import ModelLoadError

EXTRA_MODULES = ("torch", "safetensors", "tokenizers")
# The files of a checkpoint folder the loader reads besides its safetensors weights (a download fetches them).
REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
NEEDS_EXTRA = "needs the gptq extra"
INSTALL_HINT = "install it with `scripts/setup.sh --gptq` (or `pip install localchat[gptq]`)"


def is_gptq_folder(path: str | Path) -> bool:
    """A folder whose config.json declares GPTQ quantization: the torch worker's to run."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        quant = json.loads(config.read_text(encoding="utf-8")).get("quantization_config")
    except (ValueError, OSError, AttributeError):
        return True  # a damaged config.json: the GPTQ loader says what is wrong with it
    return isinstance(quant, dict) and quant.get("quant_method") == "gptq"


def extra_installed() -> bool:
    """Whether torch, safetensors and tokenizers can be imported here."""
    return all(importlib.util.find_spec(name) is not None for name in EXTRA_MODULES)


def require_extra(folder: str | Path) -> None:
    """Before a GPTQ checkpoint folder is loaded: a clear error when the extra is missing."""
    if not extra_installed():
        missing = ", ".join(m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None)
        raise ModelLoadError(f"{folder} is a GPTQ checkpoint, which {NEEDS_EXTRA} ({missing} not installed); "
                             f"{INSTALL_HINT}, or use a GGUF file of the model.")
