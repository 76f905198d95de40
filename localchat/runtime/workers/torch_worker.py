"""The torch worker: a GPTQ (or unquantized HF) checkpoint (gptq/) behind the engine's Worker interface.

Every sequence slot keeps its own KV cache (gptq/kv_cache.py); one decode() runs the rows of all
sequences of a step in one forward. The engine, scheduler, prefix reuse, PD split and sampling
run over it unchanged: sampling is llama.cpp's own sampler chain, over the logits torch computed.
Imported only for a checkpoint folder (the optional gptq extra: torch, safetensors, tokenizers).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
from pathlib import Path

import llama_cpp
import numpy as np
import torch

from ...errors import EngineError, ModelLoadError, RequestError
from ...gptq.kv_cache import SeqCache
from ...gptq.loader import load_decoder
from ...gptq.model import Row
from ...gptq.tokenizer import CheckpointTokenizer
from ..events import TokenLogprob
from ..logprobs import token_logprob
from ..sampling import Sampler, SamplingParams
from ..worker_types import TORCH_DEVICES, BatchRow, WorkerConfig, default_threads

log = logging.getLogger(__name__)


def choose_device(wanted: str) -> torch.device:
    """Where the checkpoint runs: `wanted` is the torch_device setting (auto: CUDA where torch sees a GPU)."""
    if wanted not in TORCH_DEVICES:
        raise ModelLoadError(f"torch_device {wanted!r} is none of {', '.join(TORCH_DEVICES)}; set one of them.")
    if wanted == "cpu" or (wanted == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise ModelLoadError(f"torch_device is cuda, but torch {torch.__version__} ({build}) sees no CUDA GPU: "
                             "install torch's CUDA build for this machine's driver, or set torch_device to auto "
                             "or cpu.")
    return torch.device("cuda", torch.cuda.current_device())


class LogitsSampler(Sampler):
    """A Sampler that reads its logits from an array instead of a llama.cpp context: the same
    parameters, the same chain."""

    def __init__(self, params: SamplingParams, n_vocab: int) -> None:
        if getattr(params, "grammar", None) is not None:
            raise RequestError("grammar-constrained output needs a GGUF model (llama.cpp's grammar sampler); "
                               "drop the grammar or load a GGUF file.", "grammar")
        super().__init__(params, n_vocab)
        self._data: ctypes.Array | None = None

    def sample_logits(self, logits: np.ndarray) -> int:
        """Sample one token from float32 logits [n_vocab] and record it in the chain."""
        if self._argmax_of:
            return int(logits.argmax())  # the first of equal maxima, as llama.cpp's greedy sampler takes
        n = logits.shape[0]
        if self._data is None:
            self._data = (llama_cpp.llama_token_data * n)()
        view = np.ctypeslib.as_array(self._data)
        view["id"] = np.arange(n, dtype=np.int32)
        view["logit"] = logits
        view["p"] = 0.0
        candidates = llama_cpp.llama_token_data_array(self._data, n, -1, False)
        llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(candidates))
        token = int(candidates.data[candidates.selected].id)
        llama_cpp.llama_sampler_accept(self._chain, token)
        return token


class TorchWorker:
    """One checkpoint on torch (on a CUDA GPU or the CPU: `device`), with room for `n_seq_max` sequences."""

    def __init__(self, folder: str | Path, config: WorkerConfig | None = None) -> None:
        self.config = config or WorkerConfig()
        self.model_path = Path(folder)
        self.device = choose_device(self.config.torch_device)
        self.checkpoint, self.decoder = load_decoder(self.model_path, device=self.device)
        self.decoder.row_invariant = self.config.deterministic
        if self.config.deterministic and self.device.type == "cuda":
            log.warning("--deterministic holds for the attention on any device and for the linears on the CPU; "
                        "a GPU's matrix products round as its kernels do, which may depend on the batch")
        model = self.checkpoint.model
        self.tokenizer = CheckpointTokenizer(self.model_path, self.checkpoint.config)
        self.n_vocab = model.vocab
        self.n_ctx_train = model.n_ctx_train
        self.n_ctx = min(self.config.n_ctx, model.n_ctx_train) if self.config.n_ctx else model.n_ctx_train
        self.bos_token = self.tokenizer.bos_token
        self.eos_token = self.tokenizer.eos_token
        self.add_bos = self.tokenizer.add_bos
        self.max_threads = self.config.n_threads or default_threads()
        self.threads = (0, 0)
        self.set_threads(self.max_threads, self.max_threads)
        self.caches = [SeqCache(model.n_layer, model.n_head_kv, model.head_dim, self.device)
                       for _ in range(self.config.n_seq_max)]
        self._logits: dict[int, np.ndarray] = {}
        self.fingerprint = self._fingerprint()

    # -- vocabulary ---------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of `text`; a rendered chat prompt goes piece by piece, only the template's own
        text may become special tokens (as the llama.cpp worker does)."""
        pieces = getattr(text, "pieces", None)
        if pieces is None:
            return self.tokenizer.encode(text, add_special and self.add_bos, parse_special)
        tokens: list[int] = []
        for i, (piece, own) in enumerate(text.each_piece()):  # type: ignore[attr-defined]
            tokens += self.tokenizer.encode(piece, add_special and self.add_bos and i == 0, parse_special and own)
        return tokens

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        return self.tokenizer.token_bytes(token, special)

    def token_text(self, token: int) -> str:
        return self.tokenizer.token_text(token)

    def is_eog(self, token: int) -> bool:
        return token in self.tokenizer.eog

    def meta(self, key: str) -> str | None:
        return None  # GGUF metadata: a checkpoint folder has none

    def chat_template(self) -> str | None:
        return self.tokenizer.chat_template

    def describe(self) -> str:
        model, quant = self.checkpoint.model, self.checkpoint.quant
        weights = f"GPTQ {quant.bits}-bit g{quant.group_size}" if quant else "unquantized"
        kernels = ", ".join(f"{n} {k}" for k, n in sorted(self.decoder.kernel_counts.items()))
        where = f" on {torch.cuda.get_device_name(self.device)}" if self.device.type == "cuda" else ""
        return f"{model.family} {model.n_layer} layers, {weights} on torch{where} ({kernels or 'dense'})"

    def _fingerprint(self) -> str:
        digest = hashlib.sha256((self.model_path / "config.json").read_bytes())
        for path in self.checkpoint.weight_files:
            digest.update(f"{path.name}:{path.stat().st_size}".encode())
        return f"torch checkpoint {digest.hexdigest()[:16]}, n_ctx {self.n_ctx}, KV f32"

    # -- computation --------------------------------------------------------------------------

    @torch.inference_mode()
    def decode(self, rows: list[BatchRow]) -> list[int]:
        """One forward over all rows; returns the batch index of each row's last token."""
        tokens: list[int] = []
        wanted: list[int] = []
        last_index = []
        model_rows = []
        for row in rows:
            cache = self.caches[row.seq_id]
            if row.pos != cache.length:
                raise EngineError(f"sequence {row.seq_id} holds {cache.length} positions, a row starts at {row.pos}")
            first = len(tokens)
            tokens += row.tokens
            last_index.append(len(tokens) - 1)
            wanted += range(first, len(tokens)) if row.all_logits else [len(tokens) - 1] if row.want_logits else []
            model_rows.append(Row(cache, row.pos, len(row.tokens)))
        assert 0 < len(tokens) <= self.config.n_batch, len(tokens)
        if max(r.pos + len(r.tokens) for r in rows) > self.n_ctx:
            raise EngineError("a sequence ran past the context window")
        logits = self.decoder.forward(torch.tensor(tokens, device=self.device), model_rows,
                                      torch.tensor(wanted, dtype=torch.long, device=self.device))
        values = logits.cpu().numpy()  # sampling is llama.cpp's, on the CPU
        self._logits = {index: values[i] for i, index in enumerate(wanted)}
        return last_index

    def set_threads(self, decode: int, batch: int) -> None:
        """torch keeps one thread count: the larger of the two (steps of one token are rare alone)."""
        if (decode, batch) != self.threads:
            torch.set_num_threads(max(decode, batch))
            self.threads = (decode, batch)

    def new_sampler(self, params: SamplingParams) -> LogitsSampler:
        return LogitsSampler(params, self.n_vocab)

    def sample(self, sampler: LogitsSampler, index: int) -> int:
        return sampler.sample_logits(self._logits[index])

    def logits(self, index: int) -> np.ndarray:
        """The float32 logits of batch position `index` of the last decode."""
        return self._logits[index]

    def logprob(self, index: int, token: int, n_top: int) -> TokenLogprob:
        """The log-probability of `token` (and the `n_top` likeliest) at batch position `index`."""
        return token_logprob(self._logits[index], token, n_top, self.token_bytes)

    def seq_remove(self, seq_id: int, start: int = 0, end: int = -1) -> None:
        self.caches[seq_id].remove(start, end)

    def seq_copy(self, src: int, dst: int, start: int = 0, end: int = -1) -> None:
        self.caches[dst].copy_from(self.caches[src], start, end)

    def apply(self, op) -> None:
        """Run one remove or copy the slot table asked for."""
        if op.kind == "remove":
            self.seq_remove(op.seq_id, op.start, op.end)
        else:
            assert op.kind == "copy", op
            self.seq_copy(op.src, op.seq_id, op.start, op.end)

    def export_seq(self, seq_id: int) -> torch.Tensor:
        return self.caches[seq_id].export()

    def import_seq(self, seq_id: int, data: torch.Tensor) -> bool:
        self.caches[seq_id].load(data)
        return True

    def close(self) -> None:
        self.caches = []
        self._logits = {}
