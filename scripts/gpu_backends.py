"""Which of llama.cpp's GPU backends to build into the wheel, as loadable modules beside the CPU variants.

Run by scripts/install-runtime.sh before localchat is installed, so the standard library only.
`LOCALCHAT_GPU` (the argument): auto | none | a comma list of cuda, vulkan, metal. Prints one line,
"NAMES FLAGS...": the backends chosen ("none" when there are none) and their CMake flags; what it saw
and why it chose so goes to stderr, one line each, with the command that fixes a gap.

* CUDA wherever nvcc and an NVIDIA GPU are both here, for the compute capabilities nvidia-smi reports
  (never CMake's "native" guess, which a machine without a GPU cannot make) and only those nvcc can
  still build (CUDA 13 dropped everything below 7.5). Asked for by name without a GPU here, CUDA needs
  `CUDA_ARCHITECTURES` (a build for another machine).
* Vulkan (any maker's GPU: AMD, Intel, NVIDIA) wherever its build tools are: glslc and the headers.
* Metal on macOS, where llama.cpp builds it by default.
auto takes CUDA where it can, else Vulkan where it can; a GPU seen with neither buildable gets one
line: which GPU, what is missing, and the command.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
import sys

CHOICES = ("cuda", "vulkan", "metal")
# PCI vendor ids of the GPUs the Linux kernel lists under /sys/class/drm.
VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}
VULKAN_PACKAGES = "glslc libvulkan-dev spirv-headers"
# The oldest compute capability each CUDA major version still compiles for.
OLDEST_ARCH = {13: 75, 12: 50, 11: 35}


def say(line: str) -> None:
    print(f"gpu backends: {line}", file=sys.stderr)


def run(command: list[str]) -> str:
    """A tool's stdout, or "" when it is missing or fails (a probe never stops the install)."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def seen_gpus() -> list[str]:
    """The GPUs the driver or the kernel shows, by maker (and name where nvidia-smi gives one)."""
    names = [n.strip() if n.strip().startswith("NVIDIA") else f"NVIDIA {n.strip()}"
             for n in run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines() if n.strip()]
    if names:
        return names
    found = []
    for vendor_file in sorted(glob.glob("/sys/class/drm/card[0-9]*/device/vendor")):
        try:
            vendor = open(vendor_file, encoding="ascii").read().strip()
        except OSError:
            continue
        if vendor in VENDORS and not re.search(r"card\d+-", vendor_file):
            found.append(f"{VENDORS[vendor]} GPU")
    return found


def nvcc() -> str | None:
    """The CUDA compiler: in CUDA_HOME where that is set, else on PATH or where the toolkit installs itself."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    places = [os.path.join(home, "bin", "nvcc")] if home else \
        [shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc", "/opt/cuda/bin/nvcc"]
    return next((p for p in places if p and os.access(p, os.X_OK)), None)


def nvcc_major(path: str) -> int:
    found = re.search(r"release (\d+)\.", run([path, "--version"]))
    return int(found.group(1)) if found else 0


def cuda_architectures(compiler: str) -> tuple[list[str], list[str]]:
    """(architectures to build, those too old for this nvcc) of the GPUs here, or CUDA_ARCHITECTURES."""
    wanted = os.environ.get("CUDA_ARCHITECTURES", "")
    caps = wanted.replace(";", ",").split(",") if wanted else \
        run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]).split()
    archs = sorted({c.strip().replace(".", "") for c in caps if re.fullmatch(r"\d+\.?\d*[af]?", c.strip())})
    oldest = OLDEST_ARCH.get(nvcc_major(compiler), 0)
    too_old = [a for a in archs if int(re.sub(r"\D", "", a)) < oldest]
    return [a for a in archs if a not in too_old], too_old


def vulkan_tools() -> str:
    """What Vulkan's build lacks here ("" when nothing)."""
    missing = [] if shutil.which("glslc") else ["glslc"]
    headers = [os.path.join(os.environ.get("VULKAN_SDK", "/nonexistent"), "include/vulkan/vulkan.h"),
               "/usr/include/vulkan/vulkan.h", "/usr/local/include/vulkan/vulkan.h"]
    if not any(os.path.exists(h) for h in headers):
        missing.append("the Vulkan headers")
    return " and ".join(missing)


def choose(mode: str) -> tuple[list[str], list[str]]:
    """(backends, CMake flags) for LOCALCHAT_GPU=mode; exits 2 when a backend named cannot be built."""
    mode = mode.strip().lower() or "auto"
    named = [m.strip() for m in mode.split(",") if m.strip()]
    if mode not in ("auto", "none") and not set(named) <= set(CHOICES):
        sys.exit(f"LOCALCHAT_GPU must be auto, none or a comma list of {', '.join(CHOICES)}; not '{mode}'")
    apple = platform.system() == "Darwin"
    if mode == "none":
        return [], ["-DGGML_METAL=OFF"] if apple else []
    gpus = seen_gpus()
    if gpus:
        say("seen: " + ", ".join(gpus))
    chosen, flags = [], []
    compiler = nvcc()
    if "cuda" in named or (mode == "auto" and compiler and any(g.startswith("NVIDIA") for g in gpus)):
        if not compiler:
            sys.exit("LOCALCHAT_GPU=cuda needs the CUDA toolkit (nvcc): install it from NVIDIA "
                     "(or your distribution's nvidia-cuda-toolkit), then run this again")
        archs, too_old = cuda_architectures(compiler)
        if too_old:
            say(f"compute capability {', '.join(too_old)} is too old for this nvcc; "
                "those GPUs get Vulkan or the CPU")
        if archs:
            chosen.append("cuda")
            flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)}",
                      f"-DCMAKE_CUDA_COMPILER={compiler}"]
        elif "cuda" in named:
            sys.exit("LOCALCHAT_GPU=cuda: no GPU here to build for; name the architectures, "
                     "e.g. CUDA_ARCHITECTURES=89 (compute capability 8.9)")
    lacking = vulkan_tools()
    if "vulkan" in named or (mode == "auto" and not chosen and not apple and not lacking):
        if lacking:
            sys.exit(f"LOCALCHAT_GPU=vulkan needs {lacking}: sudo apt-get install {VULKAN_PACKAGES} "
                     "(Fedora: glslc vulkan-headers vulkan-loader-devel), then run this again")
        chosen.append("vulkan")
        flags.append("-DGGML_VULKAN=ON")
    if apple and (mode == "auto" or "metal" in named):
        chosen.append("metal")  # on by default in llama.cpp's Apple builds
    elif apple:
        flags.append("-DGGML_METAL=OFF")
    elif "metal" in named:
        sys.exit("LOCALCHAT_GPU=metal: Metal is macOS's; this is " + platform.system())
    if gpus and not chosen:
        fix = (f"install the CUDA toolkit (nvcc), or Vulkan's tools: sudo apt-get install {VULKAN_PACKAGES}"
               if any(g.startswith("NVIDIA") for g in gpus) else f"sudo apt-get install {VULKAN_PACKAGES}")
        say(f"{gpus[0]} seen, but no GPU backend can be built here ({lacking or 'no CUDA toolkit'} missing): "
            f"{fix}; then run this again. The model runs on the CPU until then.")
    say("building " + (" and ".join(chosen) if chosen else "no GPU backend"))
    return chosen, flags


def main(argv: list[str]) -> None:
    chosen, flags = choose(argv[1] if len(argv) > 1 else os.environ.get("LOCALCHAT_GPU", "auto"))
    print(" ".join([",".join(chosen) or "none", *flags]))


if __name__ == "__main__":
    main(sys.argv)
