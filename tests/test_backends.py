"""CPU kernels: the wheel's ISA variants, proven in a child process with fallback, remembered per
machine. A CPU whose best kernels crash is hardware we lack: the child is made to die as such a
kernel kills it (SIGILL), everything else is the real machinery."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from localchat import paths
from localchat.runtime.backends import kernels
from localchat.runtime.workers.worker import Worker, WorkerConfig


def test_the_wheel_carries_fast_and_exact_variants():
    fast, exact = kernels.ranked(exact=False), kernels.ranked(exact=True)
    assert fast and exact, "scripts/install-runtime.sh builds both sets"
    # The default mode has somewhere to fall: its next fast variants, then the exact kernels.
    assert kernels.candidates(False) == fast + exact and len(kernels.candidates(False)) >= 2
    names = {kernels.variant_name(m) for m in fast}
    if len(names) > 2:  # an install of every variant (a native one has two at most), down to the baseline
        assert kernels.variant_name(fast[-1]) == "x64"
        assert {kernels.variant_name(m) for m in exact} <= names


def test_a_crashing_variant_falls_back_to_the_next_best(model_path: Path):
    ordered = kernels.candidates(False)
    # Two crash: on an install of every variant the third fast one runs; on a native install (two fast
    # variants at most) the exact kernels run the default mode.
    crashing = frozenset(ordered[:min(2, len(ordered) - 1)])
    chosen = kernels.choose(False, model_path, simulate_crash=crashing)
    assert chosen.path() not in crashing
    assert ordered.index(chosen.path()) >= len(crashing)
    assert chosen.exact == (chosen.path() in kernels.ranked(exact=True))
    assert any("crashed (SIGILL)" in r for r in chosen.refused)
    assert "next best" in chosen.reason
    if chosen.exact:
        assert "deterministic mode's kernels" in chosen.reason


def test_the_verdict_is_remembered_and_used(model_path: Path):
    worker = Worker(model_path, WorkerConfig(n_ctx=256, n_seq_max=1))
    try:
        used = worker.cpu_backend
    finally:
        worker.close()
    verdicts = json.loads((paths.cache_dir() / "cpu-backend.json").read_text())
    mode = "exact" if used.exact else "fast"
    assert any(v.get(mode, {}).get("variant") == used.variant for v in verdicts.values())
    assert kernels.describe(used.exact).startswith(used.variant)


def test_probe_names_the_cpu_kernels():
    done = subprocess.run([sys.executable, "-m", "localchat", "probe", "--no-measure"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    line = next(l for l in done.stdout.splitlines() if l.startswith("CPU kernels"))
    assert any(kernels.variant_name(m) in line for m in kernels.ranked(exact=False))


def test_a_float_weight_file_proves_nothing_of_the_quantized_kernels(model_path: Path, embedding_model_path: Path):
    # The F16 embedding model runs none of the AMX kernels that crash here: proven on it, the AMX
    # variant would pass and then kill the first quantized chat model.
    proof, telling = kernels._proof_model(embedding_model_path)
    assert proof != embedding_model_path and telling
    assert not proof.name.upper().endswith(("F16.GGUF", "F32.GGUF"))
