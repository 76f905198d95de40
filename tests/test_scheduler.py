"""The scheduler and KV slot table on their own: pure Python, no model."""

from __future__ import annotations

from localchat.runtime.kv.kv_slots import KVSlots, Remove, common_prefix
from localchat.runtime.scheduler import Scheduler, StepBudget
from localchat.runtime.sequence import Sequence


def seq(name: str, tokens: list[int], max_tokens: int = 8) -> Sequence:
    return Sequence(id=name, tokens=list(tokens), max_tokens=max_tokens)


def run_step(sched: Scheduler):
    """What the engine does after a decode: advance counters, sample a fake token where logits came."""
    step = sched.schedule()
    for row in step.rows:
        row.seq.num_computed = row.end
        if row.want_logits:
            row.seq.tokens.append(7)
    return step


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([5, 6], [5, 6]) == 2


def test_long_prompt_is_prefilled_in_chunks_of_n_batch():
    sched = Scheduler(n_ctx=4096, n_seq_max=4, n_batch=100)
    a = seq("a", range(1, 251))
    sched.add(a)
    sizes = [run_step(sched).num_tokens for _ in range(3)]
    assert sizes == [100, 100, 50]
    assert a.num_generated == 1 and a.is_decoding


def test_decodes_go_first_and_prefill_fills_the_budget():
    sched = Scheduler(n_ctx=4096, n_seq_max=4, n_batch=512, step_budget=16)
    a = seq("a", range(1, 11))
    sched.add(a)
    run_step(sched)  # a's whole prompt
    b = seq("b", range(100, 400))
    sched.add(b)
    step = run_step(sched)
    assert [(r.seq.id, r.end - r.start) for r in step.rows] == [("a", 1), ("b", 16)]


def test_a_chat_message_is_not_queued_behind_a_long_document():
    sched = Scheduler(n_ctx=8192, n_seq_max=4, n_batch=512, step_budget=16)
    doc = seq("doc", range(1, 3001))
    sched.add(doc)
    assert run_step(sched).num_tokens == 512  # alone, the document goes at full speed
    chat = seq("chat", range(5000, 5030))
    sched.add(chat)
    step = run_step(sched)
    assert [(r.seq.id, r.end - r.start) for r in step.rows] == [("chat", 30)]
    assert chat.num_generated == 1  # its first token comes from this very step
    step = run_step(sched)
    assert [(r.seq.id, r.end - r.start) for r in step.rows] == [("chat", 1), ("doc", 16)]


def test_follow_up_reuses_the_resident_prefix():
    sched = Scheduler(n_ctx=4096, n_seq_max=2, n_batch=512)
    first = seq("first", range(1, 51))
    sched.add(first)
    run_step(sched)
    ops = sched.finish(first, keep_kv=True)
    assert ops == []
    follow = seq("follow", list(range(1, 51)) + [7, 90, 91])
    sched.add(follow)
    step = sched.schedule()
    assert step.admitted == [(follow, 50)]  # the first prompt is resident; its sampled token is not
    assert [(r.start, r.end) for r in step.rows] == [(50, 53)]
    assert [(o.kind, o.seq_id, o.start) for o in step.ops] == [("remove", 0, 50)]


def test_a_busy_prefix_is_shared_by_copy():
    sched = Scheduler(n_ctx=4096, n_seq_max=2, n_batch=512)
    doc = list(range(1, 101))
    a = seq("a", doc + [500])
    sched.add(a)
    run_step(sched)
    b = seq("b", doc + [600, 601])
    sched.add(b)
    step = sched.schedule()
    assert step.admitted == [(b, 100)]
    assert [(o.kind, o.seq_id, o.src, o.end) for o in step.ops] == [("copy", 1, 0, 100)]


def test_prompts_that_share_only_a_few_tokens_keep_both_prefixes():
    # An agent alternating a long prompt (with tools) and a short one (without) that share a header.
    slots = KVSlots(n_slots=3, n_ctx=1000)
    header, tools, question = [1, 2, 3, 4], list(range(100, 260)), [9, 9]
    runs = {"tools": header + tools + question, "plain": header + question}
    kept = {}
    for turn in range(2):
        for name, tokens in runs.items():
            s = seq(name, tokens)
            ops, reused = slots.assign(s)
            if turn:  # each finds its whole prompt resident: neither cut the other's
                assert reused == len(tokens) - 1
                assert not [op for op in ops if isinstance(op, Remove) and op.seq_id != s.slot]
            kept[name] = s.slot
            s.num_computed = len(tokens) + 5  # the prompt and an answer
            s.tokens += [7] * 6
            slots.release(s, keep=True)
    assert kept["tools"] != kept["plain"]
    # In place, when what is cut is less than what is kept (a follow-up, an edited last question).
    follow = seq("follow", runs["tools"] + [8, 8])
    ops, reused = slots.assign(follow)
    assert follow.slot == kept["tools"] and reused == len(runs["tools"])


def test_a_prompt_sharing_a_header_with_a_long_resident_one_is_admitted_when_both_cannot_fit():
    # A long read left resident (a stopped answer keeps its cells), then a prompt that shares only its
    # first tokens and cannot fit beside it: the long one is cut in place, or the prompt would wait forever.
    sched = Scheduler(n_ctx=1000, n_seq_max=4, n_batch=512)
    header = [1, 2, 3, 4]
    long_read = seq("long", header + list(range(100, 800)))
    sched.add(long_read)
    while long_read.num_pending > 1:
        run_step(sched)
    held = long_read.slot
    sched.finish(long_read, keep_kv=True)
    question = seq("question", header + list(range(2000, 2400)))
    sched.add(question)
    step = run_step(sched)
    assert question in sched.running and [s for s, _ in step.admitted] == [question]
    assert question.slot == held and sched.kv.used_cells() <= 1000  # the long read, cut to the header


def test_idle_slots_are_evicted_least_recently_used():
    slots = KVSlots(n_slots=3, n_ctx=100)
    for name, start in (("x", 1000), ("y", 2000)):
        s = seq(name, range(start, start + 40))
        assert slots.assign(s) is not None
        s.num_computed = 40
        slots.release(s, keep=True)
    ops = slots.evict(need=50)
    assert [(o.kind, o.seq_id) for o in ops] == [("remove", 0)]  # x was used first
    assert slots.used_cells() == 40


def test_out_of_cells_preempts_the_youngest_and_it_resumes():
    sched = Scheduler(n_ctx=64, n_seq_max=4, n_batch=64)
    a = seq("a", range(1, 21), max_tokens=40)
    b = seq("b", range(100, 120), max_tokens=40)
    sched.add(a)
    sched.add(b)
    preempted = []
    for _ in range(80):
        step = run_step(sched)
        preempted += step.preempted
        for s in list(sched.running):
            if s.num_generated >= s.max_tokens:
                sched.finish(s, keep_kv=True)
        if not sched.has_work():
            break
        assert sched.kv.used_cells() <= 64
    assert preempted and preempted[0] is b
    assert a.num_generated == 40 and b.num_generated == 40


def test_cancel_while_waiting_and_running():
    sched = Scheduler(n_ctx=4096, n_seq_max=1, n_batch=512)
    a, b = seq("a", range(1, 10)), seq("b", range(1, 10))
    sched.add(a)
    sched.add(b)
    run_step(sched)
    assert sched.waiting[0] is b  # one slot only
    assert sched.finish(b, keep_kv=False) == []
    ops = sched.finish(a, keep_kv=False)
    assert [(o.kind, o.seq_id) for o in ops] == [("remove", 0)]
    assert not sched.has_work() and sched.kv.used_cells() == 0


def test_adaptive_budget_shrinks_when_mixed_steps_are_slow_and_grows_back():
    budget = StepBudget(n_batch=512)
    budget.record(1, 1, 0.010)  # decode-only steps: 10 ms
    start = budget.current
    for _ in range(5):
        budget.record(start + 1, 1, 0.100)  # far above 2.5 x 10 ms
    assert budget.current < start
    low = budget.current
    for _ in range(5):
        budget.record(low + 1, 1, 0.011)
    assert budget.current > low
    fixed = StepBudget(n_batch=512, fixed=32)
    fixed.record(1, 1, 0.01)
    fixed.record(33, 1, 1.0)
    assert fixed.current == 32


def test_a_document_read_alone_goes_in_whole_batches_and_a_chat_waits_one_step():
    sched = Scheduler(n_ctx=8192, n_seq_max=4, n_batch=512)
    doc = seq("doc", list(range(5000)))
    sched.add(doc)
    sizes = [r.end - r.start for r in run_step(sched).rows]
    sizes += [r.end - r.start for r in run_step(sched).rows]
    assert sizes == [512, 512]  # nothing decoding: the full batch, however late in the document
    chat = seq("chat", range(9000, 9020), max_tokens=50)
    sched.add(chat)  # arrives mid-read: the very next step reads it whole
    assert ("chat", 20) in [(r.seq.id, r.end - r.start) for r in run_step(sched).rows]


def test_the_budget_beside_decoding_follows_the_measured_cost_of_a_prompt_token():
    budget = StepBudget(n_batch=512, latency_factor=3.0)
    budget.record(1, 1, 0.010)  # a decode-only step: 10 ms
    budget.record(5, 1, 0.014)  # 4 prompt tokens beside it cost 4 ms: 1 ms a token
    assert budget.current == 8  # at most twice the last budget a step, on the way to the target
    budget.record(9, 1, 0.018)
    budget.record(17, 1, 0.026)
    assert budget.current == 20  # (3 - 1) x 10 ms of room at 1 ms a token
    for _ in range(10):  # late in a long document each token costs 4 ms
        budget.record(21, 1, 0.090)
    assert budget.current == 5
    budget.record(6, 1, 0.0101)  # a step whose prompt tokens seemed free does not open the whole batch
    assert budget.current <= 10


def test_the_tail_of_a_long_document_keeps_to_the_budget_beside_a_streaming_chat():
    sched = Scheduler(n_ctx=8192, n_seq_max=4, n_batch=512, step_budget=16)
    chat = seq("chat", range(5000, 5010), max_tokens=500)
    sched.add(chat)
    run_step(sched)
    doc = seq("doc", range(1, 1201))
    sched.add(doc)
    sizes = []
    while not doc.num_generated:
        sizes.append(sum(r.end - r.start for r in run_step(sched).rows if r.seq is doc))
    # 1,200 tokens at 16 a step: the last 128 (no longer than a "short" prompt) are not taken at once.
    assert set(sizes) == {16} and len(sizes) == 75
    late = seq("late", range(7000, 7100))  # a short prompt that arrives short is still read in one step
    sched.add(late)
    assert [(r.seq.id, r.end - r.start) for r in run_step(sched).rows if r.seq is late] == [("late", 100)]
