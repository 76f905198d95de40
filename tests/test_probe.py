"""The hardware probe: real probing in a child process, failure modes, fake NVML, JSON round trips."""

from __future__ import annotations

import json
import sys
import time
import types

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


def test_a_dead_driver_means_no_gpus_and_a_warning(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(init_fails=True))
    monkeypatch.setattr(probe_module.platform, "system", lambda: "Linux")
    info = probe_module.collect(measure=False)
    assert info.gpus == [] and any("DRIVER_NOT_LOADED" in w for w in info.warnings)


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
