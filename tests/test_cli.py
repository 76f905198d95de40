"""The `localchat` command as a user runs it: a real process, real model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localchat", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_chat_json_answers_a_question(model_path: Path):
    done = run("chat", "--json", "--temperature", "0", "--max-tokens", "24", "Name the capital city of France.")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert "Paris" in answer["text"]
    assert answer["prompt_tokens"] > 5 and 0 < answer["completion_tokens"] <= 24
    assert answer["ttft_ms"] > 0 and answer["tokens_per_s"] > 0


def test_chat_streams_plain_text(model_path: Path):
    done = run("chat", "--temperature", "0", "--max-tokens", "16", "--model", str(model_path), "Say hello.")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_interactive_chat_keeps_the_conversation(model_path: Path):
    turns = "My name is Ada. Remember it.\nWhat is my name?\n/reset\nWhat is my name?\n"
    done = subprocess.run([sys.executable, "-m", "localchat", "chat", "--temperature", "0", "--max-tokens", "24"],
                          input=turns, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    answers = [a.strip() for a in done.stdout.split("> ") if a.strip()]
    assert len(answers) == 3, done.stdout
    assert "Ada" in answers[1]  # remembered within the conversation
    assert "Ada" not in answers[2]  # forgotten after /reset
    assert done.stderr.count("tok/s") == 3


def test_errors_are_one_clear_line_without_traceback(tmp_path: Path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a model")
    cases = [
        (["chat", "--model", str(bogus), "hi"], "not a GGUF model file"),
        (["chat", "--model", "/no/such/model.gguf", "hi"], "no model file"),
        (["chat", "--model", "no-such-model", "hi"], "unknown model"),
        (["chat", "--top-p", "3", "hi"], "top_p=3.0 is invalid"),
        (["chat", "--n-ctx", "10", "hi"], "n_ctx"),
    ]
    for args, message in cases:
        done = run(*args)
        assert done.returncode == 1, args
        assert message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_unknown_setting_in_the_environment_is_an_error():
    done = run("chat", "hi", env={"LOCALCHAT_N_CTXX": "100"})
    assert done.returncode == 1
    assert "unknown setting 'n_ctxx'" in done.stderr


def test_models_lists_the_catalog(model_path: Path):
    done = run("models")
    assert done.returncode == 0
    assert "smollm2-135m:Q4_1" in done.stdout and "local:" in done.stdout


def _notes(lines: int) -> str:
    filler = [f"Line {i}: the ferry timetable for pier {i % 9} was revised in spring." for i in range(lines)]
    filler.insert(lines // 2, "The vault code is 7341.")
    return "\n".join(filler)


def test_chat_answers_from_a_document_and_says_what_was_included(tmp_path: Path, model_path: Path):
    doc = tmp_path / "notes.txt"
    doc.write_text(_notes(40))
    done = run("chat", "--json", "--temperature", "0", "--max-tokens", "24", "--file", str(doc), "What is the vault code?")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert "7341" in answer["text"]
    included = answer["included"]
    assert included["mode"] == "whole" and included["documents"][0]["name"] == "notes.txt"


def test_a_document_beyond_the_context_is_retrieved_not_cut(tmp_path: Path, model_path: Path):
    doc = tmp_path / "long-notes.txt"
    doc.write_text(_notes(400))
    done = run("chat", "--json", "--temperature", "0", "--max-tokens", "24", "--n-ctx", "2048",
               "--file", str(doc), "What is the vault code?")
    assert done.returncode == 0, done.stderr
    included = json.loads(done.stdout)["included"]
    assert included["mode"] == "retrieved" and included["num_tokens"] <= included["budget_tokens"]
    chunks = included["documents"][0]["chunks"]
    assert chunks and len(chunks) < included["documents"][0]["num_chunks"]
    fact_line = 400 // 2 + 1  # lines are numbered from 1
    assert any(_covers(anchor, fact_line) for c in chunks for anchor in c["anchors"]), chunks


def _covers(anchor: str, line: int) -> bool:
    numbers = [int(n) for n in anchor.replace("\u2013", " ").replace("-", " ").split() if n.isdigit()]
    return len(numbers) == 2 and numbers[0] <= line <= numbers[1]


def test_a_broken_document_is_one_clear_line(tmp_path: Path):
    bad = tmp_path / "report.pdf"
    bad.write_text("this is not a PDF")
    done = run("chat", "--file", str(bad), "Summarize it.")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "report.pdf" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_top_level_help_shows_every_way_to_start_the_window():
    done = run("--help")
    assert done.returncode == 0
    for flag in ("--no-browser", "--port PORT", "--host HOST", "--listen", "--api-key KEY", "--model",
                 "--placement", "localchat ui --help"):
        assert flag in done.stdout, flag
    assert run("--no-browser", "--help").stdout == run("ui", "--help").stdout  # the same options, either way


def test_each_placement_is_explained_on_its_own_line():
    from localchat.config import PLACEMENTS

    for command in ("chat", "serve", "ui"):
        shown = run(command, "--help").stdout
        lines = shown[shown.index("placements (--placement):"):].strip().splitlines()[1:]
        assert [line.split()[0] for line in lines] == list(PLACEMENTS), shown  # one line each, nothing else
        assert all(len(line.split()) > 6 and len(line) < 100 for line in lines), shown


def test_chat_json_claims_no_speedup_where_nothing_was_drafted(model_path: Path):
    # Two tokens: the second is the only one speculation could draft for, and it has no room to.
    done = run("chat", "--json", "--lookup", "--temperature", "0", "--max-tokens", "2", "Say hi")
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout)["speculation"]
    assert spec["drafted"] == 0 and spec["predicted_speedup"] is None


def test_a_logged_user_error_is_one_line_and_a_bug_keeps_its_traceback():
    code = """if True:
        import logging
        from localchat import cli
        from localchat.errors import ModelNotFoundError
        cli.main(["models"])  # the CLI's start sets the log up
        log = logging.getLogger("localchat.check")
        for error in (ModelNotFoundError("unknown model 'x'; run `localchat models` for the names."),
                      ValueError("a real bug")):
            try:
                raise error
            except Exception:
                log.exception("engine step failed")
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    first, *rest = done.stderr.strip().splitlines()
    assert first == ("ERROR localchat.check: engine step failed: unknown model 'x'; run `localchat models` "
                     "for the names. (ModelNotFoundError)")
    assert rest[0] == "ERROR localchat.check: engine step failed" and rest[1].startswith("Traceback")
    assert rest[-1] == "ValueError: a real bug"


def test_window_and_api_take_sampling_defaults_and_requests_still_win(model_path: Path):
    from localchat.cli import _sampling, build_parser
    from localchat.ui.chat import Sampling
    from localchat.api.schemas import ChatBody

    for command in ("serve", "ui"):
        args = build_parser().parse_args([command, "--temperature", "0", "--top-k", "7", "--max-tokens", "9"])
        defaults = _sampling(args)
        assert (defaults.temperature, defaults.top_k, defaults.max_tokens, defaults.top_p) == (0.0, 7, 9, 0.95)
    chat = Sampling.over(defaults)
    assert (chat.temperature, chat.max_tokens) == (0.0, 9) and chat.params().top_k == 7  # the window
    body = ChatBody(model="x", messages=[{"role": "user", "content": "hi"}])
    assert body.to_request(defaults).sampling.top_k == 7  # what a request leaves out
    body = ChatBody(model="x", messages=[{"role": "user", "content": "hi"}], top_k=3, max_tokens=2)
    request = body.to_request(defaults)
    assert (request.sampling.top_k, request.sampling.max_tokens, request.sampling.temperature) == (3, 2, 0.0)
    bad = run("serve", "--temperature", "9")
    assert bad.returncode != 0 and "temperature" in bad.stderr and "Traceback" not in bad.stderr


def test_sampling_limits_are_the_same_for_the_flags_the_api_and_the_engine():
    import pytest

    from localchat.api.schemas import ChatBody
    from localchat.cli import _sampling, build_parser
    from localchat.errors import RequestError
    from localchat.runtime.sampling import LIMITS, SamplingParams

    assert (LIMITS["temperature"].low, LIMITS["temperature"].high) == (0, 2)  # OpenAI's documented range
    hi = {"role": "user", "content": "hi"}
    for name, bad in (("temperature", 2.5), ("top_p", 1.5), ("min_p", 1.0), ("presence_penalty", -3.0)):
        flag = "--" + name.replace("_", "-")
        with pytest.raises(RequestError, match=f"{name}={bad} is invalid") as engine:
            SamplingParams(**{name: bad}).validate()
        with pytest.raises(RequestError) as api:
            ChatBody(model="x", messages=[hi], **{name: bad}).to_request()
        assert str(api.value) == str(engine.value) and api.value.param == name
        with pytest.raises(RequestError) as cli:
            _sampling(build_parser().parse_args(["chat", flag, str(bad)]))
        assert str(cli.value) == str(engine.value)
    edge = ChatBody(model="x", messages=[hi], temperature=2, top_p=0).to_request().sampling
    assert edge.temperature == 0.0  # top_p 0 keeps the most likely token: greedy
