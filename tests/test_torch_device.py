"""Where the torch worker runs a GPTQ checkpoint: CUDA where torch sees a GPU, else the CPU; the
torch_device setting forces one. The CPU path runs for real here; the CUDA path only where torch
reports a GPU (skipped otherwise: no GPU is faked)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the gptq extra is not installed")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from gptq_checkpoint import smollm2_gptq4  # noqa: E402

from localchat.assemble import worker_config  # noqa: E402
from localchat.config import Settings  # noqa: E402
from localchat.errors import ConfigError, ModelLoadError  # noqa: E402
from localchat.runtime.engine import Engine, EngineConfig, Request  # noqa: E402
from localchat.runtime.sampling import SamplingParams  # noqa: E402
from localchat.runtime.workers.worker import WorkerConfig  # noqa: E402

GPU = torch.cuda.is_available()
QUESTION = [{"role": "user", "content": "Name the capital city of France."}]


@pytest.fixture(scope="module")
def gptq4(model_path: Path) -> Path:
    return smollm2_gptq4(model_path)


def load(folder: Path, device: str) -> Engine:
    config = WorkerConfig(n_ctx=512, n_batch=64, n_seq_max=1, n_threads=2, torch_device=device)
    return Engine.load(folder, EngineConfig(worker=config, adapt_threads=False))


def answer(engine: Engine, tokens: int = 12) -> list[int]:
    request = Request(messages=QUESTION, sampling=SamplingParams(temperature=0.0, max_tokens=tokens))
    return engine.submit(request).result().token_ids


def test_the_setting_reaches_the_worker_and_refuses_a_device_it_does_not_know():
    assert worker_config(Settings(torch_device="cpu")).torch_device == "cpu"
    assert worker_config(Settings()).torch_device == "auto"
    with pytest.raises(ConfigError, match="torch_device"):
        Settings(torch_device="gpu")


@pytest.mark.skipif(GPU, reason="torch sees a GPU here: auto takes CUDA (the test below)")
def test_auto_runs_on_the_cpu_where_torch_sees_no_gpu_as_forcing_the_cpu_does(gptq4: Path):
    with load(gptq4, "auto") as auto:
        assert auto.worker.device.type == "cpu" and " on torch (" in auto.worker.describe()
        said = answer(auto)
    with load(gptq4, "cpu") as cpu:
        assert answer(cpu) == said


@pytest.mark.skipif(GPU, reason="torch sees a GPU here")
def test_cuda_asked_for_where_torch_sees_no_gpu_is_refused_with_what_to_do(gptq4: Path):
    with pytest.raises(ModelLoadError, match="sees no CUDA GPU") as refused:
        load(gptq4, "cuda")
    assert "set torch_device to auto or cpu" in str(refused.value) and torch.__version__ in str(refused.value)


@pytest.mark.skipif(not GPU, reason="torch sees no CUDA GPU here")
def test_on_a_gpu_auto_runs_the_checkpoint_there_and_it_answers_as_on_the_cpu(gptq4: Path):
    with load(gptq4, "auto") as auto:
        worker = auto.worker
        assert worker.device.type == "cuda" and torch.cuda.get_device_name(worker.device) in worker.describe()
        assert worker.decoder.embed.device.type == "cuda" and worker.caches[0].data.device.type == "cuda"
        on_gpu = auto.submit(Request(messages=QUESTION, sampling=SamplingParams(temperature=0.0, max_tokens=24)))
        assert "Paris" in on_gpu.result().text
        said = answer(auto, 4)
    with load(gptq4, "cpu") as cpu:
        # Other kernels (dequantized bfloat16 on the GPU, torch's int4 op on the CPU): the first tokens agree.
        assert answer(cpu, 4)[:2] == said[:2]
