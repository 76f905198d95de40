"""Which of llama.cpp's CPU variants to build: all of them (a bundle, CI), or only those this CPU runs.

Run by scripts/install-runtime.sh before localchat is installed, so the standard library only.
Prints two comma-separated lists, the fast set (llamafile's sgemm on) and the exact set (off, for
--deterministic and the fallback of both modes); "native" gives the best fast variant this CPU runs
(and the best safe one, where that one is risky) and the best safe exact one, "all" every variant of
the architecture. A CPU it cannot read (Windows, an unknown system) gets
"all": slower to build, never wrong.

The table is ggml's own (ggml/src/CMakeLists.txt, GGML_CPU_ALL_VARIANTS) and so is the score
(ggml-cpu/arch/*/cpu-feats.cpp): a variant scores 0 when the CPU lacks one of its features, else
the sum of its features' weights; runtime/backends/cpu_variants.py asks the built modules the same question.
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys

# feature -> weight in ggml's score; x86 and ARM are scored apart.
X86_WEIGHTS = {"FMA": 1, "F16C": 2, "SSE42": 4, "BMI2": 8, "AVX": 16, "AVX2": 32, "AVX_VNNI": 64,
               "AVX512": 128, "AVX512_VBMI": 256, "AVX512_BF16": 512, "AVX512_VNNI": 1024, "AMX_INT8": 2048}
ARM_WEIGHTS = {"DOTPROD": 2, "FP16": 4, "SVE": 8, "I8MM": 16, "SVE2": 32, "SME": 64}

_HASWELL = ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2")
_AVX512 = (*_HASWELL, "AVX512")
X86 = {
    "x64": (), "sse42": ("SSE42",), "sandybridge": ("SSE42", "AVX"), "ivybridge": ("SSE42", "AVX", "F16C"),
    "piledriver": ("SSE42", "AVX", "F16C", "FMA"), "haswell": _HASWELL, "skylakex": _AVX512,
    "cannonlake": (*_AVX512, "AVX512_VBMI"), "cascadelake": (*_AVX512, "AVX512_VNNI"),
    "icelake": (*_AVX512, "AVX512_VBMI", "AVX512_VNNI"), "cooperlake": (*_AVX512, "AVX512_VNNI", "AVX512_BF16"),
    "zen4": (*_AVX512, "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"), "alderlake": (*_HASWELL, "AVX_VNNI"),
    "sapphirerapids": (*_AVX512, "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8"),
}
_SVE = ("DOTPROD", "FP16", "SVE")
ARM_LINUX = {
    "armv8.0_1": (), "armv8.2_1": ("DOTPROD",), "armv8.2_2": ("DOTPROD", "FP16"), "armv8.2_3": _SVE,
    "armv8.6_1": (*_SVE, "I8MM"), "armv8.6_2": (*_SVE, "I8MM", "SVE2"), "armv9.2_1": (*_SVE, "I8MM", "SME"),
    "armv9.2_2": (*_SVE, "I8MM", "SVE2", "SME"),
}
APPLE = {"apple_m1": ("DOTPROD",), "apple_m2_m3": ("DOTPROD", "I8MM"), "apple_m4": ("DOTPROD", "I8MM", "SME")}

# The exact set keeps to the common ISA levels (each costs a compile of the CPU backend) and leaves
# out kernels whose rounding depends on the batch: AMX tiles on x86, int8 matrix multiply on ARM
# (its 2x2 kernels serve even row counts only).
NOT_EXACT = re.compile(r"ivybridge|piledriver|cannonlake|cascadelake|cooperlake|zen4|sapphirerapids"
                       r"|armv8[.]6|armv9|apple_m2|apple_m4")
# Kernels that have crashed or are rare enough to distrust; the fallback does without them.
RISKY = ("AVX512", "AMX_INT8", "SVE", "SME")

# /proc/cpuinfo flag -> feature (AVX512 stands for the five ggml requires together).
_LINUX_X86 = {"fma": "FMA", "f16c": "F16C", "sse4_2": "SSE42", "bmi2": "BMI2", "avx": "AVX", "avx2": "AVX2",
              "avx_vnni": "AVX_VNNI", "avx512vbmi": "AVX512_VBMI", "avx512_bf16": "AVX512_BF16",
              "avx512_vnni": "AVX512_VNNI", "amx_int8": "AMX_INT8"}
_LINUX_ARM = {"asimddp": "DOTPROD", "asimdhp": "FP16", "sve": "SVE", "i8mm": "I8MM", "sve2": "SVE2", "sme": "SME"}
_AVX512_PARTS = {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}


def table(machine: str, system: str) -> tuple[dict[str, tuple[str, ...]], dict[str, int]] | None:
    """The variants ggml builds for this architecture and system, and how it weighs their features."""
    if machine in ("x86_64", "amd64"):
        # MSVC defines neither __FMA__ nor __F16C__ on their own: ggml leaves those two variants out there.
        skip = ("ivybridge", "piledriver") if system == "Windows" else ()
        return {k: v for k, v in X86.items() if k not in skip}, X86_WEIGHTS
    if machine in ("aarch64", "arm64"):
        if system == "Darwin":
            return APPLE, ARM_WEIGHTS
        if system == "Linux":
            return ARM_LINUX, ARM_WEIGHTS
    return None


def linux_features(cpuinfo: str, machine: str) -> set[str]:
    """The features ggml scores, from /proc/cpuinfo's flags (x86) or Features (ARM) line."""
    line = re.search(r"^(?:flags|Features)\s*:(.*)$", cpuinfo, re.MULTILINE)
    flags = set(line.group(1).split()) if line else set()
    names = _LINUX_ARM if machine in ("aarch64", "arm64") else _LINUX_X86
    found = {feature for flag, feature in names.items() if flag in flags}
    if _AVX512_PARTS <= flags:
        found.add("AVX512")
    return found


def mac_features(machine: str) -> set[str]:
    def sysctl(name: str) -> str:
        done = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    if machine == "arm64":
        flags = {"DOTPROD": "FEAT_DotProd", "FP16": "FEAT_FP16", "I8MM": "FEAT_I8MM", "SME": "FEAT_SME"}
        return {f for f, name in flags.items() if sysctl(f"hw.optional.arm.{name}") == "1"}
    words = set((sysctl("machdep.cpu.features") + " " + sysctl("machdep.cpu.leaf7_features")).upper().split())
    found = {f for f, word in {"FMA": "FMA", "F16C": "F16C", "SSE42": "SSE4.2", "BMI2": "BMI2", "AVX": "AVX1.0",
                                "AVX2": "AVX2", "AVX512_VBMI": "AVX512VBMI", "AVX512_VNNI": "AVX512VNNI"}.items()
             if word in words}
    if {"AVX512F", "AVX512CD", "AVX512VL", "AVX512DQ", "AVX512BW"} <= words:
        found.add("AVX512")
    return found


def score(needs: tuple[str, ...], features: set[str], weights: dict[str, int]) -> int:
    """ggml's score of a variant on a CPU with these features: 0 when one is missing."""
    if not set(needs) <= features:
        return 0
    return 1 + sum(weights[f] for f in needs if f in weights)


def runnable(variants: dict[str, tuple[str, ...]], weights: dict[str, int], features: set[str]) -> list[str]:
    """The variants this CPU runs, best first."""
    return sorted((v for v in variants if score(variants[v], features, weights)),
                  key=lambda v: -score(variants[v], features, weights))


def safe(variants: dict[str, tuple[str, ...]], runs: list[str]) -> str:
    """The best of `runs` without the risky features, or the baseline every CPU of the architecture runs."""
    return next((v for v in runs if not set(variants[v]) & set(RISKY)), runs[-1])


def choose(mode: str, machine: str, system: str, features: set[str] | None) -> tuple[list[str], list[str]] | None:
    """(fast, exact) variant lists, or None when this architecture has no variants at all.

    "native": the best fast variant this CPU runs, and the best exact one without the risky features,
    which is the fallback of both modes (runtime/backends/kernels.py). Where the best fast one is itself risky
    (ggml's AMX kernels die on virtualised CPUs that report AMX) the best safe fast one is built too, so
    that the default mode keeps llamafile's sgemm; otherwise two compiles of the CPU backend in all."""
    known = table(machine, system)
    if known is None:
        return None
    variants, weights = known
    exact_variants = {k: v for k, v in variants.items() if not NOT_EXACT.search(k)}
    if mode == "native" and features is not None:
        fast, exact = runnable(variants, weights, features), runnable(exact_variants, weights, features)
        if fast and exact:
            fallback = safe(variants, fast)
            return [fast[0]] if fallback == fast[0] else [fast[0], fallback], [safe(exact_variants, exact)]
    return list(variants), list(exact_variants)


def this_cpu(machine: str, system: str) -> set[str] | None:
    try:
        if system == "Linux":
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                return linux_features(f.read(), machine)
        if system == "Darwin":
            return mac_features(machine)
    except OSError:
        pass
    return None


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else "native"
    if mode not in ("native", "all"):
        print(f"usage: {argv[0]} [native|all]", file=sys.stderr)
        return 2
    machine, system = platform.machine().lower(), platform.system()
    lists = choose(mode, machine, system, this_cpu(machine, system) if mode == "native" else None)
    if lists is None:
        return 1
    print(",".join(lists[0]), ",".join(lists[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
