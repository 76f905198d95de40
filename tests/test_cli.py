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


def chat_session(*lines: str) -> subprocess.CompletedProcess:
    """`localchat chat` with `lines` piped in, as `printf ... | localchat chat` runs it."""
    return subprocess.run([sys.executable, "-m", "localchat", "chat", "--temperature", "0", "--max-tokens", "24"],
                          input="".join(f"{line}\n" for line in lines), capture_output=True, text=True, timeout=300)


def saved(path: Path) -> list[dict[str, str]]:
    return json.loads(path.read_text(encoding="utf-8"))["messages"]


def test_interactive_chat_keeps_the_conversation(model_path: Path, tmp_path: Path):
    done = chat_session("My name is Ada. Remember it.", "What is my name?", f"/save {tmp_path}/before.json", "/reset",
                        "What is my name?", f"/save {tmp_path}/after.json")
    assert done.returncode == 0, done.stderr
    before, after = saved(tmp_path / "before.json"), saved(tmp_path / "after.json")
    assert [m["role"] for m in before] == ["user", "assistant", "user", "assistant"]
    assert "Ada" in before[3]["content"]  # remembered within the conversation
    assert [m["role"] for m in after] == ["user", "assistant"] and "Ada" not in after[1]["content"]  # forgotten
    assert done.stderr.count("tok/s") == 3


def test_piped_chat_prints_the_answers_only(model_path: Path):
    done = chat_session("What is 2+2?", "Name the capital city of France.")
    assert done.returncode == 0, done.stderr
    assert "> " not in done.stdout and done.stdout.strip()  # no prompts: stdout is the answers
    assert "Paris" in done.stdout.strip().splitlines()[-1] and done.stdout.endswith("\n")  # each on its own line
    assert done.stderr.count("tok/s") == 2 and "type a message" not in done.stderr  # no banner for a pipe


def test_a_terminal_gets_a_prompt_and_the_banner(model_path: Path):
    import pty
    import select

    controller, terminal = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "localchat", "chat", "--max-tokens", "4"], stdin=terminal,
                             stdout=terminal, stderr=subprocess.PIPE, text=True)
    os.close(terminal)
    os.write(controller, b"/help\n/exit\n")
    shown = b""
    while True:
        ready, _, _ = select.select([controller], [], [], 120)
        assert ready, shown
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the child closed the terminal: it has exited
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    assert child.wait(timeout=60) == 0
    errors = child.stderr.read()
    assert shown.count(b"> ") >= 2, shown  # a prompt before each line read
    assert "type a message" in errors and "/model NAME" in errors


def test_slash_commands_are_never_sent_to_the_model(model_path: Path, tmp_path: Path):
    done = chat_session("/help", "/system Answer in one short sentence.", "/bogus", "/hlep",
                        "/usr/bin/env is a path: say OK.", "//reset is a word: say OK.",
                        "Name the capital city of France.", f"/save {tmp_path}/chat.json", f"/save {tmp_path}/chat.md",
                        "/exit", "This line comes after /exit.")
    assert done.returncode == 0, done.stderr
    for usage in ("/help", "/reset", "/model NAME", "/system TEXT", "/save FILE", "/exit"):  # /help lists them
        assert usage in done.stderr, usage
    assert "unknown command /bogus; the commands are:" in done.stderr
    assert "unknown command /hlep (did you mean /help?)" in done.stderr
    messages = saved(tmp_path / "chat.json")
    assert messages[0] == {"role": "system", "content": "Answer in one short sentence."}
    asked = [m["content"] for m in messages if m["role"] == "user"]
    assert asked == ["/usr/bin/env is a path: say OK.", "/reset is a word: say OK.", "Name the capital city of France."]
    assert "Paris" in messages[-1]["content"] and done.stderr.count("tok/s") == 3
    markdown = (tmp_path / "chat.md").read_text(encoding="utf-8")
    assert "**System prompt:** Answer in one short sentence." in markdown and markdown.count("## You") == 3


def test_model_command_switches_the_model_and_keeps_the_conversation(q8_model_path: Path, tmp_path: Path):
    done = chat_session("My name is Ada. Remember it.", "/model no-such-model", f"/model {q8_model_path}",
                        "What is my name?", f"/save {tmp_path}/chat.json")
    assert done.returncode == 0, done.stderr
    assert "unknown model 'no-such-model'" in done.stderr and "still answering with smollm2-135m" in done.stderr
    assert f"now answering with {q8_model_path}: llama, 135M parameters, Q8_0" in done.stderr
    first, second = [m for m in saved(tmp_path / "chat.json") if m["role"] == "assistant"]
    assert first["model"] == "smollm2-135m" and second["model"] == str(q8_model_path)
    assert "Ada" in second["content"]  # the new model read the conversation so far
    assert json.loads((tmp_path / "chat.json").read_text())["model"] == str(q8_model_path)


def test_an_empty_prompt_is_refused_before_the_model_loads():
    for prompt in ("", "   ", "\n\t"):
        done = run("chat", prompt)
        assert done.returncode == 1 and "the prompt is empty" in done.stderr, (prompt, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and not done.stdout
    done = run("chat", "--json")  # --json answers one prompt: without one it said nothing of it
    assert done.returncode == 1 and "--json answers one prompt" in done.stderr


def test_an_empty_name_is_refused_never_read_as_none():
    for flag in ("--json-schema", "--file"):  # an empty --json-schema was ignored: the answer was unconstrained
        done = run("chat", flag, " ", "Say hi.", timeout=60)
        assert done.returncode == 2 and f"argument {flag}: needs a file name, not an empty string" in done.stderr
    for args in (("pull", ""), ("chat", "--model", "", "Say hi.")):
        done = run(*args, timeout=60)
        assert done.returncode == 1 and "the model name is empty" in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1


def test_a_mistyped_option_names_the_one_meant():
    done = run("chat", "--temprature", "0.5", "hi")
    assert done.returncode == 2 and done.stderr.startswith("usage: localchat chat ")  # the subcommand's usage
    assert done.stderr.strip().endswith("unrecognized option --temprature; did you mean --temperature?")
    cases = [(("serve", "--max-tokns=9"), "usage: localchat serve ", "did you mean --max-tokens?"),
             (("--no-browsr",), "usage: localchat ui ", "did you mean --no-browser?"),
             (("plan", "--hardwre", "box.json"), "usage: localchat plan ", "did you mean --hardware?"),
             (("chat", "--zzz", "hi"), "usage: localchat chat ", "`localchat chat --help` lists the options"),
             (("chat", "two", "words"), "usage: localchat chat ", "unrecognized arguments: words (a prompt"),
             (("chta", "hi"), "usage: localchat ", "unknown command 'chta'; did you mean chat?")]
    for args, usage, said in cases:
        done = run(*args, timeout=60)  # a case that parsed would start a server: fail soon
        assert done.returncode == 2 and done.stderr.startswith(usage) and said in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


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
    downloaded = done.stdout[:done.stdout.index("In the catalog")]
    assert downloaded.startswith("Downloaded:") and "smollm2-135m:Q4_1" in downloaded and str(model_path) in downloaded


def test_models_lists_downloaded_first_with_the_windows_verdicts(model_path: Path, capsys):
    import re

    from localchat import cli, gptq
    from localchat.models.catalog import load_catalog
    from localchat.ui.models.model_browser import Downloads, catalog_rows, machine

    assert cli.main(["models"]) == 0
    shown = capsys.readouterr().out
    downloaded, rest = shown.split("In the catalog")
    rows = {line[2:].split()[0]: line for line in shown.splitlines() if re.match(r"[ *] [a-z0-9.-]+:\S+ ", line)}
    window = catalog_rows(load_catalog(), machine(), Downloads())  # what the Models panel shows, this process
    assert set(rows) == {row.choice for row in window}
    for row in window:
        line = rows[row.choice]
        assert f"  {row.verdict.short}  " in line + "  ", (line, row.verdict.short)  # the same fit column
        assert f"  {row.size}  " in line and re.fullmatch(r"≈?\d+(\.\d)? (MB|GB)", row.size)  # 93 MB, 16.5 GB
        assert line.startswith("*") == row.best
        assert (row.choice in downloaded) == (row.here == "downloaded")
    assert "smollm2-135m:Q4_1" in downloaded and "qwen2.5-7b:Q4_K_M" in rest
    assert shown.count("GPTQ checkpoint folders for NVIDIA GPUs") == 1  # once, not on every GPTQ row
    assert shown.count(gptq.INSTALL_HINT) <= 1


def test_sizes_are_decimal_units_everywhere_in_the_terminal():
    from localchat.hardware import GPUInfo, HardwareInfo
    from localchat.hardware.probe import format_table
    from localchat.tune.wizard import machine_line
    from localchat.units import rate_text, size_text

    assert [size_text(n) for n in (512, 9.4e6, 93e6, 999.7e6, 16.5e9, None)] == \
        ["512 B", "9.4 MB", "93 MB", "1.0 GB", "16.5 GB", "?"]
    assert rate_text(34e9) == "34.0 GB/s" and rate_text(None) == "?"
    box = HardwareInfo(cpu_model="CPU", physical_cores=8, logical_cores=16, ram_total=16 * 2**30,
                       ram_available=12 * 2**30, gpus=[GPUInfo(index=0, name="GPU", memory_total=24 * 2**30)])
    probe, wizard = format_table(box), machine_line(box)
    assert "17.2 GB total" in probe and "17.2 GB RAM" in wizard  # the same 16 GiB, the same words
    assert "25.8 GB" in probe and "GPU 25.8 GB" in wizard and "GiB" not in probe + wizard


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
    from localchat.api.schemas import ChatBody
    from localchat.cli import build_parser
    from localchat.command_flags import sampling_from
    from localchat.ui.chat.core import Sampling

    for command in ("serve", "ui"):
        args = build_parser().parse_args([command, "--temperature", "0", "--top-k", "7", "--max-tokens", "9"])
        defaults = sampling_from(args)
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
    from localchat.cli import build_parser
    from localchat.command_flags import sampling_from
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
            sampling_from(build_parser().parse_args(["chat", flag, str(bad)]))
        assert str(cli.value) == str(engine.value)
    edge = ChatBody(model="x", messages=[hi], temperature=2, top_p=0).to_request().sampling
    assert edge.temperature == 0.0  # top_p 0 keeps the most likely token: greedy
