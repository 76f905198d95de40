"""The thread tuner on a simulated machine: step times as a 2-core CPU gives them, idle and with a
core taken by another program (measured: 2 threads on 2 cores with one busy run at half the speed
of 1 thread). The engine's use of it runs in the real-runtime tests; its speed is a benchmark."""

from localchat.runtime.backends.threads import EXPLORE_MAX_S, ThreadTuner, width_class


def step_seconds(threads: int, busy_cores: int, cores: int = 8, width: int = 1) -> float:
    """Work split over the threads; a thread without a core of its own stalls every barrier."""
    free = cores - busy_cores
    seconds = 0.01 * width / min(threads, free)
    return seconds * (4 if threads > free else 1)


def run(tuner: ThreadTuner, busy_cores: int, seconds: float, now: float, cores: int = 8, width: int = 1) -> float:
    end = now + seconds
    while now < end:
        threads = tuner.choose(now)
        took = step_seconds(threads, busy_cores, cores, width)
        now += took
        tuner.record(threads, took, now)
    return now


def test_idle_machine_keeps_every_thread_and_rarely_tries_others():
    tuner = ThreadTuner(8)
    tried = []
    now = 0.0
    while now < 60:
        threads = tuner.choose(now)
        tried.append(threads)
        took = step_seconds(threads, 0)
        now += took
        tuner.record(threads, took, now)
    assert tuner.threads == 8
    assert tuner.changes == 0
    # Trials back off to one every EXPLORE_MAX_S: a small share of the steps.
    assert sum(t != 8 for t in tried) / len(tried) < 0.01
    assert EXPLORE_MAX_S <= 16


def test_follows_cores_taken_and_given_back():
    tuner = ThreadTuner(8)
    now = run(tuner, busy_cores=0, seconds=30, now=0.0)
    assert tuner.threads == 8
    now = run(tuner, busy_cores=2, seconds=30, now=now)
    assert tuner.threads == 6
    now = run(tuner, busy_cores=0, seconds=60, now=now)
    assert tuner.threads == 8


def test_two_cores_one_busy_goes_to_one_thread_and_back():
    tuner = ThreadTuner(2)
    now = run(tuner, 0, 10, 0.0, cores=2)
    assert tuner.threads == 2
    now = run(tuner, 1, 10, now, cores=2)
    assert tuner.threads == 1
    run(tuner, 0, 30, now, cores=2)
    assert tuner.threads == 2


def test_width_classes():
    assert [width_class(w) for w in (1, 2, 3, 4, 5, 8, 9, 512)] == [1, 2, 4, 4, 8, 8, 16, 512]


def test_returns_to_all_threads_on_a_many_core_machine():
    """Near the top one more thread gains less than a trial can tell; all of them together can."""
    def seconds(threads: int, busy: int) -> float:
        free = 16 - busy
        speed = min(threads, free) ** 0.7  # bandwidth-bound: each extra thread gains less
        return 0.02 / speed * (4 if threads > free else 1)

    tuner = ThreadTuner(16)
    now = 0.0
    for busy, span in ((8, 30), (0, 60)):
        end = now + span
        while now < end:
            threads = tuner.choose(now)
            took = seconds(threads, busy)
            now += took
            tuner.record(threads, took, now)
        if busy:
            assert tuner.threads == 8
    assert tuner.threads == 16


def test_one_thread_has_nothing_to_tune():
    tuner = ThreadTuner(1)
    run(tuner, 0, 20, 0.0, cores=1)
    assert tuner.threads == 1 and tuner.changes == 0


def test_prompt_chunks_that_get_dearer_cost_few_trials():
    """A long document: each 512-token chunk costs more than the last (attention over more cells)."""
    tuner = ThreadTuner(2, react_to_slowdown=False)
    now, trial_time, total = 0.0, 0.0, 0.0
    for i in range(200):
        threads = tuner.choose(now)
        took = 0.3 * (1 + i / 50) * (1.8 if threads == 1 else 1.0)
        if threads != tuner.threads:
            trial_time += took
        now += took
        total += took
        tuner.record(threads, took, now)
    assert tuner.threads == 2
    assert trial_time / total < 0.05


def test_one_long_document_reads_at_the_kept_count():
    """A 5,000-token document in 512-token chunks of 1.4 to 3.3 s: a trial at 1 thread would cost a whole
    chunk at half speed (measured: +1.9 s on a 27 s read), so none is run before the chunks paid for one."""
    tuner = ThreadTuner(2, react_to_slowdown=False)
    now = 0.0
    for i in range(12):
        threads = tuner.choose(now)
        assert threads == 2, f"chunk {i} was a trial"
        took = 1.4 + 0.17 * i
        now += took
        tuner.record(threads, took, now)


def test_a_hint_from_the_single_tokens_searches_the_prompt_chunks_at_once():
    """Another program takes a core: the single tokens' tuner sees it first; the chunks' tuner, hinted,
    tries the count the single tokens found after three chunks at the old count (a fresh figure to judge it
    against) instead of after minutes of half-speed reading."""
    tokens, chunks = ThreadTuner(2), ThreadTuner(2, react_to_slowdown=False)
    now = run(tokens, 0, 10, 0.0, cores=2)
    now = run(chunks, 0, 3, now, cores=2, width=64)
    assert chunks.threads == 2
    before = tokens.changes
    now = run(tokens, 1, 10, now, cores=2)
    assert tokens.threads == 1 and tokens.changes > before
    chunks.hint(tokens.threads)
    now = run(chunks, 1, 12, now, cores=2, width=64)
    assert chunks.threads == 1, "the hinted search kept the slow count"
    unhinted = ThreadTuner(2, react_to_slowdown=False)
    later = run(unhinted, 0, 3, 0.0, cores=2, width=64)
    run(unhinted, 1, 12, later, cores=2, width=64)
    assert unhinted.threads == 2  # without the hint: 12 s of half-speed chunks have not paid for a trial


def test_a_hint_during_a_trial_is_tried_once_the_trial_is_judged():
    tuner = ThreadTuner(8, react_to_slowdown=False)
    now = run(tuner, 0, 3, 0.0, width=64)
    tuner._search = [6]  # a trial under way when the hint comes
    threads = tuner.choose(now)
    assert threads == 6
    tuner.hint(2)
    chosen = []
    while 2 not in chosen and len(chosen) < 10:  # the trial's steps (6 loses), a fresh figure at 8, then 2
        count = tuner.choose(now)
        chosen.append(count)
        now += step_seconds(count, 0, width=64)
        tuner.record(count, step_seconds(count, 0, width=64), now)
    assert chosen == [6, 6, 8, 8, 8, 2]


def test_a_new_kind_of_step_starts_at_the_count_given():
    tuner = ThreadTuner(8, react_to_slowdown=False, threads=1)
    assert tuner.choose(0.0) == 1
    assert ThreadTuner(4, threads=16).threads == 4
