"""The hardware probe: real probing in a child process, failure modes, fake NVML, JSON round trips."""

from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path

import pytest

from localchat.errors import ConfigError
from localchat.hardware import GPUInfo, HardwareInfo
from localchat.hardware import probe as probe_module


def test_probe_reports_this_machine_and_round_trips():
    info = probe_module.probe(measure=False)
    assert info.physical_cores >= 1 and info.logical_cores >= info.physical_cores
    assert info.ram_total > 0 and 0 < info.ram_available <= info.ram_total
    assert info.os and info.cpu_model
    again = HardwareInfo.from_json(info.to_json())
    assert again == info


def test_host_bandwidth_is_measured_when_asked():
    info = probe_module.collect(measure=True)
    assert info.ram_bandwidth is not None and 1e8 < info.ram_bandwidth < 1e13


def test_a_hanging_probe_is_cut_off_and_degrades_to_cpu(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(probe_module, "_child_command", lambda measure: [sys.executable, "-c", "import time; time.sleep(30)"])
    start = time.monotonic()
    info = probe_module.probe(timeout=1.0)
    assert time.monotonic() - start < 10
    assert info.gpus == [] and info.ram_total > 0
    assert any("did not finish" in w for w in info.warnings)


def test_a_crashing_probe_degrades_with_its_error(monkeypatch: pytest.MonkeyPatch):
    code = "import sys; sys.stderr.write('driver exploded'); sys.exit(3)"
    monkeypatch.setattr(probe_module, "_child_command", lambda measure: [sys.executable, "-c", code])
    info = probe_module.probe()
    assert info.gpus == [] and any("exit 3" in w and "driver exploded" in w for w in info.warnings)


def _fake_nvml(n_gpus: int = 2, init_fails: bool = False) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    nvml.NVML_CLOCK_MEM, nvml.NVML_CLOCK_SM = 2, 1
    nvml.NVML_P2P_CAPS_INDEX_READ, nvml.NVML_P2P_STATUS_OK = 0, 0

    def init() -> None:
        if init_fails:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")

    nvml.nvmlInit, nvml.nvmlShutdown = init, lambda: None
    nvml.nvmlDeviceGetCount = lambda: n_gpus
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetName = lambda h: b"NVIDIA GeForce RTX 3090"
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=24 << 30, free=(23 << 30) - h)
    nvml.nvmlDeviceGetMemoryBusWidth = lambda h: 384
    nvml.nvmlDeviceGetMaxClockInfo = lambda h, kind: 9751 if kind == 2 else 2100
    nvml.nvmlDeviceGetCudaComputeCapability = lambda h: (8, 6)
    nvml.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 4
    nvml.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16

    def no_cores(h: int) -> int:
        raise AttributeError("old driver")  # a missing query must not lose the GPU

    nvml.nvmlDeviceGetNumGpuCores = no_cores
    nvml.nvmlDeviceGetP2PStatus = lambda a, b, cap: 0
    return nvml


def test_nvml_facts_become_gpus_with_spec_bandwidth_and_peer_pairs(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(3))
    monkeypatch.setattr(probe_module.platform, "system", lambda: "Linux")
    info = probe_module.collect(measure=False)
    assert [g.index for g in info.gpus] == [0, 1, 2]
    gpu = info.gpus[1]
    assert gpu.name == "NVIDIA GeForce RTX 3090" and gpu.compute_capability == "8.6"
    assert gpu.spec_bandwidth == pytest.approx(936e9, rel=0.01)  # the 3090's published 936 GB/s
    assert (gpu.pcie_gen, gpu.pcie_width, gpu.fp32_tflops) == (4, 16, None)
    assert gpu.memory_free == (23 << 30) - 1
    assert info.peer_access == [[0, 1], [0, 2], [1, 2]]


def _devices(root: Path, pci: dict[str, tuple[str, str]] | None = None, nodes: tuple[str, ...] = ()) -> Path:
    """A made-up Linux device tree: PCI functions (address: (vendor, class)) and /dev nodes."""
    for address, (vendor, pci_class) in (pci or {}).items():
        device = root / "sys" / "bus" / "pci" / "devices" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(pci_class + "\n")
    (root / "sys" / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    (root / "dev").mkdir()
    for node in nodes:
        (root / "dev" / node).write_text("")
    return root


INTEL_HOST_BRIDGE = ("0x8086", "0x060000")
NVIDIA_VGA, NVIDIA_AUDIO = ("0x10de", "0x030000"), ("0x10de", "0x040300")


def _driver_warnings(info: HardwareInfo) -> list[str]:
    return [w for w in info.warnings if "NVIDIA" in w or "driver" in w]


def test_no_nvidia_gpu_is_the_normal_case_and_not_warned_about(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(init_fails=True))
    monkeypatch.setattr(probe_module.platform, "system", lambda: "Linux")
    # An NVIDIA HDMI audio function alone is no GPU.
    root = _devices(tmp_path, {"0000:00:00.0": INTEL_HOST_BRIDGE, "0000:00:1f.3": NVIDIA_AUDIO})
    monkeypatch.setattr(probe_module, "DEVICE_ROOT", root)
    info = probe_module.collect(measure=False)
    assert info.gpus == [] and _driver_warnings(info) == []


@pytest.mark.parametrize("where", ["pci", "device-node"])
def test_a_gpu_without_a_working_driver_is_warned_about_with_the_fix(where: str, monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(init_fails=True))
    monkeypatch.setattr(probe_module.platform, "system", lambda: "Linux")
    root = (_devices(tmp_path, {"0000:01:00.0": NVIDIA_VGA}) if where == "pci"
            else _devices(tmp_path, nodes=("nvidia0", "nvidiactl")))
    monkeypatch.setattr(probe_module, "DEVICE_ROOT", root)
    info = probe_module.collect(measure=False)
    (warning,) = _driver_warnings(info)
    assert info.gpus == [] and "DRIVER_NOT_LOADED" in warning and "nvidia-smi" in warning
    assert ("PCI 0000:01:00.0" if where == "pci" else "/dev/nvidia0") in warning
    assert "nvidiactl" not in warning  # the control node is no card


def test_a_gpu_without_the_nvml_package_is_warned_about(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    monkeypatch.setattr(probe_module.platform, "system", lambda: "Linux")
    monkeypatch.setattr(probe_module, "DEVICE_ROOT", _devices(tmp_path, {"0000:01:00.0": NVIDIA_VGA}))
    (warning,) = _driver_warnings(probe_module.collect(measure=False))
    assert "pip install nvidia-ml-py" in warning


def test_without_a_device_list_only_a_failing_driver_library_is_warned_about(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path):
    nvml = _fake_nvml(init_fails=True)
    nvml.NVMLError_LibraryNotFound = type("NVMLError_LibraryNotFound", (Exception,), {})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(probe_module.platform, "system", lambda: "Windows")
    monkeypatch.setattr(probe_module, "DEVICE_ROOT", tmp_path)  # no sys/ tree: nothing to look at
    (warning,) = _driver_warnings(probe_module.collect(measure=False))
    assert "installed but not usable" in warning and "DRIVER_NOT_LOADED" in warning

    def no_library() -> None:
        raise nvml.NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    nvml.nvmlInit = no_library
    assert _driver_warnings(probe_module.collect(measure=False)) == []


def test_apple_silicon_is_one_unified_gpu_with_the_chip_bandwidth():
    info = HardwareInfo(os="Darwin", machine="arm64", cpu_model="Apple M2 Max",
                        ram_total=32 << 30, ram_available=20 << 30)
    probe_module._apple_gpu(info)
    (gpu,) = info.gpus
    assert gpu.unified and info.unified_memory and gpu.spec_bandwidth == 400e9
    assert gpu.memory_total < info.ram_total and gpu.memory_free <= info.ram_available


def test_described_machines_load_with_defaults_and_reject_typos():
    info = HardwareInfo.from_json(json.dumps({"ram_total": 16 << 30, "gpus": [{"index": 0, "name": "X"}]}))
    assert info.ram_total == 16 << 30 and info.gpus == [GPUInfo(index=0, name="X")]
    with pytest.raises(ConfigError, match="ram_totl"):
        HardwareInfo.from_json(json.dumps({"ram_totl": 1}))
    with pytest.raises(ConfigError, match="memory_ttl"):
        HardwareInfo.from_json(json.dumps({"gpus": [{"index": 0, "name": "X", "memory_ttl": 1}]}))
    with pytest.raises(ConfigError, match="JSON"):
        HardwareInfo.from_json("{not json")


def test_cli_prints_a_table_and_json(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    fake = HardwareInfo(cpu_model="Test CPU", ram_total=8 << 30, gpus=[GPUInfo(index=0, name="Fake GPU")],
                        warnings=["a warning"])
    monkeypatch.setattr(probe_module, "probe", lambda measure=True: fake)
    assert probe_module.main([]) == 0
    table = capsys.readouterr().out
    assert "Test CPU" in table and "Fake GPU" in table and "a warning" in table
    assert probe_module.main(["--json"]) == 0
    assert HardwareInfo.from_json(capsys.readouterr().out) == fake
