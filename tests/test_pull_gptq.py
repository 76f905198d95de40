"""`localchat pull MODEL:gptq-int4`: every file of a GPTQ checkpoint through the hub download path (progress,
resume, checksums), with the real huggingface_hub client against the local fake hub; and local folders."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from gptq_checkpoint import WEIGHTS, checkpoint, hub, smollm2_gptq4  # noqa: F401  (fixtures)
from hub_server import COMMIT, FakeHub

from localchat import cli
from localchat.errors import DownloadError, ModelNotFoundError
from localchat.models.catalog import load_catalog
from localchat.models.download import cached_file
from localchat.models.resolve import resolve_model


def fetched(hub: FakeHub) -> list[str]:
    """The names of the files whose bytes were fetched, in order (the fake CDN serves them by sha256)."""
    names = {hashlib.sha256(data).hexdigest(): name for (_, name), data in hub.files.items()}
    return [names[seen.path.rsplit("/", 1)[-1]] for seen in hub.downloads()]


def test_pull_fetches_every_file_of_the_checkpoint_with_progress_and_finds_it_again(
        hub: FakeHub, checkpoint: dict[str, bytes], capsys: pytest.CaptureFixture[str]):
    entry = load_catalog()["qwen2.5-0.5b"].file_for("gptq-int4")
    assert cached_file(entry) is None
    seen: list[tuple[int, int]] = []
    folder = resolve_model("qwen2.5-0.5b:gptq-int4", progress=lambda done, total: seen.append((done, total)))
    repo_dir = Path(os.environ["HF_HUB_CACHE"]) / "models--Qwen--Qwen2.5-0.5B-Instruct-GPTQ-Int4"
    assert folder == repo_dir / "snapshots" / COMMIT
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == checkpoint  # no README, no pickle
    total = sum(len(data) for data in checkpoint.values())
    assert seen[-1] == (total, total) and {t for _, t in seen} == {total}
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)  # one bar over all the files
    # Small files first, the weights last: a repo that is not a checkpoint fails before the big download.
    assert sorted(fetched(hub)) == sorted(checkpoint) and fetched(hub)[-1] == WEIGHTS
    assert cached_file(entry) == folder
    assert cli.main(["pull", "qwen2.5-0.5b:gptq-int4"]) == 0  # found whole: nothing is fetched again
    assert capsys.readouterr().out.strip() == str(folder) and len(hub.downloads()) == len(checkpoint)


def test_the_pulled_checkpoint_loads_on_the_torch_worker(hub: FakeHub):
    from localchat.runtime.engine import Engine, EngineConfig, Request
    from localchat.runtime.sampling import SamplingParams
    from localchat.runtime.workers.worker import WorkerConfig

    folder = resolve_model("qwen2.5-0.5b:gptq-int4")
    config = EngineConfig(worker=WorkerConfig(n_ctx=256, n_batch=64, n_seq_max=1, n_threads=2), adapt_threads=False)
    with Engine.load(folder, config) as engine:
        assert "GPTQ 4-bit" in engine.worker.describe()
        done = engine.submit(Request(prompt="Paris is", sampling=SamplingParams(temperature=0.0, max_tokens=2,
                                                                                ignore_eos=True))).result()
        assert done.stats.completion_tokens == 2


def test_a_cut_connection_resumes_the_weights_with_a_range_request(hub: FakeHub, checkpoint: dict[str, bytes]):
    hub.cut_once[WEIGHTS] = 40_000_000
    folder = resolve_model("qwen2.5-0.5b:gptq-int4")
    first, second = [s for s, name in zip(hub.downloads(), fetched(hub)) if name == WEIGHTS]
    assert "range" not in first.headers and 0 < int(second.headers["range"][6:].rstrip("-")) <= 40_000_000
    assert (folder / WEIGHTS).read_bytes() == checkpoint[WEIGHTS]


def test_an_interrupted_pull_resumes_where_it_stopped(hub: FakeHub, checkpoint: dict[str, bytes]):
    small = sum(len(d) for n, d in checkpoint.items() if n != WEIGHTS)

    def stop_in_the_weights(done: int, total: int) -> None:
        if done >= small + 30_000_000:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        resolve_model("qwen2.5-0.5b:gptq-int4", progress=stop_in_the_weights)
    assert cached_file(load_catalog()["qwen2.5-0.5b"].file_for("gptq-int4")) is None  # not whole: not found
    before = len(hub.downloads())
    seen: list[int] = []
    folder = resolve_model("qwen2.5-0.5b:gptq-int4", progress=lambda done, total: seen.append(done))
    again = hub.downloads()[before:]
    assert fetched(hub)[before:] == [WEIGHTS]  # the small files were kept whole
    assert int(again[0].headers["range"][6:].rstrip("-")) >= 30_000_000
    assert seen[0] >= small + 30_000_000  # progress starts from what was already there
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == checkpoint


def test_a_corrupted_file_is_caught_by_its_checksum_and_fetched_again(hub: FakeHub, checkpoint: dict[str, bytes]):
    hub.corrupt["tokenizer.json"] = 1  # a small file
    hub.corrupt[WEIGHTS] = 1           # and the weights: each checked by the sha256 the hub gives
    folder = resolve_model("qwen2.5-0.5b:gptq-int4")
    assert fetched(hub).count("tokenizer.json") == 2 and fetched(hub).count(WEIGHTS) == 2
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == checkpoint


def test_a_repo_without_the_tokenizer_is_refused_before_the_weights(hub: FakeHub, tmp_path: Path):
    catalog_file = tmp_path / "models.yaml"
    catalog_file.write_text("""
models:
  broken:
    architecture: {arch: llama, n_layer: 30, n_head_kv: 3}
    files:
      Q4_1: {file: broken.gguf, size: 98000000, sources: []}
      gptq-int4:
        {format: gptq, bits: 4, file: broken-GPTQ, size: 120000000, sources: [{hub: {repo: org/no-tokenizer-GPTQ}}]}
""")
    with pytest.raises(DownloadError, match=r"no-tokenizer-GPTQ is not a checkpoint.*tokenizer\.json, tokenizer_conf"):
        resolve_model("broken:gptq-int4", catalog=load_catalog(catalog_file))
    assert hub.downloads() == []


def test_a_local_folder_is_used_in_place_when_whole(tmp_path: Path, model_path: Path,
                                                   capsys: pytest.CaptureFixture[str]):
    pytest.importorskip("torch", reason="the gptq extra is not installed (the checkpoint is made with it)")
    folder = shutil.copytree(smollm2_gptq4(model_path), tmp_path / "my-checkpoint")
    assert cli.main(["pull", str(folder)]) == 0
    assert capsys.readouterr().out.strip() == str(folder.resolve())
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ModelNotFoundError, match=r"lacks tokenizer\.json"):
        resolve_model(str(folder))
