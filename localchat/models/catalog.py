"""The model catalog: models.yaml parsed once into ModelFacts (files and their sources, architecture, draft pairing)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, ModelNotFoundError
from ..runtime.gguf_types import GGML_TYPES
from .gguf_info import GGUFInfo, is_expert_tensor
from .split_files import part_names

CATALOG_FILE = Path(__file__).resolve().parent.parent / "models.yaml"

# Effective bits per weight of llama.cpp's quant mixes (scales included), for estimates only;
# a GGUF header, when at hand, gives the exact bytes instead.
QUANT_BITS = {"F32": 32.0, "F16": 16.0, "BF16": 16.0, "Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.69,
              "Q5_K_S": 5.54, "Q5_1": 6.0, "Q5_0": 5.5, "Q4_K_M": 4.89, "Q4_K_S": 4.58, "Q4_1": 5.0,
              "Q4_0": 4.5, "IQ4_XS": 4.25, "IQ4_NL": 4.5, "Q3_K_L": 4.27, "Q3_K_M": 3.91, "Q3_K_S": 3.5,
              "IQ3_M": 3.66, "IQ3_XS": 3.3, "Q2_K": 3.35, "IQ2_M": 2.7, "IQ2_XS": 2.31}
# Bytes per element of llama.cpp's KV cache types (type_k / type_v), from ggml's block sizes.
KV_TYPE_BYTES = {name.lower(): size / block for name, block, size in GGML_TYPES.values()
                 if name in ("F16", "BF16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0")}
GGUF, GPTQ = "gguf", "gptq"   # the weights' formats a catalog file may have
# A GPTQ checkpoint quantizes the linears only: its token embedding and output head stay float16.
GPTQ_EMBEDDING_BITS = 16.0


@dataclass(slots=True)
class ModelFile:
    """One quant level of a model: its file name, size, checksum, weight format and where to fetch it.

    A GPTQ entry (format gptq, quant like gptq-int4) is a checkpoint folder: `file` is the folder's name,
    `size` all of its files together, and its hub source names the repo only (the listing names the files).
    """

    quant: str
    file: str
    size: int
    sha256: str | None = None  # hub-only entries may leave it out: the hub's LFS sha256 is checked then
    sources: list[dict[str, Any]] = field(default_factory=list)  # as written: [{kind: spec}], tried in order
    format: str = GGUF  # the weights' format; one model may list files of several formats
    bits: int | None = None  # a GPTQ checkpoint's bits per quantized weight (4 or 8)

    @property
    def is_checkpoint(self) -> bool:
        """A GPTQ checkpoint folder (the torch worker's), not one GGUF file (llama.cpp's)."""
        return self.format == GPTQ

    @property
    def verified(self) -> bool:
        """Whether the size and checksum were checked against the bytes (a hub listing's rounded size is not)."""
        return bool(self.sha256) and any(next(iter(s.values())).get("verified", True) for s in self.sources)

    @property
    def hub(self) -> dict[str, Any]:
        """The first hub source's spec (repo, file, revision, verified), or {} when the hub does not serve it."""
        return next((s["hub"] for s in self.sources if "hub" in s), None) or {}

    @property
    def repo(self) -> str | None:
        """The hub repo that serves the file, where the catalog names one."""
        return self.hub.get("repo")

    @property
    def repo_file(self) -> str | None:
        """The file's name in that repo (None for a checkpoint: the repo's listing names its files)."""
        return self.hub.get("file", self.file) if self.hub and not self.is_checkpoint else None

    @property
    def revision(self) -> str:
        return self.hub.get("revision", "main")


@dataclass(slots=True)
class ModelFacts:
    """One catalog model: its files, its architecture (what planning needs) and its draft pairing."""

    key: str
    name: str
    family: str
    license: str
    arch: str
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    params_b: float
    tied_embeddings: bool = True
    sliding_window: int | None = None
    swa_pattern: int | None = None          # every n-th layer keeps full attention
    draft: str | None = None                # the catalog key of a smaller model with the same tokenizer
    thinking_tokens: int = 0                # what a model that always thinks writes before its answer
    # A mixture of experts (gpt-oss): each layer holds n_expert experts' feed-forward weights and a token
    # runs n_expert_used of them, so memory follows params_b and what one token reads follows active_params_b.
    n_expert: int = 0
    n_expert_used: int = 0
    active_params_b: float | None = None    # the weights one token uses (all of them for a dense model)
    per_layer_embd: int = 0                 # Gemma 3n: each layer's own token-embedding width, kept in RAM
    kv_layers: int | None = None            # layers with a KV cache of their own (Gemma 3n's later ones share)
    default_quant: str = "Q4_K_M"
    files: dict[str, ModelFile] = field(default_factory=dict)
    exact_layer_bytes: dict[str, int] = field(default_factory=dict)  # quant -> bytes, from a header
    # quant -> bytes of the output head as a GPU holds it, from a header: a tied head is a copy of the token
    # embedding, which files often keep at another type than the layers (SmolLM2's Q4_1 file: Q8_0).
    exact_output_bytes: dict[str, int] = field(default_factory=dict)
    exact_expert_bytes: dict[str, int] = field(default_factory=dict)  # quant -> one layer's expert weights
    exact_host_bytes: dict[str, int] = field(default_factory=dict)    # quant -> the embeddings kept in RAM

    def file_for(self, quant: str | None) -> ModelFile:
        """The file of a quant level (the default one when None), or a clear error."""
        quant = quant or self.default_quant
        for known, model_file in self.files.items():
            if known.lower() == quant.lower():
                return model_file
        raise ModelNotFoundError(
            f"{self.key} has no quant '{quant}'. Available: {', '.join(self.files)}."
        )

    def embedding_bytes(self, quant: str) -> int:
        """Bytes of one vocab x n_embd matrix (the token embedding; the output head is another)."""
        known = self.files.get(quant)
        bits = GPTQ_EMBEDDING_BITS if known is not None and known.is_checkpoint else QUANT_BITS.get(quant, 8.5)
        return int(self.n_vocab * self.n_embd * bits / 8)

    def host_bytes(self, quant: str) -> int:
        """What llama.cpp keeps in host memory wherever the layers run: the token embedding, and Gemma 3n's
        per-layer embeddings (n_vocab rows of per_layer_embd for each layer, at about the file's bits)."""
        if quant in self.exact_host_bytes:
            return self.exact_host_bytes[quant]
        per_layer = self.n_vocab * self.per_layer_embd * self.n_layer
        return self.embedding_bytes(quant) + int(per_layer * QUANT_BITS.get(quant, 8.5) / 8)

    def formats(self, fmt: str) -> dict[str, ModelFile]:
        """The files of one weight format, by quant."""
        return {quant: f for quant, f in self.files.items() if f.format == fmt}

    def layer_bytes(self, quant: str) -> int:
        """Weight bytes of one repeating block."""
        if quant in self.exact_layer_bytes:
            return self.exact_layer_bytes[quant]
        known = self.files[quant]
        outside = self.host_bytes(quant) + (0 if self.tied_embeddings else self.embedding_bytes(quant))
        # Never below half an even split: the bits table is an estimate, the file size is not. A GPTQ
        # checkpoint's float16 embeddings are exact, and can be most of a small model's bytes.
        floor = known.size // (8 if known.is_checkpoint else 2)
        return max(known.size - outside, floor) // self.n_layer

    def expert_bytes(self, quant: str) -> int:
        """Bytes of one layer's expert weights (0 for a dense model). Without a header, the experts' share of
        the layer's parameters: total - active = the unused experts' part, (1 - used/n) of all experts."""
        if not self.n_expert:
            return 0
        if quant in self.exact_expert_bytes:
            return self.exact_expert_bytes[quant]
        experts = (self.params_b - self.active_params()) / (1 - self.n_expert_used / self.n_expert)
        tables = self.n_vocab * self.n_embd * (1 if self.tied_embeddings else 2) / 1e9 + self.table_params_b()
        share = min(1.0, experts / max(self.params_b - tables, 1e-9))
        return int(self.layer_bytes(quant) * share)

    def read_layer_bytes(self, quant: str, n_tokens: int) -> int:
        """Bytes of one layer's weights a step over n_tokens reads: all of a dense layer; of an expert layer
        the experts its tokens chose, each token n_expert_used of n_expert (routed independently, a step of
        n tokens touches 1 - (1 - used/n)^n of them: one token 4 of 32, a 512-token prompt chunk all)."""
        experts = self.expert_bytes(quant)
        if not experts:
            return self.layer_bytes(quant)
        touched = 1 - (1 - self.n_expert_used / self.n_expert) ** n_tokens
        return self.layer_bytes(quant) - experts + int(experts * touched)

    def table_params_b(self) -> float:
        """Gemma 3n's per-layer embedding tables, in billions of parameters: a token looks up one row of each."""
        return self.n_vocab * self.per_layer_embd * self.n_layer / 1e9

    def active_params(self) -> float:
        """The parameters one token computes with, in billions (neither unchosen experts nor lookup tables)."""
        return self.active_params_b or self.params_b - self.table_params_b()

    def output_bytes(self, quant: str) -> int:
        """Bytes of the output head, which lives with the last layer (tied heads are a copy)."""
        return self.exact_output_bytes.get(quant) or self.embedding_bytes(quant)

    def kv_bytes(self, n_ctx: int, type_kv: str = "f16", n_layers: int | None = None) -> int:
        """KV cache bytes of `n_layers` layers (all by default) at n_ctx tokens. A sliding-window layer holds
        all n_ctx cells too: the runtime keeps llama.cpp's full-size cache for them (runtime/workers/worker.py,
        swa_full), so that prefixes are reused and drafts rolled back; it attends over its window only
        (attended_cells). Measured on gemma-3-270m at 4k: 72 MiB, the full cache, where a cache of the window
        plus one ubatch would be 27. A model whose later layers reuse an earlier layer's cache (Gemma 3n:
        llama.cpp keeps one for its first 20 layers only) holds at most kv_layers caches on any device."""
        n_layers = self.n_layer if n_layers is None else n_layers
        if self.kv_layers is not None:
            n_layers = min(n_layers, self.kv_layers)
        return int(2 * self.n_head_kv * self.head_dim * KV_TYPE_BYTES[type_kv] * n_layers * n_ctx)

    def attended_cells(self, fill: int, n_layers: int | None = None) -> int:
        """KV cells one new token attends over with `fill` tokens cached, summed over `n_layers` layers."""
        n_layers = self.n_layer if n_layers is None else n_layers
        if self.sliding_window and self.swa_pattern:
            n_full = math.ceil(n_layers / self.swa_pattern)
            return n_full * fill + (n_layers - n_full) * min(fill, self.sliding_window)
        return n_layers * fill

    def kv_read_bytes(self, fill: int, type_kv: str = "f16", n_layers: int | None = None) -> int:
        """KV bytes one decode step reads at `fill` cached tokens (sliding-window layers read their window)."""
        return int(2 * self.n_head_kv * self.head_dim * KV_TYPE_BYTES[type_kv] * self.attended_cells(fill, n_layers))

    def attention_flops(self, fill: int, n_layers: int | None = None) -> float:
        """Attention FLOPs of one new token over `fill` cached tokens: Q.K and P.V, 2 FLOPs each per head dim."""
        return 4.0 * self.n_head * self.head_dim * self.attended_cells(fill, n_layers)

    def compute_bytes(self, n_ubatch: int = 512) -> int:
        """Scratch buffer of one llama.cpp context with flash attention: logits plus activations."""
        # llama.cpp reserves its graph for a whole ubatch of outputs: float32 logits of n_ubatch rows,
        # plus two n_embd-wide float32 activations its allocator cannot overlap. One load of SmolLM2-135M
        # (n_ctx 8192, n_ubatch 512) reported a CPU compute buffer of exactly this (98.25 MiB); CUDA logs
        # of 5120-wide models report n_vocab + 1-2 n_embd rows (docs/architecture.md, the memory-fit model).
        return int(n_ubatch * 4 * (self.n_vocab + 2 * self.n_embd))

    def flops_per_token(self) -> float:
        """Matmul FLOPs per token, 2 per weight it uses (a mixture of experts: its active ones)."""
        return 2 * self.active_params() * 1e9


def catalog_path() -> Path:
    """models.yaml inside the package (a source checkout links it from the repository root)."""
    return CATALOG_FILE


def _model_file(quant: str, raw: dict[str, Any]) -> ModelFile:
    fmt = raw.get("format", GGUF)
    if fmt not in (GGUF, GPTQ):
        raise ValueError(f"{quant} has format {fmt!r}; a catalog file is {GGUF} or {GPTQ}")
    bits = raw.get("bits")
    if fmt == GPTQ and bits not in (4, 8):
        raise ValueError(f"the GPTQ entry {quant} says bits {bits!r}; GPTQ checkpoints here are 4- or 8-bit")
    model_file = ModelFile(quant=quant, file=raw["file"], size=int(raw["size"]), sha256=raw.get("sha256"),
                           sources=list(raw.get("sources") or []), format=fmt, bits=bits)
    if len(part_names(model_file.file)) > 1 and (model_file.sha256 or any("hub" not in s for s in model_file.sources)):
        raise ValueError(f"{quant} is a split model ({model_file.file}): it is fetched part by part from the hub, each "
                         "part checked against the hub's sha256, so it lists hub sources only and no sha256")
    return model_file


def _model(key: str, raw: dict[str, Any]) -> ModelFacts:
    arch = raw["architecture"]
    files = {quant: _model_file(quant, entry) for quant, entry in raw["files"].items()}
    n_layer = int(arch["n_layer"])
    first = next((f for f in files.values() if not f.is_checkpoint), next(iter(files.values())))
    # Older entries lack some facts: estimate them from the file size (params ~ 12 * L * d^2).
    params_b = float(arch.get("params_b") or first.size * 8 / QUANT_BITS.get(first.quant, 8.5) / 1e9)
    n_embd = int(arch.get("n_embd") or math.sqrt(params_b * 1e9 / (12 * n_layer)))
    head_dim = int(arch.get("head_dim") or 128)
    return ModelFacts(
        key=key, name=raw.get("name", key), family=raw.get("family", key), license=raw.get("license", "unknown"),
        arch=arch.get("arch", "unknown"), n_layer=n_layer, n_head=int(arch.get("n_head") or n_embd // head_dim),
        n_head_kv=int(arch["n_head_kv"]), head_dim=head_dim, n_embd=n_embd, n_vocab=int(arch.get("n_vocab") or 32000),
        n_ctx_train=int(arch.get("n_ctx_train") or 4096), params_b=params_b,
        tied_embeddings=bool(arch.get("tied_embeddings", True)), sliding_window=arch.get("sliding_window"),
        swa_pattern=arch.get("swa_pattern"), draft=raw.get("draft"), default_quant=raw.get("default_quant", first.quant),
        files=files, thinking_tokens=int(raw.get("thinking_tokens") or 0),
        n_expert=int(arch.get("n_expert") or 0), n_expert_used=int(arch.get("n_expert_used") or 0),
        active_params_b=float(arch["active_params_b"]) if arch.get("active_params_b") else None,
        per_layer_embd=int(arch.get("per_layer_embd") or 0),
        kv_layers=int(arch["kv_layers"]) if arch.get("kv_layers") else None)


# Parsed YAML by path, with the (size, mtime) it was parsed at: models.yaml was parsed again on every
# Ollama chat, model listing and embeddings call, on the event loop (~80 ms each on two cores); a stat is
# all a call costs now. Readers take the parsed data as it is and never change it. This is the one place
# that parses the catalog file (the layout test keeps it so).
_parsed: dict[Path, tuple[tuple[int, int], Any]] = {}


def _cached_yaml(path: Path) -> Any:
    """`path` parsed as YAML, once per change of the file (OSError and yaml.YAMLError as they come)."""
    info = path.stat()
    stamp = (info.st_size, info.st_mtime_ns)
    known = _parsed.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    _parsed[path] = (stamp, data)
    return data


def _unreadable(path: Path, exc: BaseException) -> ConfigError:
    fix = "reinstall localchat" if path == catalog_path() else "check it against models.yaml's schema"
    return ConfigError(f"the model catalog {path} is unreadable ({exc!r}); {fix}.")


def catalog_section(name: str, path: Path | None = None) -> dict[str, Any]:
    """One top-level section of the catalog file (`models`, `embedding_models`), parsed once per change."""
    path = Path(path) if path is not None else catalog_path()
    try:
        section = _cached_yaml(path)[name] if name == "models" else (_cached_yaml(path).get(name) or {})
        if not isinstance(section, dict):
            raise TypeError(f"{name} is a {type(section).__name__}, not a mapping")
        return section
    except (OSError, KeyError, TypeError, AttributeError, yaml.YAMLError) as exc:
        raise _unreadable(path, exc) from None


def load_catalog(path: Path | None = None) -> dict[str, ModelFacts]:
    """Parse models.yaml (or a catalog file in its schema) into models keyed by catalog name."""
    path = Path(path) if path is not None else catalog_path()
    section = catalog_section("models", path)
    try:
        catalog = {key: _model(key, raw) for key, raw in section.items()}
    except (KeyError, TypeError, ValueError, StopIteration, AttributeError) as exc:
        raise _unreadable(path, exc) from None
    for model in catalog.values():
        if model.draft and model.draft not in catalog:
            raise ConfigError(f"{model.key} names draft '{model.draft}', which is not in the catalog {path}.")
    return catalog


def facts_from_gguf(info: GGUFInfo, key: str, size: int, family: str = "local") -> ModelFacts:
    """Exact facts for a GGUF file at hand (the per-layer bytes come from its tensors)."""
    quant = info.quant or "F16"
    layers = info.layer_bytes()
    params = sum(math.prod(t.shape) for t in info.tensors)
    expert_params = sum(math.prod(t.shape) for t in info.tensors if is_expert_tensor(t.name))
    unused = 1 - info.n_expert_used / info.n_expert if info.n_expert else 0.0
    model = ModelFacts(
        key=key, name=str(info.metadata.get("general.name", key)), family=family,
        license=str(info.metadata.get("general.license", "unknown")), arch=info.arch, n_layer=info.n_layer,
        n_head=info.n_head, n_head_kv=info.n_head_kv, head_dim=info.head_dim, n_embd=info.n_embd,
        n_vocab=info.vocab_size, n_ctx_train=info.context_length, params_b=params / 1e9,
        tied_embeddings=not any(t.name == "output.weight" for t in info.tensors),
        sliding_window=info.sliding_window, swa_pattern=6 if info.sliding_window and info.arch == "gemma3" else None,
        default_quant=quant, files={quant: ModelFile(quant, Path(info.source).name, size)},
        n_expert=info.n_expert, n_expert_used=info.n_expert_used, per_layer_embd=info.per_layer_embd,
        kv_layers=info.kv_layers,
        active_params_b=(params - expert_params * unused) / 1e9 if info.n_expert else None)
    if layers:
        model.exact_layer_bytes[quant] = max(layers)
        model.exact_expert_bytes[quant] = max(info.layer_bytes(experts_only=True))
    model.exact_host_bytes[quant] = info.host_bytes()
    head = {t.name: t.n_bytes for t in info.tensors if t.name in ("output.weight", "token_embd.weight")}
    if head:
        model.exact_output_bytes[quant] = head.get("output.weight") or head["token_embd.weight"]
    return model
