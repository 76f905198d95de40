"""Models split over several GGUF files (NAME-00001-of-0000N.gguf): named, sized, listed once, fetched part by part
from a (fake) hub with one progress, and loaded by llama.cpp through their first part."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from gguf_shapes import split_gguf
from hub_server import FakeHub, serve_to_hub_client

from localchat.models.catalog import load_catalog
from localchat.models.download import cached_file
from localchat.models.gguf_info import read_gguf, read_model
from localchat.models.importers import scan_folder
from localchat.models.resolve import resolve_model, servable_files
from localchat.models.sizes import _listed_size
from localchat.models.split_files import is_later_part, part_names
from localchat.planning.fit import ModelSize
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.workers.worker import WorkerConfig

pytest.importorskip("gguf")
REPO, STEM, PARTS = "org/SmolLM2-split-GGUF", "SmolLM2-135M-Instruct-Q4_1", 3
FIRST = f"{STEM}-00001-of-00003.gguf"


@pytest.fixture(scope="module")
def parts(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The real SmolLM2 file in three parts, as gguf-split writes them."""
    return split_gguf(model_path, tmp_path_factory.mktemp("split") / f"{STEM}.gguf", PARTS)


def test_the_parts_of_a_split_model_are_named_from_its_first():
    assert part_names("Q4/m-00001-of-00003.gguf") == [f"Q4/m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert part_names("m-00002-of-00003.gguf") == ["m-00002-of-00003.gguf"]  # only a first part names the rest
    assert part_names("m.gguf") == ["m.gguf"]
    assert is_later_part("m-00003-of-00003.gguf") and not is_later_part("m-00001-of-00003.gguf")


def test_a_split_models_header_and_size_are_all_its_parts(parts: list[Path], model_path: Path):
    whole, first = read_gguf(model_path), read_gguf(parts[0])
    assert first.metadata["split.count"] == PARTS and len(first.tensors) < len(whole.tensors)
    joined = read_model(parts[0])
    assert sorted(t.name for t in joined.tensors) == sorted(t.name for t in whole.tensors)
    assert joined.tensor_bytes == whole.tensor_bytes
    assert joined.file_size == sum(p.stat().st_size for p in parts)
    # The fit sizes the whole model, not its first part.
    assert ModelSize.of(parts[0]).bytes_for(2048) == ModelSize.of(model_path).bytes_for(2048)


def test_a_split_model_lists_once_by_its_first_part(parts: list[Path]):
    found = scan_folder(parts[0].parent)
    assert [m.path for m in found] == [parts[0]]
    assert found[0].size == sum(p.stat().st_size for p in parts)


def test_a_split_model_loads_through_its_first_part_and_answers_as_the_whole_file(parts: list[Path],
                                                                                  model_path: Path):
    config = EngineConfig(worker=WorkerConfig(n_ctx=512, n_seq_max=1, n_threads=2, deterministic=True))
    ask = Request(messages=[{"role": "user", "content": "What is the capital of France?"}],
                  sampling=SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    answers = []
    for path in (parts[0], model_path):
        with Engine.load(path, config) as engine:
            answers.append(engine.submit(ask).result())
    assert len(answers[0].token_ids) == 12 and answers[0].text.strip()
    assert answers[0].token_ids == answers[1].token_ids


def _catalog(tmp_path: Path, size: int) -> dict:
    catalog_file = tmp_path / "models.yaml"
    catalog_file.write_text(f"""
models:
  smol-split:
    name: SmolLM2 split
    family: smollm2
    license: apache-2.0
    default_quant: Q4_1
    architecture: {{arch: llama, n_layer: 30, n_head_kv: 3}}
    files:
      Q4_1:
        file: {FIRST}
        size: {size}
        sources:
          - hub: {{repo: {REPO}, file: {FIRST}, verified: true}}
""")
    return load_catalog(catalog_file)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: list[Path]):
    fake = FakeHub()
    for part in parts:
        fake.add(REPO, part.name, part.read_bytes())
    yield from serve_to_hub_client(fake, tmp_path, monkeypatch)


def test_pull_fetches_every_part_with_one_progress_and_finds_them_again(hub: FakeHub, parts: list[Path],
                                                                         tmp_path: Path):
    total = sum(p.stat().st_size for p in parts)
    catalog = _catalog(tmp_path, total)
    seen: list[tuple[int, int]] = []
    path = resolve_model("smol-split", catalog=catalog, progress=lambda done, whole: seen.append((done, whole)))
    assert path.name == FIRST
    for part in parts:  # every part beside the first, byte for byte
        assert hashlib.sha256(path.with_name(part.name).read_bytes()).digest() == \
            hashlib.sha256(part.read_bytes()).digest()
    assert {whole for _, whole in seen} == {total} and seen[-1] == (total, total)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)  # one bar that only moves forward
    assert cached_file(catalog["smol-split"].file_for(None)) == path
    fetched = len(hub.downloads())
    assert resolve_model("smol-split", catalog=catalog) == path and len(hub.downloads()) == fetched
    names = servable_files(catalog)
    assert names["smol-split"] == path and not any(is_later_part(p.name) for p in names.values())


def test_a_part_cut_midway_resumes_and_a_corrupted_part_is_fetched_again(hub: FakeHub, parts: list[Path],
                                                                          tmp_path: Path):
    catalog = _catalog(tmp_path, sum(p.stat().st_size for p in parts))
    hub.cut_once[parts[1].name] = 21_000_000  # past two of the client's 10 MB reads
    hub.corrupt[parts[2].name] = 1
    path = resolve_model("smol-split", catalog=catalog)

    def gets(part: Path) -> list:  # the CDN serves a file by its sha256
        return [seen for seen in hub.downloads() if hashlib.sha256(part.read_bytes()).hexdigest() in seen.path]

    cut = gets(parts[1])
    assert len(cut) == 2 and 0 < int(cut[1].headers["range"].removeprefix("bytes=").rstrip("-")) <= 21_000_000
    assert len(gets(parts[2])) == 2 and len(gets(parts[0])) == 1
    assert [path.with_name(p.name).read_bytes() == p.read_bytes() for p in parts] == [True] * PARTS


def test_a_part_missing_from_the_hub_fails_the_pull_and_nothing_is_listed(hub: FakeHub, parts: list[Path],
                                                                           tmp_path: Path):
    del hub.files[(REPO, parts[2].name)]
    catalog = _catalog(tmp_path, sum(p.stat().st_size for p in parts))
    with pytest.raises(Exception, match="00003-of-00003"):
        resolve_model("smol-split", catalog=catalog)
    assert cached_file(catalog["smol-split"].file_for(None)) is None
    assert "smol-split" not in servable_files(catalog)


def test_the_hub_listing_sizes_a_split_model_by_all_its_parts(parts: list[Path], tmp_path: Path):
    entry = _catalog(tmp_path, 1).get("smol-split").file_for(None)
    listed = {p.name: p.stat().st_size for p in parts}
    assert _listed_size(entry, listed) == sum(listed.values())
    del listed[parts[1].name]
    assert _listed_size(entry, listed) is None  # a listing without every part does not size the model
    assert os.path.basename(entry.repo_file or "") == FIRST
