"""Machines as people have them, described the way `localchat probe --json` writes them (bytes, Hz, B/s),
each with where its figures come from; the planner's tests plan for them."""

from __future__ import annotations

from localchat.hardware import GPUInfo, HardwareInfo

GiB, MiB = 1 << 30, 1 << 20


def rtx4090_desktop() -> HardwareInfo:
    """An RTX 4090 (24 GB GDDR6X, 1008 GB/s) driving the desktop, beside a Ryzen 9 7950X (16 cores, AVX-512)
    with 64 GB of dual-channel DDR5. NVML reports 24564 MiB in all; llama.cpp saw 22994 MiB free on such a
    card with a desktop session on it (koboldcpp issue #1522's log), after its own CUDA context: ~23.3 GiB
    free before one."""
    return HardwareInfo(os="Linux", machine="x86_64", cpu_model="AMD Ryzen 9 7950X 16-Core Processor",
                        physical_cores=16, logical_cores=32, cpu_max_mhz=5700, cpu_flags=["avx2", "fma", "avx512f"],
                        ram_total=64 * GiB, ram_available=56 * GiB, ram_bandwidth=64e9,
                        gpus=[GPUInfo(index=0, name="NVIDIA GeForce RTX 4090", memory_total=24564 * MiB,
                                      memory_free=(22994 + 330) * MiB, spec_bandwidth=1008e9, fp16_tflops=165,
                                      compute_capability="8.9")])


def rtx4060_laptop() -> HardwareInfo:
    """A gaming laptop: RTX 4060 Laptop GPU (8 GB GDDR6, 256 GB/s; the desktop runs on the integrated GPU,
    so nearly all of it is free), Core i7-13700H (6 performance + 8 efficient cores), 16 GB of DDR5."""
    return HardwareInfo(os="Windows", machine="AMD64", cpu_model="13th Gen Intel(R) Core(TM) i7-13700H",
                        physical_cores=14, logical_cores=20, cpu_max_mhz=5000, cpu_flags=["avx2", "fma"],
                        ram_total=16 * GiB, ram_available=10 * GiB, ram_bandwidth=55e9,
                        gpus=[GPUInfo(index=0, name="NVIDIA GeForce RTX 4060 Laptop GPU", memory_total=8188 * MiB,
                                      memory_free=7900 * MiB, spec_bandwidth=256e9, fp16_tflops=60,
                                      compute_capability="8.9")])


def apple_m3_16gb() -> HardwareInfo:
    """A MacBook Air M3 with 16 GB of unified memory (100 GB/s; 4 performance + 4 efficiency cores; the
    10-core GPU ~3.6 TFLOPS FP32). Metal lets the GPU use about two thirds of the memory; macOS and the
    browser hold some 6 GB."""
    return HardwareInfo(os="Darwin", machine="arm64", cpu_model="Apple M3", physical_cores=8, logical_cores=8,
                        cpu_flags=["neon", "dotprod"], ram_total=16 * GiB, ram_available=10 * GiB,
                        unified_memory=True,
                        gpus=[GPUInfo(index=0, name="Apple M3 GPU", vendor="apple", memory_total=int(16 * GiB * 2 / 3),
                                      memory_free=int(16 * GiB * 2 / 3), spec_bandwidth=100e9, fp32_tflops=3.6,
                                      unified=True)])


def two_rtx3090() -> HardwareInfo:
    """Two RTX 3090 (24 GB GDDR6X, 936 GB/s each; the first drives the display) on a desktop with 64 GB."""
    gpus = [GPUInfo(index=i, name="NVIDIA GeForce RTX 3090", memory_total=24576 * MiB, memory_free=free * MiB,
                    spec_bandwidth=936e9, fp16_tflops=71, compute_capability="8.6")
            for i, free in enumerate((23300, 24200))]
    return HardwareInfo(os="Linux", machine="x86_64", cpu_model="AMD Ryzen 9 5950X 16-Core Processor",
                        physical_cores=16, logical_cores=32, cpu_max_mhz=4900, cpu_flags=["avx2", "fma"],
                        ram_total=64 * GiB, ram_available=56 * GiB, ram_bandwidth=42e9, gpus=gpus,
                        peer_access=[[0, 1]])


def cpu_laptop_16gb() -> HardwareInfo:
    """A thin laptop without a usable GPU: Ryzen 7 7840U (8 cores, AVX-512), 16 GB of LPDDR5 (a numpy copy
    measures ~45 GB/s), 11 GB of it free."""
    return HardwareInfo(os="Linux", machine="x86_64", cpu_model="AMD Ryzen 7 7840U w/ Radeon 780M Graphics",
                        physical_cores=8, logical_cores=16, cpu_max_mhz=5100, cpu_flags=["avx2", "fma", "avx512f"],
                        ram_total=16 * GiB, ram_available=11 * GiB, ram_bandwidth=45e9)


def two_core_box() -> HardwareInfo:
    """The shared 2-core machine these tests run on, as `localchat probe --json` reported it (December 2026)."""
    return HardwareInfo(os="Linux", machine="x86_64", cpu_model="Intel(R) Xeon(R) Processor", physical_cores=2,
                        logical_cores=2, cpu_max_mhz=2000, cpu_flags=["avx2", "fma", "avx512f"],
                        ram_total=25275990016, ram_available=24454590464, ram_bandwidth=19.2e9)


def rtx4080_desktop() -> HardwareInfo:
    """An RTX 4080 SUPER (16 GB GDDR6X, 736 GB/s) driving the desktop (NVML: 16376 MiB in all, ~1 GiB held by
    the desktop), beside a Ryzen 7 7800X3D (8 cores) with 32 GB of dual-channel DDR5."""
    return HardwareInfo(os="Windows", machine="AMD64", cpu_model="AMD Ryzen 7 7800X3D 8-Core Processor",
                        physical_cores=8, logical_cores=16, cpu_max_mhz=5000, cpu_flags=["avx2", "fma", "avx512f"],
                        ram_total=32 * GiB, ram_available=24 * GiB, ram_bandwidth=60e9,
                        gpus=[GPUInfo(index=0, name="NVIDIA GeForce RTX 4080 SUPER", memory_total=16376 * MiB,
                                      memory_free=15300 * MiB, spec_bandwidth=736e9, fp16_tflops=104,
                                      compute_capability="8.9")])


def h100_server() -> HardwareInfo:
    """A server with one H100 PCIe (80 GB HBM2e, 2039 GB/s; NVML: 81559 MiB, all free on a headless card),
    two 32-core Xeons and 512 GB of DDR5."""
    return HardwareInfo(os="Linux", machine="x86_64", cpu_model="Intel(R) Xeon(R) Platinum 8462Y+",
                        physical_cores=64, logical_cores=128, cpu_max_mhz=4100, cpu_flags=["avx2", "fma", "avx512f"],
                        ram_total=512 * GiB, ram_available=480 * GiB, ram_bandwidth=300e9,
                        gpus=[GPUInfo(index=0, name="NVIDIA H100 PCIe", memory_total=81559 * MiB,
                                      memory_free=81000 * MiB, spec_bandwidth=2039e9, fp16_tflops=756,
                                      compute_capability="9.0")])


DESCRIBED = {"rtx4090-desktop": rtx4090_desktop, "rtx4060-laptop": rtx4060_laptop, "m3-16gb": apple_m3_16gb,
             "2x-rtx3090": two_rtx3090, "cpu-laptop-16gb": cpu_laptop_16gb, "2-core-box": two_core_box,
             "rtx4080-desktop": rtx4080_desktop, "h100-server": h100_server}
