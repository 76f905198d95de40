"""The model browser's logic without a browser: verdicts, measured speeds, downloads that pause, resume and
cancel against a local hub (the real huggingface_hub client), and the checks an imported GGUF passes."""

from __future__ import annotations

import dataclasses
import os
import hashlib
import re
import time
from pathlib import Path

import pytest
from hub_server import FakeHub, serve_to_hub_client

from localchat.errors import ModelLoadError
from localchat.hardware import HardwareInfo
from localchat.models.catalog import ModelFile, load_catalog
from localchat.planning.planner import Wants
from localchat.tune.profile import Profile
from localchat.ui.documents.uploads import received_dir
from localchat.ui.models.model_browser import CatalogRow, Downloads, measured_speed, verdict
from localchat.ui.models.model_import import import_gguf
from localchat.ui.models.models_html import catalog_table

REPO, FILE = "org/SmolLM2-GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf"
LAPTOP = HardwareInfo(os="Linux", machine="x86_64", cpu_model="test CPU", physical_cores=4, logical_cores=8,
                      cpu_max_mhz=3000, cpu_flags=["avx2", "fma"], ram_total=16 * 2**30, ram_available=12 * 2**30,
                      ram_bandwidth=40e9)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_path: Path):
    fake = FakeHub(bytes_per_s=16 * 2**20)  # ~6 s for the file: a pause lands mid-file
    fake.add(REPO, FILE, model_path.read_bytes())
    yield from serve_to_hub_client(fake, tmp_path, monkeypatch)


def hub_file(model_path: Path) -> ModelFile:
    return ModelFile("Q4_1", FILE, model_path.stat().st_size, sources=[{"hub": {"repo": REPO, "file": FILE}}])


def wait_for(check, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout_s:.0f} s for {what}"
        time.sleep(0.05)


def partials(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "hf" / "hub").rglob("*.incomplete"))


def test_a_paused_download_keeps_its_bytes_and_resumes_from_them(hub: FakeHub, tmp_path: Path, model_path: Path):
    downloads = Downloads()
    job = downloads.start("smol:Q4_1", hub_file(model_path))
    wait_for(lambda: job.done > 0, "the first bytes")
    downloads.pause("smol:Q4_1")
    wait_for(lambda: not job.running, "the pause")
    assert job.state == "paused" and 0 < job.done < job.total
    assert [p.stat().st_size for p in partials(tmp_path)] == [job.done]
    assert downloads.here("smol:Q4_1", hub_file(model_path)).startswith("paused")
    kept = job.done

    downloads.start("smol:Q4_1", hub_file(model_path))  # Resume
    wait_for(lambda: not job.running, "the rest of the file")
    assert job.state == "done", job.error
    assert hub.downloads()[-1].headers["range"] == f"bytes={kept}-"
    assert hashlib.sha256(job.path.read_bytes()).hexdigest() == hashlib.sha256(model_path.read_bytes()).hexdigest()
    assert not partials(tmp_path)
    assert downloads.here("smol:Q4_1", hub_file(model_path)) == "downloaded"


def test_cancel_deletes_the_partial_file_running_or_paused(hub: FakeHub, tmp_path: Path, model_path: Path):
    downloads = Downloads()
    job = downloads.start("smol:Q4_1", hub_file(model_path))
    wait_for(lambda: job.done > 0, "the first bytes")
    downloads.cancel("smol:Q4_1")
    wait_for(lambda: not job.running, "the cancel")
    assert job.state == "cancelled" and not partials(tmp_path)

    downloads.start("smol:Q4_1", hub_file(model_path))
    wait_for(lambda: job.done > 0, "the first bytes again")
    downloads.pause("smol:Q4_1")
    wait_for(lambda: not job.running, "the pause")
    assert partials(tmp_path)
    downloads.cancel("smol:Q4_1")  # paused: nothing runs, yet the kept bytes go
    wait_for(lambda: not job.running, "the cancel of the paused download")
    assert job.state == "cancelled" and not partials(tmp_path)
    with pytest.raises(Exception, match="nothing to pause"):
        downloads.pause("smol:Q4_1")


def test_the_verdicts_come_from_the_planner_for_each_quant():
    catalog = load_catalog()
    small = verdict(LAPTOP, catalog, "smollm2-135m", "Q4_1", Wants())
    assert small.short.startswith("fits: cpu") and small.decode_tps and small.decode_tps > 0
    big_key, big_quant = next((k, q) for k, m in catalog.items() for q, f in m.files.items()
                              if f.format == "gguf" and f.size > 30e9)
    assert verdict(LAPTOP, catalog, big_key, big_quant, Wants()).short == "does not fit"
    for key, model in catalog.items():
        for quant, model_file in model.files.items():
            if model_file.format == "gptq":  # a CPU-only machine: the planner does not offer checkpoints
                assert verdict(LAPTOP, catalog, key, quant, Wants()).short == "not offered without an NVIDIA GPU"


def test_a_file_that_fits_but_crawls_says_so_and_its_speed_never_reads_zero():
    catalog = load_catalog()
    slow = dataclasses.replace(LAPTOP, ram_total=64 * 2**30, ram_available=60 * 2**30, ram_bandwidth=2e9)
    key, quant = next((k, q) for k, m in catalog.items() for q, f in m.files.items()
                      if f.format == "gguf" and 8e9 < f.size < 30e9)
    said = verdict(slow, catalog, key, quant, Wants())
    assert said.short.startswith("fits") and 0 < said.decode_tps < 1  # bandwidth-bound: under a token a second
    best = verdict(slow, catalog, "smollm2-135m", "Q4_1", Wants())
    table = catalog_table([CatalogRow(f"{key}:{quant}", key, quant, "gguf", "9 GB", said, None, "not here"),
                           CatalogRow("smollm2-135m:Q4_1", "smollm2-135m", "Q4_1", "gguf", "98 MB", best, None,
                                      "not here", best=True)])
    assert "fits, too slow to use (cpu" in table and f"{said.decode_tps:.1f} tok/s" in table and ">0 tok/s" not in table
    # The badge follows the verdict, so the two never read as one phrase ("best here fits: ...").
    assert re.search(r"fits: cpu, \w+ context <span class='lc-badge'>best here</span></td>", table)


def test_the_measured_speed_is_the_wizards_for_that_very_file():
    profile = Profile("f", "cpu", "smollm2-135m", "Q4_1", "/x.gguf", "single", 4096, 2, decode_tps=120.0,
                      candidates=[{"model": "qwen3-0.6b", "quant": "Q8_0", "decode_tps": 41.5},
                                  {"model": "qwen3-0.6b", "quant": "Q4_K_M", "status": "did not fit"}])
    assert measured_speed(profile, "smollm2-135m", "Q4_1") == 120.0
    assert measured_speed(profile, "qwen3-0.6b", "Q8_0") == 41.5
    assert measured_speed(profile, "qwen3-0.6b", "Q4_K_M") is None
    assert measured_speed(None, "smollm2-135m", "Q4_1") is None


def upload(name: str, data: bytes) -> Path:
    """A file where the window's upload route puts what the browser sends."""
    folder = received_dir() / f"upload-{time.monotonic_ns()}"
    folder.mkdir(parents=True)
    (folder / name).write_bytes(data)
    return folder / name


def test_an_import_takes_only_a_readable_gguf_from_the_upload_folder(tmp_path: Path, model_path: Path):
    from localchat.models.derive import random_weights_like
    from localchat.paths import models_dir

    tiny = random_weights_like(model_path, tmp_path / "tiny.gguf").read_bytes()
    outside = tmp_path / "elsewhere.gguf"
    outside.write_bytes(tiny)
    with pytest.raises(ModelLoadError, match="only a file uploaded through the window"):
        import_gguf(outside)
    assert outside.exists()  # a file the window did not receive is never touched
    for name, data, why in (("notes.gguf", b"plain text, not a model\n" * 50, "does not start like a GGUF"),
                            ("cut.gguf", tiny[:64], "not a readable GGUF"),
                            ("model.bin", tiny, "not a .gguf file")):
        sent = upload(name, data)
        with pytest.raises(ModelLoadError, match=why):
            import_gguf(sent)
        assert not sent.exists()  # refused: the upload is gone, nothing reached the models folder
    sent = upload("my model.gguf", tiny)
    placed = import_gguf(sent)
    first = placed.path
    assert first == models_dir() / "imported" / "my model.gguf" and first.read_bytes() == tiny
    assert (placed.how, placed.said) == ("moved", "moved my model.gguf into the models folder")
    assert not sent.exists() and not list(sent.parent.glob("*.gguf"))  # moved: no second copy left behind
    second = import_gguf(upload("my model.gguf", tiny)).path
    assert second.name == "my model-2.gguf"  # never over a model already there
    first.unlink()
    second.unlink()


def test_delete_leaves_other_programs_files_and_takes_a_model_path_file_off_the_list(
        model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The Models panel's Delete on what is not localchat's: LM Studio's file stays with a line saying where to
    delete it; a file given with --model (served earlier) is taken off the lists, its file kept."""
    from localchat.runtime.engine import Engine, EngineConfig
    from localchat.runtime.workers.worker import WorkerConfig
    from localchat.ui.chat.session import Runtime
    from localchat.ui.models import local_files

    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # where LM Studio keeps its models
    lmstudio = tmp_path / "user" / ".lmstudio" / "models" / "someone" / "repo" / "theirs.gguf"
    lmstudio.parent.mkdir(parents=True)
    os.link(model_path, lmstudio)
    started = tmp_path / "elsewhere" / "started.gguf"
    started.parent.mkdir()
    os.link(model_path, started)
    runtime = Runtime(Engine.load(str(model_path), EngineConfig(worker=WorkerConfig(n_ctx=512, n_threads=1))),
                      str(model_path), earlier=[str(started)])
    try:
        listed = {m.path: m for m in local_files.listed_files(runtime)}
        assert Path(runtime.engine.worker.model_path).resolve() == next(iter(listed)).resolve()  # loaded first
        with pytest.raises(ModelLoadError, match=r"theirs.gguf belongs to LM Studio, not to localchat, so localchat "
                                                 r"does not delete it; delete it there"):
            local_files.delete(runtime, local_files.listed(runtime, str(lmstudio)))
        assert lmstudio.is_file()
        with pytest.raises(ModelLoadError, match="is the model answering now, so it cannot be deleted"):
            local_files.delete_question(runtime, listed[model_path])
        mine = local_files.listed(runtime, str(started))
        assert local_files.delete_question(runtime, mine).startswith("Take **started.gguf** off the list?")
        said = local_files.delete(runtime, mine)
        assert said.startswith("Took started.gguf off the list; the file stays at") and started.is_file()
        assert str(started) not in runtime.earlier
        assert started not in {m.path for m in local_files.listed_files(runtime)}
        with pytest.raises(ModelLoadError, match="not in the list of model files"):  # a path sent by a client
            local_files.listed(runtime, str(started))
    finally:
        runtime.engine.close()
