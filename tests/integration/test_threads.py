"""The trial's intra-op threads: chosen by the worker from its usable cores (or
asked for with threads=N), pinned, recorded, and known to the contention check."""
import json
import os

import pytest

from worker import launcher, recipes, summary, threads
from worker import report as reports
from worker.probes import contention
from worker.spec import SpecError, parse

TINY = ["llm-infer", "layers=1", "hidden=64", "heads=2", "kv_heads=1", "vocab=128",
        "prompt=8", "gen=2", "warmup=0", "repeats=2", "stability=0", "malloc=glibc",
        "device=cpu", "processes=1"]


def test_the_worker_leaves_one_core_free_and_pins_to_the_rest():
    got = threads.choose(0, (0, 1, 2, 3))
    assert (got.threads, got.cores, got.free, got.pinned) == (3, (1, 2, 3), (0,), True)
    assert got.chosen_by == "worker" and got.env()["OMP_NUM_THREADS"] == "3"
    one = threads.choose(0, (5,))
    assert (one.threads, one.cores, one.pinned) == (1, (5,), False)
    # two CPU ranks on two cores: one each, so nothing is left free
    ranks = threads.choose(0, (0, 1), ranks=2)
    assert (ranks.threads, ranks.pinned) == (2, False)


def test_threads_n_is_the_users_count_and_out_of_range_is_refused_naming_the_cores():
    got = threads.choose(2, (0, 1, 2, 3))
    assert (got.threads, got.cores, got.chosen_by) == (2, (2, 3), "user")
    with pytest.raises(SpecError) as err:
        threads.choose(6, (0, 1, 2, 3, 8))
    assert err.value.message == ("`threads=6`: this worker has 5 usable cores (0-3,8); use "
                                 "threads=1 to threads=5, or leave threads out and the worker "
                                 "chooses")
    with pytest.raises(SpecError) as err:
        parse(["llm-infer", "threads=two"])
    assert "threads must be a whole number" in err.value.message


def test_a_trial_asking_for_more_threads_than_cores_fails_with_the_reason():
    n = len(os.sched_getaffinity(0))
    report = launcher.run_trial(parse([*TINY, f"threads={n + 1}"]))
    assert report["status"] == "failed" and report["error"]["class"] == "unsupported"
    assert f"this worker has {n} usable cores" in report["error"]["message"]


def test_the_childs_torch_runs_with_the_chosen_count_on_the_chosen_cores():
    usable = threads.usable_cores()
    report = launcher.run_trial(parse(TINY))
    assert report["status"] == "ok", report["error"]
    t = report["threads"]
    want = threads.choose(0, usable)
    assert (t["threads"], t["cores"], t["chosen_by"]) == (want.threads, list(want.cores),
                                                          "worker")
    # what the child itself saw: torch.get_num_threads() and its own affinity
    assert t["torch_threads"] == want.threads and t["cores_seen"] == list(want.cores)
    assert t["pinned"] == (len(usable) > 1) and report["params"]["threads"] == 0
    assert summary.threads_line(t).startswith(f"{want.threads} on cores")
    assert reports.validate(report) == []  # the bot takes it as it is
    # the user's count: every usable core, so torch's own default, unpinned
    asked = launcher.run_trial(parse([*TINY, f"threads={len(usable)}"]))["threads"]
    assert (asked["torch_threads"], asked["pinned"], asked["chosen_by"]) == (
        len(usable), False, "user")
    assert asked["cores_seen"] == list(usable)
    assert summary.threads_line(asked).endswith(f"as asked (threads={len(usable)})")


def _row(t, trial, core0, core1, hz=100):
    # 2 CPUs; the trial is pinned to core 1 and used `trial` of it; core0 and core1
    # are each core's busy share. (t, busy, steal, total, tree, self, load1,
    # busy, steal, total on the trial's cores)
    j = int(t * hz)
    return (t, int(j * (core0 + core1)), 0, 2 * j, int(j * trial), 0, 1.0,
            int(j * core1), 0, j)


def _pinned(rows):
    c = contention.ContentionTracker(cores=(1,))
    c.rows = rows
    return c


def test_a_neighbour_on_the_free_core_is_said_and_not_flagged():
    # the trial holds core 1, a spinner holds core 0
    rows = [_row(10 + i * 0.5, 1.0, 1.0, 1.0) for i in range(5)]
    out = _pinned(rows).result([{"name": "run", "start": 10.0, "end": 12.0}], free=(0,))
    assert not out["flagged"] and out["cores"] == [1] and out["free_cores"] == [0]
    assert out["neighbour"] == {"phase": "run", "others_cpu_free": 1.0}
    assert summary.machine(out) == (
        "quiet: other processes used 0% of the trial's cores 1 during the run phase (steal 0%; "
        "flagged above 25%); a neighbour used 100% of cores 0, which the trial leaves free (not "
        "counted)")
    # the same machine judged over all CPUs (an unpinned trial): half of it was others'
    flat = contention.ContentionTracker()
    flat.rows = [r[:7] for r in rows]
    assert flat.result([{"name": "run", "start": 10.0, "end": 12.0}])["flagged"]


def test_other_processes_on_the_trials_own_core_are_contention():
    # the neighbour shares core 1 with the trial: the trial got half of it
    rows = [_row(10 + i * 0.5, 0.5, 0.0, 1.0) for i in range(5)]
    out = _pinned(rows).result([{"name": "run", "start": 10.0, "end": 12.0}], free=(0,))
    assert out["flagged"] and out["neighbour"] is None
    assert out["phases"]["run"]["others_cpu"] == pytest.approx(0.5)


PROGRAM = """
import json, os, sys
import torch
if len(sys.argv) > 2:
    torch.set_num_threads(int(sys.argv[2]))
json.dump({"omp": os.environ.get("OMP_NUM_THREADS"), "torch": torch.get_num_threads(),
           "argv": sys.argv[2:],
           "cores": sorted(os.sched_getaffinity(0))}, open(sys.argv[1], "w"))
"""


def _recipe(tmp_path, env: str, extra: str) -> dict:
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "recipes.toml").write_text(f"""
[recipes.threads]
cwd = "{tmp_path}"
argv = ["{{python}}", "prog.py", "{tmp_path / 'seen.json'}"{extra}]
env = {{ {env} }}
timeout = "1m"
""")
    book = recipes.load(str(tmp_path / "recipes.toml"))
    table = {k: r.workload() for k, r in book.items()}
    report = launcher.run_trial(parse(["recipe", "threads"], table), recipes=book)
    assert report["status"] == "ok", report["error"]
    return report


def test_a_recipes_torch_gets_the_chosen_count_on_the_chosen_cores(tmp_path):
    want = threads.choose(0, threads.usable_cores())
    t = _recipe(tmp_path, "", ', "{threads}"')["threads"]  # `{threads}`: the chosen count
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {"omp": str(want.threads), "torch": want.threads, "cores": list(want.cores),
                    "argv": [str(want.threads)]}
    assert t["torch_threads"] == want.threads and t["chosen_by"] == "worker"


def test_a_recipes_own_count_wins_and_the_report_says_what_torch_ran_with(tmp_path):
    # its env sets OMP_NUM_THREADS, and the program then sets 3 itself
    t = _recipe(tmp_path, 'OMP_NUM_THREADS = "5"', ', "3"')["threads"]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["omp"] == "5" and seen["torch"] == 3
    assert t["torch_threads"] == 3 and "a program that sets its own count wins" in t[
        "torch_threads_method"]
