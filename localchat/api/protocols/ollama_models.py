"""What Ollama's model routes say about a model (/api/tags, /api/show, /api/ps), from its GGUF header."""

from __future__ import annotations

import functools
import hashlib
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...models.gguf_bytes import GGUFError
from ...models.gguf_info import GGUFInfo, read_gguf
from ..service import ModelInfo

LATEST = ":latest"  # Ollama's tag for a name given without one
NEVER = "2999-12-31T23:59:59Z"  # when a model expires that is never unloaded


def tagged(name: str) -> str:
    """A name as Ollama writes it: with a tag."""
    return name if ":" in name else name + LATEST


def untagged(name: str | None) -> str | None:
    """A client's model name as this server knows it: Ollama's clients add ':latest' to a bare name."""
    return name[: -len(LATEST)] if name and name.endswith(LATEST) else name


def now() -> str:
    """The time, as Ollama's `created_at` writes it (RFC 3339, UTC)."""
    return stamp(datetime.now(timezone.utc))


def stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


# Headers by file and version, for every model a listing shows: with room for 16 only, a machine with
# more models read every header again on each /api/tags, on the event loop. A header is small once read
# (its token arrays are summarised), so a thousand fit.
@functools.lru_cache(maxsize=1024)
def _header(path: Path, mtime_ns: int) -> GGUFInfo | None:
    try:
        return read_gguf(path)
    except (GGUFError, OSError):
        return None  # a GPTQ folder, or a file that changed under us: the facts the engine gave still stand


def _facts(info: ModelInfo) -> tuple[GGUFInfo | None, int, datetime]:
    """The GGUF header (None when the model is no GGUF file), the file's size and its modification time."""
    path = info.path
    if path is None or not path.is_file():
        return None, 0, datetime.fromtimestamp(info.created, timezone.utc)
    stat = path.stat()
    header = _header(path, stat.st_mtime_ns) if path.suffix.lower() == ".gguf" else None
    return header, stat.st_size, datetime.fromtimestamp(stat.st_mtime, timezone.utc)


def _parameter_size(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def details(info: ModelInfo) -> dict[str, Any]:
    """Ollama's `details`: format, family, parameter size, quantization."""
    header, _, _ = _facts(info)
    words = info.description.split(", ")  # "llama, 135M parameters, Q4_1": what the engine says when no header
    family = header.arch if header is not None else words[0] if info.description else ""
    count = sum(math.prod(t.shape) for t in header.tensors) if header is not None else 0
    return {"parent_model": "", "format": "gguf" if header is not None else "", "family": family,
            "families": [family] if family else None,
            "parameter_size": _parameter_size(count) if count else (words[1].split()[0] if len(words) > 1 else ""),
            "quantization_level": (header.quant or "") if header is not None else (words[2] if len(words) > 2 else "")}


def listed(info: ModelInfo) -> dict[str, Any]:
    """A model as /api/tags lists it."""
    _, size, modified = _facts(info)
    # The version of the file, not its content's sha256: hashing gigabytes to list models would stall the server.
    identity = f"{info.path.name if info.path else info.name}\0{size}\0{modified.timestamp()}"
    return {"name": tagged(info.name), "model": tagged(info.name), "modified_at": stamp(modified), "size": size,
            "digest": hashlib.sha256(identity.encode()).hexdigest(), "details": details(info)}


def running(info: ModelInfo) -> dict[str, Any]:
    """A model as /api/ps lists it: loaded, until when (the served model: while the server runs)."""
    # size_vram is what llama.cpp allocated on GPUs (weights, KV cache, compute), never the configured layer count.
    expires = NEVER if info.expires_at == math.inf else stamp(datetime.fromtimestamp(info.expires_at, timezone.utc))
    return {**listed(info), "expires_at": expires, "size_vram": info.device_bytes, "context_length": info.n_ctx,
            "x_localchat": {"placement": info.placed,  # and each GPU's memory now (none on the CPU)
                            "devices": info.device_memory() if info.device_memory is not None else []}}


def shown(info: ModelInfo) -> dict[str, Any]:
    """A model as /api/show describes it: details, the GGUF header's facts, the template, the parameters."""
    header, _, modified = _facts(info)
    model_info: dict[str, Any] = {}
    if header is not None:  # the header's own values; long lists (the vocabulary) and the template are left out
        model_info = {key: value for key, value in header.metadata.items()
                      if isinstance(value, (str, int, float, bool)) and key != "tokenizer.chat_template"
                      and not (isinstance(value, str) and len(value) > 1024)}
        model_info["general.parameter_count"] = sum(math.prod(t.shape) for t in header.tensors)
    defaults = info.defaults
    parameters = [f"num_ctx {info.n_ctx}"]
    if defaults is not None:
        parameters += [f"temperature {defaults.temperature}", f"top_k {defaults.top_k}", f"top_p {defaults.top_p}",
                       f"min_p {defaults.min_p}", f"repeat_penalty {defaults.repeat_penalty}"]
        parameters += [f'stop "{s}"' for s in defaults.stop]
    capabilities = ["embedding"] if info.kind == "embedding" else ["completion", "tools"]
    file = info.path.name if info.path else info.name  # the file's name only: the server's folders stay its own
    return {"modelfile": f"# served by localchat\nFROM {file}\n", "parameters": "\n".join(parameters),
            "template": info.template, "details": details(info), "model_info": model_info,
            "capabilities": capabilities, "modified_at": stamp(modified)}
