"""The chat window: its safety helpers, and the running app driven with gradio_client."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import pytest
from gradio_client import Client
from ui_server import RunningUI, start_ui

from localchat.ingest import DocumentError
from localchat.ui.chat.render import inert, reply_markdown
from localchat.ui.documents.uploads import MAX_UPLOAD_BYTES, read_upload, safe_name, store_upload

KEY = "ui-test-key-81c3"


def test_messages_sent_mid_answer_go_oldest_first_and_a_cancelled_one_never_goes():
    from localchat.ui.chat.session import Sampling
    from localchat.ui.chat.underway import Underway

    underway = Underway()
    first, second, third = (underway.queue("c", text, [], "", Sampling()) for text in ("one", "<b>two</b>", "three"))
    underway.show_answer("c", "streaming…")
    tail = underway.tail("c", lambda message: "")
    assert [m["content"].split("\n")[0] for m in tail] == ["streaming…", "one", "&lt;b&gt;two&lt;/b&gt;", "three"]
    assert f"(#lc-cancel-{second.number})" in tail[2]["content"]
    assert underway.cancel("c", second.number) == second and underway.cancel("c", second.number) is None
    assert underway.cancel("other chat", third.number) is None  # a Cancel only takes back its own chat's
    underway.end_answer("c")
    assert [underway.next_message("c"), underway.next_message("c"), underway.next_message("c")] == [first, third, None]
    assert underway.tail("c", lambda message: "") == []


def test_model_html_is_escaped_outside_code():
    text = 'Hi <script>alert(1)</script> <img src=x onerror="alert(2)">\n```html\n<b>code</b>\n```'
    shown = inert(text)
    assert "<script>" not in shown and "<img" not in shown
    assert "&lt;script&gt;" in shown and "&lt;img src=x" in shown
    assert "<b>code</b>" in shown  # inside a fence it is shown as code, not rendered
    assert "<img" not in reply_markdown(text, {}, included="<img src=x onerror=y>.txt whole")
    # A cited passage is the document's text: shown, never run, whatever the document holds.
    cited = reply_markdown("ok", {}, "a.txt: line 2 (1 of 9 chunks)",
                           passages=[{"document": "<b>a.txt", "label": "line 2", "text": "<script>x()</script>\nend"}])
    assert "<script>" not in cited and "<b>" not in cited and "&lt;script&gt;x()&lt;/script&gt;<br>end" in cited
    assert "<details class=\"passage\"><summary>&lt;b&gt;a.txt line 2</summary>" in cited


@pytest.mark.parametrize("name, expected", [
    ("../../etc/passwd", "passwd"), ("..\\..\\boot.ini", "boot.ini"), ("...", "document"),
    ("report <final>.pdf", "report _final_.pdf"), (".bashrc", "bashrc"), ("a/b/c.txt", "c.txt"),
])
def test_upload_names_cannot_leave_their_folder(name: str, expected: str):
    assert safe_name(name) == expected


def test_uploads_are_stored_checked_and_limited(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("localchat.ui.documents.uploads.uploads_dir", lambda: tmp_path / "uploads")
    note = tmp_path / "note.txt"
    note.write_text("The vault code is 7341.\n")
    stored = store_upload(note, "../../note.txt")
    assert stored.parent.parent == tmp_path / "uploads" and stored.name == "note.txt"
    assert "7341" in read_upload(stored).text
    fake = tmp_path / "fake.pdf"
    fake.write_text("not a pdf")
    with pytest.raises(DocumentError, match="not a PDF"):
        read_upload(store_upload(fake))
    with pytest.raises(DocumentError, match="not an attached document"):
        read_upload(note)  # a path outside the uploads dir is never read
    big = tmp_path / "big.txt"
    with big.open("wb") as f:
        f.truncate(MAX_UPLOAD_BYTES + 1)
    with pytest.raises(DocumentError, match="limit"):
        store_upload(big)


@pytest.fixture(scope="module")
def ui(model_path: Path, tmp_path_factory) -> Iterator[RunningUI]:
    yield from start_ui(model_path, tmp_path_factory.mktemp("ui") / "conversations.sqlite3")


def test_send_a_message_and_get_a_streamed_reply(ui: RunningUI):
    client = Client(ui.url + "/", verbose=False)
    # The message, the system prompt, then the settings in SHOWN_SETTINGS order (the overflow policy last).
    job = client.submit("Name the capital city of France.", "", 0.0, 1.0, 32, 40, 0.05, 1.0, None, 0.0, 0.0,
                        "rolling", api_name="/send")
    updates = list(job)
    chat = job.outputs()[-1][0]
    assert len(updates) >= 2  # it streamed: more than the final answer arrived
    assert chat[0]["role"] == "user" and chat[-1]["role"] == "assistant"
    reply = chat[-1]["content"][0]["text"]
    assert "Paris" in reply and "TTFT" in reply and "tokens/s" in reply
    saved = ui.store.list()[0]
    assert saved.title == "Name the capital city of France."
    messages = ui.store.get(saved.id).messages
    assert [m.role for m in messages] == ["user", "assistant"] and "Paris" in messages[1].content
    assert messages[1].stats["completion_tokens"] > 0


def test_api_is_served_beside_the_window(ui: RunningUI):
    body = httpx.get(ui.url + "/v1/models", timeout=10).json()
    assert body["data"][0]["id"] == "SmolLM2-135M-Instruct.Q4_1"
    assert "localchat" in httpx.get(ui.url + "/", timeout=10).text


def test_a_key_protects_window_and_api(model_path: Path, tmp_path: Path):
    for running in start_ui(model_path, tmp_path / "c.sqlite3", api_key=KEY):
        assert httpx.get(running.url + "/v1/models", timeout=10).status_code == 401
        ok = httpx.get(running.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
        assert ok.status_code == 200
        config = httpx.get(running.url + "/config", timeout=10)
        assert config.status_code in (401, 403) or "auth_required" in config.text
        with pytest.raises(Exception):
            Client(running.url + "/", verbose=False)
        client = Client(running.url + "/", auth=("localchat", KEY), verbose=False)
        assert "/send" in client.view_api(return_format="dict", print_info=False)["named_endpoints"]


def test_prefill_line_gives_an_eta():
    from localchat.ui.chat.render import prefill_line

    line = prefill_line(1024, 4096, started=10.0, first_done=0, now=12.0)
    assert "1,024 / 4,096 tokens (25%)" in line and "about 6 s left" in line


def test_stop_cancels_and_keeps_the_partial_answer(ui: RunningUI):
    from localchat.ui.chat.core import ChatCore, Sampling

    core = ChatCore(ui.runtime, ui.store)
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=200)
    conv = core.add_user_turn(None, "Count from 1 to 100, separated by commas.", [], "", sampling)
    shown = []
    for shown_text in core.answer(conv, sampling):
        shown.append(shown_text)
        if len(shown) == 3:
            core.stop(conv)
    assert "stopped" in shown[-1]
    reply = ui.store.get(conv).messages[-1]
    assert reply.role == "assistant" and reply.stats["finish_reason"] == "cancelled"
    assert reply.stats["completion_tokens"] < 200


def test_a_message_after_stop_reuses_the_chat_read_so_far(ui: RunningUI):
    from localchat.ui.chat.core import ChatCore, Sampling

    core = ChatCore(ui.runtime, ui.store)
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=300)
    notes = " ".join(f"Note {i}: barge {i * 3} moored at pier {i % 11}." for i in range(90))  # no earlier test's
    conv = core.add_user_turn(None, notes + "\nList every barge, one per line.", [], "", sampling)
    for i, _ in enumerate(core.answer(conv, sampling)):
        if i == 8:  # well into the answer
            core.stop(conv)
    stopped = ui.store.get(conv).messages[-1]
    assert stopped.stats["finish_reason"] == "cancelled" and stopped.stats["completion_tokens"] > 2
    prior = stopped.stats["prompt_tokens"] + stopped.stats["completion_tokens"]
    core.add_user_turn(conv, "Which pier is barge 9 at?", [], "", Sampling(temperature=0.0, top_p=1.0, max_tokens=8))
    list(core.answer(conv, sampling))
    # The stopped answer's prompt and the tokens it generated are reused, not read again.
    assert ui.store.get(conv).messages[-1].stats["cached_tokens"] >= prior - 4


def test_an_attached_document_is_read_before_the_question_and_a_detach_ends_the_read(ui: RunningUI, tmp_path: Path,
                                                                                    monkeypatch):
    from localchat.ui.chat.core import ChatCore, Sampling
    from localchat.ui.chat.pre_read import PreReader

    monkeypatch.setattr("localchat.ui.documents.uploads.uploads_dir", lambda: tmp_path / "uploads")
    core = ChatCore(ui.runtime, ui.store)
    reader = PreReader(core)
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=16)
    doc = tmp_path / "ledger.txt"
    doc.write_text("\n".join(f"Ledger line {i}: account {i * 19 % 1000} paid {i * 7 % 300} crowns." for i in range(70))
                   + "\nThe auditor is called Mirela.")
    stored = [str(store_upload(doc))]
    # Attached, then detached mid-read: the read ends (and what it read stays resident).
    lines = []
    for line in reader.follow("tab", reader.start("tab", None, stored, "", sampling.max_tokens)):
        lines.append(line)
        if line.startswith("reading the document"):
            reader.start("tab", None, [], "", sampling.max_tokens)  # the chip's ×
    assert lines[-1] == "" and any(x.startswith("reading the document… ") for x in lines)
    # Attached again and read whole before the question: the question costs only its own tokens.
    lines = list(reader.follow("tab", reader.start("tab", None, stored, "", sampling.max_tokens)))
    assert lines[-1] == ""
    conv = core.add_user_turn(None, "Who is the auditor?", stored, "", sampling)
    list(core.answer(conv, sampling))
    stats = ui.store.get(conv).messages[-1].stats
    assert stats["cached_tokens"] >= stats["prompt_tokens"] - 24, stats


def test_the_live_speed_never_says_zero_while_text_streams(ui: RunningUI):
    from localchat.ui.chat.core import ChatCore, Sampling

    core = ChatCore(ui.runtime, ui.store)
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=24)
    conv = core.add_user_turn(None, "Write one sentence about rivers.", [], "", sampling)
    shown = list(core.answer(conv, sampling))
    live = [s for s in shown if "generating" in s]
    assert live and not any("generating, 0 tokens/s" in s for s in live)


def test_the_model_picker_lists_each_file_once(model_path: Path):
    from localchat.ui.components.models_panel import model_choices

    # The file in localchat's models folder is also the catalog's smollm2-135m: one entry, not two.
    for current in (str(model_path), "smollm2-135m"):
        values = [value for _, value in model_choices(current)]
        assert values[0] == current
        assert not {str(model_path), "smollm2-135m"} <= set(values), values


def test_an_embedding_model_is_no_choice_to_chat_with_and_loading_one_says_what_it_is(model_path: Path,
                                                                                       embedding_model_path: Path):
    from localchat.errors import ModelLoadError
    from localchat.models.gguf_info import is_embedding_model
    from localchat.models.importers import LocalModel
    from localchat.runtime.engine import Engine, EngineConfig
    from localchat.runtime.workers.worker import WorkerConfig
    from localchat.ui.components.models_panel import model_choices
    from localchat.ui.models.models_html import local_table

    assert embedding_model_path.parent == model_path.parent  # both in the models folder the lists search
    values = [value for _, value in model_choices(str(model_path))]
    assert str(model_path) in values and str(embedding_model_path) not in values
    row = local_table([LocalModel("minilm", embedding_model_path, 1, "path"), LocalModel("smol", model_path, 1, "path")])
    assert row.count("disabled title='an embedding model") == 1 and row.count("class='lc-file-load'") == 2
    assert "<span class='lc-what'>an embedding model: documents and /v1/embeddings use it" in row
    broken = embedding_model_path.parent / "broken-header.gguf"  # a header that ends early is no embedding model
    broken.write_bytes(embedding_model_path.read_bytes()[:4096])
    try:
        assert not is_embedding_model(broken) and "<span class='lc-what'>" not in local_table([LocalModel("b", broken, 1, "path")])
    finally:
        broken.unlink()
    with pytest.raises(ModelLoadError, match="is an embedding model: it turns text into vectors .* load a chat model"):
        Engine.load(embedding_model_path, EngineConfig(worker=WorkerConfig(n_ctx=256)))


def test_a_turn_asked_for_with_a_wait_is_taken_when_it_ends_within_it_and_refused_while_it_does_not(ui: RunningUI):
    """A click on what an answer's last update drew (its ‹ ›, its Delete) comes just before the answer's turn
    ends: it waits that moment out; one while the answer is still written is refused at once."""
    import threading

    from localchat.ui.chat.core import ChatCore

    core = ChatCore(ui.runtime, ui.store)
    cid = ui.store.create("Turns")
    answering, ended = threading.Event(), threading.Event()

    def answer() -> None:
        with core.turn(cid):
            answering.set()
            ended.wait()

    threading.Thread(target=answer, daemon=True).start()
    answering.wait()
    with core.turn(cid, wait_s=0.2) as turn:
        assert turn is None and core.busy(cid)  # still answering: not taken
    threading.Timer(0.1, ended.set).start()  # the answer's turn ends while the click waits
    with core.turn(cid, wait_s=60) as turn:
        assert turn is not None and core.busy(cid)  # held now by the click
    assert not core.busy(cid)


def test_stop_while_reading_shows_only_stopped(ui: RunningUI):
    from localchat.ui.chat.core import ChatCore, Sampling

    core = ChatCore(ui.runtime, ui.store)
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=32)
    # A long prompt no earlier test left in the cache: reading it takes many steps.
    notes = " ".join(f"Note {i}: crate {i * 7} left the dock at {i % 24}:00." for i in range(120))
    conv = core.add_user_turn(None, notes + "\nWhich crate left last?", [], "", sampling)
    shown = []
    for text in core.answer(conv, sampling):
        shown.append(text)
        if "Reading the prompt" in text:
            core.stop(conv)
    assert any("Reading the prompt" in s for s in shown)
    assert "stopped" in shown[-1] and "TTFT" not in shown[-1] and "tokens/s" not in shown[-1]
    assert core.display(ui.store.get(conv))[-1]["content"] == \
        "*No answer: it was stopped before its first word.*\n\n*stopped*"


def test_the_meter_says_whole_only_when_the_reply_will_read_the_document_whole(ui: RunningUI, tmp_path: Path,
                                                                              monkeypatch):
    from localchat.ui.chat.core import ChatCore, Sampling

    monkeypatch.setattr("localchat.ui.documents.uploads.uploads_dir", lambda: tmp_path / "uploads")
    core = ChatCore(ui.runtime, ui.store)
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=48)
    room = ui.runtime.engine.n_ctx - 512  # what the meter used to compare with
    lines, text = [], ""
    while core.count_tokens(text) < room - 60:  # just under that: the old meter said "they fit"
        lines.append(f"Line {len(lines)}: the shipment of week {len(lines) % 52} arrived on time.")
        text = "\n".join(lines)
    doc = tmp_path / "long.txt"
    doc.write_text(text)
    stored = str(store_upload(doc))
    meter = core.meter([stored], sampling.max_tokens)
    conv = core.add_user_turn(None, "Which shipment came last?", [stored], "", sampling)
    mode = ui.store.get(conv).messages[-1].stats["mode"]
    assert ("they fit" in meter) == (mode == "whole"), (meter, mode)


def test_every_follow_up_about_a_long_document_retrieves_its_own_passages(ui: RunningUI, tmp_path: Path,
                                                                         monkeypatch):
    import dataclasses

    from localchat.ingest.fit import passage_budget
    from localchat.ui.chat.core import ChatCore, Sampling

    monkeypatch.setattr("localchat.ui.documents.uploads.uploads_dir", lambda: tmp_path / "uploads")
    monkeypatch.setattr("localchat.ingest.fit.PASSAGE_SHARE", 0.1)  # fewer passages to read: a quicker test
    core = ChatCore(ui.runtime, ui.store)
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=4)
    facts = {40: "The keeper's cat is called Pepperpot.", 200: "The schooner Marigold ran aground on the north reef.",
             360: "The lantern room was painted a deep saffron yellow."}
    lines = [facts.get(i, f"Day {i}: the keeper logged calm weather and trimmed the wicks.") for i in range(420)]
    doc = tmp_path / "logbook.txt"
    doc.write_text("\n".join(lines))
    stored = str(store_upload(doc))
    assert core.count_tokens(doc.read_text()) > ui.runtime.engine.n_ctx  # it cannot go in whole
    questions = ["What is the keeper's cat called?", "Which schooner ran aground?", "What colour is the lantern room?"]
    conv, prompts = None, []
    for question, fact in zip(questions, facts.values()):
        conv = core.add_user_turn(conv, question, [stored] if conv is None else [], "", sampling)
        turn = ui.store.get(conv).messages[-1]
        assert turn.stats["mode"] == "retrieved" and "logbook.txt: lines" in turn.stats["included"]
        assert fact in turn.stats["prompt"], (question, turn.stats["included"])
        prompts.append(turn.stats["prompt"])
        list(core.answer(conv, sampling))
    chat = ui.store.get(conv)
    # Each turn keeps the passages it was read with (they open under its reply)...
    assert [m.stats["prompt"] for m in chat.messages if m.role == "user"] == prompts
    replies = [m.stats for m in chat.messages if m.role == "assistant"]
    for after in replies[1:]:
        assert after["included"].startswith("logbook.txt: lines")
    # ...but a follow-up's prompt carries only its own question's passages: the earlier turns as they were typed.
    read = core.engine_messages(dataclasses.replace(chat, messages=chat.messages[:-1]))
    asked = [m["content"] for m in read if m["role"] == "user"]
    assert asked == [*questions[:-1], prompts[-1]]
    # So the prompt does not grow by a question's passages with each follow-up (it did: 470, 3,737, 4,998 tokens).
    grown = replies[-1]["prompt_tokens"] - replies[0]["prompt_tokens"]
    assert grown < passage_budget(ui.runtime.engine.n_ctx), [r["prompt_tokens"] for r in replies]
    # Each reply cites its own passages, and each opens to the text it was given.
    for reply, fact in zip(replies, facts.values()):
        assert any(fact in p["text"] and p["label"].startswith("line") for p in reply["passages"])
    assert "logbook.txt line" in core.display(chat)[-1]["content"]


def test_a_chat_that_outgrows_the_context_leaves_out_early_turns_and_says_so(ui: RunningUI):
    from localchat.errors import ContextOverflowError
    from localchat.ui.chat.core import ChatCore, Sampling

    core = ChatCore(ui.runtime, ui.store)
    n_ctx, filler = ui.runtime.engine.n_ctx, " ".join(f"item{j}" for j in range(60))

    def long_chat(policy: str, document: bool) -> str:
        conv = ui.store.create(f"A long {policy} chat", "", {})
        # A first turn that read an attached document is never left out.
        read = {"documents": ["vault.txt"], "prompt": "The vault code is 7341.\n\nRemember this."} if document else {}
        ui.store.append(conv, "user", "Remember this.", read)
        ui.store.append(conv, "assistant", "I will.")
        for i in range(30):
            ui.store.append(conv, "user", f"Note {i}: {filler}")
            ui.store.append(conv, "assistant", f"Noted {i}.")
        return conv

    rolling = Sampling(temperature=0.0, top_p=1.0, max_tokens=8)
    conv = long_chat("rolling", document=True)
    assert core.count_tokens("\n".join(m.content for m in ui.store.get(conv).messages)) > n_ctx
    refusing = Sampling(temperature=0.0, top_p=1.0, max_tokens=8, context_overflow="refuse")
    with pytest.raises(ContextOverflowError, match="rolling or truncate-middle"):
        core.add_user_turn(conv, "What was the last note?", [], "", refusing)
    assert len(ui.store.get(conv).messages) == 62  # refused: nothing kept
    core.add_user_turn(conv, "What was the last note?", [], "", rolling)
    gone = ui.store.get(conv).messages[-1].stats["left_out"]
    assert gone == list(range(1, len(gone) + 1))  # the oldest after the document's turn
    shown = list(core.answer(conv, rolling))[-1]
    assert f"{len(gone)} early turns left out to fit the context" in shown
    first = ui.store.get(conv).messages[-1].stats
    assert first["prompt_tokens"] <= (n_ctx - 8) * 0.75 + 200 and first["left_out"] == len(gone)
    assert "left out to fit" in core.display(ui.store.get(conv))[-1]["content"]
    # The next turn fits with the same turns left out: the chat read before is reused, not read again.
    core.add_user_turn(conv, "And the note before it?", [], "", rolling)
    assert ui.store.get(conv).messages[-1].stats["left_out"] == gone
    list(core.answer(conv, rolling))
    assert ui.store.get(conv).messages[-1].stats["cached_tokens"] >= first["prompt_tokens"]
    middle = Sampling(temperature=0.0, top_p=1.0, max_tokens=8, context_overflow="truncate-middle")
    conv = long_chat("truncate-middle", document=False)
    core.add_user_turn(conv, "What was the last note?", [], "", middle)
    assert ui.store.get(conv).messages[-1].stats["left_out"][0] == 1  # the first turn stays, document or not


def test_the_chip_the_meter_and_the_reply_count_a_document_alike(ui: RunningUI, tmp_path: Path, monkeypatch):
    from localchat.ui.chat.core import ChatCore, Sampling

    monkeypatch.setattr("localchat.ui.documents.uploads.uploads_dir", lambda: tmp_path / "uploads")
    core = ChatCore(ui.runtime, ui.store)
    doc = tmp_path / "notes.md"
    doc.write_text("\n\n".join(f"## Part {i}\n\nThe crate of part {i} weighs {i * 3} kilograms." for i in range(12)))
    stored = str(store_upload(doc))
    (name, chip), = core.attachment_counts([stored])
    # The prompt form: each section's source marker counts, which the bare text lacks.
    assert chip > core.count_tokens(core.documents([stored])[0].text)
    assert f"{chip:,} of" in core.meter([stored], 64)
    conv = core.add_user_turn(None, "How heavy is the crate of part 7?", [stored], "",
                              Sampling(temperature=0.0, top_p=1.0, max_tokens=64))
    assert f"{name} whole ({chip:,} tokens)" == ui.store.get(conv).messages[-1].stats["included"]


def test_the_status_panel_gives_the_models_own_size(ui: RunningUI):
    from localchat.ui.chat.core import ChatCore

    status = ChatCore(ui.runtime, ui.store).status()
    assert "135M parameters" in status and "256M" not in status
    # On the CPU: no GPU's memory to show, in the window or in /api/ps.
    assert ui.runtime.engine.devices() == [] and "Device memory" not in status
    (running,) = httpx.get(ui.url + "/api/ps", timeout=10).json()["models"]
    assert running["x_localchat"]["devices"] == [] and running["size_vram"] == 0


def test_the_stats_line_gives_the_answers_tokens_its_rate_and_the_whole_wait_apart_and_a_cut():
    from localchat.ui.chat.render import finish_note

    stats = {"prompt_tokens": 30, "cached_tokens": 0, "completion_tokens": 42, "ttft_ms": 80.0,
             "tokens_per_s": 140.2, "n_ctx": 8192, "total_s": 1.32, "finish_reason": "length"}
    shown = reply_markdown("1, 2, 3", stats, "", finish_note("length"))
    assert "cut at max tokens · TTFT 80 ms · 42 tokens at 140.2 tokens/s · 1.3 s in all · context 72 / 8,192" in shown
    # A thinking model's tokens, told apart; the rate stays the whole writing's.
    thought = reply_markdown("Paris.", stats | {"thinking_tokens": 30}, "", "")
    assert "TTFT 80 ms · 30 thinking + 12 answer tokens at 140.2 tokens/s · 1.3 s in all" in thought
    stopped = reply_markdown("", stats | {"completion_tokens": 0, "finish_reason": "cancelled"}, "",
                             finish_note("cancelled"))
    assert stopped == "*No answer: it was stopped before its first word.*\n\n*stopped*"
    # Still to come, an answer shows "…"; one that ended with nothing says so, and what it read (no "…").
    assert reply_markdown("", {}, "", "generating").startswith("…")
    nothing = reply_markdown("", stats | {"completion_tokens": 0, "finish_reason": "stop", "model": "m"}, "", "")
    assert "…" not in nothing and "The model answered nothing" in nothing
    assert "m · 0 tokens · 1.3 s in all · context 30 / 8,192" in nothing


def test_a_new_chat_starts_with_the_configured_system_prompt(model_path: Path, tmp_path: Path):
    for running in start_ui(model_path, tmp_path / "c.sqlite3", system_prompt="Answer in one sentence."):
        config = httpx.get(running.url + "/config", timeout=10).json()
        system = next(c for c in config["components"] if c.get("props", {}).get("elem_id") == "system")
        assert system["props"]["value"] == "Answer in one sentence."


def test_a_switch_keeps_the_current_model_answering_and_reports_the_load(model_path: Path):
    from localchat.runtime.engine import Engine, EngineConfig, Request
    from localchat.runtime.events import TextDelta
    from localchat.runtime.sampling import SamplingParams
    from localchat.runtime.workers.worker import WorkerConfig
    from localchat.ui.chat.session import Runtime

    shares: list[float] = []

    def load(path: str, n_ctx: int | None = None, progress=None) -> Engine:
        def report(share: float) -> None:
            shares.append(share)
            if progress is not None:
                progress(share)
        worker = WorkerConfig(n_ctx=n_ctx or 1024, n_threads=1, n_seq_max=2)
        return Engine.load(path, EngineConfig(worker=worker, on_load_progress=report))

    runtime = Runtime(load(str(model_path)), "the first load", load)
    old = runtime.engine
    stream = old.submit(Request(messages=[{"role": "user", "content": "Count to fifty."}],
                                sampling=SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)))
    next(event for event in stream if isinstance(event, TextDelta))  # the answer is streaming
    shares.clear()
    runtime.switch(str(model_path))
    try:
        assert runtime.engine is not old and runtime.loading is None
        assert shares and shares == sorted(shares) and shares[-1] == 1.0
        answer = stream.result()  # finished on the old engine, not cut by the switch
        assert answer.finish_reason == "length" and len(answer.token_ids) == 64
    finally:
        runtime.engine.close()


def test_an_edit_box_gives_back_the_message_as_typed():
    # The edit box starts with what the chat shows (escaped); saving it unchanged must not store "&lt;".
    from localchat.ui.chat.render import from_inert

    for typed in ["is 3 < 4 && 5 > 2?", "see ![a](http://x/a.png)", "`a &lt; b` and <b>bold</b>",
                  "```\n<html>&amp;\n```\nthen & <", "&lt; typed as such"]:
        assert inert(typed) != typed and from_inert(inert(typed)) == typed
