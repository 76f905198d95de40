"""The GPU pieces that need no GPU: the install's choice of backends, the drivers' GPUs merged with
llama.cpp's devices, where a load put its layers (read from llama.cpp's own log lines), the layer count
after an out-of-memory, and a plan that wanted a GPU on an install with none."""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from localchat.hardware import GPUInfo, HardwareInfo
from localchat.planning.choose import choose_arrangement
from localchat.planning.fit import ModelSize
from localchat.planning.placements import arrange
from localchat.runtime.backends import gpus, offload, residence
from localchat.runtime.worker_types import WorkerConfig

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_backends", ROOT / "scripts" / "gpu_backends.py")
gb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gb)
GiB = 1 << 30


# -- the install's choice ---------------------------------------------------------------------------------

def _tools(folder: Path, **scripts: str) -> str:
    """A PATH of made-up tools (nvidia-smi, nvcc, glslc) that print what a machine's would."""
    folder.mkdir(exist_ok=True)
    for name, output in scripts.items():
        tool = folder / name.replace("_", "-")
        lines = " ".join(f"'{line}'" for line in output.splitlines())
        tool.write_text(f"#!/bin/sh\nprintf '%s\\n' {lines}\n")  # a shell builtin: PATH holds only these tools
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return str(folder)


def _choose(mode: str, path: str, sdk: Path | None = None) -> subprocess.CompletedProcess:
    """The chooser as install-runtime.sh runs it, with only the tools in `path` (the system's headers stay)."""
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/"), "CUDA_HOME": path.rsplit("/", 1)[0],
           **({"VULKAN_SDK": str(sdk)} if sdk else {})}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_backends.py"), mode], capture_output=True,
                          text=True, env=env)


def test_auto_builds_cuda_for_the_gpus_here_only(tmp_path: Path):
    path = _tools(tmp_path / "bin", nvidia_smi="8.6\n8.9", nvcc="Cuda compilation tools, release 13.0, V13.0.48")
    done = _choose("auto", path)
    assert done.returncode == 0, done.stderr
    names, *flags = done.stdout.split()
    assert names == "cuda" and "-DGGML_CUDA=ON" in flags
    assert "-DCMAKE_CUDA_ARCHITECTURES=86;89" in flags  # the GPUs' own, never "native"


def test_cuda_13_leaves_out_what_it_can_no_longer_build(tmp_path: Path):
    path = _tools(tmp_path / "bin", nvidia_smi="6.1\n8.6", nvcc="Cuda compilation tools, release 13.0, V13.0.48")
    done = _choose("auto", path)
    assert "-DCMAKE_CUDA_ARCHITECTURES=86" in done.stdout.split() and "too old" in done.stderr


def test_a_gpu_with_no_buildable_backend_gets_one_line_with_the_fix(tmp_path: Path):
    path = _tools(tmp_path / "bin", nvidia_smi="NVIDIA GeForce RTX 4090")
    done = _choose("auto", path)
    assert done.returncode == 0 and done.stdout.split() == ["none"]
    line = next(l for l in done.stderr.splitlines() if "no GPU backend can be built" in l)
    assert "NVIDIA" in line and "apt-get install glslc libvulkan-dev" in line and "CUDA toolkit" in line


def test_vulkan_asked_for_without_its_tools_fails_loudly_with_the_command(tmp_path: Path):
    done = _choose("vulkan", _tools(tmp_path / "bin"))
    assert done.returncode != 0 and "needs glslc" in done.stderr
    assert "sudo apt-get install glslc libvulkan-dev spirv-headers" in done.stderr


def test_vulkan_is_chosen_where_its_tools_are(tmp_path: Path):
    sdk = tmp_path / "sdk"
    (sdk / "include" / "vulkan").mkdir(parents=True)
    (sdk / "include" / "vulkan" / "vulkan.h").write_text("")
    done = _choose("auto", _tools(tmp_path / "bin", glslc="glslc 2023.2"), sdk)
    assert done.stdout.split() == ["vulkan", "-DGGML_VULKAN=ON"], done.stderr


def test_unknown_backends_are_refused():
    done = _choose("rocm", "/nonexistent")
    assert done.returncode != 0 and "auto, none or a comma list of cuda, vulkan, metal" in done.stderr


# -- the drivers' GPUs and llama.cpp's devices ------------------------------------------------------------

def _device(name: str, description: str, free: int, device_id: str = "", backend: str = "Vulkan",
            kind: str = "gpu") -> dict:
    return {"name": name, "description": description, "kind": kind, "backend": backend,
            "memory_free": free, "memory_total": free + GiB, "device_id": device_id}


def test_a_driver_gpu_without_a_device_is_not_usable_and_says_why():
    seen = HardwareInfo(gpus=[GPUInfo(0, "NVIDIA GeForce RTX 4090", memory_total=24 * GiB, spec_bandwidth=1008e9)])
    merged = gpus.merge(seen, [], "this install has no GPU backend: reinstall with one, `LOCALCHAT_GPU=cuda ...`")
    assert merged.gpus == [] and merged.gpus_checked
    assert "RTX 4090" in merged.not_usable[0] and "LOCALCHAT_GPU=cuda" in merged.not_usable[0]
    assert "no GPU backend" in merged.gpu_gap


def test_devices_carry_the_drivers_facts_by_bus_id_and_amd_gets_a_spec_bandwidth():
    nvidia = GPUInfo(0, "NVIDIA GeForce RTX 3090", memory_total=24 * GiB, spec_bandwidth=936e9,
                     compute_capability="8.6", pci_bus_id="00000000:01:00.0")
    devices = [_device("CUDA0", "NVIDIA GeForce RTX 3090", 20 * GiB, "0000:01:00.0", "CUDA"),
               _device("Vulkan1", "AMD Radeon RX 7900 XTX (RADV NAVI31)", 22 * GiB, "0000:03:00.0")]
    merged = gpus.merge(HardwareInfo(gpus=[nvidia]), devices)
    first, second = merged.gpus
    assert (first.index, first.device, first.compute_capability, first.spec_bandwidth) == (0, "CUDA0", "8.6", 936e9)
    assert first.memory_free == 20 * GiB  # llama.cpp's live figure
    assert (second.index, second.device, second.vendor, second.spec_bandwidth) == (1, "Vulkan1", "amd", 960e9)
    assert "spec" in second.bandwidth_source and merged.not_usable == [] and merged.gpu_gap == ""


def test_a_software_gpu_reads_the_hosts_memory():
    merged = gpus.merge(HardwareInfo(ram_bandwidth=30e9), [_device("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", GiB)])
    (gpu,) = merged.gpus
    assert gpu.vendor == "software" and gpu.unified and gpu.bandwidth == 30e9 and "RAM" in gpu.bandwidth_source


def test_one_gpu_seen_by_two_backends_is_used_through_the_better_one():
    from localchat.runtime.backends.devices import Device, dedupe

    vulkan = Device("Vulkan0", "RTX 4090", "gpu", "Vulkan", 1, 2, "0000:01:00.0")
    cuda = Device("CUDA0", "RTX 4090", "gpu", "CUDA", 1, 2, "0000:01:00.0")
    other = Device("Vulkan1", "Arc A770", "gpu", "Vulkan", 1, 2, "0000:02:00.0")
    assert [d.name for d in dedupe([vulkan, cuda, other])] == ["CUDA0", "Vulkan1"]


# -- where the layers went ------------------------------------------------------------------------------

SPLIT_LOG = [f"load_tensors: layer {i:3d} assigned to device {'Vulkan0' if i < 16 else 'Vulkan1'}, is_swa = 0"
             for i in range(31)] + [
    "load_tensors:   CPU_Mapped model buffer size =    19.50 MiB",
    "load_tensors:      Vulkan0 model buffer size =    40.00 MiB",
    "load_tensors:      Vulkan1 model buffer size =    38.00 MiB",
    "llama_kv_cache:    Vulkan0 KV buffer size =     8.00 MiB",
    "llama_kv_cache:    Vulkan1 KV buffer size =     7.50 MiB",
    "llama_context:    Vulkan0 compute buffer size =    20.00 MiB",
    "llama_context: Vulkan_Host compute buffer size =     2.00 MiB",
]


def test_a_layer_split_is_read_from_llamas_own_lines():
    found = residence.read(SPLIT_LOG)
    assert found.layers == {"Vulkan0": 16, "Vulkan1": 15} and found.n_layers == 31 and found.on_gpu() == 31
    assert found.bytes["Vulkan0"] == 68 << 20 and found.bytes[residence.HOST] == int(21.5 * (1 << 20))
    assert found.text().startswith("31/31 layers: 16 on Vulkan0 (71 MB), 15 on Vulkan1 (48 MB)")
    assert residence.device_bytes({"model": found}) == int(113.5 * (1 << 20))


def test_a_load_planned_for_a_gpu_that_landed_on_the_cpu_reads_so():
    lines = [f"load_tensors: layer {i:3d} assigned to device CPU, is_swa = 0" for i in range(31)]
    lines.append("load_tensors: offloaded 31/31 layers to GPU")  # llama.cpp's count of what was asked, not done
    found = residence.read(lines)
    assert found.on_gpu() == 0 and found.text() == "all 31 layers on the CPU"


def test_a_retry_counts_only_the_last_load():
    first = [f"load_tensors: layer {i:3d} assigned to device Vulkan0, is_swa = 0" for i in range(31)]
    second = [f"load_tensors: layer {i:3d} assigned to device {'CPU' if i < 16 else 'Vulkan0'}, is_swa = 0"
              for i in range(31)]
    found = residence.read(first + second)
    assert found.layers == {"CPU": 16, "Vulkan0": 15}
    assert found.text() == "15/31 layers on Vulkan0 (?), 16 on the CPU"


def test_out_of_device_memory_halves_the_layers_until_none_are_left():
    placed = [f"load_tensors: layer {i:3d} assigned to device Vulkan0, is_swa = 0" for i in range(31)]
    oom = placed + ["ggml_vulkan: Device memory allocation of size 98000000 failed.",
                    "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory"]
    assert offload.fewer_layers(oom, -1) == 15
    assert offload.fewer_layers(oom, 8) == 4
    assert offload.fewer_layers(oom, 1) is None
    assert offload.fewer_layers(placed + ["llama_model_load: error loading model: bad magic"], -1) is None


# -- plans on what is usable ----------------------------------------------------------------------------------

def test_all_layers_asked_for_on_an_install_without_a_gpu_run_on_the_cpu_and_say_why(tmp_path: Path):
    checked = gpus.merge(HardwareInfo(physical_cores=2), [], "this install has no GPU backend: reinstall ...")
    done = choose_arrangement("single", WorkerConfig(n_gpu_layers=-1), tmp_path / "m.gguf", hardware=lambda: checked)
    assert done.worker.n_gpu_layers == 0
    assert done.description == "one worker on the CPU: no GPU is usable (this install has no GPU backend: reinstall ...)"


def test_placements_name_the_devices_llama_cpp_named():
    checked = gpus.merge(HardwareInfo(physical_cores=8, ram_total=64 * GiB),
                         [_device("Vulkan0", "llvmpipe", 2 * GiB), _device("Vulkan1", "llvmpipe", 2 * GiB)])
    size = ModelSize(weights=100 << 20, kv_per_token=20_000)
    split = arrange("layer-split", checked, WorkerConfig(n_ctx=2048), size, devices="1,0")
    assert split.worker.gpus == (1, 0) and "GPU 1 (Vulkan1) 50%, GPU 0 (Vulkan0) 50%" in split.description
    pd = arrange("pd-split", checked, WorkerConfig(n_ctx=2048), size, devices="0,1")
    assert pd.description == "prefill on GPU 0 (Vulkan0), decode on GPU 1 (Vulkan1)"
    with pytest.raises(Exception, match=r"GPUs this install can use are: GPU 0 \(Vulkan0\), GPU 1 \(Vulkan1\)"):
        arrange("pd-split", checked, WorkerConfig(n_ctx=2048), size, devices="0,2")


def test_a_devices_memory_says_free_only_where_its_driver_counts_what_is_allocated():
    counted = residence.DeviceMemory("CUDA0", held=13_100_000_000, free=9_400_000_000, total=24_000_000_000)
    assert counted.text() == "CUDA0: 9.4 GB free of 24.0 GB (this model: 13.1 GB)"
    assert counted.to_dict()["free"] == 9_400_000_000
    # All of it free while the model's buffers sit there: the driver has no budget to report (llvmpipe).
    uncounted = residence.DeviceMemory("Vulkan0", held=211_000_000, free=2 << 30, total=2 << 30)
    assert uncounted.text() == "Vulkan0: 2.1 GB in all, free not reported by its driver (this model: 211 MB)"
    assert uncounted.to_dict()["free"] is None
    placed = {"model": residence.Residence({"Vulkan0": 20, "CPU": 11}, {"Vulkan0": 5, "CPU": 7}),
              "draft": residence.Residence({"Vulkan1": 31}, {"Vulkan1": 3}), "prefill": None}
    assert residence.gpu_bytes(placed) == {"Vulkan0": 5, "Vulkan1": 3} and residence.device_bytes(placed) == 8
