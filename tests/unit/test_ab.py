"""A/B trials: parsing and the comparison (pure); one A/B through the console is
tests/e2e/test_ab_console.py."""
import re

import pytest

from bot.trials import ab
from worker.spec import SpecError


def test_one_parameter_with_two_values_makes_a_and_b_in_abba_order():
    specs, lines, key = ab.parse(["llm-infer", "dtype=fp32,bf16", "batch=8"])
    assert key == "dtype" and len(specs) == 2 * ab.ROUNDS == 8
    assert [s.params["dtype"] for s in specs] == ["fp32", "bf16", "bf16", "fp32"] * 2
    assert lines[1] == "llm-infer dtype=bf16 batch=8"
    specs, lines, _ = ab.parse(["llm-infer", "rounds=3", "dtype=fp32,bf16"])
    a, b = "llm-infer dtype=fp32", "llm-infer dtype=bf16"
    assert len(specs) == 6 and lines == [a, b, b, a, a, b]


@pytest.mark.parametrize("words, says", [
    (["llm-infer", "dtype=fp32"], "exactly one parameter with two values"),
    (["llm-infer", "dtype=fp32,bf16,fp16"], "exactly one parameter with two values"),
    (["llm-infer", "dtype=fp32,bf16", "batch=1,2"], "exactly one parameter"),
    (["llm-infer", "dtype=bf16,bf16"], "A and B are the same value"),
    (["llm-infer", "dtype=fp32,fp8"], "dtype must be one of"),
    (["llm-infer", "dtype=fp32,bf16", "rounds=0"], "rounds= is one whole number from 1 to 6"),
    (["llm-infer", "dtype=fp32,bf16", "rounds=7"], "rounds= is one whole number from 1 to 6"),
    (["llm-infer", "dtype=fp32,bf16", "rounds=two"], "`rounds=two`: rounds= is one whole"),
    (["llm-infer", "dtype=fp32,bf16", "rounds=1.5"], "rounds= is one whole number"),
    (["llm-infer", "dtype=fp32,bf16", "rounds=2", "rounds=3"], "`rounds=2 rounds=3`"),
])
def test_bad_ab_is_refused(words, says):
    with pytest.raises(SpecError, match=says):
        ab.parse(words)


def test_rounds_through_the_command_queue_and_lease_in_abba_order_and_bad_rounds_queue_nothing(
        tmp_path):
    from bot import commands
    from bot.app.runtime import context
    from bot.store import Store
    q = context(Store(str(tmp_path / "r.db")))
    q.store.upsert_worker("cpu-a", {"gpus": [], "cpus": 2})
    reply, job = commands.trial(q, "ab llm-infer dtype=fp32,bf16 rounds=0", "U1", "C1")
    assert job is None and "rounds= is one whole number from 1 to 6" in reply["text"]
    assert q.store.jobs() == []
    reply, job = commands.trial(q, "ab llm-infer dtype=fp32,bf16 rounds=2", "U1", "C1")
    jobs = sorted(q.store.jobs(), key=lambda j: j["id"])
    assert [j["spec"]["params"]["dtype"] for j in jobs] == ["fp32", "bf16", "bf16", "fp32"]
    assert "Queued an A/B of 2 rounds" in reply["text"]
    assert f"({jobs[0]['trial']}, {jobs[3]['trial']})" in reply["text"]
    t = [j["trial"] for j in jobs]
    assert f"in the order A {t[0]}, B {t[1]}, B {t[2]}, A {t[3]} (ABBA" in reply["text"]
    # the worker is handed them in that order, one after another
    leased = [q.queue.lease("cpu-a", 0) for _ in jobs]
    assert [j["spec"]["params"]["dtype"] for j in leased] == ["fp32", "bf16", "bf16", "fp32"]
    reply, _job = commands.trial(q, "ab llm-infer dtype=fp32,bf16 rounds=1", "U1", "C1")
    assert "Queued an A/B of 1 round" in reply["text"]
    assert "one round cannot balance a drift (the default, rounds=4, runs A B B A A B B A)" \
        in reply["text"]


def infer(latency, rss, logits, tokens):
    return {"latency": {"mean": latency},
            "memory": {"peak_allocated": None, "process_used_peak": None, "host_rss_peak": rss},
            "quality_probe": {"logits_head": logits, "logits_sd": 1.0, "first_tokens": tokens}}


def test_logits_beyond_the_tolerance_break_quality_and_memory_compares_one_method():
    a = infer(1.0, 1000, [0.0, 1.0, -1.0, 2.0], [1, 2])
    close = ab.compare(a, infer(0.5, 900, [0.05, 1.0, -1.0, 2.0], [1, 2]))
    assert close["memory"] == pytest.approx(-0.1)
    assert close["quality"]["held"] and "2 of 2" in close["quality"]["what"]
    far = ab.compare(a, infer(0.5, 900, [1.0, 0.0, 1.0, 0.0], [3, 2]))
    assert not far["quality"]["held"] and "1 of 2" in far["quality"]["what"]
    b = infer(0.5, None, [0.0] * 4, [1, 2])
    b["memory"]["peak_allocated"] = 10
    assert ab.compare(a, b)["memory"] is None  # allocator vs host RSS: not compared


def timed(trial, mean, windows=None, contention=None, **extra):
    r = infer(mean, 1000, [0.0, 1.0, -1.0, 2.0], [1, 2])
    r.update(status="ok", trial=trial, **extra)
    r["latency"].update(stdev=mean * 0.05, count=12)
    if windows is not None:
        r["windows"] = {"unit": "request", "what": "test", "rows": [
            {"start": 0, "end": 1, "count": 4, "mean": m, "sd": m * 0.02,
             "others_cpu": 0.6 if busy else 0.02, "contended": busy} for m, busy in windows]}
    if contention is not None:
        r["contention"] = contention
    return r


def jobs_of(n, workers=None):
    """n jobs as an A/B queues them (ABBA), 40 s apart, on one worker unless named."""
    arms = ab.order(n // 2)
    return [{"id": i, "trial": f"T{i}", "channel": "C1", "started": 1000.0 + 40 * i,
             "worker": (workers or ["cpu-a"] * n)[i - 1],
             "words": "llm-infer layers=4" if arms[i - 1] == "A" else "llm-infer layers=8"}
            for i in range(1, n + 1)]


QUIET = {"flagged": False, "summary": None}


def abba(a_means, b_means, **kw):
    """Reports T1… in ABBA order from each arm's means, round by round."""
    slots = [x for i, (a, b) in enumerate(zip(a_means, b_means))
             for x in ((a, b) if i % 2 == 0 else (b, a))]
    return [timed(f"T{i}", m, [(m, False)] * 2, QUIET, **kw) for i, m in enumerate(slots, 1)]


def test_the_ab_message_states_the_paired_test_the_interval_the_verdict_and_the_order():
    # the rounds differ by 5%, A and B within a round by about 2%: inside the noise
    reports = abba([0.305, 0.321], [0.312, 0.326])
    text = ab.message(jobs_of(4), reports)["text"]
    assert text.startswith("*A/B*: A T1, T4 `llm-infer layers=4` vs B T2, T3")
    line = text.splitlines()[1]
    assert line.startswith("• time per request: A 313 ms, B 319 ms: B/A ×1.02 (95% paired "
                           "t interval ×")
    assert line.endswith("over 2 pairs, dof 1): no measurable difference")
    assert ("• order run (ABBA): A T1 on cpu-a at +0 s, B T2 on cpu-a at +40 s, "
            "B T3 on cpu-a at +80 s, A T4 on cpu-a at +120 s") in text
    assert "• peak memory (host_rss_peak): +0.0%" in text and "quality held" in text
    slower = abba([0.3, 0.31], [0.6, 0.62])
    assert "): B is slower" in ab.message(jobs_of(4), slower)["text"]


def test_a_pair_from_two_workers_is_no_pair_and_is_named():
    # B twice as slow, but round 2 ran its B and A on two workers, perhaps at once
    reports = abba([0.3, 0.31, 0.3], [0.6, 0.62, 0.61])
    jobs = jobs_of(6, ["cpu-a", "cpu-a", "cpu-a", "cpu-b", "cpu-a", "cpu-a"])
    for j, r in zip(jobs, reports):
        r["worker"] = j["worker"]
    text = ab.message(jobs, reports)["text"]
    assert "T3 and T4 ran on different workers (cpu-b, cpu-a)" not in text
    assert "T4 and T3 ran on different workers (cpu-b, cpu-a), so not side by side: no pair" \
        in text
    assert "over 2 pairs, dof 1" in text and "A T4 on cpu-b at +120 s" in text
    # every pair split: the unpaired test, and the line says why
    split = jobs_of(4, ["cpu-a", "cpu-b", "cpu-a", "cpu-b"])
    text = ab.message(split, abba([0.3, 0.31], [0.6, 0.62]))["text"]
    assert "0 usable pair(s) of 2: the unpaired test" in text and "Student t" in text


def test_unstable_and_contended_marks_reach_the_ab_message():
    busy = {"flagged": True, "summary": "busy machine: other processes used 61% of the CPU "
                                        "during the run phase"}
    # ABBA: T1, T4 are A; T2, T3 are B
    reports = [timed("T1", 0.3, [(0.3, True)] * 3, busy),
               timed("T2", 0.3, [(0.3, False)] * 3, QUIET),
               timed("T3", 0.3, stability={"stable": False, "iqr_over_median": 4.767}),
               timed("T4", 0.3, [(0.3, True)] * 3, busy)]
    text = ab.message(jobs_of(4), reports)["text"]
    assert "no verdict: A has no usable trial (T1: every window of its run phase was contended" \
        in text and "when the machine is quiet" in text
    assert "T3 was UNSTABLE (IQR/median 477%)" in text
    # old reports: no windows, no contention: compared, and said to be unmeasured
    old = [timed(f"T{i}", 0.3 * (1 if ab.order(2)[i - 1] == "A" else 2)) for i in range(1, 5)]
    text = ab.message(jobs_of(4), old)["text"]
    assert "B is slower" in text and "T1: contention not measured" in text


def test_a_failed_trial_is_named_and_the_others_still_compared():
    reports = [timed("T1", 0.3), {"status": "failed", "error": {"class": "oom"}},
               timed("T3", 0.6), timed("T4", 0.31)]
    text = ab.message(jobs_of(4), reports)["text"]
    assert "• T2 did not succeed: compared without them" in text
    assert "T2 did not succeed" in text and "time per request" in text
    none = [timed("T1", 0.3), None, None, timed("T4", 0.3)]
    assert "nothing to compare" in ab.message(jobs_of(4), none)["text"]


def test_logits_or_a_loss_that_overflowed_break_quality_without_printing_inf():
    # The worker reports a logit or loss that was not finite as null (an fp16 overflow)
    a = infer(1.0, 1000, [0.0, 1.0, -1.0, 2.0], [1, 2])
    overflowed = infer(0.5, 900, [None, 1.0, -1.0, 2.0], [1, 2])
    q = ab.compare(a, overflowed)["quality"]
    assert q["value"] is None and q["held"] is False
    flat = ab.compare(dict(a, quality_probe=dict(a["quality_probe"], logits_sd=0.0)), a)
    assert flat["quality"]["value"] is None  # no spread to compare against: not "inf"
    trained = [{"training": {"loss_final": loss, "steps": 4}, "latency": {"mean": 1.0},
                "memory": {"host_rss_peak": 10}} for loss in (5.0, None)]
    q = ab.compare(*trained)["quality"]
    assert q["value"] is None and q["held"] is False
    reports = [timed(f"T{i}", 0.3, [(0.3, False)] * 2, QUIET) for i in range(1, 5)]
    reports[1]["quality_probe"]["logits_head"][0] = None
    text = ab.message(jobs_of(4), reports)["text"]
    assert "quality BROKE: not finite against a tolerance of ±" in text
    assert not re.search(r"(?i)\b(nan|inf)\b", text)
