"""The install's choice of CPU variants (scripts/native_variants.py): described CPUs, and this one
against ggml's own verdict on the modules the wheel carries."""

from __future__ import annotations

import importlib.util
import platform
from pathlib import Path

import pytest

from localchat.runtime.backends import cpu_variants

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "native_variants.py"
_spec = importlib.util.spec_from_file_location("native_variants", SCRIPT)
nv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nv)

HASWELL = "sse4_2 avx f16c fma avx2 bmi2"
AVX512 = f"{HASWELL} avx512f avx512cd avx512vl avx512dq avx512bw"

# (what the CPU is, /proc/cpuinfo's line, machine, the fast set, the exact set), each written down: the
# best fast variant it runs, and where that one uses AVX-512/AMX/SVE/SME the best without them too; the
# best exact one without them (or the baseline), which is the fallback of both modes.
DESCRIBED = [
    ("Zen 4 (AVX-512 with VBMI, VNNI, BF16; no AMX)",
     f"flags : {AVX512} avx512vbmi avx512_vnni avx512_bf16", "x86_64", ["zen4", "haswell"], ["haswell"]),
    ("Sapphire Rapids (AMX)", f"flags : {AVX512} avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8 avx_vnni",
     "x86_64", ["sapphirerapids", "alderlake"], ["alderlake"]),
    ("Skylake-X (AVX-512F/CD/VL/DQ/BW only)", f"flags : {AVX512}", "x86_64", ["skylakex", "haswell"], ["haswell"]),
    ("AVX-512F without BW (Knights Landing): not AVX-512 as ggml counts it", f"flags : {HASWELL} avx512f avx512cd",
     "x86_64", ["haswell"], ["haswell"]),
    ("Alder Lake (AVX-VNNI, no AVX-512)", f"flags : {HASWELL} avx_vnni", "x86_64", ["alderlake"], ["alderlake"]),
    ("Haswell", f"flags : {HASWELL}", "x86_64", ["haswell"], ["haswell"]),
    ("Nehalem (SSE4.2 only)", "flags : sse4_2 ssse3", "x86_64", ["sse42"], ["sse42"]),
    # The exact set has no int8 matrix multiply, and SVE is risky: NEON with dot product and FP16.
    ("Graviton 3 (SVE, int8 matmul, no SVE2)", "Features : fp asimd asimdhp asimddp sve i8mm", "aarch64",
     ["armv8.6_1", "armv8.2_2"], ["armv8.2_2"]),
    ("Cortex-A76 (dot product, FP16)", "Features : fp asimd asimdhp asimddp", "aarch64", ["armv8.2_2"], ["armv8.2_2"]),
    ("Cortex-A53 (none)", "Features : fp asimd", "aarch64", ["armv8.0_1"], ["armv8.0_1"]),
]


@pytest.mark.parametrize("what,cpuinfo,machine,fast,exact", DESCRIBED, ids=[d[0] for d in DESCRIBED])
def test_a_described_cpu_gets_its_best_variant_and_a_safe_exact_one(what, cpuinfo, machine, fast, exact) -> None:
    features = nv.linux_features(cpuinfo, machine)
    assert nv.choose("native", machine, "Linux", features) == (fast, exact), what


def test_apple_silicon_and_an_unreadable_cpu() -> None:
    # M2/M3: int8 matrix multiply; the exact set leaves it out, so M1's kernels are all it has.
    assert nv.choose("native", "arm64", "Darwin", {"DOTPROD", "FP16", "I8MM"}) == (["apple_m2_m3"], ["apple_m1"])
    every = nv.choose("all", "x86_64", "Linux", None)
    # A CPU that cannot be read builds every variant: slower, never wrong.
    assert nv.choose("native", "x86_64", "Windows", None) == (
        [v for v in every[0] if v not in ("ivybridge", "piledriver")], every[1])
    assert "sapphirerapids" in every[0] and "sapphirerapids" not in every[1]
    assert nv.choose("native", "riscv64", "Linux", set()) is None  # one portable backend, no variants


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/cpuinfo")
def test_this_cpu_is_scored_as_ggml_scores_the_modules_the_wheel_carries() -> None:
    machine = platform.machine().lower()
    variants, weights = nv.table(machine, "Linux")
    features = nv.this_cpu(machine, "Linux")
    modules = cpu_variants.variant_modules(exact=False)
    if not modules:
        pytest.skip("this wheel carries no CPU variants")
    # The same number ggml's own ggml_backend_score gives, for every variant built (all of them in CI).
    for module in modules:
        name = cpu_variants.variant_name(module)
        assert nv.score(variants[name], features, weights) == cpu_variants.score(module), name
    fast, exact = nv.choose("native", machine, "Linux", features)
    assert cpu_variants.variant_name(cpu_variants.ranked(exact=False)[0]) == fast[0]
    exact_names = [cpu_variants.variant_name(m) for m in cpu_variants.ranked(exact=True)]
    assert nv.safe(variants, exact_names) == exact[0]
