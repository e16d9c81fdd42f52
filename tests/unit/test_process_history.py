"""A worker's earlier trials of the same config lend the block their spread
between fresh processes and their drift between trials (bot/plans/perrun.history):
pure estimates, and through `/plan` on a real SQLite store."""
import math

import pytest
from scipy import stats

from bot.app.runtime import context
from bot.plans import perrun
from bot.store import Store
from test_planner import block, estimate, job
from test_processes import TINY, processes_report
from test_recipe_units import say
from worker.spec import parse


def agree():
    """A trial whose four processes happened to agree: alone, its three degrees
    of freedom read the spread between processes as nearly none."""
    return processes_report([2.0, 2.001, 1.999, 2.0])


def spread_out(scale=1.0):
    return processes_report([1.8 * scale, 2.2 * scale, 2.0 * scale, 2.0 * scale])


def test_earlier_trials_of_the_config_pool_their_spread_between_processes():
    alone = estimate(block(runs=100), [job(1, agree())])
    earlier = [spread_out() for _ in range(5)]
    pooled = estimate(block(runs=100), [job(1, agree())], earlier=earlier)
    assert pooled["half"] > 10 * alone["half"]
    # The relative spreads, pooled over their degrees of freedom: 3 of its own, 15 lent.
    xs = [1.8, 2.2, 2.0, 2.0]
    rel = (3 * _var([x / 2.0 for x in [2.0, 2.001, 1.999, 2.0]])
           + 15 * _var([x / 2.0 for x in xs])) / 18
    pr = perrun.per_run([job(1, agree())], earlier)
    assert pr["dof"] == 18
    between = rel * pr["mean"] ** 2
    level = between + between / 4  # its windows agree: nothing below the processes' level
    want = stats.t.ppf(0.95, 18) * math.sqrt(100 ** 2 * (pr["within"] / 100 + level)
                                             + pr["prep_var"])
    assert pooled["half"] == pytest.approx(want)
    assert ("pooled with the spread between processes of 5 earlier trial(s) of this config "
            "on this worker (18 degrees of freedom in all)") in pooled["interval_note"]


def _var(xs):
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def test_trials_of_another_config_or_device_or_flagged_busy_lend_nothing():
    alone = estimate(block(runs=100), [job(1, agree())])
    other_config = processes_report([1.8, 2.2, 2.0, 2.0])
    other_config["params"]["batch"] = 8
    other_device = spread_out()
    other_device["env"] = dict(other_device["env"], gpu_name="NVIDIA A100-SXM4-80GB")
    busy = dict(spread_out(), contention={"flagged": True, "reason": "busy"})
    failed = dict(spread_out(), status="failed")
    e = estimate(block(runs=100), [job(1, agree())],
                 earlier=[other_config, other_device, busy, failed])
    assert e["half"] == pytest.approx(alone["half"])
    assert "pooled" not in e["interval_note"]


def test_earlier_trials_at_other_levels_add_the_drift_between_trials():
    # Each earlier trial's processes agree with each other, but the trials sit at
    # levels 10% apart: drift over longer than a trial, which back-to-back
    # processes cannot see.
    steady = [processes_report([x] * 4) for x in (1.8, 2.2)]
    drifting = estimate(block(runs=100), [job(1, spread_out())], earlier=steady)
    alike = estimate(block(runs=100), [job(1, spread_out())],
                     earlier=[processes_report([2.0] * 4) for _ in range(2)])
    assert drifting["half"] > 1.5 * alike["half"]
    assert "drift between 3 trials of this config at other times" in drifting["interval_note"]
    assert "ran back to back" not in drifting["interval_note"]
    one = estimate(block(runs=100), [job(1, spread_out())], earlier=steady[:1])
    assert "ran back to back" in one["interval_note"]  # one earlier trial measures no drift
    assert "trials of this config at other times" not in one["interval_note"]


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "h.db")), admins=frozenset({"U1"}))


def _finish(ctx, report) -> str:
    job_ = ctx.queue.submit(parse(TINY), "llm-infer", "U1", "C1")
    leased = ctx.store.lease_next("w1", 60)
    ctx.queue.finish(job_["id"], "w1", leased["lease"], dict(report, trial=job_["trial"]))
    return job_["trial"]


def test_a_plan_block_reads_its_workers_earlier_trials_from_the_store(ctx):
    for _ in range(3):
        _finish(ctx, spread_out())
    t = _finish(ctx, agree())
    say(ctx, "new repro")
    out = say(ctx, f"repro block baseline runs=10 trial={t}")
    assert "pooled with the spread between processes of 3 earlier trial(s)" in out, out
    assert [j["trial"] for j in ctx.store.worker_trials("w1", "llm-infer", 2)] == ["T4", "T3"]
    assert ctx.store.worker_trials("w2", "llm-infer", 10) == []


def _with_requests(per_process: list[list[float]]):
    """A trial split into processes whose requests took these times, each in a
    window of its own (the report's `windows` rows carry their process)."""
    r = processes_report([sum(xs) / len(xs) for xs in per_process], count=len(per_process[0]))
    r["windows"] = {"unit": "request", "what": "test", "rows": [
        {"start": 0, "end": 1, "count": 1, "mean": x, "sd": None, "others_cpu": 0.0,
         "contended": False, "process": p + 1}
        for p, xs in enumerate(per_process) for x in xs]}
    for row, xs in zip(r["processes"]["rows"], per_process):
        row["windows"] = list(xs)
    return r


def test_a_fresh_processs_slow_first_request_is_counted_once_not_once_per_process():
    # Each process's first request took 0.3 s longer: four processes of three
    # requests paid it four times, a block of 100 runs in one process pays it once.
    r = _with_requests([[2.3, 2.0, 2.0], [2.3, 2.0, 2.0], [2.4, 2.1, 2.1], [2.2, 1.9, 1.9]])
    e = estimate(block(runs=100), [job(1, r)])
    assert e["per_run"] == pytest.approx(2.0)
    runs = next(c for c in e["components"] if c["name"] == "runs")
    assert runs["seconds"] == pytest.approx(100 * 2.0 + 0.3)
    assert "first request took 0.3 s longer than the rest (mean of 4)" in runs["source"]
    # Without the request-by-request windows nothing is known of the first request.
    plain = estimate(block(runs=100), [job(1, processes_report([2.1, 2.1, 2.2, 2.0]))])
    assert plain["per_run"] == pytest.approx(2.1)
    assert "first request" not in next(c for c in plain["components"]
                                       if c["name"] == "runs")["source"]
