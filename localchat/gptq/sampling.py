"""llama.cpp's sampler chain over logits computed by torch (the same parameters, the same chain)."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from ..errors import RequestError
from ..runtime.sampling import Sampler, SamplingParams


class LogitsSampler(Sampler):
    """A Sampler that reads its logits from an array instead of a llama.cpp context."""

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
