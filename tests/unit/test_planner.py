"""The estimate's arithmetic (docs/design.md §3), prices and the rent/buy rules: pure."""
import datetime as dt
import math
from decimal import Decimal

import pytest
from scipy import stats

from bot.fits import gpus
from bot.plans import advice, prices, review
from bot.plans import estimate as planner
from worker.report import new_report

TODAY = dt.date(2026, 12, 1)


def report(mean=2.0, sd=0.2, count=10, setup=30.0, weights=60.0, data=120.0, warmup=5.0,
           gpu="NVIDIA H100 80GB HBM3", **params):
    """A report in the schema's shape, as a worker posts it."""
    r = new_report("llm-infer", {"batch": 4, "prompt": 512, "repeats": count, **params})
    r.update(status="ok", seconds=setup + weights + data + warmup + mean * count,
             phases=[{"name": n, "seconds": s} for n, s in
                     (("setup", setup), ("weights", weights), ("data", data),
                      ("warmup", warmup), ("run", mean * count))],
             latency={"p50": mean, "p90": mean, "p99": mean, "mean": mean, "stdev": sd,
                      "count": count},
             env={"gpu_count": 1 if gpu else 0, "gpu_name": gpu, "torch": "2.13.0",
                  "cpu": "EPYC", "device": "cuda" if gpu else "cpu", "host": "box",
                  "gpu_memory": 80 * 10**9 if gpu else None, "driver": None, "cuda": None})
    r["memory"].update(peak_allocated=40 * 2**30, peak_reserved=42 * 2**30,
                       host_rss_peak=2**30)
    return r


def job(i, r, status="done"):
    return {"id": i, "trial": f"T{i}", "status": status, "report": r, "worker": "w1"}


def block(runs=100, configs=1, kind="baseline", **kw):
    return {"kind": kind, "runs": runs, "configs": configs, "gpus": kw.pop("gpus", 1),
            "trials": [1], "sweep": None, "predict": {}, "note": None, "handoff": None, **kw}


def estimate(b=None, trials=None, attempts=None, facts=None, pays_prep=True, **kw):
    trials = trials or [job(1, report())]
    e = planner.estimate_block(b or block(), trials, attempts or {}, facts or {}, pays_prep,
                               **kw)
    return planner.in_hours([e])[0]


def part(e, name):
    return next(c for c in e["components"] if c["name"] == name)


def test_components_add_up_to_the_total_shown():
    e = estimate(facts={"handoff": 0.5},
                 attempts={1: [{"status": "failed", "error_class": "oom", "seconds": 9},
                               {"status": "ok", "error_class": None, "seconds": 300}]})
    assert e["hours"] == sum(c["hours"] for c in e["components"])
    assert [c["name"] for c in e["components"]] == ["prep", "runs", "retries", "data", "idle"]
    assert all(c["source"] for c in e["components"])


def test_doubling_runs_doubles_the_run_component():
    one, two = estimate(block(runs=100)), estimate(block(runs=200))
    assert part(two, "runs")["seconds"] == 2 * part(one, "runs")["seconds"]
    assert part(two, "prep")["seconds"] == part(one, "prep")["seconds"]


def test_run_component_and_interval_follow_the_design_formula():
    e = estimate(block(runs=100))
    assert part(e, "runs")["seconds"] == 100 * 2.0
    half = stats.t.ppf(0.95, 9) * 0.2 * math.sqrt(100 + 100 ** 2 / 10)
    assert e["half"] == pytest.approx(half)
    lo, hi = e["interval"]
    # unrounded: the interval's ends are the total ± the half-width, to Decimal precision
    assert float(hi - e["hours"]) == pytest.approx(half / 3600)
    assert float(e["hours"] - lo) == pytest.approx(half / 3600)


def test_single_measurement_gives_no_interval_and_says_why():
    e = estimate(trials=[job(1, report(count=1, sd=None))])
    assert e["interval"] is None and "no spread" in e["interval_note"]


def test_repeats_of_two_trials_are_pooled():
    a, b = report(mean=1.0, sd=0.1, count=5), report(mean=3.0, sd=0.1, count=5)
    pr = planner.per_run([job(1, a), job(2, b)])
    assert pr["k"] == 10 and pr["mean"] == pytest.approx(2.0)
    # sd is the requests' spread within a trial; the trials' own means differ
    # by 2 s, which is the between-trial component, not request noise.
    assert pr["sd"] == pytest.approx(0.1 * pr["mean"] / 2.0)
    assert pr["parts"] == ["the run-to-run spread", "the spread between 2 trials"]


def test_retries_come_from_the_observed_failure_rate():
    tries = [{"status": "failed", "error_class": "oom", "seconds": 5},
             {"status": "ok", "error_class": None, "seconds": 300},
             {"status": "ok", "error_class": None, "seconds": 300},
             {"status": "ok", "error_class": None, "seconds": 300}]
    e = estimate(block(runs=100), attempts={1: tries})
    p = 0.25
    assert part(e, "retries")["seconds"] == pytest.approx(200 * p / (1 - p))
    assert "1 of 4 trial attempts failed (oom)" in part(e, "retries")["source"]
    clean = estimate(attempts={1: tries[1:]})
    assert part(clean, "retries")["seconds"] == 0
    assert "rule of three" in part(clean, "retries")["source"]


def test_prep_is_paid_once_per_rental_session_and_data_per_config():
    paid, free = estimate(pays_prep=True), estimate(pays_prep=False)
    assert part(paid, "prep")["seconds"] == 30 + 60 + 5
    assert part(free, "prep")["seconds"] == 0 and "rental=single" in part(free, "prep")["source"]
    assert part(estimate(block(configs=3)), "data")["seconds"] == 3 * 120


def test_idle_from_a_declared_gap_or_the_measured_share():
    assert part(estimate(facts={"handoff": 2}), "idle")["seconds"] == 7200
    usage = {"worker": "w1", "idle": 1000.0, "busy": 3000.0, "days": 2}
    e = estimate(facts={"idle": "measured"}, usage=usage)
    busy = sum(part(e, n)["seconds"] for n in ("prep", "runs", "retries", "data"))
    assert part(e, "idle")["seconds"] == pytest.approx(busy / 3)
    assert "idle 25%" in part(e, "idle")["source"]
    assert "not counted" in part(estimate(), "idle")["source"]


def test_gpus_multiply_gpu_hours():
    one, four = estimate(block(gpus=1)), estimate(block(gpus=4))
    assert part(four, "runs")["seconds"] == 4 * part(one, "runs")["seconds"]


def test_trials_of_different_configs_or_failed_are_refused():
    with pytest.raises(planner.EstimateError, match="different configs"):
        planner.check_trials([job(1, report()), job(2, report(batch=8))])
    failed = dict(report(), status="failed")
    with pytest.raises(planner.EstimateError, match="T3 failed"):
        planner.check_trials([job(3, failed, status="failed")])
    with pytest.raises(planner.EstimateError, match="still running"):
        planner.check_trials([job(4, None, status="running")])
    with pytest.raises(planner.EstimateError, match="one kind of environment"):
        planner.check_trials([job(1, report()), job(2, report(gpu=None))])
    # how it measured (repeats) is not what it ran
    planner.check_trials([job(1, report(count=10)), job(2, report(count=20))])


def test_plan_total_adds_blocks_and_widths():
    a, b = estimate(block(runs=10)), estimate(block(runs=30, kind="compare"))
    tot = planner.total([a, b])
    assert tot["hours"] == a["hours"] + b["hours"]
    assert float(tot["interval"][1] - tot["hours"]) == pytest.approx(float(
        (a["interval"][1] - a["hours"]) + (b["interval"][1] - b["hours"])))


def test_cost_is_hours_times_the_confirmed_rate():
    rent = {"item": "H100", "kind": "rent", "value": 2.49, "unit": "per GPU-hour",
            "currency": "$", "source": "quote", "date": "2026-11-20"}
    assert prices.cost(Decimal("12.5"), rent) == Decimal("31.12")  # 31.125, half to even
    assert prices.money(prices.cost(Decimal("100"), rent), "$") == "$249.00"
    assert not prices.is_stale(rent, TODAY)
    old = dict(rent, date="2026-10-01")
    assert prices.is_stale(old, TODAY) and "STALE: 61 days old" in prices.cited(old, TODAY)


def test_break_even_hours_and_days():
    p = lambda kind, v: {"item": "H100", "kind": kind, "value": v}  # noqa: E731
    be = prices.breakeven(p("buy", 30000), p("resale", 10000), p("rent", 2.5),
                          p("power", 0.7), p("electricity", 0.5 / 0.7), 0.5)
    assert be["hours"] == pytest.approx(20000 / 2.0)
    assert be["days"] == pytest.approx(10000 / 12)
    never = prices.breakeven(p("buy", 30000), None, p("rent", 0.1), p("power", 1),
                             p("electricity", 0.2), 0.5)
    assert never["hours"] is None and "never breaks even" in never["why"]


def facts(**kw):
    base = {"target": "H100", "platform": "cuda", "pattern": "steady", "period": 365,
            "later_use": None, "needs_cuda": "yes", "utilization": 0.5, "fixed": True,
            "trials": 1, "on_target": ["T1"], "peak_on_target": True, "envs": ["1× H100"],
            "prices": {k: None for k in ("rent", "buy", "resale", "power", "electricity")},
            "total_hours": 100.0, "prep_hours": 2.0}
    return {**base, **kw}


def test_rule_1_fires_without_a_trial_on_the_target():
    a = advice.advise(facts(on_target=[], envs=["CPU (EPYC)"]), TODAY)
    assert a["rule"] == 1 and "CPU (EPYC)" in " ".join(a["facts"])


def test_a_missing_fact_is_asked_for_not_guessed():
    a = advice.advise(facts(target=None), TODAY)
    assert a["rule"] is None and a["undecided"] == 1 and "set gpu=" in a["missing"][0]
    a = advice.advise(facts(pattern=None), TODAY)
    assert a["undecided"] == 2 and "pattern" in a["missing"][0]


def test_rule_2_concentrated_work_with_uncertain_later_use():
    a = advice.advise(facts(pattern="concentrated", later_use="uncertain"), TODAY)
    assert a["rule"] == 2 and "separately" in a["answer"]


def test_rule_3_asks_for_confirmed_prices_then_gives_break_even():
    a = advice.advise(facts(), TODAY)
    assert a["undecided"] == 3 and any("confirmed rent" in m for m in a["missing"])
    p = {k: {"item": "H100", "kind": k, "value": v, "unit": "u", "currency": "",
             "source": "s", "date": "2026-11-30"}
         for k, v in (("rent", 2.5), ("buy", 30000), ("power", 0.7), ("electricity", 0.2))}
    p["resale"] = None
    a = advice.advise(facts(prices=p), TODAY)
    assert a["rule"] == 3
    h = 30000 / (2.5 - 0.14)
    assert a["breakeven"]["hours"] == pytest.approx(h)
    assert a["breakeven"]["days"] == pytest.approx(h / 12)  # 24 h × 0.5
    assert f"{h:,.0f} GPU-hours" in a["answer"] and "renting is cheaper" in a["answer"]
    a = advice.advise(facts(prices=p, period=5 * 365.25), TODAY)
    assert "buying pays off" in a["answer"]


def test_rule_4_cuda_code_on_a_non_cuda_target():
    a = advice.advise(facts(pattern="concentrated", later_use="planned", platform="mps"), TODAY)
    assert a["rule"] == 4


def test_rule_5_not_locked_or_memory_unmeasured():
    a = advice.advise(facts(pattern="concentrated", later_use="planned", fixed=False), TODAY)
    assert a["rule"] == 5 and "not locked" in a["facts"][0]
    a = advice.advise(facts(pattern="concentrated", later_use="planned",
                            peak_on_target=False), TODAY)
    assert a["rule"] == 5


def test_later_rules_that_also_fire_are_named():
    a = advice.advise(facts(on_target=[], platform="mps", pattern="concentrated",
                            later_use="planned"), TODAY)
    assert a["rule"] == 1 and [x["rule"] for x in a["also"]] == [4]


def test_rule_3_waits_for_rules_4_and_5_and_checks_the_prices():
    p = {k: {"item": "H100", "kind": k, "value": v, "unit": "u", "currency": "$",
             "source": "s", "date": "2026-11-30"}
         for k, v in (("rent", 2.5), ("buy", 30000), ("power", 0.7), ("electricity", 0.2))}
    p["resale"] = None
    a = advice.advise(facts(prices=p, platform="mps"), TODAY)
    assert a["rule"] == 4  # no buy advice for a stack that cannot run the code
    a = advice.advise(facts(prices=p, peak_on_target=False), TODAY)
    assert a["rule"] == 5
    a = advice.advise(facts(prices=p), TODAY)
    assert a["rule"] == 3 and "no confirmed resale value: taken as 0" in a["facts"]
    euro = dict(p, buy=dict(p["buy"], currency="€"))
    assert "one currency" in advice.advise(facts(prices=euro), TODAY)["missing"][0]
    resale = dict(p, resale=dict(p["buy"], kind="resale", value=99999))
    assert "below the purchase price" in advice.advise(facts(prices=resale), TODAY)["missing"][0]


def test_gpu_names_match_whole_words():
    assert gpus.matches_gpu(report(gpu="NVIDIA H100 80GB HBM3"), "H100")
    assert not gpus.matches_gpu(report(gpu="NVIDIA A100-SXM4-80GB"), "A10")
    assert not gpus.matches_gpu(report(gpu="NVIDIA L40S"), "L4")
    assert gpus.matches_gpu(report(gpu="NVIDIA A100-SXM4-80GB"), "A100-80GB")
    assert gpus.matches_gpu(report(gpu=None), "cpu")


def test_a_run_is_the_run_phase_over_its_requests():
    r = report(mean=2.0, count=10)
    r["phases"][-1]["seconds"] = 25.0  # 5 s between requests, outside their latencies
    r["seconds"] = sum(p["seconds"] for p in r["phases"])
    assert planner.per_run([job(1, r)])["mean"] == 2.5


def test_a_recipes_launch_is_prep_not_spread_over_its_run_units():
    # A hooked recipe: importing transformers (launch) takes longer than its runs.
    r = report(mean=0.25, count=4)
    r["phases"] = [{"name": "launch", "seconds": 6.0}, {"name": "data", "seconds": 0.5},
                   {"name": "weights", "seconds": 1.0}, {"name": "warmup", "seconds": 0.3},
                   {"name": "run", "seconds": 1.0}]
    r["seconds"] = sum(p["seconds"] for p in r["phases"])
    assert planner.per_run([job(1, r)])["mean"] == pytest.approx(0.25)
    assert planner.prep_seconds(r) == pytest.approx(7.3)


def test_a_halve_batch_retry_is_not_a_failure_of_the_smaller_batch():
    tries = [{"status": "failed", "error_class": "oom", "seconds": 5, "changed": "{}"},
             {"status": "ok", "error_class": None, "seconds": 300, "changed": '{"batch": 2}'}]
    assert planner.failure_rate([job(1, report())], {1: tries})["failed"] == 0


def test_a_failed_tagged_trial_is_all_retries():
    failed = dict(report(), status="failed")
    a = review.actual_of_job(job(2, failed, status="failed"),
                              [{"status": "failed", "seconds": 235.0}], gpus=1)
    assert a == {"prep": 0.0, "data": 0.0, "runs": 0.0, "retries": 235.0, "count": 0}


def test_two_trials_at_different_speeds_widen_the_interval_by_their_spread():
    a, b = report(mean=1.0, sd=0.01, count=10), report(mean=1.2, sd=0.01, count=10)
    e = estimate(block(runs=100), trials=[job(1, a), job(2, b)])
    pr = planner.per_run([job(1, a), job(2, b)])
    means = pr["trial_means"]
    between = (means[0] - means[1]) ** 2 / 2
    # A new block sits at a new level: the trials' drift beyond their own request
    # noise, plus the uncertainty of the mean of 2 trials, plus its runs' noise.
    drift = between - pr["within"] * 2 / 20
    want = stats.t.ppf(0.95, 1) * 100 * math.sqrt(pr["within"] / 100 + drift + between / 2)
    assert e["half"] == pytest.approx(want)
    assert "the spread between 2 trials" in e["interval_note"]
    one = estimate(block(runs=100), trials=[job(1, a)])
    assert e["half"] > 10 * one["half"]


def _windows(means, count=2):
    return {"unit": "request", "what": "test", "rows": [
        {"start": i, "end": i + 1, "count": count, "mean": m, "sd": 0.2, "others_cpu": 0.0,
         "contended": False} for i, m in enumerate(means)]}


def test_drift_between_windows_goes_inside_the_interval():
    steady = dict(report(mean=2.0, sd=0.2, count=10), windows=_windows([2.0] * 5))
    wander = dict(report(mean=2.0, sd=0.2, count=10), windows=_windows([1.6, 1.8, 2.0, 2.2, 2.4]))
    a = estimate(block(runs=1000), trials=[job(1, steady)])
    b = estimate(block(runs=1000), trials=[job(1, wander)])
    # Same request spread; the wandering trial's level is uncertain by its windows'
    # spread (sd 0.32 s per run over 5 windows, 4 dof), which dominates at 1000 runs.
    pr = planner.per_run([job(1, wander)])
    var_w = _var_of([1.6, 1.8, 2.0, 2.2, 2.4]) * (pr["mean"] / 2.0) ** 2
    drift = var_w - pr["within"] / 2
    want = stats.t.ppf(0.95, 4) * 1000 * math.sqrt(pr["within"] / 1000 + drift + var_w / 5)
    assert b["half"] == pytest.approx(want)
    assert b["half"] > 5 * a["half"]
    assert "drift between the run phase's windows (5 windows)" in b["interval_note"]
    assert "drift over longer than the trial's run phase" in b["interval_note"]
    assert "not in it" in b["interval_note"]


def _var_of(xs):
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def test_a_report_from_before_windows_says_so_in_the_note():
    e = estimate(block(runs=100))
    assert "drift inside the run phase (a report from before windows)" in e["interval_note"]


def test_a_block_from_a_contended_trial_warns_and_asks_for_a_re_run():
    from bot.plans import views
    busy = dict(report(), contention={"flagged": True, "summary": "busy machine: other "
                                      "processes used 61% of the CPU during the run phase"})
    e = estimate(block(), trials=[job(1, busy)])
    warnings = views.block_warnings({"facts": {"gpu": "CPU"}}, e, [busy])
    assert any("ran on a busy machine — busy machine: other processes used 61%" in w
               and "re-run it" in w for w in warnings)


def test_malloc_auto_times_under_glibc_so_a_lock_on_glibc_still_compares():
    glibc = {"workload": "llm-infer", "batch": 8, "malloc": "glibc"}
    assert planner.differences(glibc, {**glibc, "malloc": "auto"}) == []
    assert planner.differences(glibc, {**glibc, "malloc": "live"}) == ["malloc glibc → live"]


def test_an_off_target_blocks_time_leaves_the_total_and_no_target_keeps_it():
    on = estimate(facts={"gpu": "H100"})
    off = estimate(block(kind="compare"), trials=[job(2, report(gpu=None))],
                   facts={"gpu": "H100"})
    assert on["off_target"] is None and off["off_target"] == "CPU (EPYC)"
    tot = planner.total([on, off])
    assert tot["hours"] == on["hours"] and tot["left_out"] == ["compare"]
    assert tot["interval"] == on["interval"]
    mine = estimate(trials=[job(2, report(gpu=None))], facts={})  # no target: its own device
    assert mine["off_target"] is None
    assert planner.total([on, mine])["hours"] == on["hours"] + mine["hours"]


def test_a_calibrated_interval_scales_the_measured_part_and_adds_a_handoff_once():
    from bot.plans import views
    e = estimate(facts={"handoff": 0.5})
    measured = e["hours"] - Decimal("0.5")
    lo, hi = views.calibrated_interval(e, {"calibrated": True, "low": 0.8, "high": 1.5})
    assert (lo, hi) == (measured * Decimal("0.8") + Decimal("0.5"),
                        measured * Decimal("1.5") + Decimal("0.5"))


def test_every_warning_a_trial_carries_shows_without_a_target():
    from bot.plans import views
    loose = dict(report(), stability={"stable": False, "iqr_over_median": 0.4},
                 contention={"flagged": True, "summary": "busy machine"})
    e = estimate(trials=[job(1, loose)])
    for facts in ({}, {"gpu": "H100"}, {"gpu": "cpu"}):
        warnings = "\n".join(views.block_warnings({"facts": facts}, e, [loose]))
        assert "T1 was UNSTABLE (IQR/median 40.0%)" in warnings
        assert "T1 ran on a busy machine" in warnings
