"""Derived model files: other quant levels of a local GGUF, made with llama.cpp's own quantizer."""

from __future__ import annotations

from pathlib import Path

import llama_cpp

from ..errors import ModelLoadError
from ..paths import models_dir

FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "F16": 1, "Q5_0": 8, "Q5_1": 9, "Q4_K_M": 15, "Q6_K": 18}


def requantize(source: Path, quant: str, target: Path | None = None) -> Path:
    """`source` re-quantized to `quant` (cached next to the downloaded models)."""
    if quant not in FTYPES:
        raise ModelLoadError(f"unknown quant '{quant}'; choose one of {', '.join(FTYPES)}.")
    target = target or models_dir() / f"{source.stem.rsplit('.', 1)[0]}.{quant}.gguf"
    if target.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[quant]
    params.allow_requantize = True
    partial = target.with_name(target.name + ".partial")
    if llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), params) != 0:
        partial.unlink(missing_ok=True)
        raise ModelLoadError(f"llama.cpp could not quantize {source} to {quant}.")
    partial.replace(target)
    return target
