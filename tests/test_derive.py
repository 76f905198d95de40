"""Tiny random-weight GGUFs that share the real model's vocabulary (or deliberately do not)."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import llama_cpp
import pytest

from localchat.models.derive import RENAMED_IDS, SHRINK_BY, random_weights_like
from localchat.runtime.backends import kernels

SAMPLE = "Hello, world! Ünïcødé 你好 <|im_start|>user\nWhat is 12345 + 678?<|im_end|>"


@pytest.fixture(scope="module", autouse=True)
def cpu_kernels(model_path: Path) -> None:
    """The bindings' `Llama` loads no CPU kernels itself; these tests must not rely on an earlier test's."""
    kernels.activate(False, model_path)


@pytest.fixture(scope="module")
def tiny(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str | None, Path]:
    """The identical, renamed and shrunk variants, written fresh (explicit targets skip the shared cache)."""
    out = tmp_path_factory.mktemp("derived")
    return {
        change: random_weights_like(model_path, out / f"tiny-{change}.gguf", vocab_change=change)
        for change in (None, "rename", "shrink")
    }


def _vocab(path: Path) -> tuple[llama_cpp.Llama, list[bytes], int, int]:
    """The model's tokenizer as llama.cpp loaded it: every token's text, then bos and eos."""
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    texts = [llama_cpp.llama_vocab_get_text(vocab, i) for i in range(llama_cpp.llama_vocab_n_tokens(vocab))]
    return llm, texts, llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab)


@pytest.fixture(scope="module")
def source_vocab(model_path: Path) -> tuple[llama_cpp.Llama, list[bytes], int, int]:
    return _vocab(model_path)


def test_tiny_model_loads_and_generates(tiny: dict[str | None, Path]):
    llm = llama_cpp.Llama(str(tiny[None]), n_ctx=256, verbose=False)
    assert llama_cpp.llama_model_n_layer(llm.model) == 2
    assert llama_cpp.llama_model_n_embd(llm.model) == 64
    prompt = llm.tokenize(b"The capital of France is")
    generated = []
    for token in llm.generate(prompt, temp=0.0):
        generated.append(token)
        if len(generated) == 4:
            break
    assert len(generated) == 4 and all(0 <= t < llm.n_vocab() for t in generated)


def test_vocabulary_is_identical_to_the_source(tiny: dict[str | None, Path], source_vocab):
    source, source_texts, bos, eos = source_vocab
    llm, texts, tiny_bos, tiny_eos = _vocab(tiny[None])
    assert len(texts) == len(source_texts) == 49152
    assert texts == source_texts
    assert (tiny_bos, tiny_eos) == (bos, eos)
    for special in (False, True):
        assert llm.tokenize(SAMPLE.encode(), special=special) == source.tokenize(SAMPLE.encode(), special=special)
    assert llm.metadata["tokenizer.chat_template"] == source.metadata["tokenizer.chat_template"]


def test_renamed_variant_differs_only_in_the_renamed_tokens(tiny: dict[str | None, Path], source_vocab):
    source, source_texts, _, _ = source_vocab
    llm, texts, _, _ = _vocab(tiny["rename"])
    assert len(texts) == len(source_texts)
    assert [i for i, (a, b) in enumerate(zip(texts, source_texts)) if a != b] == list(RENAMED_IDS)
    # Text the source encodes as one renamed token comes out differently here.
    word = source_texts[RENAMED_IDS[0]]
    assert source.tokenize(word, add_bos=False, special=False) == [RENAMED_IDS[0]]
    assert llm.tokenize(word, add_bos=False, special=False) != [RENAMED_IDS[0]]


def test_shrunk_variant_drops_the_last_tokens(tiny: dict[str | None, Path], source_vocab):
    _, source_texts, _, _ = source_vocab
    _, texts, _, _ = _vocab(tiny["shrink"])
    assert len(source_texts) - len(texts) == SHRINK_BY > 128
    assert texts == source_texts[:-SHRINK_BY]


def test_tokenizer_metadata_keeps_its_types_and_stays_consistent(model_path: Path, tiny: dict[str | None, Path]):
    source = gguf.GGUFReader(model_path).fields
    shrunk = gguf.GGUFReader(tiny["shrink"]).fields
    keys = sorted(k for k in source if k.startswith("tokenizer."))
    assert keys == sorted(k for k in shrunk if k.startswith("tokenizer."))
    for key in keys:
        assert shrunk[key].types == source[key].types, key
    n_vocab = len(source["tokenizer.ggml.tokens"].data) - SHRINK_BY
    assert len(shrunk["tokenizer.ggml.tokens"].data) == len(shrunk["tokenizer.ggml.token_type"].data) == n_vocab
    assert shrunk["llama.vocab_size"].contents() == n_vocab
    assert shrunk["tokenizer.ggml.merges"].contents() == source["tokenizer.ggml.merges"].contents()
    assert shrunk["tokenizer.ggml.eos_token_id"].contents() == source["tokenizer.ggml.eos_token_id"].contents()


def test_files_are_small_and_reused(model_path: Path, tiny: dict[str | None, Path]):
    for path in tiny.values():
        assert path.stat().st_size < 20 * 2**20
        assert not path.with_name(path.name + ".partial").exists()
    before = tiny[None].stat().st_mtime_ns
    assert random_weights_like(model_path, tiny[None]) == tiny[None]
    assert tiny[None].stat().st_mtime_ns == before


def test_unknown_vocab_change_is_refused(model_path: Path, tmp_path: Path):
    with pytest.raises(ValueError, match="rename"):
        random_weights_like(model_path, tmp_path / "x.gguf", vocab_change="reverse")
    assert not os.listdir(tmp_path)
