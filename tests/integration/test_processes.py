"""processes=N: a trial's time from N fresh processes, merged into one report
(real child processes), and the plan's interval built from the spread
between them (pure)."""
import math
import os
import subprocess
import sys

import pytest
from scipy import stats

from bot.app.runtime import context
from bot.plans import estimate as planner
from bot.store import Store
from test_planner import block, estimate, job, report
from test_recipe_units import book, finish, run, say
from worker import launcher, summary
from worker.catalog import PROCESSES
from worker.report import validate
from worker.spec import SpecError, parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["llm-infer", "layers=1", "hidden=32", "heads=2", "kv_heads=1", "vocab=64", "prompt=8",
        "gen=2", "stability=0", "warmup=1"]


def test_processes_2_runs_two_fresh_children_and_names_their_spreads():
    r = launcher.run_trial(parse([*TINY, "repeats=4", "processes=2", "malloc=glibc"]))
    assert r["status"] == "ok", r["error"]
    assert validate(r) == []
    pr = r["processes"]
    assert pr["count"] == 2 and [row["process"] for row in pr["rows"]] == [1, 2]
    assert [row["count"] for row in pr["rows"]] == [2, 2]  # repeats=4 split between them
    assert r["latency"]["count"] == 4 and r["params"]["processes"] == 2
    # One user run: the run phase holds every measured request, end to end.
    run = next(p["seconds"] for p in r["phases"] if p["name"] == "run")
    assert run == pytest.approx(sum(row["run"] for row in pr["rows"]))
    assert pr["seconds"] > max(row["seconds"] for row in pr["rows"])  # the trial's wall time
    means = [row["per_run"] for row in pr["rows"]]
    assert pr["between"]["sd"] == pytest.approx(abs(means[0] - means[1]) / math.sqrt(2))
    assert pr["between"]["dof"] == 1 and pr["within"]["dof"] == 2
    assert {w["process"] for w in r["windows"]["rows"]} == {1, 2}
    card = dict(summary.facts(r))["processes"]
    assert card.startswith("2 fresh processes") and "drift between processes" in card


def test_the_default_is_several_processes_and_the_memory_pass_stays_one():
    assert PROCESSES > 1
    r = launcher.run_trial(parse([*TINY, "device=cpu"]))  # malloc=auto: two passes on a CPU
    assert r["status"] == "ok", r["error"]
    assert r["processes"]["count"] == PROCESSES == len(r["processes"]["rows"])
    memory, time_ = r["passes"]
    assert memory["params"] == {"warmup": 0, "repeats": 2, "stability": 0}
    assert time_["seconds"] == r["processes"]["seconds"]  # the time pass: all its processes
    assert r["memory"]["host_rss_peak"] == memory["host_rss_peak"]


def test_processes_1_is_one_process_and_the_interval_says_what_it_leaves_out():
    r = launcher.run_trial(parse([*TINY, "repeats=4", "processes=1", "malloc=glibc"]))
    assert r["status"] == "ok", r["error"]
    assert r["processes"]["count"] == 1 and len(r["processes"]["rows"]) == 1
    assert r["latency"]["count"] == 4  # not split
    assert "leaves out drift between processes" in dict(summary.facts(r))["processes"]
    e = planner.estimate_block(block(runs=10), [job(1, r)], {}, {}, True)
    assert "drift between processes (processes=1" in e["interval_note"].split("not in it")[1]


@pytest.mark.parametrize("word", ["processes=0", "processes=21", "processes=two"])
def test_a_bad_process_count_is_refused_with_the_range(word):
    with pytest.raises(SpecError) as refused:
        parse([*TINY, word])
    assert refused.value.token == word and "1" in refused.value.message
    assert "20" in refused.value.message


def processes_report(per_run: list[float], sd=0.02, count=4, preps=None):
    """A report whose time came from fresh processes with these run times per
    request (and these preps), in worker/launcher/processes.py's shape."""
    r = report(mean=sum(per_run) / len(per_run), sd=sd, count=count * len(per_run))
    preps = preps or [10.0] * len(per_run)
    r["processes"] = {"count": len(per_run), "rows": [
        {"process": i + 1, "seconds": prep + m * count, "prep": prep, "run": m * count,
         "count": count, "mean": m, "stdev": sd, "per_run": m, "windows": [m, m]}
        for i, (m, prep) in enumerate(zip(per_run, preps))]}
    return r


def test_processes_that_differ_widen_the_interval_by_their_spread():
    same = estimate(block(runs=100), [job(1, processes_report([2.0, 2.0, 2.0]))])
    apart = estimate(block(runs=100), [job(1, processes_report([1.8, 2.0, 2.2]))])
    assert same["per_run"] == pytest.approx(apart["per_run"]) == pytest.approx(2.0)
    assert apart["half"] > 3 * same["half"]
    # The between-process level: their variance plus its mean's, over 3 - 1 dof.
    between = 0.2 ** 2
    assert apart["half"] >= stats.t.ppf(0.95, 2) * 100 * math.sqrt(between * (1 + 1 / 3)) * 0.95
    assert "the spread between 3 processes of 1 trial(s)" in apart["interval_note"]


def test_one_trials_processes_name_the_slower_drift_they_cannot_see():
    # Back to back, its processes agree more than a run at another time does
    # (the quiet plan bench: 46 of 60 held), so the line says what is left out.
    one = estimate(block(runs=100), [job(1, processes_report([1.8, 2.0, 2.2]))])
    assert "drift over longer than the trial: its processes ran back to back" in (
        one["interval_note"])
    two = estimate(block(runs=100), [job(1, processes_report([1.8, 2.0, 2.2])),
                                     job(2, processes_report([1.9, 2.1, 2.0]))])
    assert "ran back to back" not in two["interval_note"]


def test_preps_that_differ_widen_the_interval_and_are_named_in_it():
    steady = estimate(block(runs=10), [job(1, processes_report([2.0, 2.1, 1.9]))])
    wander = estimate(block(runs=10), [job(1, processes_report([2.0, 2.1, 1.9],
                                                               preps=[10.0, 14.0, 6.0]))])
    assert wander["half"] > steady["half"]
    assert "prep's spread between 3 processes" in wander["interval_note"]
    same_session = estimate(block(runs=10), [job(1, processes_report(
        [2.0, 2.1, 1.9], preps=[10.0, 14.0, 6.0]))], pays_prep=False)
    assert same_session["half"] == pytest.approx(steady["half"])  # no prep, no prep spread


def test_a_report_from_before_processes_estimates_as_before():
    old = report()
    e = estimate(block(runs=100), [job(1, old)])
    half = stats.t.ppf(0.95, 9) * 0.2 * math.sqrt(100 + 100 ** 2 / 10)
    assert e["half"] == pytest.approx(half)
    assert "processes" not in e["interval_note"]


def test_llm_train_steps_are_split_between_processes_and_merge_into_one_report():
    r = launcher.run_trial(parse(["llm-train", "layers=1", "hidden=32", "heads=2", "kv_heads=1",
                                  "vocab=64", "seq=8", "malloc=glibc", "steps=4",
                                  "processes=2"]))
    assert r["status"] == "ok", r["error"]
    assert validate(r) == []
    assert [row["count"] for row in r["processes"]["rows"]] == [2, 2]
    assert r["latency"]["count"] == 4 and r["training"]["loss_final"] is not None
    assert r["stability"]["count"] == 4


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "u.db")), admins=frozenset({"U1"}))


def test_a_program_recipe_in_three_processes_gets_an_interval_from_one_trial(tmp_path, ctx):
    recipes = book(tmp_path, "import time\ntime.sleep(0.2)\n", "program")
    assert recipes["paper"].workload().param("processes").default == 1  # a program is whole
    spec, r = run(recipes, "processes=3")
    assert r["processes"]["count"] == 3
    programs = [row["run"] for row in r["processes"]["rows"]]
    assert all(0.2 <= p < 5 for p in programs)
    assert r["units"]["program"]["seconds"] == pytest.approx(sum(programs) / 3)
    t = finish(ctx, spec, r)
    say(ctx, "new repro")
    out = say(ctx, f"repro block baseline runs=10 trial={t}")
    assert "no interval" not in out and "3 fresh processes, one value each" in out, out
    assert "the spread between 3 processes of 1 trial(s)" in out


def test_a_process_that_fails_is_the_report_and_names_which_one():
    r = launcher.run_trial(parse([*TINY, "processes=2", "malloc=glibc", "timeout=1"]))
    assert r["status"] == "failed" and r["error"]["class"] == "timeout"
    assert r["error"]["message"].startswith("process 1 of 2 (processes=2) failed: ")
    assert r["processes"]["ran"] == 1 and r["processes"]["count"] == 2
    assert validate(r) == []
    assert dict(summary.facts(r))["processes"] == "1 of 2 fresh processes ran; the last failed"


def test_the_stop_rule_loads_nothing_inside_a_run_phase():
    # np.percentile imported numpy.ma on its first call, after a run phase's
    # last request and inside its timed span: 0.1 s in a child, +6% per run on
    # a process of 3 requests, so split trials' estimates ran high (issue 31).
    code = ("import sys\nfrom worker import stats\nbefore = set(sys.modules)\n"
            "stats.iqr_ratio([0.5, 0.6, 0.55])\nstats.summary([0.5, 0.6, 0.55])\n"
            "print(sorted(set(sys.modules) - before))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_merged_host_peak_says_how_the_process_that_held_it_was_measured():
    from worker.launcher import processes
    methods = ("RSS sampled at ~100 Hz", "kernel max RSS of the child, which ran alone")
    reports = [{"memory": {"host_rss_peak": peak, "method": {"host_rss_peak": how}}}
               for peak, how in zip((300, 310), methods)]
    out = {"memory": {"host_rss_peak": None, "method": {"host_rss_peak": methods[0]}}}
    processes._merge_memory(out, reports)
    assert out["memory"]["host_rss_peak"] == 310
    assert out["memory"]["method"]["host_rss_peak"] == methods[1] + "; the max over 2 processes"
