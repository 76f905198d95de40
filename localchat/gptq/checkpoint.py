"""Read an HF-layout checkpoint folder (GPTQ or unquantized) and refuse, before loading any weight,
what the torch worker cannot run, naming the part: the files, the architecture, the quantization."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError
from . import REQUIRED_FILES
from .format import SUPPORTED_BITS
from .model import ARCHITECTURES, ModelConfig

GROUP_SIZES = (-1, 32, 64, 128)  # -1: one group per output column (per-channel)
CHECKPOINT_FORMATS = {"gptq": True, "gptq_v2": False}  # -> are zeros stored minus one (v1)?


@dataclass(slots=True)
class Quantization:
    bits: int
    group_size: int
    desc_act: bool
    sym: bool
    v1: bool  # zero points stored minus one


@dataclass(slots=True)
class Checkpoint:
    folder: Path
    config: dict[str, Any]
    model: ModelConfig
    quant: Quantization | None  # None: unquantized weights
    weight_files: list[Path]


def read_checkpoint(folder: str | Path, need_quantization: bool = True) -> Checkpoint:
    """The checkpoint's configuration, checked; ModelLoadError says which part we cannot run."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelLoadError(f"no checkpoint folder at {folder}; check the path.")
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        missing.append("*.safetensors (the weights)")
    if missing:
        raise ModelLoadError(f"the checkpoint in {folder} lacks {', '.join(missing)}; download it again in full.")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelLoadError(f"{folder / 'config.json'} is not valid JSON ({exc}); download it again.") from None
    architecture = (config.get("architectures") or ["(none given)"])[0]
    if architecture not in ARCHITECTURES:
        raise ModelLoadError(
            f"the checkpoint's architecture {architecture} is not one the GPTQ worker runs "
            f"({', '.join(ARCHITECTURES)}); use a GGUF file of this model instead.")
    try:
        model = ModelConfig.from_hf(config)
    except (KeyError, TypeError) as exc:
        raise ModelLoadError(f"config.json in {folder} lacks the model shape ({exc}); download it again.") from None
    if config.get("rope_scaling"):
        raise ModelLoadError("the checkpoint's config.json asks for RoPE scaling, which the GPTQ worker does not "
                             "implement; use a GGUF file of this model instead.")
    raw = config.get("quantization_config")
    if raw is None and not need_quantization:
        return Checkpoint(folder, config, model, None, weights)
    return Checkpoint(folder, config, model, _quantization(raw, folder), weights)


def _quantization(raw: Any, folder: Path) -> Quantization:
    if not isinstance(raw, dict) or raw.get("quant_method") != "gptq":
        method = raw.get("quant_method") if isinstance(raw, dict) else None
        raise ModelLoadError(f"the checkpoint in {folder} is not GPTQ-quantized (quant_method {method!r}); "
                             "use a GPTQ checkpoint or a GGUF file.")
    bits, group = raw.get("bits"), raw.get("group_size", -1)
    if bits not in SUPPORTED_BITS:
        raise ModelLoadError(f"the checkpoint's quantization has {bits} bits; the GPTQ worker runs "
                             f"{' or '.join(map(str, SUPPORTED_BITS))}-bit GPTQ. Pick a GPTQ-Int4 or -Int8 checkpoint.")
    if group not in GROUP_SIZES:
        raise ModelLoadError(f"the checkpoint's quantization group size {group} is not one of "
                             f"{', '.join(map(str, GROUP_SIZES))}; pick another checkpoint.")
    fmt = raw.get("checkpoint_format", "gptq")
    if fmt not in CHECKPOINT_FORMATS:
        raise ModelLoadError(f"the checkpoint format {fmt!r} (a repacked kernel layout) is not one the GPTQ "
                             f"worker reads ({', '.join(CHECKPOINT_FORMATS)}); pick a plain GPTQ checkpoint.")
    return Quantization(bits, group, bool(raw.get("desc_act", False)), bool(raw.get("sym", True)),
                        CHECKPOINT_FORMATS[fmt])
