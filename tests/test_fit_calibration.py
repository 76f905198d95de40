"""The memory-fit model against what llama.cpp allocates: one load of the real SmolLM2 file, the buffer sizes
llama.cpp logs beside what planning/fit.py plans for the same context."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from localchat.models.catalog import facts_from_gguf
from localchat.models.gguf_info import read_gguf
from localchat.planning.fit import N_UBATCH, usage

N_CTX = 8192
BUFFER = re.compile(r"CPU(?:_Mapped)? +(model|KV|compute) buffer size = +([0-9.]+) MiB")


@pytest.fixture(scope="module")
def allocated(model_path: Path) -> dict[str, int]:
    """llama.cpp's own buffer sizes (bytes, as logged to 1/100 MiB) for the file at N_CTX, flash attention on."""
    import llama_cpp

    from localchat.runtime import llama_log
    from localchat.runtime.backends import kernels

    kernels.activate(False, model_path)
    llama_log.install()
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger, keep = logging.getLogger("localchat.llama_cpp"), Keep(logging.DEBUG)
    level, logger.level = logger.level, logging.DEBUG
    logger.addHandler(keep)
    try:
        llm = llama_cpp.Llama(str(model_path), n_ctx=N_CTX, n_batch=N_UBATCH, n_ubatch=N_UBATCH, flash_attn=True,
                              n_threads=1, verbose=False)
        llm.close()
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)
    found = {}
    for line in records:
        if (match := BUFFER.search(line)) and match.group(1) not in found:
            found[match.group(1)] = round(float(match.group(2)) * (1 << 20))
    assert set(found) == {"model", "KV", "compute"}, records[-20:]
    return found


def test_the_fit_model_counts_what_llama_cpp_allocates(allocated: dict[str, int], model_path: Path):
    info = read_gguf(model_path)
    facts = facts_from_gguf(info, "smollm2-135m", model_path.stat().st_size)
    planned = usage(facts, info.quant, N_CTX, "f16", facts.n_layer, True, whole_file=True)
    mib = 1 << 20
    # The KV cache and the compute buffer to the logged 1/100 MiB; the weights as the file (its metadata, the
    # vocabulary, is mapped too), within 2% of the tensors llama.cpp reports.
    assert abs(planned["kv"] - allocated["KV"]) < mib / 100
    assert abs(planned["compute"] - allocated["compute"]) < mib / 100
    assert allocated["model"] <= planned["weights"] <= allocated["model"] * 1.02
