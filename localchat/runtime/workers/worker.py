"""A Worker owns one llama.cpp model and context. Only workers touch llama.cpp. (Some 360 lines:
loading, batches, KV operations, state hand-over and samplers are one object's view of one context.)"""

from __future__ import annotations

import ctypes
import hashlib
import logging
from pathlib import Path
from typing import Callable

import llama_cpp

from ...errors import EngineError, ModelLoadError
from .. import llama_log
from ..backends import kernels, offload, residence
from ..events import TokenLogprob
from ..gguf_types import GGML_TYPE_BF16, GGML_TYPE_NAMES, GGML_TYPE_Q8_0, GGUF_MAGIC
from ..kv.kv_slots import Copy, Remove
from ..kv.weights_digest import weights_digest
from ..logprobs import token_logprob
from ..sampling import Sampler, SamplingParams, logits_at
from ..vocab import tokenize
from ..worker_types import BatchRow, WorkerConfig, default_threads

log = logging.getLogger(__name__)


def check_gguf_file(path: Path) -> None:
    """Fail early, with a useful message, on files llama.cpp would reject with a bare NULL."""
    if not path.is_file():
        raise ModelLoadError(f"no model file at {path}; check the path or run `localchat pull`.")
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic != GGUF_MAGIC:
        raise ModelLoadError(
            f"{path} is not a GGUF model file; use a .gguf file, "
            "for example one from `localchat models`."
        )


def model_meta(model: llama_cpp.llama_model_p, key: str) -> str | None:
    """A GGUF metadata value of a loaded model as a string, or None."""
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    if n < 0:
        return None
    if n >= len(buf):
        buf = ctypes.create_string_buffer(n + 1)
        llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", errors="replace")


class Worker:
    """One model + one context with room for `n_seq_max` sequences sharing a unified KV cache."""

    def __init__(self, model_path: str | Path, config: WorkerConfig | None = None,
                 on_progress: Callable[[float], None] | None = None) -> None:
        """Load the model; `on_progress` hears the share of the file loaded so far (0 to 1)."""
        self.config = config or WorkerConfig()
        self.model_path = Path(model_path)
        llama_log.install()
        check_gguf_file(self.model_path)
        self.cpu_backend = kernels.acquire(self.config.deterministic, self.model_path)
        if self.config.deterministic and self.config.n_gpu_layers:
            log.warning("--deterministic holds for the CPU kernels; layers offloaded to a GPU round as its "
                        "kernels do, which may depend on the batch")
        self.model, load_lines = self._load_model(on_progress)
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(self.model)
        self.max_threads = self.config.n_threads or default_threads()
        with llama_log.captured() as context_lines:
            self.ctx, cparams = self._new_context()
        self.residence = self._placed(load_lines + context_lines)
        self.threads = (self.max_threads, self.max_threads)  # (single-token steps, batches)
        self.n_ctx = llama_cpp.llama_n_ctx(self.ctx)
        self.fingerprint = self._fingerprint(cparams)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self._batch = llama_cpp.llama_batch_init(self.config.n_batch, 0, 1)
        # Deterministic mode keeps the cells packed (_close_holes); this is (seq_id, first, last) when the
        # topmost used cells are known to hold exactly that sequence's positions first..last, in order.
        self._top_run: tuple[int, int, int] | None = None
        self._piece_buf = ctypes.create_string_buffer(256)
        self.bos_token = llama_cpp.llama_vocab_bos(self.vocab)
        self.eos_token = llama_cpp.llama_vocab_eos(self.vocab)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    def _model_params(self, n_gpu_layers: int) -> llama_cpp.llama_model_params:
        """llama.cpp's model parameters for this worker's config and GPUs (the progress callback aside)."""
        mparams = llama_cpp.llama_model_default_params()
        offload.apply(mparams, self.config, self.gpus, n_gpu_layers, self._pinned)
        # Repacked weights (the CPU's fast layouts) use one kernel for a single row and another
        # for several: only the deterministic mode does without them.
        mparams.use_extra_bufts = not self.config.deterministic
        return mparams

    def _load_model(self, on_progress: Callable[[float], None] | None) -> tuple[llama_cpp.llama_model_p, list[str]]:
        """The model, loaded from the file on the config's GPUs (fewer layers after an out-of-memory), and what
        llama.cpp logged of that load; one llama.cpp cannot load is a ModelLoadError (the CPU backend released)."""
        self._pinned: list = []  # arrays llama.cpp keeps pointers to, alive as long as the worker
        self.gpus, why_none = offload.devices_for(self.config)
        self.why_cpu = why_none  # said once the load is placed (_placed)
        n_gpu_layers = self.config.n_gpu_layers
        while True:
            mparams = self._model_params(n_gpu_layers)
            if on_progress is not None:
                # llama.cpp keeps the pointer while it loads: the callback object must outlive the call.
                report = llama_cpp.llama_progress_callback(lambda share, _: on_progress(share) or True)
                mparams.progress_callback = report
            llama_log.recent_problems.clear()
            with llama_log.captured() as lines:
                model = llama_cpp.llama_model_load_from_file(str(self.model_path).encode(), mparams)
            fewer = None if model or not self.gpus else offload.fewer_layers(lines, n_gpu_layers)
            if model or fewer is None:
                break
            log.warning("%s had no room for %s layers of %s; loading again with %d on the GPU",
                        ", ".join(d.name for d in self.gpus), "all" if n_gpu_layers < 0 else n_gpu_layers,
                        self.model_path.name, fewer)
            n_gpu_layers = fewer
        if not model:
            kernels.release()
            reason = "; ".join(llama_log.recent_problems) or "llama.cpp gave no reason"
            raise ModelLoadError(
                f"could not load {self.model_path} ({reason}). The file may be truncated or corrupt: "
                "download it again (`localchat pull`), or pick another model."
            )
        return model, lines

    def _placed(self, lines: list[str]) -> residence.Residence:
        """Where the layers and buffers went, read from what llama.cpp logged of the load and the context; a
        plan for a GPU that landed on the CPU says so (and why, when no GPU was usable)."""
        found = residence.read(lines)
        if self.config.n_gpu_layers and not found.on_gpu():
            log.warning("%s was planned for a GPU and runs on the CPU (%s)", self.model_path.name,
                        self.why_cpu or "llama.cpp placed no layer on a GPU")
        log.info("placement of %s: %s", self.model_path.name, found.text())
        return found

    def _context_params(self) -> llama_cpp.llama_context_params:
        """llama.cpp's context parameters for this worker's config."""
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = self.config.n_ctx
        cparams.n_batch = self.config.n_batch
        cparams.n_ubatch = self.config.n_batch
        if self.config.deterministic:
            cparams.type_k = cparams.type_v = GGML_TYPE_Q8_0
            cparams.op_offload = False  # a GPU would take the prompt's big matrix products, not single tokens
        cparams.n_seq_max = self.config.n_seq_max
        cparams.n_threads = self.max_threads
        cparams.n_threads_batch = self.max_threads
        cparams.kv_unified = True  # one cell pool shared by every sequence: prefixes can be shared
        # Sliding-window layers keep every cell too, not only their window (llama.cpp's default, said here
        # because the fit model counts it: ModelFacts.kv_bytes): a prefix reused or a draft rolled back
        # needs cells older than the window.
        cparams.swa_full = True
        # Flash attention visits a sequence's own cells one by one and skips masked ones, so a
        # sequence's numbers do not depend on where other sequences' cells sit in the shared
        # cache; without it, SIMD sums over the whole cache row change with placement.
        cparams.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.config.flash_attn \
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cparams.no_perf = True
        return cparams

    def _new_context(self) -> tuple[llama_cpp.llama_context_p, llama_cpp.llama_context_params]:
        """The model's context and the parameters it was made with; one that cannot be made is a
        ModelLoadError (the model freed, the CPU backend released)."""
        cparams = self._context_params()
        ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not ctx and self.config.deterministic:
            # Q8_0 needs head sizes in multiples of its 32-value blocks; BF16 takes any size and
            # has the same single per-row attention kernel (only F16 and F32 get the others).
            cparams.type_k = cparams.type_v = GGML_TYPE_BF16
            ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not ctx:
            llama_cpp.llama_model_free(self.model)
            kernels.release()
            reason = "; ".join(llama_log.recent_problems) or "out of memory?"
            raise ModelLoadError(f"could not create a context of {self.config.n_ctx} tokens ({reason}); "
                                 "try a smaller n_ctx.")
        return ctx, cparams

    # -- vocabulary -------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of `text`. A rendered chat prompt (chat_template.Prompt) goes piece by piece: only
        the template's own text may become special tokens, a message's text never does."""
        pieces = getattr(text, "pieces", None)
        if pieces is None:
            return self._tokenize(text, add_special, parse_special)
        tokens: list[int] = []
        for i, (piece, own) in enumerate(text.each_piece()):  # type: ignore[attr-defined]
            tokens += self._tokenize(piece, add_special and i == 0, parse_special and own)
        return tokens

    def _tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        return tokenize(self.vocab, text, add_special, parse_special)

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """The raw bytes of one token (may be part of a UTF-8 character)."""
        n = llama_cpp.llama_token_to_piece(self.vocab, token, self._piece_buf, len(self._piece_buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
            return buf.raw[:n]
        return self._piece_buf.raw[:n]

    def token_text(self, token: int) -> str:
        """The vocabulary entry of a token, as stored (for special-token names)."""
        return llama_cpp.llama_vocab_get_text(self.vocab, token).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as a string, or None."""
        return model_meta(self.model, key)

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def describe(self) -> str:
        """"llama, 135M parameters, Q4_1": llama.cpp's description names a size class ("256M" for
        SmolLM2-135M), so the size is the model's own parameter count."""
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.model, buf, len(buf))
        words = buf.value.decode("utf-8", errors="replace").split(" ")  # arch, size class, file type
        arch, quant = words[0], " ".join(words[2:])
        n = llama_cpp.llama_model_n_params(self.model)
        size = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"
        return ", ".join(x for x in (arch, f"{size} parameters", quant) if x)

    def _fingerprint(self, cparams) -> str:
        """What must agree for one context's KV state to be valid in another: the same weights
        (weights_digest.py: the header and samples across all the tensor data; the parameter count,
        the description), n_ctx and the KV cell types. Sets `state_identity`, the same without n_ctx:
        what a state saved to disk must match. The PD split's handover checks the fingerprint."""
        digest = hashlib.sha256(weights_digest(self.model_path).encode())
        weights = f"{llama_cpp.llama_model_n_params(self.model)}:{self.describe()}"
        digest.update(weights.encode())
        kv = "/".join(GGML_TYPE_NAMES.get(t, f"type {t}") for t in (cparams.type_k, cparams.type_v))
        self.state_identity = f"model {digest.hexdigest()[:16]}, KV {kv}"
        return f"model {digest.hexdigest()[:16]}, n_ctx {self.n_ctx}, KV {kv}"

    # -- computation --------------------------------------------------------------------------

    def decode(self, rows: list[BatchRow]) -> list[int]:
        """Run one llama_decode over all rows; returns the batch index of each row's last token."""
        batch = self._batch
        n = 0
        last_index = []
        for row in rows:
            for offset, token in enumerate(row.tokens):
                batch.token[n] = token
                batch.pos[n] = row.pos + offset
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = row.seq_id
                batch.logits[n] = row.all_logits or (row.want_logits and offset == len(row.tokens) - 1)
                n += 1
            last_index.append(n - 1)
        assert 0 < n <= self.config.n_batch, n
        batch.n_tokens = n
        status = llama_cpp.llama_decode(self.ctx, batch)
        self._note_top_run(rows if status == 0 else [])
        if status != 0:
            raise EngineError(
                "llama.cpp could not place the batch in the KV cache" if status == 1
                else f"llama_decode failed with status {status}"
            )
        return last_index

    def set_threads(self, decode: int, batch: int) -> None:
        """Threads for single-token steps and for batches, from the next decode on."""
        if (decode, batch) != self.threads:
            llama_cpp.llama_set_n_threads(self.ctx, decode, batch)
            self.threads = (decode, batch)

    def new_sampler(self, params: SamplingParams) -> Sampler:
        """A sampler for `params`; RequestError for a grammar llama.cpp cannot parse."""
        return Sampler(params, self.n_vocab, self.vocab, self.eos_token)

    def logprob(self, index: int, token: int, n_top: int) -> TokenLogprob:
        """The log-probability of `token` (and the `n_top` likeliest) at batch position `index`."""
        return token_logprob(logits_at(self.ctx, index, self.n_vocab), token, n_top, self.token_bytes)

    def sample(self, sampler: Sampler, index: int) -> int:
        return sampler.sample(self.ctx, index)

    def _note_top_run(self, rows: list[BatchRow]) -> None:
        """With the cells packed, a batch's tokens take the next cells in batch order: its last row's
        are the topmost, extending the run below them when that row continues it."""
        if not rows:
            self._top_run = None
            return
        last, run = rows[-1], self._top_run
        end = last.pos + len(last.tokens) - 1
        continues = len(rows) == 1 and run is not None and run[0] == last.seq_id and run[2] + 1 == last.pos
        self._top_run = (last.seq_id, run[1] if continues and run else last.pos, end)

    def seq_remove(self, seq_id: int, start: int = 0, end: int = -1) -> None:
        """Drop positions [start, end) of a sequence from the KV cache (end -1: to the end)."""
        if self.config.deterministic and end < 0 and llama_cpp.llama_memory_seq_pos_max(self.memory, seq_id) < start:
            return  # nothing there to drop (a draft's catch-up that kept everything, say)
        ok = llama_cpp.llama_memory_seq_rm(self.memory, seq_id, start, end)
        assert ok, (seq_id, start, end)
        if not self.config.deterministic:
            return
        run = self._top_run
        if run is not None and run[0] == seq_id and end < 0 and start >= run[1]:
            # Only the topmost cells were freed (a rejected draft, say): no free cell lies below a used
            # one, and packing the whole cache (a copy of all of it) would change nothing.
            self._top_run = (seq_id, run[1], start - 1) if start > run[1] else None
            return
        self._close_holes()

    def _close_holes(self) -> None:
        """Move every KV cell down over the free ones, keeping their order. llama.cpp sums a
        sequence's attention over its cells in cache order, and puts new cells in the first free
        ones from its head: once other cells were freed, those can lie below a sequence's older
        cells, and the same tokens then sum in another order (greedy output can change). With no
        free cell below a used one, new cells land above every older one, so each sequence's cells
        stay in position order wherever it runs. A whole-cache save and restore packs them."""
        size = llama_cpp.llama_state_seq_get_size(self.ctx, -1)
        buf = (ctypes.c_uint8 * size)()
        saved = llama_cpp.llama_state_seq_get_data(self.ctx, buf, size, -1)
        if saved != size:
            raise EngineError(f"llama.cpp saved {saved} of the KV cache's {size} bytes while packing it")
        restored = llama_cpp.llama_state_seq_set_data(self.ctx, buf, size, -1)
        self._top_run = None
        if restored != size:
            raise EngineError(f"llama.cpp restored {restored} of the KV cache's {size} bytes while packing it")

    def seq_copy(self, src: int, dst: int, start: int = 0, end: int = -1) -> None:
        """Let `dst` share the cells of `src` over [start, end): no data is copied."""
        llama_cpp.llama_memory_seq_cp(self.memory, src, dst, start, end)
        self._top_run = None  # a shared cell is not freed by removing one of its sequences

    def export_seq(self, seq_id: int) -> ctypes.Array:
        """The KV state of one sequence, as llama.cpp serialises it, in a host buffer that
        import_seq reads as it is (no copy into Python bytes and back)."""
        size = llama_cpp.llama_state_seq_get_size(self.ctx, seq_id)
        buf = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self.ctx, buf, size, seq_id)
        assert written == size, (written, size)
        return buf

    def import_seq(self, seq_id: int, data: ctypes.Array) -> bool:
        """Replace a sequence's KV with exported state; False when no run of free cells is long enough."""
        self._top_run = None  # the imported cells go wherever llama.cpp finds room
        return llama_cpp.llama_state_seq_set_data(self.ctx, data, len(data), seq_id) > 0

    def apply(self, op: Remove | Copy) -> None:
        """Run one remove or copy the slot table asked for (an import is the engine's: it needs the
        handed-over state and a fallback when it does not fit)."""
        match op:
            case Remove(seq_id, start, end):
                self.seq_remove(seq_id, start, end)
            case Copy(seq_id, src, start, end):
                self.seq_copy(src, seq_id, start, end)
            case _:
                raise AssertionError(f"a worker cannot run {op!r}")

    def close(self) -> None:
        if getattr(self, "ctx", None):
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            llama_cpp.llama_model_free(self.model)
            self.model = None
            kernels.release()
